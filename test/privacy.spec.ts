import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BusRecord } from '@shopstream/bus';
import { rebuildProjection, type ProjectionDefinition } from '@shopstream/projections';
import { conversationsTopic, headers as H, schemas } from '@shopstream/contracts';
import { sql } from '@shopstream/db';
import type { Runtime, StartedService } from '@shopstream/runtime';
import { serviceFactories } from '@shopstream/all-in-one';
import { activityProjection } from '@shopstream/activity-projector';
import { flowMatcherProjection } from '@shopstream/flow-matcher';
import { conversationProjection } from '@shopstream/conversation-projector';
import { ShopstreamClient } from '@shopstream/client';
import { createTestShop, json, readTopic, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { conversationWithMessage } from '@shopstream/testkit';

/**
 * Issue 24, end to end on a real broker and PostgreSQL: the `events` log never holds a person's identifiers or
 * event content in plaintext; an erasure job (by email, phone, remote_id or contact id) removes the person from
 * every read and every projection table, destroys the data key, announces it on `erasures`; a rebuild of every
 * projection brings nothing back; a bystander is untouched. (privacy.crash.spec.ts: a job survives a kill -9.)
 */
let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;
const started: StartedService[] = [];

const call = async (method: string, p: string, body?: unknown, headers = shop.headers) => {
  const res = await fetch(`${server.baseUrl}/v2026-04${p}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : null) as any };
};

interface Person {
  email: string;
  phone: string;
  remote_id: string;
  secret: string;
  contactId: string;
  activityIds: string[];
  conversationId: string;
}

let phoneSeq = 0;
/** A person with two events (a secret in their name and properties), a conversation with a message, and a trigger. */
async function person(tag: string): Promise<Person> {
  const email = `${tag}-${randomUUID().slice(0, 8)}@example.com`;
  // Valid US numbers, one per person.
  const phone = `+1415555${String(2600 + phoneSeq++).padStart(4, '0')}`;
  const remote_id = `cust-${tag}-${randomUUID().slice(0, 8)}`;
  const secret = `secret-${tag}-${randomUUID().slice(0, 8)}`;
  const activityIds: string[] = [];
  let contactId = '';
  for (const n of [1, 2]) {
    const r = await call('POST', '/events/', {
      name: `Order ${n} of ${secret}`,
      description: `for ${secret}`,
      metric: { metric_name: 'placed_order', value: 10 * n, additional_properties: { note: `${secret}-note`, n } },
      contact: { email, phone, remote_id, name: `Name ${secret}` },
      // The event's own id is not personal (docs/privacy.md): readable, like the metric.
      remote_id: `order-${randomUUID()}`,
      remote_platform: 'shop',
    });
    expect(r.status).toBe(202);
    activityIds.push(r.body.activity_id);
    contactId = r.body.contact.id;
  }
  const [conv, msg] = conversationWithMessage(shop.shopId, { at: '2026-04-01T10:00:00Z', text: `Hello, I am ${secret}`, contact_id: contactId });
  await rt.bus.publish(
    rt.topics.conversations,
    [conv, msg].map((v) => conversationsTopic.record(v)),
  );
  return { email, phone, remote_id, secret, contactId, activityIds, conversationId: conv.conversation.id };
}

const count = async (q: ReturnType<typeof sql>) => Number((await rt.db.query(q))[0].n);

/** Every row any projection table (and contacts, contact_keys) holds of the contact. */
const rowsOf = async (p: Person) => ({
  contacts: await count(sql`SELECT count(*) AS n FROM contacts WHERE shop_id = ${shop.shopId} AND id = ${p.contactId}`),
  contact_keys: await count(sql`SELECT count(*) AS n FROM contact_keys WHERE shop_id = ${shop.shopId} AND contact_id = ${p.contactId}`),
  activities: await count(sql`SELECT count(*) AS n FROM activities WHERE shop_id = ${shop.shopId} AND id = ANY(${p.activityIds}::uuid[])`),
  contact_timeline: await count(sql`SELECT count(*) AS n FROM contact_timeline WHERE shop_id = ${shop.shopId} AND contact_id = ${p.contactId}`),
  flow_triggers: await count(sql`SELECT count(*) AS n FROM flow_triggers WHERE shop_id = ${shop.shopId} AND contact_id = ${p.contactId}`),
  conversations: await count(sql`SELECT count(*) AS n FROM conversations WHERE shop_id = ${shop.shopId} AND contact_id = ${p.contactId}`),
  conversation_messages: await count(
    sql`SELECT count(*) AS n FROM conversation_messages WHERE shop_id = ${shop.shopId} AND conversation_id = ${p.conversationId}`,
  ),
});
const present = { contacts: 1, contact_keys: 1, activities: 2, contact_timeline: 2, flow_triggers: 2, conversations: 1, conversation_messages: 1 };
const gone = { contacts: 0, contact_keys: 0, activities: 0, contact_timeline: 0, flow_triggers: 0, conversations: 0, conversation_messages: 0 };

/** What the HTTP reads answer about the person: status codes and list memberships. */
async function reads(p: Person) {
  const activity = await Promise.all(p.activityIds.map(async (id) => (await call('GET', `/activities/${id}/`)).status));
  const timeline = (await call('GET', `/contacts/${p.contactId}/timeline/`)).status;
  const exported = await call('GET', `/conversations/export/?contact_id=${p.contactId}&created_at__range=2026-03-20T00:00:00Z,2026-04-10T00:00:00Z`);
  const flows = (await call('GET', '/flows/')).body.results as { id: string }[];
  let triggers = 0;
  for (const f of flows)
    triggers += ((await call('GET', `/flows/${f.id}/triggers/`)).body.results as { contact_id: string }[]).filter((t) => t.contact_id === p.contactId).length;
  return { activity, timeline, conversations: exported.body.results.length as number, triggers };
}
const readsPresent = { activity: [200, 200], timeline: 200, conversations: 1, triggers: 2 };
const readsErased = { activity: [404, 404], timeline: 404, conversations: 0, triggers: 0 };

async function projected(p: Person) {
  await waitFor(async () => JSON.stringify(await rowsOf(p)) === JSON.stringify(present), { timeoutMs: 30_000, message: `${p.secret} projected` });
}

async function erase(body: Record<string, string>): Promise<any> {
  const r = await call('POST', '/data-privacy/deletion-jobs/', body);
  expect(r.status).toBe(202);
  expect(Object.keys(r.body).sort()).toEqual(['id', 'requested_at', 'status']);
  expect(r.body.status).toBe('queued');
  return waitFor(
    async () => {
      const j = await call('GET', `/data-privacy/deletion-jobs/${r.body.id}/`);
      return j.body.status === 'completed' || j.body.status === 'failed' ? j.body : undefined;
    },
    { timeoutMs: 30_000, message: 'the job done' },
  );
}

const everySecret = (p: Person) => [p.email, p.phone, p.remote_id, p.secret];

describe('forget a person', () => {
  let a: Person;
  let bystander: Person;

  beforeAll(async () => {
    rt = await startTestRuntime({ FLOW_REFRESH_MS: '300', ERASURE_POLL_MS: '200' }, 'privacy');
    for (const f of Object.values(serviceFactories)) started.push(await f(rt));
    server = await startTestServer(rt, started);
    shop = await createTestShop(rt);
    expect((await call('POST', '/flows/', { name: 'Orders', trigger: { metric_name: 'placed_order' } })).status).toBe(201);
    await waitFor(async () => /^shopstream_flow_matcher_active_flows [1-9]/m.test(await (await fetch(`${server.baseUrl}/metrics`)).text()), {
      message: 'the flow loaded',
    });
    a = await person('a');
    bystander = await person('b');
    await projected(a);
    await projected(bystander);
  });
  afterAll(async () => {
    await server?.stop();
    await rt?.close();
  });

  it('writes no identifier and no event content of a person to `events` in plaintext (event-recorded.v2)', async () => {
    const mine = (rs: BusRecord[]) => rs.filter((r) => r.key?.toString() === shop.shopId);
    const records = mine(await readTopic(rt, rt.topics.events, (rs) => mine(rs).length >= 4));
    expect(records.length).toBe(4);
    for (const r of records) {
      const raw = r.value.toString('utf8');
      for (const s of [...everySecret(a), ...everySecret(bystander)]) expect(raw).not.toContain(s);
      expect(r.headers[H.schema]).toBe(schemas.eventRecordedV2);
      const v = json(r);
      expect(v.sealed.alg).toBe('A256GCM');
      // Routing and analytics fields stay readable.
      expect(v.metric).toMatchObject({ metric_name: 'placed_order' });
      expect(v.metric.additional_properties).toBeUndefined();
      expect(Object.keys(v.contact)).toEqual(['id']);
    }
    // ...and the projections read them back in full.
    const activity = await call('GET', `/activities/${a.activityIds[0]}/`);
    expect(activity.body).toMatchObject({
      name: `Order 1 of ${a.secret}`,
      description: `for ${a.secret}`,
      metric: { additional_properties: { note: `${a.secret}-note`, n: 1 } },
      contact: { id: a.contactId, email: a.email, phone: a.phone, remote_id: a.remote_id, name: `Name ${a.secret}` },
    });
  });

  it('validates a deletion request: exactly one identifier, a granted shop, its own jobs only', async () => {
    const none = await call('POST', '/data-privacy/deletion-jobs/', {});
    expect(none.status).toBe(400);
    expect(none.body.error.code).toBe('validation_error');
    const two = await call('POST', '/data-privacy/deletion-jobs/', { email: 'x@example.com', phone: '+14155552671' });
    expect(two.status).toBe(400);
    expect(two.body.error.code).toBe('validation_error');
    expect((await call('POST', '/data-privacy/deletion-jobs/', { phone: '12' })).body.error.fields).toEqual({ phone: expect.any(String) });
    expect((await call('POST', '/data-privacy/deletion-jobs/', { name: 'x' })).status).toBe(400);
    const other = await createTestShop(rt);
    const forbidden = await call('POST', '/data-privacy/deletion-jobs/', { email: a.email }, { ...shop.headers, 'x-shop-id': other.shopId });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.code).toBe('forbidden');
    const theirs = await call('POST', '/data-privacy/deletion-jobs/', { email: 'nobody@example.com' }, other.headers);
    expect(theirs.status).toBe(202);
    expect((await call('GET', `/data-privacy/deletion-jobs/${theirs.body.id}/`)).status).toBe(404);
    expect((await call('GET', `/data-privacy/deletion-jobs/${randomUUID()}/`)).status).toBe(404);
  });

  it('a job that matches no contact completes with contacts_erased 0', async () => {
    const job = await erase({ email: 'never-seen@example.com' });
    expect(job).toMatchObject({ status: 'completed', contacts_erased: 0, error: null });
    expect(job.completed_at).toEqual(expect.any(String));
  });

  it('a job by email erases the person from every read and table, destroys the key, tells `erasures`; the bystander stays', async () => {
    expect(await reads(a)).toEqual(readsPresent);
    const job = await erase({ email: a.email.toUpperCase() });
    expect(job).toMatchObject({ status: 'completed', contacts_erased: 1, error: null });
    expect(await rowsOf(a)).toEqual(gone);
    expect(await reads(a)).toEqual(readsErased);
    expect(await rowsOf(bystander)).toEqual(present);
    expect(await reads(bystander)).toEqual(readsPresent);

    const erasures = await readTopic(rt, rt.topics.erasures, (rs) => rs.some((r) => json(r).job_id === job.id));
    const mine = erasures.filter((r) => json(r).job_id === job.id);
    expect(mine.length).toBeGreaterThanOrEqual(1);
    expect(json(mine[0])).toMatchObject({ shop_id: shop.shopId, contact_id: a.contactId, job_id: job.id, erased_at: expect.any(String) });
    expect(mine[0].headers[H.schema]).toBe('contact-erased.v1');
    for (const s of everySecret(a)) expect(mine[0].value.toString()).not.toContain(s);

    // The audit: who asked, when, a salted hash; never the identifier.
    const [audit] = await rt.db.query(sql`SELECT * FROM erasure_jobs WHERE id = ${job.id}`);
    expect(audit).toMatchObject({ api_key_id: expect.any(String), identifier_kind: 'email', identifier_sealed: null });
    expect(audit.identifier_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(audit)).not.toContain(a.email);
    const [tomb] = await rt.db.query(sql`SELECT * FROM erased_contacts WHERE contact_id = ${a.contactId}`);
    expect(tomb).toMatchObject({ job_id: job.id, key_id: expect.any(String) });
  });

  it('a rebuild of every projection brings nothing of the person back', async () => {
    for (const def of [activityProjection, flowMatcherProjection(rt.env.FLOW_REFRESH_MS), conversationProjection] as ProjectionDefinition<unknown>[]) {
      await rebuildProjection(def, { bus: rt.bus, db: rt.db, logger: rt.logger, topics: rt.topics, groupPrefix: rt.env.CONSUMER_GROUP_PREFIX, env: rt.env });
    }
    expect(await rowsOf(a)).toEqual(gone);
    expect(await reads(a)).toEqual(readsErased);
    expect(await rowsOf(bystander)).toEqual(present);
    expect(await reads(bystander)).toEqual(readsPresent);
  });

  it('upstream conversations: a contact id only conversations name is erased, and what producers send for it later is skipped', async () => {
    const contactId = randomUUID();
    const exportOf = async () =>
      (await call('GET', `/conversations/export/?contact_id=${contactId}&created_at__range=2026-03-20T00:00:00Z,2026-04-10T00:00:00Z`)).body.results as {
        id: string;
        messages: unknown[];
      }[];
    const [conv, msg] = conversationWithMessage(shop.shopId, { at: '2026-04-02T10:00:00Z', text: 'upstream secret', contact_id: contactId });
    await rt.bus.publish(
      rt.topics.conversations,
      [conv, msg].map((v) => conversationsTopic.record(v)),
    );
    await waitFor(async () => (await exportOf()).length === 1, { message: 'the upstream conversation projected' });
    expect(await erase({ contact_id: contactId })).toMatchObject({ status: 'completed', contacts_erased: 1 });
    expect(await exportOf()).toEqual([]);
    // Later, the producer sends a message of that conversation, an update of it, and a new conversation of the contact.
    const [later, laterMsg] = conversationWithMessage(shop.shopId, { at: '2026-04-03T10:00:00Z', text: 'later secret', contact_id: contactId });
    const again = { ...conv, conversation: { ...conv.conversation, updated_at: '2026-04-04T10:00:00Z', title: 'updated' } };
    const extra = { ...msg, message: { ...msg.message, id: randomUUID(), created_at: '2026-04-02T11:00:00Z', text: 'another' } };
    // And a conversation without a contact after them, to know they were all consumed (one partition: one shop).
    const [marker] = conversationWithMessage(shop.shopId, { at: '2026-04-05T10:00:00Z', text: 'marker' });
    await rt.bus.publish(
      rt.topics.conversations,
      [extra, again, later, laterMsg, marker].map((v) => conversationsTopic.record(v)),
    );
    await waitFor(
      async () => (await count(sql`SELECT count(*) AS n FROM conversations WHERE shop_id = ${shop.shopId} AND id = ${marker.conversation.id}`)) === 1,
      { message: 'the marker projected' },
    );
    expect(await exportOf()).toEqual([]);
    expect(await count(sql`SELECT count(*) AS n FROM conversations WHERE shop_id = ${shop.shopId} AND contact_id = ${contactId}`)).toBe(0);
    expect(
      await count(
        sql`SELECT count(*) AS n FROM conversation_messages WHERE shop_id = ${shop.shopId} AND conversation_id = ANY(${[conv.conversation.id, later.conversation.id]}::uuid[])`,
      ),
    ).toBe(0);
  });

  it('jobs by phone, remote_id and contact id erase theirs too; the same identifier later makes a new contact', async () => {
    const byPhone = await person('phone');
    const byRemote = await person('remote');
    const byId = await person('id');
    for (const p of [byPhone, byRemote, byId]) await projected(p);
    expect(await erase({ phone: byPhone.phone.replace('+1', '+1 ') })).toMatchObject({ status: 'completed', contacts_erased: 1 });
    expect(await erase({ remote_id: byRemote.remote_id })).toMatchObject({ status: 'completed', contacts_erased: 1 });
    // Through @shopstream/client.
    const client = new ShopstreamClient({ baseUrl: server.baseUrl, apiKey: shop.key, shopId: shop.shopId });
    const queued = await client.requestDeletion({ contact_id: byId.contactId });
    expect(queued.status).toBe('queued');
    expect(await client.waitForDeletion(queued.id, { intervalMs: 100 })).toMatchObject({ id: queued.id, status: 'completed', contacts_erased: 1 });
    await client.close();
    for (const p of [byPhone, byRemote, byId]) {
      expect(await rowsOf(p)).toEqual(gone);
      expect(await reads(p)).toEqual(readsErased);
    }
    expect(await rowsOf(bystander)).toEqual(present);
    // Erased already: nothing more to erase.
    expect(await erase({ contact_id: byId.contactId })).toMatchObject({ status: 'completed', contacts_erased: 0 });

    const again = await call('POST', '/events/', { name: 'Back again', metric: { metric_name: 'visit' }, contact: { email: a.email } });
    expect(again.status).toBe(202);
    expect(again.body.contact.id).not.toBe(a.contactId);
    await waitFor(async () => (await call('GET', `/contacts/${again.body.contact.id}/timeline/`)).body?.results?.length === 1, {
      message: 'the new contact projected',
    });
    expect((await call('GET', `/contacts/${a.contactId}/timeline/`)).status).toBe(404);
  });
});
