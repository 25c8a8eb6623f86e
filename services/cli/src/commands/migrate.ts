import { loadEnv } from '@shopstream/config';
import { migrate, openDb } from '@shopstream/db';
import { parse, type Command } from '../args.js';

export const command: Command = {
  usage: 'Usage: pnpm cli migrate\n\nApplies the SQL migrations not yet applied to DATABASE_URL (or the embedded database in DATA_DIR).',
  async run(args) {
    parse(args, {});
    const env = loadEnv();
    const db = await openDb(env.DATABASE_URL ? { databaseUrl: env.DATABASE_URL } : { dataDir: env.DATA_DIR, engine: env.EMBEDDED_DB, attach: true });
    try {
      const applied = await migrate(db);
      console.log(applied.length === 0 ? 'Database is up to date.' : `Applied: ${applied.join(', ')}`);
      return 0;
    } finally {
      await db.close();
    }
  },
};
