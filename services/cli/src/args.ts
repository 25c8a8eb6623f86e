import { parseArgs } from 'node:util';

/** Wrong arguments: printed with the command's usage, exit code 2. */
export class UsageError extends Error {}

// parseArgs reports unknown or malformed options with these codes: a usage error, not a crash.
const parseArgsCodes = new Set(['ERR_PARSE_ARGS_UNKNOWN_OPTION', 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE', 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL']);

/** The options a command takes, as parseArgs declares them. */
type Options = Record<string, { type: 'string' | 'boolean'; multiple?: boolean; short?: string }>;
/** What parseArgs gives for them: each option absent, or its value (an array when multiple). */
type Values<O extends Options> = {
  [K in keyof O]?: O[K] extends { type: 'boolean' }
    ? O[K] extends { multiple: true }
      ? boolean[]
      : boolean
    : O[K] extends { multiple: true }
      ? string[]
      : string;
};

/**
 * The one argument parser of every command: `node:util` parseArgs, strict, so an unknown option
 * (`migrate --force`), a flag given a value or an option missing one is refused with exit 2 and says which,
 * and `--count=3` means `--count 3`.
 */
export function parse<const O extends Options>(args: string[], options: O, allowPositionals = false): { values: Values<O>; positionals: string[] } {
  const { values, positionals } = parseArgs({ args, options, allowPositionals, strict: true });
  return { values: values as Values<O>, positionals };
}

/** `/^\d+$/` at least min, or the default when the option was not given; a UsageError otherwise. */
export function intOption(name: string, text: string | undefined, min: number, fallback?: number): number {
  if (text === undefined) {
    if (fallback === undefined) throw new UsageError(`Give --${name} <n>.`);
    return fallback;
  }
  if (!/^\d+$/.test(text) || Number(text) < min) throw new UsageError(`--${name} must be an integer >= ${min}.`);
  return Number(text);
}

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

/** One subcommand (`api-keys create`): its lines of the usage, and what it does with the arguments after its name. */
export interface Subcommand {
  /** `  pnpm cli <command> <sub> ...` and its indented description, as the group's usage lists it. */
  usage: string;
  run(args: string[]): Promise<number>;
}

/**
 * A command of `pnpm cli`: either a group of subcommands (`api-keys create|list|revoke`) or, with `run`, one
 * action of its own (`migrate`). `<command> --help` prints the whole usage, `<command> <sub> --help` only that
 * subcommand's lines (and the note).
 */
export interface Command {
  /** Said after the subcommands' lines in every usage (where it works, what it needs). */
  note?: string;
  subcommands?: Record<string, Subcommand>;
  /** A command without subcommands: its whole usage, and its run. */
  usage?: string;
  run?(args: string[]): Promise<number>;
  /** Errors that refuse the command as it was asked (exit 2, only their message): a running server holds the data, ... */
  refused?(e: unknown): boolean;
}

const wantsHelp = (args: string[]) => {
  const end = args.indexOf('--');
  return (end === -1 ? args : args.slice(0, end)).some((a) => a === '--help' || a === '-h');
};

const block = (lines: string[], note?: string) => [`Usage:\n${lines.join('\n')}`, ...(note ? [note] : [])].join('\n\n');

/** The whole usage of a command, as `pnpm cli <command> --help` prints it. */
export function usageOf(cmd: Command): string {
  if (cmd.subcommands)
    return block(
      Object.values(cmd.subcommands).map((s) => s.usage),
      cmd.note,
    );
  return [cmd.usage ?? '', ...(cmd.note ? [cmd.note] : [])].join('\n\n');
}

/** Dispatches `<command> [sub] args...`: help, an unknown subcommand, usage errors, exit codes. */
export async function runCommand(name: string, cmd: Command, args: string[]): Promise<number> {
  try {
    return await dispatch(name, cmd, args);
  } catch (e) {
    if (!cmd.refused?.(e)) throw e;
    console.error((e as Error).message);
    return 2;
  }
}

async function dispatch(name: string, cmd: Command, args: string[]): Promise<number> {
  const whole = usageOf(cmd);
  if (!cmd.subcommands) {
    if (wantsHelp(args)) {
      console.log(whole);
      return 0;
    }
    return withUsage(whole, () => cmd.run!(args));
  }
  const [sub, ...rest] = args;
  const s = sub === undefined ? undefined : cmd.subcommands[sub];
  if (!s) {
    if (sub === undefined || sub === '--help' || sub === '-h') {
      (sub ? console.log : console.error)(sub ? whole : `Say what to do: ${Object.keys(cmd.subcommands).join(', ')}.\n\n${whole}`);
      return sub ? 0 : 2;
    }
    console.error(`Unknown ${name} command "${sub}".\n\n${whole}`);
    return 2;
  }
  const own = block([s.usage], cmd.note);
  if (wantsHelp(rest)) {
    console.log(own);
    return 0;
  }
  return withUsage(own, () => s.run(rest));
}

/** Columns padded to their widest cell, two spaces apart, no trailing blanks. */
export function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  return [head, ...rows]
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
