/**
 * Polls until fn returns something other than undefined/false/null, or fails with message after timeoutMs. The
 * default minute is sized for a 2-core machine that other work shares: a deadline only costs time when it fails.
 */
const DEFAULT_TIMEOUT_MS = 60_000;

export async function waitFor<T>(
  fn: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  opts: { timeoutMs?: number; intervalMs?: number; message?: string } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  let lastError: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== null && v !== false) return v as T;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`${opts.message ?? 'condition'} not met within ${opts.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms${lastError ? `: ${String(lastError)}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
  }
}
