/** How long an unwrapped data key stays in a process's memory after it was read from contact_keys. */
export const KEY_TTL_MS = 5 * 60_000;
/** How often every cache drops its expired keys, also when nothing reads it. */
const SWEEP_MS = 30_000;
/** Keys a cache holds (about 150 bytes each); past it the oldest go first. */
const MAX_KEYS = 200_000;

/**
 * Unwrapped data keys, by name, each kept at most `ttlMs` after it was put (however often it is read) and at most
 * `max` of them, the oldest dropped first: put order is expiry order, so both drop from the front of the map. The
 * bound is what docs/privacy.md promises for an erased contact's key in any process ("Keys in memory").
 */
export class KeyMemory<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();
  private readonly ttlMs: number;
  private readonly max: number;
  private readonly now: () => number;

  constructor(opts: { ttlMs?: number; max?: number; now?: () => number } = {}) {
    this.ttlMs = opts.ttlMs ?? KEY_TTL_MS;
    this.max = opts.max ?? MAX_KEYS;
    this.now = opts.now ?? (() => performance.now());
    live.add(new WeakRef(this));
    startSweeping();
  }

  get(name: string): V | undefined {
    const e = this.entries.get(name);
    if (e === undefined) return undefined;
    if (e.until > this.now()) return e.value;
    this.sweep();
    return undefined;
  }

  set(name: string, value: V): void {
    this.entries.delete(name);
    this.entries.set(name, { value, until: this.now() + this.ttlMs });
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value!);
    this.sweep();
  }

  delete(name: string): void {
    this.entries.delete(name);
  }

  get size(): number {
    return this.entries.size;
  }

  /** Drops the expired entries: they are the first ones. */
  sweep(): void {
    const now = this.now();
    for (const [name, e] of this.entries) {
      if (e.until > now) return;
      this.entries.delete(name);
    }
  }
}

/** Every KeyMemory of the process still in use: swept on a timer, and emptied of erased contacts' keys. */
const live = new Set<WeakRef<KeyMemory<unknown>>>();
let sweeper: ReturnType<typeof setInterval> | undefined;

/** The timer that sweeps every cache; it never keeps the process alive. */
function startSweeping(): void {
  if (sweeper !== undefined) return;
  sweeper = setInterval(() => eachMemory((m) => m.sweep()), SWEEP_MS);
  sweeper.unref();
}

function eachMemory(f: (m: KeyMemory<unknown>) => void): void {
  for (const ref of live) {
    const m = ref.deref();
    if (m === undefined) live.delete(ref);
    else f(m);
  }
}

/**
 * Forgets, in every cache of this process, the data keys of contacts just erased (after the erasure committed):
 * by key id and by `<shop>/<contact>`, the two names the caches use. Other processes forget them within
 * KEY_TTL_MS.
 */
export function forgetErasedKeys(shopId: string, erased: { contactId: string; keyId: string | null }[]): void {
  eachMemory((m) => {
    for (const e of erased) {
      m.delete(`${shopId}/${e.contactId}`);
      if (e.keyId !== null) m.delete(e.keyId);
    }
  });
}
