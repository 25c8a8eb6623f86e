/** `pnpm start [service] [--help]`; pnpm passes a leading `--` through, which is ignored. */
export function parseEnvFromArgs(argv: string[]): { service?: string; help: boolean } {
  const args = argv.filter((a) => a !== '--');
  return { service: args.find((a) => !a.startsWith('-')), help: args.includes('--help') || args.includes('-h') };
}
