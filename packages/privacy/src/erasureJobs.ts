import { createHash, randomBytes } from 'node:crypto';
import { v5 as uuidv5, v7 as uuidv7 } from 'uuid';
import { appendToOutbox, type EmittedRecord } from '@shopstream/projections';
import { erasuresTopic, type DeletionJob, type DeletionJobAccepted, type DeletionJobStatus, type IdentifierKind } from '@shopstream/contracts';
import { isDataError, queryRow, queryRows, sql, type Db, type Queryable, type Row, type SQLQuery } from '@shopstream/db';
import { contactIdKnown, eraseContacts } from './eraseContacts.js';
import { forgetErasedKeys } from './keyMemory.js';
import { UnknownMasterKeyError, type Keyring } from './keyring.js';

/** What a job's sealed identifier is bound to. */
const identifierAad = (shopId: string, jobId: string) => `erasure-job/${shopId}/${jobId}`;

/** The audit's hash of an identifier: SHA-256 of a random salt kept beside it, the kind and the value. */
export const identifierHash = (salt: string, kind: IdentifierKind, value: string): string =>
  createHash('sha256').update(`${salt}\u0000${kind}\u0000${value}`).digest('hex');

const iso = (v: unknown): string => (v instanceof Date ? v : new Date(String(v))).toISOString();
const isoOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : iso(v));

const jobOf = (r: Row): DeletionJob => ({
  id: String(r.id),
  status: String(r.status) as DeletionJobStatus,
  requested_at: iso(r.requested_at),
  completed_at: isoOrNull(r.completed_at),
  contacts_erased: r.contacts_erased === null ? null : Number(r.contacts_erased),
  error: r.error === null ? null : String(r.error),
});

/** erasure_jobs: the jobs of `POST /data-privacy/deletion-jobs/`, run by the erasure worker. */
export const erasureJobs = {
  /** Queues a job; the identifier is kept sealed under the master key until the job completes. */
  async create(db: Queryable, keyring: Keyring, j: { shopId: string; apiKeyId: string; kind: IdentifierKind; value: string }): Promise<DeletionJobAccepted> {
    const id = uuidv7();
    const salt = randomBytes(16).toString('base64');
    const { masterId, wrapped } = keyring.wrap(Buffer.from(j.value, 'utf8'), identifierAad(j.shopId, id));
    const row = await queryRow(
      db,
      sql`
      INSERT INTO erasure_jobs (shop_id, id, status, requested_at, api_key_id, identifier_kind, identifier_salt, identifier_hash, identifier_master, identifier_sealed)
      VALUES (${j.shopId}, ${id}, 'queued', now(), ${j.apiKeyId}, ${j.kind}, ${salt}, ${identifierHash(salt, j.kind, j.value)}, ${masterId}, ${wrapped})
      RETURNING requested_at`,
      (r) => iso(r.requested_at),
    );
    return { id, status: 'queued', requested_at: row! };
  },

  async get(db: Queryable, shopId: string, id: string): Promise<DeletionJob | null> {
    return queryRow(
      db,
      sql`SELECT id, status, requested_at, completed_at, contacts_erased, error FROM erasure_jobs WHERE shop_id = ${shopId} AND id = ${id}`,
      jobOf,
    );
  },

  /** A shop's jobs, newest first, with their audit (never the identifier). */
  async list(
    db: Queryable,
    shopId: string,
    limit = 100,
  ): Promise<(DeletionJob & { api_key_id: string | null; identifier_kind: string; identifier_hash: string })[]> {
    return queryRows(
      db,
      sql`
      SELECT id, status, requested_at, completed_at, contacts_erased, error, api_key_id, identifier_kind, identifier_hash
      FROM erasure_jobs WHERE shop_id = ${shopId} ORDER BY requested_at DESC, id DESC LIMIT ${limit}`,
      (r) => ({
        ...jobOf(r),
        api_key_id: r.api_key_id === null ? null : String(r.api_key_id),
        identifier_kind: String(r.identifier_kind),
        identifier_hash: String(r.identifier_hash),
      }),
    );
  },
};

/** After this many attempts that failed, a job is marked failed with the last error. */
const MAX_ATTEMPTS = 5;

export interface ErasureDeps {
  db: Db;
  keyring: Keyring;
  /** The deployment's name of the `erasures` topic. */
  erasuresTopic: string;
}

/** The contacts of the shop the job's identifier names. */
async function contactsNamed(tx: Queryable, shopId: string, kind: IdentifierKind, value: string): Promise<string[]> {
  switch (kind) {
    case 'contact_id':
      return (await contactIdKnown(tx, shopId, value)) ? [value] : [];
    case 'email':
    case 'phone':
    case 'remote_id': {
      // As ingest matches them: the value as given and its NFD spelling (rows stored before normalisation).
      const spellings = [...new Set([value, value.normalize('NFD')])];
      const rows = await tx.query(sql`SELECT id FROM contacts WHERE shop_id = ${shopId} AND ${sql.ident(kind)} = ANY(${spellings}::text[]) FOR UPDATE`);
      return rows.map((r) => String(r.id));
    }
    default: {
      const never: never = kind;
      throw new Error(`unknown identifier kind ${String(never)}`);
    }
  }
}

