import { BroadcastChannel } from 'node:worker_threads';

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

/** Every KeyMemory of this thread still in use: swept on a timer, and emptied of erased contacts' keys. */
const live = new Set<WeakRef<KeyMemory<unknown>>>();
let sweeper: ReturnType<typeof setInterval> | undefined;

/**
 * How the threads of a process tell each other of an erasure: the all-in-one runs its consumers in a worker thread
 * (their caches are there) and the erasure worker in the main thread. A BroadcastChannel reaches every other
 * thread of the process that listens on the same name, never the sender itself.
 */
const CHANNEL = 'shopstream:privacy:erased-keys';
interface ErasedKeys {
  shopId: string;
  erased: { contactId: string; keyId: string | null }[];
}
let listener: BroadcastChannel | undefined;
let sender: BroadcastChannel | undefined;

/** The timer that sweeps every cache, and the channel an erasure in another thread arrives on; neither keeps the process alive. */
function startSweeping(): void {
  if (sweeper !== undefined) return;
  sweeper = setInterval(() => eachMemory((m) => m.sweep()), SWEEP_MS);
  sweeper.unref();
  listener = new BroadcastChannel(CHANNEL);
  listener.onmessage = (e) => {
    const { shopId, erased } = (e as { data: ErasedKeys }).data;
    forgetHere(shopId, erased);
  };
  listener.unref();
}

function eachMemory(f: (m: KeyMemory<unknown>) => void): void {
  for (const ref of live) {
    const m = ref.deref();
    if (m === undefined) live.delete(ref);
    else f(m);
  }
}

/**
 * Forgets, in every cache of this process (this thread at once, its other threads as soon as they read the
 * message), the data keys of contacts just erased (after the erasure committed): by key id and by
 * `<shop>/<contact>`, the two names the caches use. Other processes forget them within KEY_TTL_MS.
 */
export function forgetErasedKeys(shopId: string, erased: { contactId: string; keyId: string | null }[]): void {
  if (erased.length === 0) return;
  forgetHere(shopId, erased);
  if (sender === undefined) {
    sender = new BroadcastChannel(CHANNEL);
    sender.unref();
  }
  sender.postMessage({ shopId, erased } satisfies ErasedKeys);
}

function forgetHere(shopId: string, erased: ErasedKeys['erased']): void {
  eachMemory((m) => {
    for (const e of erased) {
      m.delete(`${shopId}/${e.contactId}`);
      if (e.keyId !== null) m.delete(e.keyId);
    }
  });
}
