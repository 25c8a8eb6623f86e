import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres, formatQuery, migrate, openPglite, queryRows, sql, type Db, type Queryable } from '@shopstream/db';
import type { EventRecord } from '@shopstream/contracts';
import type { ValidRecord } from '@shopstream/projections';
import { createTestDatabase, dropTestDatabase, testInfra } from '@shopstream/testkit';
import { COPY_FROM_ROWS, projectActivities } from './projectActivities.js';

/**
 * The projection's write paths: on a real PostgreSQL, COPY for batches of COPY_FROM_ROWS or more and the
 * one-statement insert below that; on PGlite, the insert. Each writes each activity once.
 */
const shop = randomUUID();
let n = 0;
function record(o: { keyed?: boolean; contact?: boolean; text?: string } = {}): EventRecord {
  n++;
  return {
    activity_id: randomUUID(),
    shop_id: shop,
    name: o.text ?? `Placed order ${n}`,
    description: o.text ? `tab\there, newline\nhere, back\\slash, "quote"` : null,
    event_time: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
    received_at: new Date(Date.UTC(2026, 0, 2, 0, 0, n)).toISOString(),
    metric: { metric_name: 'placed_order', value: n, additional_properties: { note: o.text ?? 'x' } },
    contact: o.contact ? { id: randomUUID(), email: `c${n}@example.com`, phone: null, remote_id: null, name: o.text ?? null } : null,
    remote_id: o.keyed ? `order-${n}` : null,
    remote_platform: o.keyed ? 'shopify' : null,
  } as unknown as EventRecord;
}
const valid = (rs: EventRecord[]): ValidRecord<EventRecord>[] => rs.map((value, i) => ({ value, record: { offset: String(i) } as never }));

const variants = [
  { engine: 'postgres', path: 'COPY' },
  { engine: 'postgres', path: 'insert' },
  { engine: 'pglite', path: 'insert' },
] as const;

for (const { engine, path } of variants) {
  describe(`projectActivities on ${engine}, by ${path}`, () => {
    let db: Db;
    let url: string | undefined;
    beforeAll(async () => {
      if (engine === 'postgres') {
        url = await createTestDatabase(testInfra().databaseUrl);
        db = connectPostgres({ url, poolSize: 2 });
      } else {
        db = await openPglite(undefined);
      }
      await migrate(db);
    });
    afterAll(async () => {
      await db?.close();
      if (url) await dropTestDatabase(url);
    });
    /** The statements of the last apply. */
    let statements: string[] = [];
    /** The transaction, its statements recorded (copyRows reaches its client through it). */
    const watched = (tx: Queryable): Queryable =>
      new Proxy(tx, {
        get: (t, k) =>
          k === 'query' ? (q: Parameters<Queryable['query']>[0]) => (statements.push(formatQuery(q).text), t.query(q)) : (Reflect.get(t, k, t) as unknown),
      });
    /**
     * Applies the records, by COPY after COPY_FROM_ROWS new unkeyed fillers when the path is COPY; returns what it
     * created of the records (the fillers left out).
     */
    const apply = async (rs: EventRecord[]) => {
      const fillers = path === 'COPY' ? Array.from({ length: COPY_FROM_ROWS }, () => record()) : [];
      statements = [];
      const created = await db.tx((tx) => projectActivities(watched(tx), valid([...rs, ...fillers])));
      const filler = new Set(fillers.map((f) => f.activity_id));
      return created.filter((e) => !filler.has(e.activity_id));
    };
    const stored = async (rs: EventRecord[]) =>
      queryRows(
        db,
        sql`SELECT id, name, description, metric, contact, event_time, recorded_at FROM activities WHERE id = ANY(${rs.map((r) => r.activity_id)}::uuid[]) ORDER BY event_time`,
        (r) => ({
          id: r.id,
          name: r.name,
          description: r.description,
          metric: r.metric,
          contact: r.contact,
          recorded_at: r.recorded_at instanceof Date ? r.recorded_at : new Date(String(r.recorded_at)),
        }),
      );

    it(`goes by ${path}`, async () => {
      expect(await apply([record(), record({ contact: true })])).toHaveLength(2);
      const copied = statements.some((t) => t.includes('SAVEPOINT project_activities_copy'));
      expect(copied).toBe(path === 'COPY');
      // The insert: both tables in one statement.
      if (path === 'insert') expect(statements).toHaveLength(1);
    });

    it('writes every new activity and its timeline entry once, text as given', async () => {
      const batch = [record({ contact: true, text: 'Ünïcode\ttab\nline\\ "q" ✓' }), record({ keyed: true }), record(), record({ contact: true })];
      const created = await apply([...batch, batch[1]]);
      expect(created.map((e) => e.activity_id)).toEqual(batch.map((e) => e.activity_id));
      const rows = await stored(batch);
      expect(rows.map((r) => r.id)).toEqual(batch.map((e) => e.activity_id));
      expect(rows[0].name).toBe(batch[0].name);
      expect(rows[0].description).toBe(batch[0].description);
      expect(rows[0].metric).toEqual(batch[0].metric);
      expect(rows[0].contact).toEqual(batch[0].contact);
      expect(new Date(rows[0].recorded_at).toISOString()).toBe(batch[0].received_at);
      const timeline = await db.query(sql`SELECT activity_id FROM contact_timeline WHERE activity_id = ANY(${batch.map((r) => r.activity_id)}::uuid[])`);
      expect(timeline.map((r) => r.activity_id).sort()).toEqual([batch[0].activity_id, batch[3].activity_id].sort());
    });

    it('a replayed keyed event creates nothing and does not stop the new ones of its batch', async () => {
      const old = record({ keyed: true, contact: true });
      expect(await apply([old])).toHaveLength(1);
      const fresh = [record(), record({ keyed: true, contact: true })];
      const created = await apply([fresh[0], old, fresh[1]]);
      expect(created.map((e) => e.activity_id)).toEqual(fresh.map((e) => e.activity_id));
      expect(await stored([old, ...fresh])).toHaveLength(3);
    });

    it('the same unkeyed record published twice (another offset, later batch) is written once', async () => {
      const once = record({ contact: true });
      expect(await apply([once])).toHaveLength(1);
      const fresh = [record({ contact: true }), record()];
      // Not keyed: the COPY meets the stored id, and the batch goes through the insert with ON CONFLICT (the
      // insert's path takes it there at once).
      const created = await apply([fresh[0], once, fresh[1]]);
      expect(created.map((e) => e.activity_id)).toEqual(fresh.map((e) => e.activity_id));
      expect(statements.some((t) => t.includes('ROLLBACK TO SAVEPOINT project_activities_copy'))).toBe(path === 'COPY');
      expect(await stored([once, ...fresh])).toHaveLength(3);
      const timeline = await db.query(
        sql`SELECT count(*)::int AS n FROM contact_timeline WHERE activity_id = ANY(${[once, ...fresh].map((r) => r.activity_id)}::uuid[])`,
      );
      expect(timeline[0].n).toBe(2);
      expect(await apply([once, ...fresh])).toEqual([]);
    });
  });
}
