import { describe, expect, it } from 'vitest';
import { dashboards, metricNames, opsExpressions } from './opsFiles.js';

/**
 * No Grafana can be installed here (Debian bookworm has no grafana package, and nothing outside the package
 * registries can be fetched): the dashboards are checked against Grafana's dashboard JSON model instead, the
 * fields a provisioned dashboard needs to load and show its panels (grafana.com/docs, "JSON model").
 */
const files = dashboards();

describe('ops/grafana dashboards', () => {
  it('ships the two dashboards, each with a unique uid', () => {
    expect(files.map((f) => f.file)).toEqual(['shopstream-consumers.json', 'shopstream-ingest.json']);
    expect(new Set(files.map((f) => f.json.uid)).size).toBe(files.length);
  });

  for (const { file, json: d } of files) {
    describe(file, () => {
      it('has the top-level fields of the dashboard model', () => {
        expect(typeof d.title).toBe('string');
        expect(d.uid).toMatch(/^[a-zA-Z0-9_-]{1,40}$/);
        expect(Number.isInteger(d.schemaVersion) && d.schemaVersion >= 36).toBe(true);
        expect(d.time).toEqual({ from: expect.any(String), to: 'now' });
        expect(Array.isArray(d.panels) && d.panels.length > 0).toBe(true);
        // The Prometheus data source is a variable, so an import or a provisioned copy picks its own.
        expect(d.templating.list).toContainEqual(expect.objectContaining({ name: 'datasource', type: 'datasource', query: 'prometheus' }));
        // An `id` would tie the file to one Grafana database; provisioning assigns it.
        expect(d.id).toBeUndefined();
      });

      it('gives every panel an id, a type, a data source, a grid position and targets with an expr', () => {
        const ids = new Set<number>();
        for (const p of d.panels) {
          const where = `${file}: ${p.title}`;
          expect({ where, id: Number.isInteger(p.id) && !ids.has(p.id) }).toEqual({ where, id: true });
          ids.add(p.id);
          expect(['timeseries', 'stat']).toContain(p.type);
          expect(p.datasource).toEqual({ type: 'prometheus', uid: '${datasource}' });
          const g = p.gridPos;
          expect({ where, grid: [g.x, g.y, g.w, g.h].every((n) => Number.isInteger(n) && n >= 0) && g.w > 0 && g.h > 0 && g.x + g.w <= 24 }).toEqual({
            where,
            grid: true,
          });
          expect(p.targets.length).toBeGreaterThan(0);
          const refIds = p.targets.map((t: any) => t.refId);
          expect(new Set(refIds).size).toBe(refIds.length);
          for (const t of p.targets) {
            expect(t.datasource).toEqual(p.datasource);
            expect(typeof t.expr === 'string' && t.expr.length > 0).toBe(true);
          }
        }
      });

      it('lays the panels out without overlaps', () => {
        const cells = new Map<string, string>();
        for (const p of d.panels) {
          const { x, y, w, h } = p.gridPos;
          for (let i = x; i < x + w; i++)
            for (let j = y; j < y + h; j++) {
              const prev = cells.get(`${i},${j}`);
              expect({ cell: `${i},${j}`, taken: prev ? `${prev} and ${p.title}` : null }).toEqual({ cell: `${i},${j}`, taken: null });
              cells.set(`${i},${j}`, p.title);
            }
        }
      });
    });
  }

  it('shows what the issue lists: ingest rate, latency, answers, 503s and 429s, lag, dead letters, outbox, rebuilds, restarts, CPU and memory', () => {
    const named = new Set(
      opsExpressions()
        .filter((e) => e.where.includes('.json: '))
        .flatMap((e) => metricNames(e.expr)),
    );
    for (const m of [
      'shopstream_ingest_events_total',
      'shopstream_http_request_seconds_bucket',
      'shopstream_http_requests_total',
      'shopstream_consumer_lag',
      'shopstream_dead_letters_total',
      'shopstream_outbox_backlog_rows',
      'shopstream_projection_rebuild_applied_records',
      'shopstream_consumer_restarts_total',
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
    ])
      expect(named).toContain(m);
  });
});
