import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

/** ops/ of the repository: the Grafana dashboards and the Prometheus rules that ship. */
export const OPS_DIR = fileURLToPath(new URL('../ops/', import.meta.url));

export interface DashboardFile {
  file: string;
  json: any;
}

/** Every ops/grafana/*.json, parsed. */
export function dashboards(): DashboardFile[] {
  const dir = `${OPS_DIR}grafana/`;
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((file) => ({ file, json: JSON.parse(readFileSync(dir + file, 'utf8')) }));
}

/** Each PromQL expression of ops/, with where it comes from: dashboard targets and alert rules. */
export function opsExpressions(): { where: string; expr: string }[] {
  const out: { where: string; expr: string }[] = [];
  for (const d of dashboards()) {
    for (const p of d.json.panels as any[]) for (const t of p.targets ?? []) out.push({ where: `${d.file}: ${p.title}`, expr: String(t.expr) });
  }
  const rules = parse(readFileSync(`${OPS_DIR}prometheus/alerts.yml`, 'utf8')) as { groups: { rules: { alert: string; expr: string }[] }[] };
  for (const g of rules.groups) for (const r of g.rules) out.push({ where: `alerts.yml: ${r.alert}`, expr: r.expr });
  return out;
}

/**
 * The metric names an expression reads: Shopstream's own (`shopstream_*`) and the process metrics prom-client
 * collects (`process_*`, `nodejs_*`). A label name never starts with these prefixes here.
 */
export function metricNames(expr: string): string[] {
  const withoutStrings = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  return [...new Set(withoutStrings.match(/\b(?:shopstream|process|nodejs)_[a-zA-Z0-9_]+/g) ?? [])];
}
