import { parseArgs } from 'node:util';
import { loadEnv } from '@shopstream/config';
import { DataDirLockedError, migrate, openDb, type Db } from '@shopstream/db';
import { ApiKeyStore, type ApiKeyInfo } from '@shopstream/http';

export const usage = `Usage:
  pnpm cli api-keys create --shop <uuid> [--shop <uuid>...] [--name <text>]
      Creates a key granted those shops. The secret is printed once, as the last line of stdout
      (so \`pnpm -s cli api-keys create --shop <uuid> | tail -n1\` captures it); only its hash is stored.
  pnpm cli api-keys list
      Every key: id, name, shops, created, revoked.
  pnpm cli api-keys revoke <id>
      Revokes the key with that id. Running services stop accepting it within API_KEY_CACHE_TTL_MS (default 5 s).

Works on DATABASE_URL, or on the embedded database in DATA_DIR.`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

class UsageError extends Error {}

export async function run(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  try {
    switch (sub) {
      case 'create': {
        const { shops, name } = parseCreate(rest);
        return await withKeys(async (keys) => {
          const { id, secret } = await keys.create(shops, name);
          console.log(`Created API key ${id}${name ? ` "${name}"` : ''} for ${shops.length === 1 ? 'shop' : 'shops'} ${shops.join(', ')}.`);
          console.log('Send it as Authorization: Bearer <secret>. Store it now: it is not shown again. The secret:');
          console.log(secret);
          return 0;
        });
      }
      case 'list': {
        parseArgs({ args: rest, options: {}, allowPositionals: false });
        return await withKeys(async (keys) => {
          const list = await keys.list();
          console.log(list.length === 0 ? 'No API keys yet. Create one with `pnpm cli api-keys create --shop <uuid>`.' : table(list));
          return 0;
        });
      }
      case 'revoke': {
        const { positionals } = parseArgs({ args: rest, options: {}, allowPositionals: true });
        if (positionals.length !== 1) throw new UsageError('Give exactly one key id: pnpm cli api-keys revoke <id>');
        const id = positionals[0];
        if (!UUID.test(id)) throw new UsageError(`"${id}" is not a key id (a uuid, as \`pnpm cli api-keys list\` shows).`);
        return await withKeys(async (keys) => {
          if (!(await keys.revoke(id.toLowerCase()))) {
            console.error(`No active API key with id ${id} (unknown or already revoked).`);
            return 1;
          }
          console.log(`Revoked API key ${id}. Running services refuse it within their API_KEY_CACHE_TTL_MS.`);
          return 0;
        });
      }
      default:
        throw new UsageError(sub ? `Unknown api-keys command "${sub}".` : 'Say what to do with API keys.');
    }
  } catch (e) {
    // parseArgs reports unknown or malformed options with these codes: a usage error, not a crash.
    const code = (e as { code?: string }).code;
    if (e instanceof UsageError || code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' || code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' || code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
      console.error(`${(e as Error).message}\n\n${usage}`);
      return 2;
    }
    throw e;
  }
}

function parseCreate(args: string[]): { shops: string[]; name: string } {
  const { values } = parseArgs({
    args,
    options: { shop: { type: 'string', multiple: true }, name: { type: 'string' } },
    allowPositionals: false,
  });
  const shops = [...new Set((values.shop ?? []).map((s) => s.trim().toLowerCase()))];
  if (shops.length === 0) throw new UsageError('Give at least one --shop <uuid>.');
  const bad = shops.filter((s) => !UUID.test(s));
  if (bad.length > 0) throw new UsageError(`Not a shop id (a uuid): ${bad.map((s) => `"${s}"`).join(', ')}.`);
  return { shops, name: (values.name ?? '').trim() };
}

/** Only the database: managing keys must work while Kafka is down. */
async function withKeys(fn: (keys: ApiKeyStore) => Promise<number>): Promise<number> {
  const env = loadEnv();
  let db: Db;
  try {
    db = await openDb(env.DATABASE_URL ? { databaseUrl: env.DATABASE_URL, poolSize: 1, applicationName: 'shopstream-cli' } : { dataDir: env.DATA_DIR });
  } catch (e) {
    if (e instanceof DataDirLockedError) {
      throw new Error(`${e.message}\nA running \`pnpm start\` holds the embedded database: stop it, run this command, start it again.`);
    }
    throw e;
  }
  try {
    await migrate(db);
    return await fn(new ApiKeyStore(db));
  } finally {
    await db.close();
  }
}

function table(keys: ApiKeyInfo[]): string {
  const head = ['ID', 'NAME', 'SHOPS', 'CREATED', 'REVOKED'];
  const rows = keys.map((k) => [k.id, k.name || '-', k.shops.join(',') || '-', k.created_at, k.revoked_at ?? '-']);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  return [head, ...rows].map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}
