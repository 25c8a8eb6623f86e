import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { parse } from 'yaml';
import { ensurePromtool } from '@shopstream/testkit';
import { OPS_DIR } from './opsFiles.js';

/** ops/prometheus as Prometheus reads it: rules that load, and the unit tests of every rule passing. */
function promtool(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    execFile(ensurePromtool(), args, { cwd: `${OPS_DIR}prometheus` }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

it('promtool check rules: ops/prometheus/alerts.yml loads', async () => {
  const { code, out } = await promtool(['check', 'rules', 'alerts.yml']);
  expect(out).toContain('SUCCESS: 12 rules found');
  expect(code).toBe(0);
}, 300_000);

it("promtool check config: docker-compose's Prometheus configuration, with the rules", async () => {
  const { code, out } = await promtool(['check', 'config', 'prometheus.yml']);
  expect(out).toContain('is valid prometheus config file syntax');
  expect(code).toBe(0);
}, 300_000);

it('promtool test rules: every rule fires and stays quiet where its tests say', async () => {
  const { code, out } = await promtool(['test', 'rules', 'alerts.test.yml']);
  expect(out).toContain('SUCCESS');
  expect(out).not.toContain('FAILED');
  expect(code).toBe(0);
}, 300_000);

it('has a promtool test for every alert rule', () => {
  const rules = parse(readFileSync(`${OPS_DIR}prometheus/alerts.yml`, 'utf8')) as { groups: { rules: { alert: string }[] }[] };
  const tests = parse(readFileSync(`${OPS_DIR}prometheus/alerts.test.yml`, 'utf8')) as {
    tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[];
  };
  const fired = new Set(tests.tests.flatMap((t) => t.alert_rule_test.filter((a) => a.exp_alerts.length > 0).map((a) => a.alertname)));
  expect(rules.groups.flatMap((g) => g.rules.map((r) => r.alert)).filter((a) => !fired.has(a))).toEqual([]);
});
