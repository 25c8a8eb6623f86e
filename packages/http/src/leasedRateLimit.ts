import { sql, type Db } from '@shopstream/db';
import { counter } from '@shopstream/telemetry';
import { ApiError } from './errors.js';
import { rateLimited } from './rateLimit.js';

const leases = counter(
  'shopstream_rate_limit_leases_total',
  'Token leases a replica took from the shared bucket in Postgres, by outcome: full (all it asked), short (less: the bucket ran low), returned (unspent tokens given back), failed (the database did not answer: fail open on a local bucket).',
  ['bucket', 'outcome'],
);

export interface LeasedRateLimitOptions {
  db: Db;
  /** Names the counters. */
  bucket: string;
  /** Tokens per second (the burst: also the burst bucket's size); 0: no such policy. */
  perSecond: number;
  /** Tokens per minute (the steady rate; the steady bucket holds a minute's worth); 0: no such policy. */
  perMinute: number;
  /** Tokens a replica takes from Postgres at a time (50). */
  chunk?: number;
  /** How long a request waits for a lease before it is served by the local bucket instead (500 ms). */
  leaseTimeoutMs?: number;
  /** After a lease failed, how long this replica counts on its own before it tries the database again (1 s). */
  failOpenMs?: number;
  /** Unspent tokens of a (key, shop) not used for this long go back to the shared bucket (2 s). */
  idleReturnMs?: number;
  /** Told when the database did not answer a lease and the replica fails open, at most once per failOpenMs. */
  onFailOpen?: (err: unknown) => void;
  /** What a unit is called in the 429's message. */
  unit?: string;
  /**
   * This replica's clock, in ms (Date.now): when a lease is due again, what has refilled since the last one, the
   * fail-open buckets. Tests drive it; the shared bucket's refill stays on the database's clock.
   */
  now?: () => number;
}

interface Policy {
  name: 'burst' | 'steady';
  limit: number;
  windowSeconds: number;
  /** Tokens per ms. */
  perMs: number;
}

interface KeyState {
  apiKeyId: string;
  shopId: string;
  /** Tokens leased from the shared bucket and not yet spent. */
  local: number;
  /** What each policy's shared bucket held after this replica's last lease, and when (local ms): for headers. */
  shared: number[];
  sharedAt: number;
  /** Until then (local ms) the shared bucket is known to be too low for another lease: reject without asking. */
  emptyUntil: number;
  usedAt: number;
  inflight: Promise<void> | null;
  /** The local-only buckets of a database outage (tokens per policy, refilled at), made full on first use. */
  fallback: { tokens: number[]; at: number } | null;
}

export interface RateDecision {
  allowed: boolean;
  /** RateLimit-* headers, to be set on the response either way. */
  headers: Record<string, string>;
  /** Seconds to wait (a rejection only). */
  retryAfter: number;
  /** Whether the database decided (false: the local bucket of a fail-open). */
  shared: boolean;
  /** Gives the tokens back (the request failed on our side). */
  refund(): void;
}

const NO_LIMIT = 1e12;

/**
 * A token bucket per (API key, shop), shared by every replica through one Postgres row but not consulted per
 * request: a replica leases `chunk` tokens at a time (ingest_rate_take, one atomic statement on the database's
 * clock) and spends them locally, leasing the next chunk in the background when half is spent. Two policies in
 * one row: `burst` (perSecond tokens, refilled at perSecond/s) and `steady` (perMinute tokens, refilled at
 * perMinute/60 per second); a request needs its cost from both. Unspent tokens of a key idle for idleReturnMs
 * are given back. So the total admitted across replicas in any window exceeds the limit by at most what the
 * replicas held at its start: one chunk (or one bulk request's cost) each.
 * When the shared bucket ran dry, a replica rejects locally until enough has refilled for a lease, so a
 * producer far over its limit costs a few statements a second, not one per request.
 * Fail open: when a lease fails or takes longer than leaseTimeoutMs, the replica counts on a local bucket of
 * the same policies (so each replica alone enforces the limit; N replicas admit up to N times it) for
 * failOpenMs, then tries the database again in the background. Ingest never waits on a database outage.
 */
