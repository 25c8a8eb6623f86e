import { v7 as uuidv7 } from 'uuid';
import { queryRows, sql, type Queryable, type Row as DbRow, type SQLQuery } from '@shopstream/db';
import type { ResolvedContact } from '@shopstream/contracts';
import type { KeyRow, MadeKey } from '@shopstream/privacy';

/** A contact as an event gives it: already validated, email lower-cased, phone in E.164. */
export interface ContactQuery {
  email?: string;
  phone?: string;
  remote_id?: string;
  name?: string;
}

const IDENTIFIERS = ['remote_id', 'email', 'phone'] as const;
type Identifier = (typeof IDENTIFIERS)[number];

interface Planned extends ResolvedContact {
  isNew: boolean;
  changed: boolean;
}

interface Plan {
  /** One per query, in order; several queries may share one contact. */
  results: Planned[];
  creates: Planned[];
  updates: Planned[];
}

/**
 * The contacts' data keys (ContactKeys), when resolution is to carry them: the statement that finds the contacts
 * reads their keys too, and the one that inserts new contacts inserts a key for each, so the request's own key
 * look-up finds them remembered instead of making two more round trips to PostgreSQL after this one.
 */
export interface ResolutionKeys {
  makeFor(shopId: string, contactIds: string[]): MadeKey[];
  remember(keys: { made?: readonly MadeKey[]; rows?: readonly KeyRow[] }): Promise<void>;
}

/** A concurrent writer changed what we read; a few rounds always settle, more means something is wrong. */
const MAX_ROUNDS = 5;

const UNIQUE_VIOLATION = '23505';
const DEADLOCK_DETECTED = '40P01';

/** A write that lost to a concurrent one; the next round reads what that one wrote and plans again. */
const lostRace = (e: unknown): boolean => {
  const code = (e as { code?: string }).code;
  return code === UNIQUE_VIOLATION || code === DEADLOCK_DETECTED;
};

/**
 * Resolves each query to a contact of the shop, creating the ones that do not exist, in a few queries for
 * the whole list: a contact is found by remote_id, then email, then phone; it gains the identifiers (and
 * the name) it lacked unless another contact holds them; no match creates one. Queries of one list that
 * name the same identity share one contact, as if they were handled in order.
 *
 * Concurrent callers creating the same identity race on the unique indexes of `contacts`: the loser's
 * INSERT ... ON CONFLICT DO NOTHING inserts nothing, and the next round finds the winner's row.
 */
export async function resolveContacts(db: Queryable, shopId: string, queries: ContactQuery[], keys?: ResolutionKeys): Promise<ResolvedContact[]> {
  if (queries.length === 0) return [];
  for (let round = 1; round <= MAX_ROUNDS; round++) {
    const existing = await selectContacts(db, shopId, queries, keys !== undefined);
    const plan = planResolution(existing, queries);
    let made: MadeKey[] = [];
    if (plan.creates.length > 0) {
      // One order for every caller, so two lists inserting the same identities rarely wait on each other in a cycle.
      plan.creates.sort((x, y) => sortKey(x).localeCompare(sortKey(y)));
      made =
        keys?.makeFor(
          shopId,
          plan.creates.map((c) => c.id),
        ) ?? [];
      const insert = sql`
        INSERT INTO contacts (shop_id, id, email, phone, remote_id, name)
        VALUES ${sql.join(
          plan.creates.map((c) => sql`(${shopId}, ${c.id}, ${c.email}, ${c.phone}, ${c.remote_id}, ${c.name})`),
          sql`, `,
        )}
        ON CONFLICT DO NOTHING
        RETURNING id`;
      let inserted: unknown[];
      try {
        // A new contact's data key in the same statement, for the contacts it inserted (a new contact is never erased).
        inserted = await db.query(
          made.length === 0
            ? insert
            : sql`
        WITH ins AS (${insert}),
        k AS (
          INSERT INTO contact_keys (shop_id, contact_id, key_id, master_id, wrapped)
          SELECT ${shopId}, m.contact_id, m.key_id, m.master_id, m.wrapped
          FROM unnest(${made.map((m) => m.contact)}::uuid[], ${made.map((m) => m.keyId)}::uuid[], ${made.map((m) => m.masterId)}::text[],
                      ${made.map((m) => m.wrapped)}::text[]) AS m(contact_id, key_id, master_id, wrapped)
          JOIN ins ON ins.id = m.contact_id
          ON CONFLICT (shop_id, contact_id) DO NOTHING
        )
        SELECT id FROM ins`,
        );
      } catch (e) {
        if (lostRace(e)) continue;
        throw e;
      }
      // Someone created one of these identities meanwhile: read again and use theirs.
      if (inserted.length < plan.creates.length) continue;
    }
    if (plan.updates.length > 0) {
      let rows: Row[];
      try {
        rows = await applyGains(db, shopId, plan.updates);
      } catch (e) {
        // Another contact took one of these identifiers meanwhile: it holds it now, so read again.
        if (lostRace(e)) continue;
        throw e;
      }
      for (const row of rows) {
        const c = plan.updates.find((u) => u.id === row.id);
        if (c) Object.assign(c, toContact(row));
      }
    }
    if (keys) {
      await keys.remember({ made, rows: existing.flatMap((r) => (r.key ? [r.key] : [])) });
    }
    return plan.results.map(({ id, email, phone, remote_id, name }) => ({ id, email, phone, remote_id, name }));
  }
  throw new Error(`contact resolution for shop ${shopId} did not settle after ${MAX_ROUNDS} rounds of concurrent changes`);
}

