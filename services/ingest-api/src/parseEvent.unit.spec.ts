import { describe, expect, it } from 'vitest';
import { normalizePhone } from '@shopstream/contacts';
import { parseEvent } from './parseEvent.js';
import { unstorableText } from '@shopstream/contracts';

const PHONE = 'Not a valid phone number. Give it in international format with the country code, e.g. +14155552671.';

describe('normalizePhone', () => {
  it('gives E.164 for valid international numbers', () => {
    expect(normalizePhone('+1 (415) 555-2671')).toBe('+14155552671');
    expect(normalizePhone(' +44 20 7946 0958 ')).toBe('+442079460958');
  });

  it('is null for numbers that are not valid or lack a country code', () => {
    expect(normalizePhone('4155552671')).toBeNull();
    expect(normalizePhone('+1 000')).toBeNull();
    expect(normalizePhone('call me')).toBeNull();
  });
});

describe('parseEvent', () => {
  it('normalises the contact: email trimmed and lower-cased, phone in E.164', () => {
    const r = parseEvent({ name: ' Signed up ', metric: { metric_name: 'signed_up' }, contact: { email: ' A@B.COM ', phone: '+1 415 555 2671' } });
    expect(r).toEqual({ ok: true, event: { name: 'Signed up', metric: { metric_name: 'signed_up' }, contact: { email: 'a@b.com', phone: '+14155552671' } } });
  });

  it('reports a bad phone beside the other problems of the same event', () => {
    expect(parseEvent({ metric: { metric_name: 'x' }, contact: { phone: '123' } })).toEqual({
      ok: false,
      fields: { name: 'Required.', 'contact.phone': PHONE },
    });
  });
});

describe('text Postgres cannot store', () => {
  // Parsed from the JSON a client sends, as the endpoint does: "\u0000" and "\ud800" are valid JSON escapes.
  const parsed = (json: string) => parseEvent(JSON.parse(json));

  it('refuses NUL and unpaired surrogates anywhere, keys included, naming the path', () => {
    expect(parsed('{"name": "Placed\\u0000order", "metric": {"metric_name": "m"}}')).toEqual({ ok: false, fields: { name: expect.stringContaining('NUL') } });
    expect(parsed('{"name": "n", "metric": {"metric_name": "m", "additional_properties": {"cart": {"items": ["ok", "\\ud800"]}}}}')).toEqual({
      ok: false,
      fields: { 'metric.additional_properties.cart.items.1': expect.stringContaining('unpaired surrogate') },
    });
    expect(parsed('{"name": "n", "metric": {"metric_name": "m", "additional_properties": {"k\\u0000": 1}}}')).toMatchObject({ ok: false });
    expect(parsed('{"name": "n", "metric": {"metric_name": "m"}, "contact": {"remote_id": "r\\u0000x"}}')).toEqual({
      ok: false,
      fields: { 'contact.remote_id': expect.any(String) },
    });
  });

  it('refuses __proto__ as a key (a copy would drop it silently)', () => {
    expect(parsed('{"name": "n", "metric": {"metric_name": "m", "additional_properties": {"__proto__": {"x": 1}, "b": 2}}}')).toEqual({
      ok: false,
      fields: { 'metric.additional_properties.__proto__': 'Not allowed as a key.' },
    });
  });

  it('accepts paired surrogates (emoji) and other control characters', () => {
    expect(parsed('{"name": "Loved it \\ud83d\\ude00\\t", "metric": {"metric_name": "m"}}')).toMatchObject({ ok: true });
  });
});

describe('event_time', () => {
  it('refuses year 0000, which passes the RFC 3339 form but no Postgres timestamp takes', () => {
    expect(parseEvent({ name: 'n', metric: { metric_name: 'm' }, event_time: '0000-01-01T00:00:00Z' })).toEqual({
      ok: false,
      fields: { event_time: expect.stringContaining('0000') },
    });
    expect(parseEvent({ name: 'n', metric: { metric_name: 'm' }, event_time: '0001-01-01T00:00:00Z' })).toMatchObject({ ok: true });
  });
});

