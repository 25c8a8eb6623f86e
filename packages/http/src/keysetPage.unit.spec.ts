import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Request } from 'express';
import { ApiError } from './errors.js';
import { keysetCursorCodec, keysetPage, type PageQuery } from './keysetPage.js';

// Rows 10..1 newest first; the position is the number itself.
const rows = Array.from({ length: 10 }, (_, i) => ({ n: 10 - i, position: 10 - i }));
const fetch = async ({ after, direction, take }: PageQuery<number>) =>
  direction === 'next'
    ? rows.filter((r) => after === null || r.n < after).slice(0, take)
    : rows.filter((r) => after === null || r.n > after).reverse().slice(0, take);

const codec = keysetCursorCodec('0123456789abcdef0123', z.number());
const req = (url: string) => ({ originalUrl: url, protocol: 'http', get: () => 'api.test' }) as unknown as Request;
const cursorOf = (link: string | null) => new URL(link!).searchParams.get('cursor') ?? undefined;
const page = (cursor: string | undefined, filters: Record<string, string> = { scope: 'workspace' }) =>
  keysetPage({ req: req('/v2026-04/things/?scope=workspace&limit=4'), publicBaseUrl: undefined, codec, cursor, limit: 4, pins: filters, query: filters, fetch });

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
