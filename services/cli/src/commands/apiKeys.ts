import { isUuid } from '@shopstream/contracts';
import { ApiKeyStore, type ApiKeyInfo } from '@shopstream/http/apiKeys';
import { parse, table, UsageError, type Command } from '../args.js';
import { withDb } from '../context.js';

const note = 'Works on DATABASE_URL, or on the embedded database in DATA_DIR.';

export const command: Command = {
  note,
  subcommands: {
    create: {
      usage: `  pnpm cli api-keys create --shop <uuid> [--shop <uuid>...] [--name <text>]
      Creates a key granted those shops. The secret is printed once, as the last line of stdout
      (so \`pnpm -s cli api-keys create --shop <uuid> | tail -n1\` captures it); only its hash is stored.`,
      async run(args) {
        const { shops, name } = parseCreate(args);
        return withKeys(async (keys) => {
          const { id, secret } = await keys.create(shops, name);
          console.log(`Created API key ${id}${name ? ` "${name}"` : ''} for ${shops.length === 1 ? 'shop' : 'shops'} ${shops.join(', ')}.`);
          console.log('Send it as Authorization: Bearer <secret>. Store it now: it is not shown again. The secret:');
          console.log(secret);
          return 0;
        });
      },
    },
    list: {
      usage: `  pnpm cli api-keys list
      Every key: id, name, shops, created, revoked.`,
      async run(args) {
        parse(args, {});
        return withKeys(async (keys) => {
          const list = await keys.list();
          console.log(list.length === 0 ? 'No API keys yet. Create one with `pnpm cli api-keys create --shop <uuid>`.' : keyTable(list));
          return 0;
        });
      },
    },
    revoke: {
      usage: `  pnpm cli api-keys revoke <id>
      Revokes the key with that id. Running services stop accepting it within API_KEY_CACHE_TTL_MS (default 5 s).`,
      async run(args) {
        const { positionals } = parse(args, {}, true);
        if (positionals.length !== 1) throw new UsageError('Give exactly one key id: pnpm cli api-keys revoke <id>');
        const id = positionals[0];
        if (!isUuid(id)) throw new UsageError(`"${id}" is not a key id (a uuid, as \`pnpm cli api-keys list\` shows).`);
        return withKeys(async (keys) => {
          if (!(await keys.revoke(id.toLowerCase()))) {
            console.error(`No active API key with id ${id} (unknown or already revoked).`);
            return 1;
          }
          console.log(`Revoked API key ${id}. Running services refuse it within their API_KEY_CACHE_TTL_MS.`);
          return 0;
        });
      },
    },
  },
};

function parseCreate(args: string[]): { shops: string[]; name: string } {
  const { values } = parse(args, { shop: { type: 'string', multiple: true }, name: { type: 'string' } });
  const shops = [...new Set((values.shop ?? []).map((s) => s.trim().toLowerCase()))];
  if (shops.length === 0) throw new UsageError('Give at least one --shop <uuid>.');
  const bad = shops.filter((s) => !isUuid(s));
  if (bad.length > 0) throw new UsageError(`Not a shop id (a uuid): ${bad.map((s) => `"${s}"`).join(', ')}.`);
  return { shops, name: (values.name ?? '').trim() };
}

/** Only the database: managing keys must work while Kafka is down. */
function withKeys(fn: (keys: ApiKeyStore) => Promise<number>): Promise<number> {
  return withDb('stop it, run this command, start it again.', (db) => fn(new ApiKeyStore(db)));
}

function keyTable(keys: ApiKeyInfo[]): string {
  return table(
    ['ID', 'NAME', 'SHOPS', 'CREATED', 'REVOKED'],
    keys.map((k) => [k.id, k.name || '-', k.shops.join(',') || '-', k.created_at, k.revoked_at ?? '-']),
  );
}
