/**
 * Text Postgres cannot store: `text` and `jsonb` refuse U+0000, and `jsonb` refuses an unpaired UTF-16
 * surrogate (`"\ud800"` is valid JSON, but not valid Unicode). A value carrying either would pass a schema,
 * be accepted, and then fail every insert of the projection that stores it, so ingest refuses it (400) and
 * consumers dead-letter a record carrying it. `__proto__` as a key is refused too: JSON.parse keeps it as a key,
 * but copying the object (zod does) turns it into the prototype, and the entry silently disappears.
 */
export function unstorableText(value: unknown): { path: string; message: string } | null {
  const hit = walk(value);
  return hit && { path: hit.path.join('.'), message: hit.message };
}

const NOT_STORABLE = 'Contains a NUL character (\\u0000) or an unpaired surrogate, which cannot be stored.';

function badString(s: string): boolean {
  return s.includes('\u0000') || !s.isWellFormed();
}

type Hit = { path: (string | number)[]; message: string };

/**
 * Every event at ingest and every record of every projection goes through here: no allocation unless a hit.
 * Iterative, with a stack of its own: client data may nest deeper than the call stack goes (a 100,000-level
 * array is 200 KB of JSON), and a recursive walk would answer it with a RangeError, a 500.
 */
function walk(root: unknown): Hit | null {
  if (typeof root === 'string') return badString(root) ? { path: [], message: NOT_STORABLE } : null;
  if (root === null || typeof root !== 'object') return null;
  // Each frame: a container, the keys (objects) or length (arrays) to visit, the next index, its key in its parent.
  type Frame = { v: object; keys: string[] | null; i: number; at: string | number };
  const stack: Frame[] = [{ v: root, keys: Array.isArray(root) ? null : Object.keys(root), i: 0, at: '' }];
  const hit = (message: string, last?: string | number): Hit => {
    const path = stack.slice(1).map((f) => f.at);
    if (last !== undefined) path.push(last);
    return { path, message };
  };
  while (stack.length > 0) {
    const f = stack[stack.length - 1];
    const n = f.keys ? f.keys.length : (f.v as unknown[]).length;
    if (f.i >= n) {
      stack.pop();
      continue;
    }
    let key: string | number;
    let child: unknown;
    if (f.keys) {
      key = f.keys[f.i++];
      if (key === '__proto__') return hit('Not allowed as a key.', key);
      if (badString(key)) return hit(`This key: ${NOT_STORABLE}`, key.replace(/\u0000/g, '\\u0000'));
      child = (f.v as Record<string, unknown>)[key];
    } else {
      key = f.i++;
      child = (f.v as unknown[])[key];
    }
    if (typeof child === 'string') {
      if (badString(child)) return hit(NOT_STORABLE, key);
    } else if (child !== null && typeof child === 'object') {
      stack.push({ v: child, keys: Array.isArray(child) ? null : Object.keys(child), i: 0, at: key });
    }
  }
  return null;
}

/** For zod's superRefine: an issue at the path of the first text Postgres cannot store (NUL, lone surrogate). */
export function refineStorable(value: unknown, ctx: { addIssue(issue: { code: 'custom'; path: (string | number)[]; message: string }): void }): void {
  const hit = walk(value);
  if (hit) ctx.addIssue({ code: 'custom', path: hit.path, message: hit.message });
}
