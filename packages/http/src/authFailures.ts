import { isIP } from 'node:net';

export interface FailedAuthLimitOptions {
  /** Failed look-ups an address may make at once (0: no limit). */
  burst: number;
  /** How fast an address earns them back. */
  perMinute: number;
  /** Addresses tracked at most: memory stays bounded however many addresses a flood comes from. */
  maxAddresses?: number;
  /** The clock, injectable so a test drives time instead of racing it. */
  now?: () => number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/**
 * A token bucket per client address, in memory, charged one token by each API key that needed a database look-up
 * and turned out unknown (taken before the look-up, given back when the key was valid). When an address has none left, secrets the process has never seen from it are not looked
 * up (the caller answers 429 with `retryAfterSeconds`): a flood of distinct made-up keys costs its sender, not the
 * database pool every valid caller waits on. Keys this process knows are never limited (see requireAuth).
 *
 * Per replica, not shared: the budget guards each replica's own pool, and a sender spread over replicas gets one
 * budget on each, still a small multiple of it.
 */
export class FailedAuthLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly maxAddresses: number;
  private readonly now: () => number;

  constructor(private readonly o: FailedAuthLimitOptions) {
    this.maxAddresses = o.maxAddresses ?? 10_000;
    this.now = o.now ?? Date.now;
  }

  get enabled(): boolean {
    return this.o.burst > 0;
  }

  /** Seconds until the address may try an unknown secret again, or 0 when it may now (nothing taken). */
  retryAfterSeconds(address: string): number {
    if (!this.enabled) return 0;
    const b = this.bucketOf(addressKey(address), false);
    if (!b || b.tokens >= 1) return 0;
    if (this.o.perMinute <= 0) return 60;
    return Math.max(1, Math.ceil(((1 - b.tokens) * 60_000) / this.o.perMinute / 1000));
  }

  /**
   * Takes a look-up from the address's budget before the query, so concurrent look-ups cannot all pass a budget
   * that only their answers would have spent (300 a second did, 384 queries for a burst of 20): 0 when taken,
   * else the seconds to wait (nothing taken). Give it back with `succeeded` when the key turns out valid.
   */
  take(address: string): number {
    if (!this.enabled) return 0;
    const wait = this.retryAfterSeconds(address);
    if (wait > 0) return wait;
    const b = this.bucketOf(addressKey(address), true)!;
    b.tokens = Math.max(0, b.tokens - 1);
    return 0;
  }

  /** A look-up taken with `take` found a valid key: it was no failure. */
  succeeded(address: string): void {
    if (!this.enabled) return;
    const b = this.bucketOf(addressKey(address), true)!;
    b.tokens = Math.min(this.o.burst, b.tokens + 1);
  }

  /** The address's bucket refilled to now; a new full one when `create`. */
  private bucketOf(key: string, create: boolean): Bucket | undefined {
    const now = this.now();
    const b = this.buckets.get(key);
    if (!b) {
      if (!create) return undefined;
      // Full: the oldest goes. A full bucket is what a new address gets anyway, so only an address that failed
      // recently and was pushed out by more than maxAddresses newer ones starts afresh.
      if (this.buckets.size >= this.maxAddresses) this.buckets.delete(this.buckets.keys().next().value!);
      const fresh = { tokens: this.o.burst, at: now };
      this.buckets.set(key, fresh);
      return fresh;
    }
    b.tokens = Math.min(this.o.burst, b.tokens + ((now - b.at) * this.o.perMinute) / 60_000);
    b.at = now;
    // Refilled: the entry says nothing a new one would not, so it frees its place.
    if (b.tokens >= this.o.burst && !create) {
      this.buckets.delete(key);
      return undefined;
    }
    // Most recently charged last, so eviction takes the address idle longest.
    this.buckets.delete(key);
    this.buckets.set(key, b);
    return b;
  }

  /** Addresses holding a bucket now (for tests: the memory bound). */
  get size(): number {
    return this.buckets.size;
  }
}

/**
 * The unit one budget covers: an IPv4 address, or an IPv6 /64 (one host is routinely given a whole /64, so
 * per-address IPv6 buckets would be free for it to multiply).
 */
export function addressKey(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1];
  if (isIP(address) !== 6) return address;
  const [head, tail = ''] = address.toLowerCase().split('::');
  const front = head ? head.split(':') : [];
  const back = address.includes('::') && tail ? tail.split(':') : [];
  const groups = address.includes('::') ? [...front, ...Array<string>(8 - front.length - back.length).fill('0'), ...back] : front;
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}
