import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { envVarNames } from '@shopstream/config';
import { serviceNames } from '@shopstream/all-in-one';

// No Docker engine runs here, so the compose file is kept honest by reading it: every service it starts
// must exist, and every variable it sets must be one the config accepts (a typo would be silently ignored).
const compose = parse(readFileSync(new URL('../docker-compose.yml', import.meta.url), 'utf8'), { merge: true }) as {
  services: Record<
    string,
    {
      command?: string[];
      environment?: Record<string, string>;
      build?: string;
      image?: string;
      healthcheck?: unknown;
      profiles?: string[];
      volumes?: string[];
    }
  >;
};
const ours = Object.entries(compose.services).filter(([, s]) => s.build === '.');

describe('docker-compose.yml', () => {
  it('runs every Shopstream service, each as its own container from the one Dockerfile', () => {
    expect(ours.map(([name]) => name).sort()).toEqual([...serviceNames].sort());
    for (const [name, s] of ours) expect(s.command).toEqual([name]);
  });

  it('sets only environment variables the config accepts', () => {
    const known = new Set<string>(envVarNames);
    for (const [name, s] of ours) {
      const unknown = Object.keys(s.environment ?? {}).filter((k) => !known.has(k));
      expect({ service: name, unknown }).toEqual({ service: name, unknown: [] });
      expect(s.environment?.KAFKA_BROKERS).toBe('kafka:9092');
      expect(s.environment?.DATABASE_URL).toMatch(/^postgres:\/\/.+@postgres:5432\//);
    }
  });

  it('gives every container a health check', () => {
    for (const [name, s] of Object.entries(compose.services)) expect({ name, hasCheck: s.healthcheck !== undefined }).toEqual({ name, hasCheck: true });
  });

  it('runs the Kafka version the tests run against', async () => {
    const { KAFKA_VERSION } = await import('@shopstream/testkit');
    expect(compose.services.kafka.image).toBe(`apache/kafka:${KAFKA_VERSION}`);
  });

  it('runs a broker that deletes nothing by age unless a topic says so (source topics are kept forever)', () => {
    expect(compose.services.kafka.environment?.KAFKA_LOG_RETENTION_MS).toBe('-1');
    expect(Object.keys(compose.services.kafka.environment ?? {}).filter((k) => /RETENTION_(HOURS|MINUTES)$/.test(k))).toEqual([]);
  });

  it('runs Prometheus and Grafana only under the monitoring profile, on the files of ops/', () => {
    const withProfile = Object.entries(compose.services).filter(([, c]) => c.profiles !== undefined);
    expect(withProfile.map(([name, c]) => [name, c.profiles])).toEqual([
      ['prometheus', ['monitoring']],
      ['grafana', ['monitoring']],
    ]);
    expect(compose.services.prometheus.volumes).toEqual(['./ops/prometheus:/etc/prometheus:ro']);
    expect(compose.services.grafana.volumes).toEqual([
      './ops/grafana/provisioning:/etc/grafana/provisioning:ro',
      './ops/grafana:/var/lib/grafana/dashboards/shopstream:ro',
    ]);
    // Prometheus scrapes every Shopstream service on the port it listens on in its container.
    const prometheus = parse(readFileSync(new URL('../ops/prometheus/prometheus.yml', import.meta.url), 'utf8'));
    expect(prometheus.rule_files).toEqual(['alerts.yml']);
    expect(prometheus.scrape_configs[0].static_configs[0].targets.sort()).toEqual(ours.map(([name]) => `${name}:8080`).sort());
    const provider = parse(readFileSync(new URL('../ops/grafana/provisioning/dashboards/shopstream.yml', import.meta.url), 'utf8'));
    expect(provider.providers[0].options.path).toBe('/var/lib/grafana/dashboards/shopstream');
  });
});