describe('event_time that a projection could not store or answer back', () => {
  const at = (event_time: string) => parseEvent({ name: 'n', metric: { metric_name: 'm' }, event_time });

  it('refuses UTC offsets past ±15:59, which RFC 3339 allows and Postgres does not', () => {
    for (const t of ['2026-04-01T10:00:00+16:00', '2026-04-01T10:00:00-23:59', '2026-04-01T10:00:00+23:00']) {
      expect(at(t)).toEqual({ ok: false, fields: { event_time: expect.stringContaining('±15:59') } });
    }
    expect(at('2026-04-01T10:00:00+15:59')).toMatchObject({ ok: true });
    expect(at('2026-04-01T10:00:00-15:59')).toMatchObject({ ok: true });
  });

  it('refuses instants outside years 0001 to 9999 once in UTC (they were read back as +010000-... or year 0000)', () => {
    expect(at('9999-12-31T23:59:59-14:00')).toEqual({ ok: false, fields: { event_time: expect.stringContaining('9999-12-31') } });
    expect(at('0001-01-01T00:00:00+14:00')).toEqual({ ok: false, fields: { event_time: expect.stringContaining('0001-01-01') } });
    expect(at('9999-12-31T23:59:59Z')).toMatchObject({ ok: true });
    expect(at('9999-12-31T09:59:59-14:00')).toMatchObject({ ok: true });
  });
});

describe('nesting', () => {
  const deep = (levels: number) => JSON.parse(`${'['.repeat(levels)}${']'.repeat(levels)}`) as unknown;

  it('answers a deep additional_properties with a 400 naming the field, whatever the depth (it was a stack overflow, a 500)', () => {
    for (const levels of [17, 5_000, 100_000]) {
      expect(parseEvent({ name: 'n', metric: { metric_name: 'm', additional_properties: { a: deep(levels) } } })).toEqual({
        ok: false,
        fields: { 'metric.additional_properties': 'Nested at most 16 levels deep.' },
      });
    }
    // 16 levels in all, the additional_properties object being the first.
    expect(parseEvent({ name: 'n', metric: { metric_name: 'm', additional_properties: { a: deep(15) } } })).toMatchObject({ ok: true });
  });

  it('walks any depth for text Postgres cannot store without overflowing, naming the path', () => {
    const value: Record<string, unknown> = {};
    let at = value;
    for (let i = 0; i < 100_000; i++) at = (at.k = {}) as Record<string, unknown>;
    at.bad = 'x\u0000';
    const hit = unstorableText(value);
    expect(hit?.message).toContain('NUL');
    expect(hit?.path.split('.')).toHaveLength(100_001);
    expect(hit?.path.endsWith('k.k.bad')).toBe(true);
    expect(unstorableText(deep(100_000))).toBeNull();
  });
});

describe('integers JSON cannot hold exactly', () => {
  // As a client sends them: JSON.parse rounds 12345678901234567890 to 12345678901234567000 before any check runs.
  const parsed = (text: string) => parseEvent(JSON.parse(text));

  it('refuses an integer beyond ±2^53 anywhere in additional_properties or as the value, naming its path (it was rounded and kept)', () => {
    expect(parsed('{"name":"n","metric":{"metric_name":"m","additional_properties":{"order":{"lines":[1,{"sku":12345678901234567890}]}}}}')).toEqual({
      ok: false,
      fields: { 'metric.additional_properties.order.lines.1.sku': expect.stringContaining('send it as a string') },
    });
    expect(parsed('{"name":"n","metric":{"metric_name":"m","additional_properties":{"n":-9007199254740993}}}')).toEqual({
      ok: false,
      fields: { 'metric.additional_properties.n': expect.stringContaining('cannot be kept exactly') },
    });
    expect(parsed('{"name":"n","metric":{"metric_name":"m","value":9007199254740992}}')).toEqual({
      ok: false,
      fields: { 'metric.value': expect.stringContaining('cannot be kept exactly') },
    });
  });

  it('keeps the largest exact integers and any fraction', () => {
    const ok = parsed(
      '{"name":"n","metric":{"metric_name":"m","value":9007199254740991,"additional_properties":{"a":-9007199254740991,"b":0.1,"c":[1.5e-300]}}}',
    );
    expect(ok).toMatchObject({
      ok: true,
      event: { metric: { value: 9007199254740991, additional_properties: { a: -9007199254740991, b: 0.1, c: [1.5e-300] } } },
    });
  });
});

describe('Unicode spellings of identifiers', () => {
  it('turns remote ids, the remote platform and the deduping key to NFC, so both spellings are one contact and one activity key', () => {
    const nfd = 'Ame\u0301lie-\u00e9'.normalize('NFD');
    const r = parseEvent({ name: 'n', metric: { metric_name: 'm', deduping_key: nfd }, contact: { remote_id: nfd }, remote_id: nfd, remote_platform: nfd });
    const nfc = nfd.normalize('NFC');
    expect(nfc).not.toBe(nfd);
    expect(r).toMatchObject({ ok: true, event: { metric: { deduping_key: nfc }, contact: { remote_id: nfc }, remote_id: nfc, remote_platform: nfc } });
  });
});
