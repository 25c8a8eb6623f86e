import { sql, type Db } from '@shopstream/db';
import { flowTriggerSchema, type FlowTrigger } from '@shopstream/contracts';
import { gauge, type Logger } from '@shopstream/telemetry';

const activeFlows = gauge('shopstream_flow_matcher_active_flows', 'Active flows in the matcher\'s in-memory index.');

export interface IndexedFlow {
  id: string;
  shop_id: string;
  trigger: FlowTrigger;
}

const keyOf = (shopId: string, metricName: string) => `${shopId}\u0000${metricName}`;

/**
 * The active flows of every shop by (shop_id, metric_name), in memory, reloaded every refreshMs: a metric
 * event finds its candidate flows with one map look-up, and flow changes arrive without a restart.
 */
export class FlowIndex {
  private byKey = new Map<string, IndexedFlow[]>();
  private timer: NodeJS.Timeout | null = null;
  private loaded = false;

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
  ) {}

  candidates(shopId: string, metricName: string): IndexedFlow[] {
    return this.byKey.get(keyOf(shopId, metricName)) ?? [];
  }

  get ready(): boolean {
    return this.loaded;
  }

  async refresh(): Promise<void> {
    const rows = await this.db.query(sql`
      SELECT shop_id, id, metric_name, property_conditions, contact_conditions FROM flows
      WHERE status = 'active' AND deleted_at IS NULL`);
    const next = new Map<string, IndexedFlow[]>();
    let n = 0;
    for (const r of rows) {
      // Flows are validated on the way in; a row that no longer parses (edited by hand) is skipped, not fatal.
      const t = flowTriggerSchema.safeParse({ metric_name: r.metric_name, property_conditions: r.property_conditions, contact_conditions: r.contact_conditions });
      if (!t.success) {
        this.logger.warn({ flow_id: r.id, shop_id: r.shop_id }, 'flow trigger does not parse; skipped');
        continue;
      }
      const k = keyOf(r.shop_id, r.metric_name);
      const list = next.get(k) ?? [];
      list.push({ id: r.id, shop_id: r.shop_id, trigger: t.data });
      next.set(k, list);
      n++;
    }
    this.byKey = next;
    this.loaded = true;
    activeFlows.set(n);
  }

  start(refreshMs: number): void {
    this.timer = setInterval(() => {
      this.refresh().catch((e) => this.logger.warn({ err: e }, 'flow index refresh failed; keeping the previous one'));
    }, refreshMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