export class LeasedRateLimiter {
  readonly policies: Policy[];
  private readonly chunk: number;
  private readonly leaseTimeoutMs: number;
  private readonly failOpenMs: number;
  private readonly idleReturnMs: number;
  private readonly keys = new Map<string, KeyState>();
  private downUntil = 0;
  private readonly sweeper: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly now: () => number;

  constructor(private readonly o: LeasedRateLimitOptions) {
    // Looked up per call, not captured: a test that fakes Date after the limiter was made still drives it.
    this.now = o.now ?? (() => Date.now());
    this.policies = [
      ...(o.perSecond > 0 ? [{ name: 'burst' as const, limit: o.perSecond, windowSeconds: 1, perMs: o.perSecond / 1000 }] : []),
      ...(o.perMinute > 0 ? [{ name: 'steady' as const, limit: o.perMinute, windowSeconds: 60, perMs: o.perMinute / 60_000 }] : []),
    ];
    this.chunk = Math.max(1, Math.min(o.chunk ?? 50, ...this.policies.map((p) => p.limit)));
    this.leaseTimeoutMs = o.leaseTimeoutMs ?? 500;
    this.failOpenMs = o.failOpenMs ?? 1_000;
    this.idleReturnMs = o.idleReturnMs ?? 2_000;
    if (this.enabled) {
      this.sweeper = setInterval(() => this.sweep(), Math.min(1_000, this.idleReturnMs));
      this.sweeper.unref();
    }
  }

  /** The smallest bucket: the most one request can take. */
  get capacity(): number {
    return Math.min(...this.policies.map((p) => p.limit));
  }

  get enabled(): boolean {
    return this.policies.length > 0;
  }

  /** The RateLimit-Policy field: every policy, e.g. `"burst";q=350;w=1, "steady";q=3500;w=60`. */
  get policyHeader(): string {
    return this.policies.map((p) => `"${p.name}";q=${p.limit};w=${p.windowSeconds}`).join(', ');
  }

