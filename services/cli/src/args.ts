
/** Wrong arguments: printed with the command's usage, exit code 2. */
export class UsageError extends Error {}

// parseArgs reports unknown or malformed options with these codes: a usage error, not a crash.
const parseArgsCodes = new Set(['ERR_PARSE_ARGS_UNKNOWN_OPTION', 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE', 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL']);

/** Runs a command; a UsageError or a parseArgs error becomes its message and the usage on stderr, exit 2. */
export async function withUsage(usage: string, fn: () => Promise<number>): Promise<number> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof UsageError || parseArgsCodes.has((e as { code?: string }).code ?? '')) {
      console.error(`${(e as Error).message}\n\n${usage}`);
      return 2;
    }
    throw e;
  }
}

/** Columns padded to their widest cell, two spaces apart, no trailing blanks. */
export function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  return [head, ...rows].map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}
