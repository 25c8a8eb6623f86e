import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { migrationSteps } from './migrate.js';

// The names schema_migrations holds on databases made before migrations moved into owners' folders: each must
// still be a step, or those databases would apply it again.
const appliedBeforeOwners = [
  '001_core.sql',
  '002_activities_flows.sql',
  '003_conversations.sql',
  '004_bus_log.sql',
  '005_topic_retention.sql',
  '007_projections.sql',
  '008_flow_versions.sql',
  '009_export_updated_at.sql',
  '010_dlq_redrives.sql',
  '014_bus_append.sql',
  '015_ingest_rate_limits.sql',
  '016_consumer_members.sql',
];

describe('migration steps (packages/<package>/migrations/ and services/<name>/migrations/)', () => {
  it('keeps every step name existing databases recorded, in the same order, new steps after them', async () => {
    const names = (await migrationSteps()).map((s) => s.name);
    expect(names.slice(0, appliedBeforeOwners.length)).toEqual(appliedBeforeOwners);
    expect(names.slice(appliedBeforeOwners.length)).toEqual(['017_embedded_demo.sql', '018_privacy.sql', '019_outbox_marks.sql']);
  });

  it("gives each table-owning step its parts in order: the packages' first, then the services', each by owner name", async () => {
    const steps = new Map((await migrationSteps()).map((s) => [s.name, s.parts.map((p) => p.owner)]));
    expect(steps.get('001_core.sql')).toEqual(['http', 'projections', 'ingest-api']);
    expect(steps.get('002_activities_flows.sql')).toEqual(['flows', 'projections', 'activity-projector', 'flow-matcher']);
    expect(steps.get('003_conversations.sql')).toEqual(['http', 'conversation-projector', 'query-api']);
    expect(steps.get('017_embedded_demo.sql')).toEqual(['all-in-one']);
    expect(steps.get('018_privacy.sql')).toEqual(['privacy', 'flow-matcher']);
  });
});

describe("migration files outside an owner's migrations folder", () => {
  const packagesWith = async (files: Record<string, string>) => {
    const dir = await mkdtemp(path.join(tmpdir(), 'packages-'));
    for (const [file, text] of Object.entries(files)) {
      await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
      await writeFile(path.join(dir, file), text);
    }
    return dir;
  };
  const cases: [string, Record<string, string>, RegExp][] = [
    ['in the packages folder', { '020_x.sql': '', 'bus/migrations/001_a.sql': '' }, /^020_x\.sql: a migration belongs in its owner's folder/],
    [
      "beside a package's code",
      { 'bus/020_x.sql': '', 'bus/migrations/001_a.sql': '' },
      /^bus\/020_x\.sql: a migration belongs in its owner's folder \(bus\/migrations\/\)/,
    ],
    [
      'in a folder inside a migrations folder (the old packages/db/migrations/<package>/)',
      { 'db/migrations/bus/020_x.sql': '' },
      /bus: a migrations folder holds/,
    ],
  ];
  it.each(cases)('refuses a .sql file %s', async (_, files, error) => {
    const dir = await packagesWith(files);
    try {
      await expect(migrationSteps([], dir)).rejects.toThrow(error);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
