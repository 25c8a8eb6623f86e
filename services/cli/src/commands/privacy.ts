import { deletionJobRequestSchema, fieldErrors, identifierOf, isUuid } from '@shopstream/contracts';
import { relayOutbox } from '@shopstream/projections';
import { normalizePhone } from '@shopstream/contacts';
import { erasureJobs, newMasterKeyText, openKeyring, rotateMasterKey, runErasureJob } from '@shopstream/privacy';
import { parse, table, UsageError, type Command } from '../args.js';
import { withRuntime } from '../context.js';

const note = `Works on DATABASE_URL and KAFKA_BROKERS, or on the embedded database in DATA_DIR (a running \`pnpm start\` too). The
same jobs exist over HTTP under /v2026-04/data-privacy/deletion-jobs/; docs/privacy.md explains the model.`;

function shopOf(v: string | undefined): string {
  const shop = (v ?? '').trim().toLowerCase();
  if (!isUuid(shop)) throw new UsageError(shop ? `"${shop}" is not a shop id (a uuid).` : 'Give --shop <uuid>.');
  return shop;
}

/** How long `erase` waits for a job another process runs. */
const WAIT_MS = 120_000;

export const command: Command = {
  note,
  subcommands: {
    erase: {
      usage: `  pnpm cli privacy erase --shop <uuid> (--email <e> | --phone <p> | --remote-id <r> | --contact-id <uuid>)
      Erases the person: queues a deletion job, runs it here unless a query-api worker already does, waits for it
      and prints its outcome; the job id is the last line of stdout. Exit 1 when it failed.`,
      async run(args) {
        const { values } = parse(args, {
          shop: { type: 'string' },
          email: { type: 'string' },
          phone: { type: 'string' },
          'remote-id': { type: 'string' },
          'contact-id': { type: 'string' },
        });
        const shop = shopOf(values.shop);
        const parsed = deletionJobRequestSchema.safeParse({
          email: values.email,
          phone: values.phone,
          remote_id: values['remote-id'],
          contact_id: values['contact-id'],
        });
        if (!parsed.success) {
          const lines = Object.entries(fieldErrors(parsed.error)).map(([k, m]) => `  ${k === '(body)' ? 'identifier' : k}: ${m}`);
          throw new UsageError(`Give exactly one of --email, --phone, --remote-id, --contact-id:\n${lines.join('\n')}`);
        }
        const { kind, value: raw } = identifierOf(parsed.data);
        const value = kind === 'phone' ? normalizePhone(raw) : kind === 'contact_id' ? raw.toLowerCase() : raw;
        if (value === null) throw new UsageError(`--phone: not a valid phone number; give it with the country code, e.g. +14155552671.`);
        return withRuntime(async (rt) => {
          const keyring = await openKeyring(rt);
          const queued = await erasureJobs.create(rt.db, keyring, { shopId: shop, apiKeyId: 'cli', kind, value });
          console.error(`Queued deletion job ${queued.id} (${kind}).`);
          const deps = { db: rt.db, keyring, erasuresTopic: rt.topics.erasures };
          await runErasureJob(deps, shop, queued.id, rt.logger);
          const deadline = Date.now() + WAIT_MS;
          let job = await erasureJobs.get(rt.db, shop, queued.id);
          while (job && (job.status === 'queued' || job.status === 'running') && Date.now() < deadline) {
            await new Promise((r) => setTimeout(r, 250));
            job = await erasureJobs.get(rt.db, shop, queued.id);
          }
          // The `erasures` records this run left in the outbox (a running worker relays its own).
          await relayOutbox({ db: rt.db, bus: rt.bus, topic: rt.topics.erasures });
          if (!job || job.status === 'queued' || job.status === 'running') {
            console.error(
              `Job ${queued.id} is still ${job?.status ?? 'unknown'} after ${WAIT_MS / 1000} s; follow it with \`pnpm cli privacy jobs --shop ${shop}\`.`,
            );
            console.log(queued.id);
            return 1;
          }
          if (job.status === 'failed') console.error(`Job ${job.id} failed: ${job.error}`);
          else console.error(`Erased ${job.contacts_erased} contact(s); announced on ${rt.topics.erasures}.`);
          console.log(job.id);
          return job.status === 'completed' ? 0 : 1;
        });
      },
    },
    jobs: {
      usage: `  pnpm cli privacy jobs --shop <uuid> [--json]
      The shop's deletion jobs, newest first, with their audit: the API key that asked (\`cli\` for this command)
      and the salted hash of the identifier (never the identifier).`,
      async run(args) {
        const { values } = parse(args, { shop: { type: 'string' }, json: { type: 'boolean' } });
        const shop = shopOf(values.shop);
        return withRuntime(async (rt) => {
          const jobs = await erasureJobs.list(rt.db, shop);
          if (values.json) {
            console.log(JSON.stringify(jobs, null, 2));
            return 0;
          }
          if (jobs.length === 0) {
            console.log('No deletion jobs in this shop.');
            return 0;
          }
          console.log(
            table(
              ['ID', 'STATUS', 'REQUESTED', 'COMPLETED', 'ERASED', 'BY', 'KEY', 'IDENTIFIER HASH'],
              jobs.map((j) => [
                j.id,
                j.status,
                j.requested_at,
                j.completed_at ?? '-',
                j.contacts_erased === null ? '-' : String(j.contacts_erased),
                j.identifier_kind,
                j.api_key_id ?? '-',
                j.identifier_hash.slice(0, 16),
              ]),
            ),
          );
          return 0;
        });
      },
    },
    'rotate-master-key': {
      usage: `  pnpm cli privacy rotate-master-key
      Re-wraps every contact's data key (and every waiting job's identifier) under the current master key: the
      first of PRIVACY_MASTER_KEY or PRIVACY_MASTER_KEY_FILE. Put the new key first (the old ones after it) on every
      service, run this, then drop the old keys. Nothing on the log changes.`,
      async run() {
        return withRuntime(async (rt) => {
          const keyring = await openKeyring(rt);
          const done = await rotateMasterKey(rt.db, keyring, (n) => console.error(`re-wrapped ${n} data keys`));
          console.log(`Re-wrapped ${done.keys} data keys and ${done.jobs} job identifiers under master key ${keyring.currentId}.`);
          return 0;
        });
      },
    },
    'generate-master-key': {
      usage: `  pnpm cli privacy generate-master-key
      Prints a new random master key (base64 of 32 bytes) for PRIVACY_MASTER_KEY or a key file.`,
      async run() {
        console.log(newMasterKeyText());
        return 0;
      },
    },
  },
};
