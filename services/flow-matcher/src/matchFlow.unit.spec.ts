import { describe, expect, it } from 'vitest';
import { flowTriggerSchema, type PropertyCondition } from '@shopstream/contracts';
import { holds, matchFlow, valueAtPath } from './matchFlow.js';

const props = {
  plan: 'pro-annual',
  total: 120.5,
  count: 3,
  gift: false,
  tags: ['vip', 'eu'],
  cart: { items: [{ sku: 'A-1' }], currency: 'EUR' },
  nothing: null,
};
const event = (
  additional_properties: Record<string, unknown> = props,
  contact: any = { id: '0190a2c4-1111-7000-8000-000000000001', email: 'ada@example.com', phone: '+14155550100', remote_id: 'crm-7', name: 'Ada' },
) => ({
  metric_name: 'placed_order',
  additional_properties,
  contact,
});
const cond = (c: unknown) => flowTriggerSchema.parse({ metric_name: 'x', property_conditions: [c] }).property_conditions[0] as PropertyCondition;
const at = (c: unknown) => holds(cond(c), valueAtPath(props, (c as { field: string }).field));

describe('matchFlow operators (given additional_properties, when a condition is evaluated, then it holds or not)', () => {
  const cases: [op: string, matching: unknown, nonMatching: unknown][] = [
    ['eq', { field: 'plan', op: 'eq', value: 'pro-annual' }, { field: 'plan', op: 'eq', value: 'pro' }],
    ['neq', { field: 'plan', op: 'neq', value: 'basic' }, { field: 'plan', op: 'neq', value: 'pro-annual' }],
    ['contains', { field: 'plan', op: 'contains', value: 'annual' }, { field: 'plan', op: 'contains', value: 'monthly' }],
    ['not_contains', { field: 'tags', op: 'not_contains', value: 'us' }, { field: 'tags', op: 'not_contains', value: 'vip' }],
    ['starts_with', { field: 'cart.currency', op: 'starts_with', value: 'EU' }, { field: 'cart.currency', op: 'starts_with', value: 'US' }],
    ['ends_with', { field: 'plan', op: 'ends_with', value: '-annual' }, { field: 'plan', op: 'ends_with', value: 'pro' }],
    ['gt', { field: 'total', op: 'gt', value: 100 }, { field: 'total', op: 'gt', value: 120.5 }],
    ['gte', { field: 'total', op: 'gte', value: 120.5 }, { field: 'total', op: 'gte', value: 121 }],
    ['lt', { field: 'count', op: 'lt', value: 4 }, { field: 'count', op: 'lt', value: 3 }],
    ['lte', { field: 'count', op: 'lte', value: 3 }, { field: 'count', op: 'lte', value: 2 }],
    ['in', { field: 'cart.items.0.sku', op: 'in', value: ['A-1', 'B-2'] }, { field: 'cart.items.0.sku', op: 'in', value: ['B-2'] }],
    ['not_in', { field: 'plan', op: 'not_in', value: ['basic', 'free'] }, { field: 'plan', op: 'not_in', value: ['pro-annual'] }],
    ['exists', { field: 'gift', op: 'exists' }, { field: 'nothing', op: 'exists' }],
    ['not_exists', { field: 'cart.missing', op: 'not_exists' }, { field: 'cart.items', op: 'not_exists' }],
  ];
  it('covers all 14 operators', () => {
    expect(new Set(cases.map((c) => c[0])).size).toBe(14);
  });
  for (const [op, yes, no] of cases) {
    it(`${op}: matches and does not match`, () => {
      expect(at(yes)).toBe(true);
      expect(at(no)).toBe(false);
    });
  }
});

describe('missing values and type mismatches are a non-match, never a crash', () => {
  it('a missing path fails every operator but not_exists', () => {
    const ops: unknown[] = [
      { field: 'nope.deep', op: 'eq', value: 'x' },
      { field: 'nope', op: 'neq', value: 'x' },
      { field: 'nope', op: 'not_contains', value: 'x' },
      { field: 'nope', op: 'not_in', value: ['x'] },
      { field: 'nope', op: 'lt', value: 1 },
      { field: 'nothing', op: 'neq', value: 'x' },
    ];
    for (const c of ops) expect(at(c)).toBe(false);
    expect(at({ field: 'nope', op: 'not_exists' })).toBe(true);
  });
  it('a value of another type fails', () => {
    expect(at({ field: 'plan', op: 'gt', value: 1 })).toBe(false);
    expect(at({ field: 'total', op: 'eq', value: '120.5' })).toBe(false);
    expect(at({ field: 'total', op: 'neq', value: 'abc' })).toBe(false);
    expect(at({ field: 'total', op: 'starts_with', value: '1' })).toBe(false);
    expect(at({ field: 'cart', op: 'contains', value: 'EUR' })).toBe(false);
    expect(at({ field: 'cart', op: 'in', value: ['EUR'] })).toBe(false);
    expect(at({ field: 'count', op: 'not_in', value: ['3'] })).toBe(false);
    expect(at({ field: 'plan.x', op: 'exists' })).toBe(false);
    expect(at({ field: 'constructor', op: 'exists' })).toBe(false);
    expect(at({ field: 'tags.first', op: 'exists' })).toBe(false);
  });
});

describe('matchFlow: metric name, property and contact conditions must all hold', () => {
  const trigger = flowTriggerSchema.parse({
    metric_name: 'placed_order',
    property_conditions: [{ field: 'total', op: 'gte', value: 100 }],
    contact_conditions: [{ field: 'email', op: 'ends_with', value: '@example.com' }],
  });
  it('matches when all three hold', () => expect(matchFlow(trigger, event())).toBe(true));
  it('another metric name', () => expect(matchFlow(trigger, { ...event(), metric_name: 'viewed' })).toBe(false));
  it('property fails', () => expect(matchFlow(trigger, event({ total: 99 }))).toBe(false));
  it('contact fails', () =>
    expect(matchFlow(trigger, event(props, { id: 'x', email: 'bob@other.org', phone: null, remote_id: null, name: null }))).toBe(false));
  it('no contact: a contact condition is a non-match', () => expect(matchFlow(trigger, event(props, null))).toBe(false));
  it('no contact: not_exists on a contact field holds', () => {
    const t = flowTriggerSchema.parse({ metric_name: 'placed_order', contact_conditions: [{ field: 'id', op: 'not_exists' }] });
    expect(matchFlow(t, event(props, null))).toBe(true);
    expect(matchFlow(t, event())).toBe(false);
  });
  it('contact fields: id, phone, remote_id, name', () => {
    const t = flowTriggerSchema.parse({
      metric_name: 'placed_order',
      contact_conditions: [
        { field: 'id', op: 'eq', value: '0190a2c4-1111-7000-8000-000000000001' },
        { field: 'phone', op: 'starts_with', value: '+1415' },
        { field: 'remote_id', op: 'in', value: ['crm-7'] },
        { field: 'name', op: 'exists' },
      ],
    });
    expect(matchFlow(t, event())).toBe(true);
    expect(
      matchFlow(t, event(props, { id: '0190a2c4-1111-7000-8000-000000000001', email: null, phone: '+14155550100', remote_id: 'crm-8', name: 'Ada' })),
    ).toBe(false);
  });
  it('no conditions: every event of the metric matches', () => {
    expect(matchFlow(flowTriggerSchema.parse({ metric_name: 'placed_order' }), event({}, null))).toBe(true);
  });
});
