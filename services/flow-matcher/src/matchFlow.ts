import type { Condition, ContactCondition, FlowTrigger, MetricEvent, PropertyCondition } from '@shopstream/contracts';

type Scalar = string | number | boolean;

const isScalar = (v: unknown): v is Scalar => typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)) || typeof v === 'boolean';

/**
 * The value at a dotted path (`cart.total`, `items.0.sku`), or undefined. Only own properties count, so
 * a path such as `constructor` never reaches the prototype.
 */
export function valueAtPath(root: unknown, path: string): unknown {
  let cur: unknown = root;
  for (const seg of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    if (Array.isArray(cur)) {
      if (!/^\d+$/.test(seg)) return undefined;
      cur = cur[Number(seg)];
    } else {
      if (!Object.hasOwn(cur, seg)) return undefined;
      cur = (cur as Record<string, unknown>)[seg];
    }
  }
  return cur;
}

/**
 * Whether one condition holds for `actual`. A missing value (undefined or null) or one of another type than
 * the operator needs is a non-match for every operator but `not_exists`; nothing here throws.
 */
export function holds(c: Condition, actual: unknown): boolean {
  const present = actual !== undefined && actual !== null;
  switch (c.op) {
    case 'exists':
      return present;
    case 'not_exists':
      return !present;
    case 'eq':
      return isScalar(actual) && typeof actual === typeof c.value && actual === c.value;
    case 'neq':
      return isScalar(actual) && typeof actual === typeof c.value && actual !== c.value;
    case 'contains':
    case 'not_contains': {
      let found: boolean;
      if (typeof actual === 'string' && typeof c.value === 'string') found = actual.includes(c.value);
      else if (Array.isArray(actual)) found = actual.some((x) => x === c.value);
      else return false;
      return c.op === 'contains' ? found : !found;
    }
    case 'starts_with':
      return typeof actual === 'string' && actual.startsWith(c.value);
    case 'ends_with':
      return typeof actual === 'string' && actual.endsWith(c.value);
    case 'gt':
      return typeof actual === 'number' && actual > c.value;
    case 'gte':
      return typeof actual === 'number' && actual >= c.value;
    case 'lt':
      return typeof actual === 'number' && actual < c.value;
    case 'lte':
      return typeof actual === 'number' && actual <= c.value;
    case 'in':
    case 'not_in': {
      // Only a value of a type the list holds can be compared with it at all.
      if (!isScalar(actual) || !c.value.some((x) => typeof x === typeof actual)) return false;
      const found = c.value.some((x) => x === actual);
      return c.op === 'in' ? found : !found;
    }
    default: {
      const never: never = c;
      throw new Error(`unknown operator ${(never as { op: string }).op}`);
    }
  }
}

export const propertyHolds = (c: PropertyCondition, m: Pick<MetricEvent, 'additional_properties'>): boolean =>
  holds(c, valueAtPath(m.additional_properties, c.field));

export const contactHolds = (c: ContactCondition, m: Pick<MetricEvent, 'contact'>): boolean => holds(c, m.contact ? m.contact[c.field] : undefined);

/** True when the metric event has the trigger's metric name and every condition holds. */
export function matchFlow(trigger: FlowTrigger, m: Pick<MetricEvent, 'metric_name' | 'additional_properties' | 'contact'>): boolean {
  return (
    m.metric_name === trigger.metric_name &&
    trigger.property_conditions.every((c) => propertyHolds(c, m)) &&
    trigger.contact_conditions.every((c) => contactHolds(c, m))
  );
}