interface Row {
  id: string;
  email: string | null;
  phone: string | null;
  remote_id: string | null;
  name: string | null;
}

const textOrNull = (v: unknown): string | null => (v === null ? null : String(v));
/** A contacts row as this file selects and returns it (id, email, phone, remote_id, name: uuid and text). */
export const contactRow = (r: DbRow): Row => ({
  id: String(r.id),
  email: textOrNull(r.email),
  phone: textOrNull(r.phone),
  remote_id: textOrNull(r.remote_id),
  name: textOrNull(r.name),
});

const sortKey = (c: Planned): string => `${c.email ?? ''}\u0000${c.phone ?? ''}\u0000${c.remote_id ?? ''}`;

const toContact = (r: Row): ResolvedContact => ({ id: r.id, email: r.email, phone: r.phone, remote_id: r.remote_id, name: r.name });

async function selectContacts(db: Queryable, shopId: string, queries: ContactQuery[], withKeys: boolean): Promise<(Row & { key?: KeyRow })[]> {
  // One look-up per identifier, each on its own unique index whatever the table's statistics say: an OR of
  // IN lists let the planner scan the whole shop on a table not yet analysed (seen in `pnpm bench`).
  const lookups: SQLQuery[] = [];
  for (const f of IDENTIFIERS) {
    // Each value as sent (NFC, see contactInputSchema) and in NFD: rows stored before identifiers were normalised
    // may hold the decomposed spelling, and should still be found rather than duplicated.
    const values = [...new Set(queries.flatMap((q) => (q[f] === undefined ? [] : spellings(q[f]))))];
    if (values.length > 0) {
      lookups.push(sql`SELECT id, email, phone, remote_id, name FROM contacts WHERE shop_id = ${shopId} AND ${sql.ident(f)} = ANY(${values}::text[])`);
    }
  }
  if (lookups.length === 0) return [];
  // UNION, not UNION ALL: a contact found by two identifiers is one row.
  const found = sql.join(lookups, sql` UNION `);
  if (!withKeys) return queryRows(db, found, contactRow);
  return queryRows(
    db,
    sql`
    SELECT f.id, f.email, f.phone, f.remote_id, f.name, k.key_id, k.master_id, k.wrapped
    FROM (${found}) AS f LEFT JOIN contact_keys k ON k.shop_id = ${shopId} AND k.contact_id = f.id`,
    (r) => ({
      ...contactRow(r),
      ...(r.key_id === null || r.key_id === undefined
        ? {}
        : { key: { shop_id: shopId, contact_id: String(r.id), key_id: String(r.key_id), master_id: String(r.master_id), wrapped: String(r.wrapped) } }),
    }),
  );
}

/** A value and, when it differs, its NFD spelling: ASCII (most identifiers) costs one comparison. */
const spellings = (v: string): string[] => {
  const nfd = v.normalize('NFD');
  return nfd === v ? [v] : [v, nfd];
};

/** The spelling a stored identifier is matched by: queries arrive in NFC. */
const matchKey = (f: Identifier, v: string): string => (f === 'phone' ? v : v.normalize('NFC'));

/** Fills only what is still empty, so a concurrent gain of the same field is never overwritten. */
async function applyGains(db: Queryable, shopId: string, updates: Planned[]): Promise<Row[]> {
  return queryRows(
    db,
    sql`
    UPDATE contacts AS c SET
      email = coalesce(c.email, v.email),
      phone = coalesce(c.phone, v.phone),
      remote_id = coalesce(c.remote_id, v.remote_id),
      name = coalesce(c.name, v.name),
      updated_at = now()
    FROM (VALUES ${sql.join(
      updates.map((u) => sql`(${u.id}::uuid, ${u.email}::text, ${u.phone}::text, ${u.remote_id}::text, ${u.name}::text)`),
      sql`, `,
    )}) AS v (id, email, phone, remote_id, name)
    WHERE c.shop_id = ${shopId} AND c.id = v.id
    RETURNING c.id, c.email, c.phone, c.remote_id, c.name`,
    contactRow,
  );
}

/** Decides, from the contacts found, which query gets which contact and what must be created or filled in. */
export function planResolution(existing: Row[], queries: ContactQuery[]): Plan {
  const index: Record<Identifier, Map<string, Planned>> = { remote_id: new Map(), email: new Map(), phone: new Map() };
  for (const row of existing) {
    const c: Planned = { ...toContact(row), isNew: false, changed: false };
    for (const f of IDENTIFIERS) if (c[f] !== null) index[f].set(matchKey(f, c[f]), c);
  }
  const plan: Plan = { results: [], creates: [], updates: [] };
  for (const q of queries) {
    let c = firstMatch(index, q);
    if (!c) {
      c = { id: uuidv7(), email: null, phone: null, remote_id: null, name: null, isNew: true, changed: false };
      plan.creates.push(c);
    }
    for (const f of IDENTIFIERS) {
      const v = q[f];
      if (v === undefined || c[f] !== null || index[f].has(v)) continue;
      c[f] = v;
      index[f].set(v, c);
      c.changed = true;
    }
    if (q.name !== undefined && c.name === null) {
      c.name = q.name;
      c.changed = true;
    }
    if (!c.isNew && c.changed && !plan.updates.includes(c)) plan.updates.push(c);
    plan.results.push(c);
  }
  return plan;
}

function firstMatch(index: Record<Identifier, Map<string, Planned>>, q: ContactQuery): Planned | undefined {
  for (const f of IDENTIFIERS) {
    const v = q[f];
    const hit = v === undefined ? undefined : index[f].get(v);
    if (hit) return hit;
  }
  return undefined;
}
