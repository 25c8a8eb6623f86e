import { gauge } from './index.js';

// Made on first use: index.ts re-exports this module, so `gauge` is not usable while the modules load.
const upGauge = () => gauge('shopstream_consumer_up', 'Whether every consumer of the group in this process is running (1) or not (0).', ['group']);

/** One consumer of this process: running or not, and since when (ms since the epoch). */
export interface ConsumerState {
  group: string;
  up: boolean;
  since: number;
}

/** A consumer that has not been running for at least the configured time (see deadConsumers). */
export interface DeadConsumer {
  group: string;
  /** When it stopped running, ISO 8601. */
  down_since: string;
}

const states = new Map<number, ConsumerState>();
let nextId = 0;
const sources: (() => Promise<ConsumerState[]>)[] = [];
let deadAfterMs = 60_000;

const refreshGauge = (group: string) => {
  const mine = [...states.values()].filter((s) => s.group === group);
  if (mine.length === 0) upGauge().remove({ group });
  else upGauge().set({ group }, mine.every((s) => s.up) ? 1 : 0);
};

/**
 * Registers a consumer of this process (down until `up()`); liveness (/healthz) fails once one has been down
 * for CONSUMER_DEAD_AFTER_MS. `remove()` when it is stopped on purpose.
 */
export function trackConsumer(group: string, now: () => number = Date.now): { up(): void; down(): void; remove(): void } {
  const id = nextId++;
  states.set(id, { group, up: false, since: now() });
  refreshGauge(group);
  const set = (up: boolean) => {
    const s = states.get(id);
    if (!s || s.up === up) return;
    states.set(id, { group, up, since: now() });
    refreshGauge(group);
  };
  return {
    up: () => set(true),
    down: () => set(false),
    remove() {
      states.delete(id);
      refreshGauge(group);
    },
  };
}

/** This thread's consumers, for a thread that asks (the all-in-one's consumer worker answers its main thread). */
export const consumerStates = (): ConsumerState[] => [...states.values()];

/** Consumers kept elsewhere in this process (a worker thread) that liveness counts with this thread's. */
export function addConsumerStateSource(source: () => Promise<ConsumerState[]>): void {
  sources.push(source);
}

/** CONSUMER_DEAD_AFTER_MS, set by the process runner. */
export function setConsumerDeadAfter(ms: number): void {
  deadAfterMs = ms;
}

/** Every consumer of this process, in every thread. */
export async function allConsumerStates(): Promise<ConsumerState[]> {
  const others = await Promise.all(sources.map((s) => s().catch(() => [] as ConsumerState[])));
  return [...states.values(), ...others.flat()];
}

/** The consumers of this process (every thread) that have not been running for CONSUMER_DEAD_AFTER_MS or more. */
export async function deadConsumers(now = Date.now()): Promise<DeadConsumer[]> {
  return (await allConsumerStates())
    .filter((s) => !s.up && now - s.since >= deadAfterMs)
    .map((s) => ({ group: s.group, down_since: new Date(s.since).toISOString() }));
}