  /** Takes `cost` tokens for (apiKeyId, shopId), or says how long to wait. Never throws, never waits on a dead database. */
  async take(apiKeyId: string, shopId: string, cost: number): Promise<RateDecision> {
    // A request bigger than a bucket (a bulk of 100 under a burst below 100) needs a full bucket and empties
    // it, rather than waiting forever.
    cost = Math.min(cost, this.capacity);
    const id = `${apiKeyId}/${shopId}`;
    let s = this.keys.get(id);
    if (!s) {
      s = {
        apiKeyId,
        shopId,
        local: 0,
        shared: this.policies.map((p) => p.limit),
        sharedAt: this.now(),
        emptyUntil: 0,
        usedAt: 0,
        inflight: null,
        fallback: null,
      };
      this.keys.set(id, s);
    }
    s.usedAt = this.now();
    for (let attempt = 0; ; attempt++) {
      if (this.now() < this.downUntil) {
        // Counting on our own; one background lease at a time finds out whether the database is back.
        if (!s.inflight && this.now() >= this.downUntil - this.failOpenMs / 2) void this.lease(s, this.chunk).catch(() => {});
        return this.takeFallback(s, cost);
      }
      if (s.local >= cost) {
        s.local -= cost;
        if (s.local < this.chunk / 2 && !s.inflight && this.now() >= s.emptyUntil) void this.lease(s, this.chunk).catch(() => {});
        return this.allowShared(s, cost);
      }
      if (this.now() < s.emptyUntil || attempt >= 2) return this.rejectShared(s, cost);
      const lease = s.inflight ?? this.lease(s, Math.max(this.chunk, cost - s.local));
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        lease.then(
          () => false,
          () => false,
        ),
        new Promise<boolean>((r) => {
          timer = setTimeout(() => r(true), this.leaseTimeoutMs);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) this.failOpen(new Error(`no lease from the database within ${this.leaseTimeoutMs} ms`));
    }
  }

  /**
   * The rejection of a request costing at least one token, decided without waiting, when this replica already
   * knows the shared bucket of (apiKeyId, shopId) is too low for it (it holds less than a token and the last
   * lease came back short, so no lease is due yet); undefined otherwise (then `take`, which may lease).
   * For shedding a producer far over its limit before its request reaches the router.
   */
  rejectNow(apiKeyId: string, shopId: string): RateDecision | undefined {
    const s = this.keys.get(`${apiKeyId}/${shopId}`);
    const now = this.now();
    if (!s || now < this.downUntil || s.local >= 1 || now >= s.emptyUntil) return undefined;
    s.usedAt = now;
    return this.rejectShared(s, 1);
  }

  /** Sets the RateLimit headers of a decision on a response. */
  static setHeaders(res: { setHeader(name: string, value: string): unknown }, d: RateDecision): void {
    for (const [k, v] of Object.entries(d.headers)) res.setHeader(k, v);
  }

  /** The 429 for a rejection: `rate_limited`, Retry-After and the RateLimit headers. */
  error(d: RateDecision): ApiError {
    rateLimited.inc({ bucket: this.o.bucket });
    const unit = this.o.unit ?? 'requests';
    const what = this.policies.map((p) => `${p.limit} ${unit} per ${p.windowSeconds === 1 ? 'second' : 'minute'}`).join(' and ');
    return new ApiError(
      'rate_limited',
      `At most ${what} for this API key and shop. Retry after ${d.retryAfter} seconds.`,
      {},
      { ...d.headers, 'Retry-After': String(d.retryAfter) },
    );
  }

  /** Gives every unspent token back to the shared buckets and stops the sweeper. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.now() < this.downUntil) return;
    await Promise.allSettled([...this.keys.values()].filter((s) => s.local > 0 && !s.inflight).map((s) => this.giveBack(s)));
  }

  private lease(s: KeyState, ask: number, giveBack = 0): Promise<void> {
    const p = this.o.db
      .query(
        sql`SELECT granted, burst_left, steady_left FROM ingest_rate_take(${s.apiKeyId}::uuid, ${s.shopId}::uuid, ${ask}::int, ${giveBack}::int,
          ${this.cap('burst')}::float8, ${this.rate('burst')}::float8, ${this.cap('steady')}::float8, ${this.rate('steady')}::float8)`,
      )
      .then(
        (rows) => {
          const granted = Number(rows[0].granted);
          const left = { burst: Number(rows[0].burst_left), steady: Number(rows[0].steady_left) };
          const now = this.now();
          s.local += granted;
          s.shared = this.policies.map((pol) => left[pol.name]);
          s.sharedAt = now;
          this.downUntil = 0;
          if (granted < ask) {
            // Not enough left: ask again once a fifth of a chunk (at least one token) has refilled.
            const want = Math.max(1, Math.min(ask - granted, Math.ceil(this.chunk / 5)));
            s.emptyUntil = now + Math.max(0, ...this.policies.map((pol) => (want - left[pol.name]) / pol.perMs));
            leases.inc({ bucket: this.o.bucket, outcome: ask === 0 ? 'returned' : 'short' });
          } else {
            s.emptyUntil = 0;
            leases.inc({ bucket: this.o.bucket, outcome: 'full' });
          }
        },
        (e: unknown) => {
          leases.inc({ bucket: this.o.bucket, outcome: 'failed' });
          this.failOpen(e);
          throw e;
        },
      )
      .finally(() => {
        if (s.inflight === p) s.inflight = null;
      });
    if (ask > 0) s.inflight = p;
    return p;
  }

  private giveBack(s: KeyState): Promise<void> {
    const n = Math.floor(s.local);
    s.local -= n;
    return this.lease(s, 0, n);
  }

  private failOpen(e: unknown): void {
    const wasUp = this.now() >= this.downUntil;
    this.downUntil = this.now() + this.failOpenMs;
    if (wasUp) this.o.onFailOpen?.(e);
  }

  private cap(name: Policy['name']): number {
    return this.policies.find((p) => p.name === name)?.limit ?? NO_LIMIT;
  }

  private rate(name: Policy['name']): number {
    const p = this.policies.find((x) => x.name === name);
    return p ? p.perMs * 1000 : NO_LIMIT;
  }

  /** What each policy has left for this key as far as this replica knows: the shared bucket, refilled since, plus its own tokens. */
  private remainingShared(s: KeyState): number[] {
    const ms = this.now() - s.sharedAt;
    return this.policies.map((p, i) => Math.max(0, Math.min(p.limit, Math.floor(Math.min(p.limit, s.shared[i] + p.perMs * ms) + s.local))));
  }

  private allowShared(s: KeyState, cost: number): RateDecision {
    return this.decision(true, this.remainingShared(s), 0, true, () => {
      s.local += cost;
    });
  }

  private rejectShared(s: KeyState, cost: number): RateDecision {
    const ms = this.now() - s.sharedAt;
    const wait = Math.max(
      s.emptyUntil - this.now(),
      ...this.policies.map((p, i) => (cost - s.local - Math.min(p.limit, s.shared[i] + p.perMs * ms)) / p.perMs),
    );
    return this.decision(false, this.remainingShared(s), wait, true, () => {});
  }

  private takeFallback(s: KeyState, cost: number): RateDecision {
    const now = this.now();
    const f = (s.fallback ??= { tokens: this.policies.map((p) => p.limit), at: now });
    f.tokens = f.tokens.map((t, i) => Math.min(this.policies[i].limit, t + this.policies[i].perMs * (now - f.at)));
    f.at = now;
    // Tokens leased before the outage are spent first.
    if (s.local >= cost) {
      s.local -= cost;
      return this.decision(
        true,
        f.tokens.map((t) => Math.floor(t + s.local)),
        0,
        false,
        () => {
          s.local += cost;
        },
      );
    }
    if (f.tokens.every((t) => t >= cost)) {
      f.tokens = f.tokens.map((t) => t - cost);
      return this.decision(true, f.tokens.map(Math.floor), 0, false, () => {
        f.tokens = f.tokens.map((t) => t + cost);
      });
    }
    const wait = Math.max(...f.tokens.map((t, i) => (cost - t) / this.policies[i].perMs));
    return this.decision(false, f.tokens.map(Math.floor), wait, false, () => {});
  }

  private decision(allowed: boolean, remaining: number[], waitMs: number, shared: boolean, refund: () => void): RateDecision {
    const resets = this.policies.map((p, i) => Math.max(0, Math.ceil((p.limit - remaining[i]) / p.perMs / 1000)));
    // RateLimit-Limit/-Remaining/-Reset speak for the policy closest to running out.
    let b = 0;
    this.policies.forEach((p, i) => {
      if (remaining[i] / p.limit < remaining[b] / this.policies[b].limit) b = i;
    });
    const retryAfter = allowed ? 0 : Math.max(1, Math.ceil(waitMs / 1000));
    const bindingReset = allowed ? resets[b] : Math.max(resets[b], retryAfter);
    let refunded = false;
    return {
      allowed,
      shared,
      retryAfter,
      headers: {
        'RateLimit-Limit': String(this.policies[b].limit),
        'RateLimit-Remaining': String(remaining[b]),
        'RateLimit-Reset': String(bindingReset),
        'RateLimit-Policy': this.policyHeader,
        RateLimit: this.policies.map((p, i) => `"${p.name}";r=${remaining[i]};t=${i === b ? bindingReset : resets[i]}`).join(', '),
      },
      refund: () => {
        if (refunded) return;
        refunded = true;
        refund();
      },
    };
  }

  /** Gives back the tokens of keys idle for idleReturnMs; forgets keys idle for a minute. */
  private sweep(): void {
    const now = this.now();
    if (now < this.downUntil) return;
    for (const [id, s] of this.keys) {
      if (s.inflight || now - s.usedAt < this.idleReturnMs) continue;
      if (s.local >= 1) void this.giveBack(s).catch(() => {});
      else if (now - s.usedAt > 60_000) this.keys.delete(id);
      else s.fallback = null;
    }
  }
}
