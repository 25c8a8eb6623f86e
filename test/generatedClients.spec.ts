import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conversationsTopic } from '@shopstream/contracts';
import { sql } from '@shopstream/db';
import type { Runtime } from '@shopstream/runtime';
import { startIngestApi } from '@shopstream/ingest-api';
import { startQueryApi } from '@shopstream/query-api';
import { startConversationProjector } from '@shopstream/conversation-projector';
import { createTestShop, startTestRuntime, startTestServer, waitFor, type TestServer } from '@shopstream/harness';
import { conversationUpserted, ensureOpenApiGenerator, OPENAPI_GENERATOR_VERSIONS } from '@shopstream/testkit';

/**
 * Clients generated from the served /openapi.json by openapi-generator's `typescript-fetch` and `python`
 * generators, with no option at all, on 7.16.0 and the newest 7.x: each records an event (sent snake_case, as
 * the server takes it) and reads a page of the export, against a running server. Their default base URL is the
 * document's servers[0], the origin it was served from. The TypeScript client is compiled with the repository's
 * tsc and run by node; the Python one runs on the machine's python3 with pydantic 2, urllib3 and python-dateutil
 * (nothing installed: PYTHONPATH points at the generated package). Needs java (17+) for the generator.
 */
const run = promisify(execFile);
const repo = path.resolve(import.meta.dirname, '..');
const tsc = path.join(repo, 'node_modules/.bin/tsc');
const java = await run('java', ['-version']).then(
  () => true,
  () => false,
);
const python = await run('python3', ['-c', 'import pydantic, urllib3, dateutil; assert pydantic.VERSION.startswith("2")']).then(
  () => true,
  () => false,
);
if (!java) console.warn('generatedClients.spec.ts: skipped, no java on PATH to run openapi-generator-cli (install a JDK 17+)');
if (java && !python) console.warn('generatedClients.spec.ts: the python client is skipped, no python3 with pydantic 2, urllib3 and python-dateutil');

const dir = mkdtempSync(path.join(tmpdir(), 'shopstream-generated-'));
let rt: Runtime;
let server: TestServer;
let shop: Awaited<ReturnType<typeof createTestShop>>;
let conversationId: string;
let docFile: string;

beforeAll(async () => {
  if (!java) return;
  rt = await startTestRuntime({}, 'generated-clients');
  server = await startTestServer(rt, [await startIngestApi(rt), await startQueryApi(rt), await startConversationProjector(rt)]);
  shop = await createTestShop(rt);
  conversationId = randomUUID();
  await rt.bus.publish(rt.topics.conversations, [
    conversationsTopic.record(conversationUpserted(shop.shopId, { id: conversationId, created_at: new Date(Date.now() - 60_000).toISOString() })),
  ]);
  await waitFor(async () => (await rt.db.query(sql`SELECT count(*)::int AS n FROM conversations WHERE shop_id = ${shop.shopId}`))[0].n === 1, {
    message: 'the conversation projected',
    timeoutMs: 60_000,
  });
  docFile = path.join(dir, 'openapi.json');
  writeFileSync(docFile, await (await fetch(`${server.baseUrl}/openapi.json`)).text());
}, 240_000);
afterAll(async () => {
  await server?.stop();
  await rt?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function generate(version: string, generator: string): Promise<string> {
  const jar = await ensureOpenApiGenerator(version);
  const out = path.join(dir, `${generator}-${version}`);
  await run('java', ['-jar', jar, 'generate', '-i', docFile, '-g', generator, '-o', out], { timeout: 300_000, maxBuffer: 64 * 1024 * 1024 });
  return out;
}

/** What each client prints: the activity id it was answered, the ids of the export page it read. */
const expected = () => ({ activityId: expect.stringMatching(/^[0-9a-f-]{36}$/), conversations: [conversationId] });

describe.skipIf(!java).each(OPENAPI_GENERATOR_VERSIONS)('openapi-generator %s, default options', (version) => {
  it('typescript-fetch: records an event and reads an export page', async () => {
    const out = await generate(version, 'typescript-fetch');
    writeFileSync(
      path.join(out, 'use.ts'),
      `import { Configuration, ConversationsApi, EventsApi } from './index';
declare const process: { env: Record<string, string> };
// No basePath: the generated default is the document's servers[0].
const config = new Configuration({ accessToken: process.env.KEY, apiKey: () => process.env.SHOP });
async function main(): Promise<void> {
  const accepted = await new EventsApi(config).createEvent({
    event: { name: 'Generated', metric: { metricName: 'generated_ts', value: 1, additionalProperties: { source: 'typescript-fetch' } }, remoteId: null },
  });
  const page = await new ConversationsApi(config).exportConversations({ createdAtRange: 'relative:-1d,', limit: 10 });
  console.log(JSON.stringify({ activityId: accepted.activityId, conversations: page.results.map((c) => c.id) }));
}
main().catch((e: { response?: { status: number; text(): Promise<string> } }) =>
  e.response ? e.response.text().then((t) => { console.error(e.response!.status, t); throw e; }) : Promise.reject(e),
);
`,
    );
    const compiled = await run(
      tsc,
      [
        '--strict',
        '--target',
        'es2022',
        '--module',
        'commonjs',
        '--moduleResolution',
        'node10',
        '--lib',
        'es2022,dom',
        '--ignoreDeprecations',
        '5.0',
        '--outDir',
        'js',
        'use.ts',
      ],
      { cwd: out, timeout: 180_000 },
    ).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? 'tsc failed' }));
    expect(compiled.stdout).toBe('');
    writeFileSync(path.join(out, 'js/package.json'), '{ "type": "commonjs" }\n');
    const { stdout } = await run('node', [path.join(out, 'js/use.js')], { env: { ...process.env, KEY: shop.key, SHOP: shop.shopId }, timeout: 60_000 });
    expect(JSON.parse(stdout)).toEqual(expected());
  }, 600_000);

  it.skipIf(!python)(
    'python: records an event and reads an export page',
    async () => {
      const out = await generate(version, 'python');
      writeFileSync(
        path.join(out, 'use.py'),
        `import json, os
import openapi_client
from openapi_client.models.event import Event
from openapi_client.models.metric import Metric

# No host: the generated default is the document's servers[0].
config = openapi_client.Configuration(access_token=os.environ["KEY"], api_key={"shopId": os.environ["SHOP"]})
with openapi_client.ApiClient(config) as client:
    accepted = openapi_client.EventsApi(client).create_event(
        Event(name="Generated", metric=Metric(metric_name="generated_py", value=1, additional_properties={"source": "python"}))
    )
    page = openapi_client.ConversationsApi(client).export_conversations(created_at__range="relative:-1d,", limit=10)
    print(json.dumps({"activityId": str(accepted.activity_id), "conversations": [str(c.id) for c in page.results]}))
`,
      );
      const { stdout } = await run('python3', ['use.py'], {
        cwd: out,
        env: { ...process.env, KEY: shop.key, SHOP: shop.shopId, PYTHONPATH: out, PYTHONDONTWRITEBYTECODE: '1' },
        timeout: 120_000,
      });
      expect(JSON.parse(stdout)).toEqual(expected());
    },
    600_000,
  );
});
