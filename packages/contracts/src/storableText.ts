/**
 * Text Postgres cannot store: `text` and `jsonb` refuse U+0000, and `jsonb` refuses an unpaired UTF-16
 * surrogate (`"\ud800"` is valid JSON, but not valid Unicode). A value carrying either would pass a schema,
 * be accepted, and then fail every insert of the projection that stores it, so ingest refuses it (400) and
 * consumers dead-letter a record carrying it. `__proto__` as a key is refused too: JSON.parse keeps it as a key,
 * but copying the object (zod does) turns it into the prototype, and the entry silently disappears.
 */
export function unstorableText(value: unknown): { path: string; message: string } | null {
  const hit = walk(value);
  // The path is gathered innermost first on the way back, only for a value that has a hit.
  return hit && { path: hit.path.reverse().join('.'), message: hit.message };
}

const NOT_STORABLE = 'Contains a NUL character (\\u0000) or an unpaired surrogate, which cannot be stored.';

function badString(s: string): boolean {
  return s.includes('\u0000') || !s.isWellFormed();
}

type Hit = { path: (string | number)[]; message: string };

/** Every event at ingest and every record of every projection goes through here: no allocation unless a hit. */
function walk(v: unknown): Hit | null {
  if (typeof v === 'string') return badString(v) ? { path: [], message: NOT_STORABLE } : null;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const hit = walk(v[i]);
      if (hit) return (hit.path.push(i), hit);
    }
    return null;
  }
  if (v !== null && typeof v === 'object') {
    for (const k in v) {
      if (!Object.hasOwn(v, k)) continue;
      if (k === '__proto__') return { path: [k], message: 'Not allowed as a key.' };
      if (badString(k)) return { path: [k.replace(/\u0000/g, '\\u0000')], message: `This key: ${NOT_STORABLE}` };
      const hit = walk((v as Record<string, unknown>)[k]);
      if (hit) return (hit.path.push(k), hit);
    }
  }
  return null;
}
