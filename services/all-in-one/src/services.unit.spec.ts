import { describe, expect, it } from 'vitest';
import { loadEnv } from '@shopstream/config';
import { workspaceServiceMigrations } from '@shopstream/db';
import { migrationSources, projectionDefinitions, serviceNames, services } from './services.js';

describe('the list of service declarations', () => {
  it("gives every process the same migration folders as a service's own main.ts finds in the workspace", async () => {
    const byOwner = (s: { owner: string; dir: string }[]) => [...s].sort((a, b) => a.owner.localeCompare(b.owner));
    expect(byOwner(migrationSources)).toEqual(byOwner(await workspaceServiceMigrations()));
    // Each service owns its folder: the owner is the declaring package.
    for (const s of services) if (s.migrations) expect(s.migrations.dir.replaceAll('\\', '/')).toMatch(new RegExp(`/services/${s.name}/migrations$`));
  });

  it('names each service once, the HTTP APIs before the consumers, each projection after its service', () => {
    expect(new Set(serviceNames).size).toBe(serviceNames.length);
    const kinds = services.map((s) => s.kind);
    expect(kinds).toEqual([...kinds].sort((a, b) => (a === b ? 0 : a === 'http' ? -1 : 1)));
    expect(projectionDefinitions(loadEnv({})).map((p) => p.name)).toEqual(services.filter((s) => s.projection).map((s) => s.name));
  });

  it("cuts each service's configuration to the variables it declared: its start never sees the whole Env", () => {
    const env = loadEnv({ FLOW_REFRESH_MS: '1234', CURSOR_SECRET: 'a-cursor-secret-of-16+' });
    const flowMatcher = services.find((s) => s.name === 'flow-matcher')!;
    expect(Object.keys(flowMatcher.configOf(env)).sort()).toEqual([...flowMatcher.configKeys].sort());
    expect(flowMatcher.configOf(env)).toMatchObject({ FLOW_REFRESH_MS: 1234 });
    expect(flowMatcher.configOf(env)).not.toHaveProperty('CURSOR_SECRET');
    for (const s of services) expect({ service: s.name, db: s.configKeys.includes('DATABASE_URL') }).toEqual({ service: s.name, db: false });
  });
});
