import { migrate } from '@shopstream/db';
import { migrationSources } from '@shopstream/all-in-one';
import { parse, type Command } from '../args.js';
import { withDb } from '../context.js';

export const command: Command = {
  usage: 'Usage: pnpm cli migrate\n\nApplies the SQL migrations not yet applied to DATABASE_URL (or the embedded database in DATA_DIR).',
  async run(args) {
    parse(args, {});
    return withDb(
      'stop it, run this command, start it again (or just start it: it migrates at start).',
      async (db) => {
        const applied = await migrate(db, undefined, migrationSources);
        console.log(applied.length === 0 ? 'Database is up to date.' : `Applied: ${applied.join(', ')}`);
        return 0;
      },
      { migrate: false },
    );
  },
};
