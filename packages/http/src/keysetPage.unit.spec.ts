import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Request } from 'express';
import { ApiError } from './errors.js';
import { cursorCodec } from './cursor.js';
import { keysetCursorCodec, keysetPage, type PageQuery } from './keysetPage.js';

// Rows 10..1 newest first; the position is the number itself.
const rows = Array.from({ length: 10 }, (_, i) => ({ n: 10 - i, position: 10 - i }));
const fetch = async ({ after, direction, take }: PageQuery<number>) =>
  direction === 'next'
    ? rows.filter((r) => after === null || r.n < after).slice(0, take)
    : rows
        .filter((r) => after === null || r.n > after)
        .reverse()
        .slice(0, take);

const codec = keysetCursorCodec('0123456789abcdef0123', z.number());
const req = (url: string) => ({ originalUrl: url, protocol: 'http', get: () => 'api.test' }) as unknown as Request;
const cursorOf = (link: string | null) => new URL(link!).searchParams.get('cursor') ?? undefined;
const page = (cursor: string | undefined, filters: Record<string, string> = { scope: 'workspace' }) =>
  keysetPage({
    req: req('/v2026-04/things/?scope=workspace&limit=4'),
    publicBaseUrl: undefined,
    codec,
    cursor,
    limit: 4,
    pins: filters,
    query: filters,
    fetch,
  });

describe('keysetPage (given rows 10..1, pages of 4)', () => {
  it('walks forward and back with absolute links that repeat the filters and limit', async () => {
    const p1 = await page(undefined);
    expect(p1.results.map((r) => r.n)).toEqual([10, 9, 8, 7]);
    expect(p1.previous).toBeNull();
    expect(p1.next).toMatch(/^http:\/\/api\.test\/v2026-04\/things\/\?scope=workspace&limit=4&cursor=/);
    const p2 = await page(cursorOf(p1.next));
    expect(p2.results.map((r) => r.n)).toEqual([6, 5, 4, 3]);
    const p3 = await page(cursorOf(p2.next));
    expect(p3.results.map((r) => r.n)).toEqual([2, 1]);
    expect(p3.next).toBeNull();
    const back = await page(cursorOf(p3.previous));
    expect(back.results.map((r) => r.n)).toEqual([6, 5, 4, 3]);
    const first = await page(cursorOf(back.previous));
    expect(first.results.map((r) => r.n)).toEqual([10, 9, 8, 7]);
    expect(first.previous).toBeNull();
    expect(first.next).not.toBeNull();
  });

  it('refuses an altered cursor and one made for other filters with invalid_cursor', async () => {
    const p1 = await page(undefined);
    const token = cursorOf(p1.next)!;
    const altered = `${token.slice(0, -2)}${token.endsWith('AA') ? 'BB' : 'AA'}`;
    await expect(page(altered)).rejects.toMatchObject({ code: 'invalid_cursor' });
    await expect(page(token, { scope: 'other' })).rejects.toBeInstanceOf(ApiError);
    await expect(page(token, { scope: 'other' })).rejects.toMatchObject({ code: 'invalid_cursor' });
  });
});

describe('one cursor format for the export and the lists', () => {
  const secret = '0123456789abcdef0123';
  const tuple = keysetCursorCodec(secret, z.tuple([z.string(), z.string()]));

  it('opens an export cursor handed out before the pager was shared ({v, d: prev, k, f, w})', () => {
    const old = cursorCodec(secret, z.unknown()).encode({
      v: 1,
      d: 'prev',
      k: ['2026-04-01T00:00:00.000000Z', '0b6d5b0e-8f2a-4c1e-9d3b-2f6a7c8e9d10'],
      f: 'abc',
      w: { c: [1, 2] },
    });
    expect(tuple.decode(old)).toEqual({
      v: 1,
      d: 'prev',
      k: ['2026-04-01T00:00:00.000000Z', '0b6d5b0e-8f2a-4c1e-9d3b-2f6a7c8e9d10'],
      f: 'abc',
      w: { c: [1, 2] },
    });
    // The lists' former form is not one: a 400 invalid_cursor, as for any cursor not ours.
    const listOld = cursorCodec(secret, z.unknown()).encode({ position: ['x', 'y'], direction: 'previous', filters: {} });
    expect(() => tuple.decode(listOld)).toThrow(ApiError);
  });

  it('pins windows resolved at the first page in every later cursor, and asks the source what lies behind', async () => {
    let resolved = 0;
    const seenWindows: unknown[] = [];
    const pinned = (cursor: string | undefined, behind: boolean) =>
      keysetPage({
        req: req('/v2026-04/things/'),
        publicBaseUrl: 'https://api.test/',
        codec,
        cursor,
        limit: 4,
        pins: { shop: 's' },
        query: {},
        windows: () => (resolved++, { c: [resolved, 100] }),
        fetch: async (q) => (seenWindows.push(q.windows), fetch(q)),
        behind: async () => behind,
      });
    const p1 = await pinned(undefined, true);
    expect(p1.next).toMatch(/^https:\/\/api\.test\/v2026-04\/things\/\?limit=4&cursor=/);
    const p2 = await pinned(cursorOf(p1.next), false);
    expect(p2.results.map((r) => r.n)).toEqual([6, 5, 4, 3]);
    // Nothing behind any more (say, deleted): no previous link.
    expect(p2.previous).toBeNull();
    await pinned(cursorOf(p2.next), true);
    expect(resolved).toBe(1);
    expect(seenWindows).toEqual([{ c: [1, 100] }, { c: [1, 100] }, { c: [1, 100] }]);
  });
});
