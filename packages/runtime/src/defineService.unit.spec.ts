import { describe, expect, it } from 'vitest';
import { topicNames } from '@shopstream/bus';
import { defineProjection, type ProjectionDeps } from '@shopstream/projections';
import { envSchema, loadEnv } from '@shopstream/config';
import { eventsTopic, flowTriggersTopic, metricsTopic } from '@shopstream/contracts';
import type { Queryable } from '@shopstream/db';
import { checkedEmits, defineService, UndeclaredEmitError } from './defineService.js';
import type { Runtime } from './runtime.js';

const topics = topicNames('t.');
// apply is given no real transaction here: the projection under test writes nothing.
const tx = {} as Queryable;
const deps = { topics, logger: {} } as ProjectionDeps;
const projection = (emitTo: string) =>
  defineProjection({
    name: 'fixture',
    version: 1,
    summary: 'events -> nothing; emits metrics',
    topic: eventsTopic,
    emits: [metricsTopic],
    tables: [],
    open: async () => ({ apply: async () => [{ topic: emitTo, key: 'k', value: '{}' }] }),
  });

describe('defineService', () => {
  it('lets a projection emit to a topic it declares, and fails the batch on one it does not declare', async () => {
    const ok = await checkedEmits(projection(topics.metrics)).open(deps);
    expect(await ok.apply(tx, [])).toEqual([{ topic: 't.metrics', key: 'k', value: '{}' }]);
    const wrong = await checkedEmits(projection(topics.flowTriggers)).open(deps);
    await expect(wrong.apply(tx, [])).rejects.toThrow(UndeclaredEmitError);
    await expect(wrong.apply(tx, [])).rejects.toThrow('projection fixture emitted to t.flow-triggers, which it does not declare in emits (t.metrics)');
  });

  it('gives start the declared configuration slice, typed, in place of the whole Env, and the projection its checked form', async () => {
    let seen: unknown;
    const service = defineService({
      name: 'fixture',
      kind: 'consumer',
      config: envSchema.pick({ FLOW_REFRESH_MS: true }),
      projection: (config) => ({ ...projection(topics.flowTriggers), name: `fixture-${config.FLOW_REFRESH_MS}` }),
      topics: { reads: [eventsTopic], emits: [flowTriggersTopic] },
      async start(ctx) {
        seen = ctx;
        return { name: 'fixture', stop: async () => {} };
      },
    });
    const env = loadEnv({ FLOW_REFRESH_MS: '777' });
    const rt = { env, mode: 'distributed', topics, close: async () => {} } as unknown as Runtime;
    await service.start(rt);
    expect(seen).toEqual({ mode: 'distributed', topics, config: { FLOW_REFRESH_MS: 777 } });
    const def = service.projection!(env);
    expect(def.name).toBe('fixture-777');
    await expect((await def.open(deps)).apply(tx, [])).rejects.toThrow(UndeclaredEmitError);
    expect(service.migrations).toBeUndefined();
  });

  it('refuses a service with no start unless it is a consumer with a projection, whose slice picks the group prefix', () => {
    const base = { config: envSchema.pick({ CONSUMER_GROUP_PREFIX: true }), topics: { reads: [eventsTopic], emits: [metricsTopic] } };
    expect(() => defineService({ ...base, name: 'web', kind: 'http' })).toThrow(
      'service web declares no start, and is not a consumer with a projection to run',
    );
    expect(() => defineService({ ...base, name: 'idle', kind: 'consumer' })).toThrow('service idle declares no start');
    expect(() =>
      defineService({
        ...base,
        name: 'nogroup',
        kind: 'consumer',
        config: envSchema.pick({ FLOW_REFRESH_MS: true }),
        projection: () => projection(topics.metrics),
      }),
    ).toThrow('service nogroup runs a projection, so its config must pick CONSUMER_GROUP_PREFIX');
    const derived = defineService({ ...base, name: 'derived', kind: 'consumer', projection: () => projection(topics.metrics) });
    expect(derived.start).toBeTypeOf('function');
  });
});
