/**
 * Text Postgres cannot store: `text` and `jsonb` refuse U+0000, and `jsonb` refuses an unpaired UTF-16
 * surrogate (`"\ud800"` is valid JSON, but not valid Unicode). A value carrying either would pass a schema,
 * be accepted, and then fail every insert of the projection that stores it, so ingest refuses it (400) and
 * consumers dead-letter a record carrying it. `__proto__` as a key is refused too: JSON.parse keeps it as a key,
 * but copying the object (zod does) turns it into the prototype, and the entry silently disappears.
 */
export function unstorableText(value: unknown): { path: string; message: string } | null {
  return walk(value, []);
}

const NOT_STORABLE = 'Contains a NUL character (\\u0000) or an unpaired surrogate, which cannot be stored.';

function badString(s: string): boolean {
  return s.includes('\u0000') || !s.isWellFormed();
}

function walk(v: unknown, path: (string | number)[]): { path: string; message: string } | null {
  if (typeof v === 'string') return badString(v) ? { path: path.join('.'), message: NOT_STORABLE } : null;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const hit = walk(v[i], [...path, i]);
      if (hit) return hit;
    }
    return null;
  }
  if (v !== null && typeof v === 'object') {
    for (const k of Object.keys(v)) {
      if (k === '__proto__') return { path: [...path, k].join('.'), message: 'Not allowed as a key.' };
      if (badString(k)) return { path: [...path, k.replace(/\u0000/g, '\\u0000')].join('.'), message: `This key: ${NOT_STORABLE}` };
      const hit = walk((v as Record<string, unknown>)[k], [...path, k]);
      if (hit) return hit;
    }
  }
  return null;
}
