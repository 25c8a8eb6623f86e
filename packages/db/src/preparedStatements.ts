/**
 * Server-side prepared statements for the statements a process runs again and again (a consumer's checkpoint, the
 * contact look-up of every ingest request): given a name, the pg driver sends the statement's text once per
 * connection (Parse) and from then on only its parameters (Bind), and after five runs PostgreSQL keeps a generic
 * plan instead of planning each run. On PostgreSQL 15 here that took the server's CPU for a consumer's checkpoint
 * statement from 140-147 to 40-43 µs a run (bench/src/preparedCost.ts; bench/README.md#prepared-statements-issue-23).
 *
 * A statement is named by its text, the same name for the same text in every connection of the process, once the
 * process has run that text PREPARE_AFTER_RUNS times: a statement whose text is built per call (a VALUES list of n
 * rows) gets no name until it repeats, and none with more than MAX_PARAMETERS parameters. Statements without
 * parameters keep the simple protocol (a migration file of many commands, BEGIN, SET LOCAL). At most MAX_NAMED texts
 * get a name, so a process cannot fill the server's memory with them. A named statement the server refuses to run
 * again ("cached plan must not change result type": a migration changed the columns it returns since it was
 * prepared) is given a new name, so its next run, in any connection, prepares it anew. The refused run fails as a
 * statement error (not a data error: a consumer's batch is delivered again, and applies).
 *
 * Off (DATABASE_PREPARED_STATEMENTS=false) for a pooler in transaction mode that does not keep prepared statements
 * per client (PgBouncer before 1.21, or without max_prepared_statements): docs/operations.md#prepared-statements.
 */
export const PREPARE_AFTER_RUNS = 2;
/** Texts named per process, at most (the JDBC driver keeps up to 256 per connection). */
export const MAX_NAMED = 250;
/**
 * Statements with more parameters stay unnamed: their text grows with their data (a VALUES list of a row per
 * contact), so each length would be a statement of its own, and a prepared 100-row VALUES insert holds about
 * 400 KB of the server's memory per connection (against about 80 KB for a consumer's checkpoint statement).
 */
export const MAX_PARAMETERS = 32;
/** Texts counted before their PREPARE_AFTER_RUNS: forgotten all at once past this, so the count stays bounded. */
const MAX_COUNTED = 10_000;

export interface StatementNames {
  /** The name to run this statement under, or undefined to run it unnamed. */
  nameFor(text: string, values: readonly unknown[]): string | undefined;
  /** After an error of a run under `name`: a refused cached plan gives the text a new name. */
  failed(text: string, name: string | undefined, error: unknown): void;
  /** How many texts have a name: for tests. */
  readonly named: number;
}

export function statementNames(): StatementNames {
  const names = new Map<string, string>();
  const runs = new Map<string, number>();
  let issued = 0;
  return {
    nameFor(text, values) {
      if (values.length === 0 || values.length > MAX_PARAMETERS) return undefined;
      const name = names.get(text);
      if (name !== undefined || names.size >= MAX_NAMED) return name;
      const n = (runs.get(text) ?? 0) + 1;
      if (n < PREPARE_AFTER_RUNS) {
        if (runs.size >= MAX_COUNTED) runs.clear();
        runs.set(text, n);
        return undefined;
      }
      runs.delete(text);
      const fresh = `shopstream_${++issued}`;
      names.set(text, fresh);
      return fresh;
    },
    failed(text, name, error) {
      if (name === undefined || names.get(text) !== name) return;
      const e = error as { code?: unknown; message?: unknown } | null;
      // 0A000 feature_not_supported, raised by the plan cache when a prepared statement's result shape changed.
      if (e?.code === '0A000' && typeof e.message === 'string' && e.message.includes('cached plan must not change result type')) {
        names.set(text, `shopstream_${++issued}`);
      }
    },
    get named() {
      return names.size;
    },
  };
}

/** The names of this process's statements: one for every pool, so a text has the same name in each. */
export const processStatementNames = statementNames();