/**
 * Claims the oldest job not done (queued, or running and left by a worker that died: its row is not locked),
 * marks it running, and runs it (runClaimed). Returns the job id it ran, or null when none was waiting.
 */
export async function runNextErasureJob(deps: ErasureDeps, log: { warn(obj: object, msg: string): void }): Promise<string | null> {
  return runClaimed(
    deps,
    log,
    sql`SELECT shop_id, id FROM erasure_jobs WHERE status IN ('queued', 'running') ORDER BY requested_at LIMIT 1 FOR UPDATE SKIP LOCKED`,
  );
}

/** Runs one job of a shop now unless another worker holds it (`pnpm cli privacy erase`); its id, or null when not run here. */
export async function runErasureJob(deps: ErasureDeps, shopId: string, id: string, log: { warn(obj: object, msg: string): void }): Promise<string | null> {
  return runClaimed(
    deps,
    log,
    sql`SELECT shop_id, id FROM erasure_jobs WHERE shop_id = ${shopId} AND id = ${id} AND status IN ('queued', 'running') FOR UPDATE SKIP LOCKED`,
  );
}

/**
 * Marks the job `pick` selects running and runs it in one transaction that holds its row: the erasure, the
 * `erasures` records (through the outbox, so they exist exactly when the erasure does) and the job's completion
 * commit together, and a crash anywhere leaves the job to the next claim. A job whose run fails is tried again by
 * the next claim, and marked failed after MAX_ATTEMPTS or at once when the database refuses its data.
 */
async function runClaimed(deps: ErasureDeps, log: { warn(obj: object, msg: string): void }, pick: SQLQuery): Promise<string | null> {
  const claimed = await queryRow(
    deps.db,
    sql`
    UPDATE erasure_jobs j SET status = 'running', started_at = coalesce(j.started_at, now()), attempts = j.attempts + 1
    FROM (${pick}) c
    WHERE j.shop_id = c.shop_id AND j.id = c.id
    RETURNING j.shop_id, j.id, j.attempts`,
    (r) => ({ shopId: String(r.shop_id), id: String(r.id), attempts: Number(r.attempts) }),
  );
  if (!claimed) return null;
  try {
    await runJob(deps, claimed.shopId, claimed.id);
  } catch (e) {
    const final = isDataError(e) || claimed.attempts >= MAX_ATTEMPTS;
    log.warn({ err: e, job: claimed.id, attempts: claimed.attempts, final }, final ? 'erasure job failed' : 'erasure job failed: retried later');
    if (final) {
      await deps.db.query(sql`
        UPDATE erasure_jobs SET status = 'failed', completed_at = now(), error = ${(e as Error).message.slice(0, 500)}
        WHERE shop_id = ${claimed.shopId} AND id = ${claimed.id} AND status = 'running'`);
    }
  }
  return claimed.id;
}

async function runJob(deps: ErasureDeps, shopId: string, id: string): Promise<void> {
  const erased = await deps.db.tx(async (tx) => {
    const job = await queryRow(
      tx,
      sql`
      SELECT identifier_kind, identifier_master, identifier_sealed, now() AS at FROM erasure_jobs
      WHERE shop_id = ${shopId} AND id = ${id} AND status = 'running' FOR UPDATE SKIP LOCKED`,
      (r) => ({ kind: String(r.identifier_kind) as IdentifierKind, master: String(r.identifier_master), sealed: String(r.identifier_sealed), at: iso(r.at) }),
    );
    // Another worker holds it, or finished it meanwhile.
    if (!job) return [];
    const unwrap = () => deps.keyring.unwrap(job.master, job.sealed, identifierAad(shopId, id)).toString('utf8');
    let value: string;
    try {
      value = unwrap();
    } catch (e) {
      if (!(e instanceof UnknownMasterKeyError)) throw e;
      // A rotation may have added a key since this process read them.
      await deps.keyring.reload();
      value = unwrap();
    }
    const contacts = await contactsNamed(tx, shopId, job.kind, value);
    const erased = await eraseContacts(tx, shopId, contacts, id, job.at);
    const records: EmittedRecord[] = erased.map((c) => ({
      topic: deps.erasuresTopic,
      ...erasuresTopic.record({
        id: uuidv5(`${id}/${c.contactId}`, ERASURE_NAMESPACE),
        shop_id: shopId,
        contact_id: c.contactId,
        job_id: id,
        erased_at: job.at,
      }),
    }));
    await appendToOutbox(tx, records);
    await tx.query(sql`
      UPDATE erasure_jobs SET status = 'completed', completed_at = now(), contacts_erased = ${erased.length}, error = NULL,
        identifier_master = NULL, identifier_sealed = NULL
      WHERE shop_id = ${shopId} AND id = ${id}`);
    return erased;
  });
  // Committed: this process's caches forget the destroyed keys now, other processes' within KEY_TTL_MS.
  forgetErasedKeys(shopId, erased);
}

/** The UUIDv5 namespace of erasure record ids. */
const ERASURE_NAMESPACE = 'c3b1e7a2-6f1d-5c7e-9b0a-2d4f6e8a1c35';
