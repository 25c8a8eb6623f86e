import { fieldErrors, flowCreateSchema, isUuid, type Flow, type FlowCreate } from '@shopstream/contracts';
import type { Db } from '@shopstream/db';
import { flowStore } from '@shopstream/flows';
import { parse, table, UsageError, type Command, type Subcommand } from '../args.js';
import { withDb } from '../context.js';

const note = `Running matchers pick a change up within FLOW_REFRESH_MS (default 2 s). Works on DATABASE_URL, or on the
embedded database in DATA_DIR. The same operations exist over HTTP under /v2026-04/flows/.`;

function shopOf(v: string | undefined): string {
  const shop = (v ?? '').trim().toLowerCase();
  if (!isUuid(shop)) throw new UsageError(shop ? `"${shop}" is not a shop id (a uuid).` : 'Give --shop <uuid>.');
  return shop;
}

function parseJson(what: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError(`${what} is not JSON: ${text}`);
  }
}

function parseCreate(args: string[]): { shop: string; flow: FlowCreate } {
  const { values } = parse(args, {
    shop: { type: 'string' },
    name: { type: 'string' },
    metric: { type: 'string' },
    where: { type: 'string', multiple: true },
    'contact-where': { type: 'string', multiple: true },
    'trigger-json': { type: 'string' },
    paused: { type: 'boolean' },
  });
  const shop = shopOf(values.shop);
  const given = values['trigger-json'];
  if (given !== undefined && (values.metric || values.where || values['contact-where'])) {
    throw new UsageError('Give either --trigger-json or --metric with --where/--contact-where, not both.');
  }
  const trigger =
    given !== undefined
      ? parseJson('--trigger-json', given)
      : {
          metric_name: values.metric ?? '',
          property_conditions: (values.where ?? []).map((w) => parseJson('--where', w)),
          contact_conditions: (values['contact-where'] ?? []).map((w) => parseJson('--contact-where', w)),
        };
  const parsed = flowCreateSchema.safeParse({ name: values.name ?? '', status: values.paused ? 'paused' : 'active', trigger });
  if (!parsed.success) {
    const lines = Object.entries(fieldErrors(parsed.error)).map(([k, m]) => `  ${k}: ${m}`);
    throw new UsageError(`The flow is not valid:\n${lines.join('\n')}`);
  }
  return { shop, flow: parsed.data };
}

function parseTarget(args: string[]): { id: string; shop: string } {
  const { values, positionals } = parse(args, { shop: { type: 'string' } }, true);
  if (positionals.length !== 1 || !isUuid(positionals[0])) throw new UsageError('Give exactly one flow id (a uuid, as `flows list` shows).');
  return { id: positionals[0].toLowerCase(), shop: shopOf(values.shop) };
}

/** pause, resume, delete: one flow of one shop. */
const change = (sub: 'pause' | 'resume' | 'delete', usage: string): Subcommand => ({
  usage,
  async run(args) {
    const { id, shop } = parseTarget(args);
    return withFlowsDb(async (db) => {
      const found =
        sub === 'delete'
          ? await flowStore.remove(db, shop, id)
          : (await flowStore.update(db, shop, id, { status: sub === 'pause' ? 'paused' : 'active' })) !== null;
      if (!found) {
        console.error(`No flow ${id} in shop ${shop}.`);
        return 1;
      }
      console.log(`${sub === 'delete' ? 'Deleted' : sub === 'pause' ? 'Paused' : 'Resumed'} flow ${id}. Running matchers follow within FLOW_REFRESH_MS.`);
      return 0;
    });
  },
});

export const command: Command = {
  note,
  subcommands: {
    create: {
      usage: `  pnpm cli flows create --shop <uuid> --name <text> --metric <metric_name>
                        [--where '<condition json>']... [--contact-where '<condition json>']... [--paused]
  pnpm cli flows create --shop <uuid> --name <text> --trigger-json '<trigger json>' [--paused]
      Creates an Activity Event flow; prints its id. A condition is {"field","op","value"}: --where tests
      metric.additional_properties (dotted paths), --contact-where the contact's email, phone, remote_id,
      name or id. Operators: eq neq contains not_contains starts_with ends_with gt gte lt lte in not_in
      exists not_exists (no value for exists/not_exists, an array for in/not_in). All must hold.
      Example: --where '{"field":"total","op":"gte","value":100}' --contact-where '{"field":"email","op":"ends_with","value":"@example.com"}'`,
      async run(args) {
        const { shop, flow } = parseCreate(args);
        return withFlowsDb(async (db) => {
          const { id } = await flowStore.create(db, shop, flow);
          console.log(`Created ${flow.status} flow "${flow.name}" on metric ${flow.trigger.metric_name} for shop ${shop}. Its id:`);
          console.log(id);
          return 0;
        });
      },
    },
    list: {
      usage: '  pnpm cli flows list --shop <uuid>',
      async run(args) {
        const { values } = parse(args, { shop: { type: 'string' } });
        const shop = shopOf(values.shop);
        return withFlowsDb(async (db) => {
          const rows = await allFlows(db, shop);
          if (rows.length === 0) {
            console.log('No flows in this shop yet. Create one with `pnpm cli flows create`.');
            return 0;
          }
          console.log(
            table(
              ['ID', 'STATUS', 'METRIC', 'CONDITIONS', 'NAME'],
              rows.map((r) => [
                r.id,
                r.status,
                r.trigger.metric_name,
                String(r.trigger.property_conditions.length + r.trigger.contact_conditions.length),
                r.name,
              ]),
            ),
          );
          return 0;
        });
      },
    },
    pause: change('pause', '  pnpm cli flows pause <id> --shop <uuid>'),
    resume: change('resume', '  pnpm cli flows resume <id> --shop <uuid>'),
    delete: change('delete', '  pnpm cli flows delete <id> --shop <uuid>'),
  },
};

/** Every flow of the shop, newest first, in pages so a shop with many flows is never one huge result. */
async function allFlows(db: Db, shop: string): Promise<Flow[]> {
  const take = 500;
  const flows: Flow[] = [];
  for (let after: [string, string] | null = null; ;) {
    const page = await flowStore.page(db, shop, { after, direction: 'next', take });
    flows.push(...page);
    if (page.length < take) return flows;
    after = page[page.length - 1].position;
  }
}

/** Only the database: flows are rows the matchers reload on their own. */
function withFlowsDb(fn: (db: Db) => Promise<number>): Promise<number> {
  return withDb('stop it and run this command, or use the HTTP API (/v2026-04/flows/).', fn);
}
