import { BusUnavailableError } from '../port.js';

/** p, or BusUnavailableError once it has not settled within ms. */
export function withTimeout<T>(p: Promise<T>, what: string, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new BusUnavailableError(`${what} timed out after ${ms} ms`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e) => (clearTimeout(t), reject(e)),
    );
  });
}
