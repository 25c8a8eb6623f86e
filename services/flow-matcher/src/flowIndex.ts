import { sql, type Db } from '@shopstream/db';
import { flowTriggerSchema, type FlowTrigger } from '@shopstream/contracts';
import { gauge, type Logger } from '@shopstream/telemetry';

const activeFlows = gauge('shopstream_flow_matcher_active_flows', 'Active flows in the matcher\'s in-memory index.');

export interface IndexedFlow {
  id: string;
  shop_id: string;
  /** ms since the epoch: the flow matches metric events recorded from then on. */
  created_at: number;
  trigger: FlowTrigger;
}

const keyOf = (shopId: string, metricName: string) => `${shopId}\u0000${metricName}`;

/**
 * The active flows of every shop by (shop_id, metric_name), in memory, reloaded every refreshMs and whenever
 * a batch holds a metric event recorded after the last load (`upTo`): a metric event finds its candidate
 * flows with one map look-up, flow changes arrive without a restart, and a flow created at T matches every
 * metric event recorded from T on, however late the matcher reads it, in the live run and in a rebuild alike.
 */
export class FlowIndex {
  private byKey = new Map<string, IndexedFlow[]>();
  private timer: NodeJS.Timeout | null = null;
  private loaded = false;
  /** The database's clock when the index was last read: flows created up to then are in it. */
  private loadedAt = -Infinity;

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
  ) {}

  /** The active flows of the shop for the metric that exist at `recordedAt` (RFC 3339). */
  candidates(shopId: string, metricName: string, recordedAt: string): IndexedFlow[] {
    const all = this.byKey.get(keyOf(shopId, metricName));
    if (!all) return [];
    const at = Date.parse(recordedAt);
    return all.filter((f) => f.created_at <= at);
  }

  /** Reloads first when a metric event was recorded after the last load, so a flow created meanwhile is seen. */
  async upTo(recordedAt: string[]): Promise<void> {
    let latest = -Infinity;
    for (const r of recordedAt) latest = Math.max(latest, Date.parse(r));
    if (latest >= this.loadedAt) await this.refresh();
  }

  get ready(): boolean {
    return this.loaded;
  }

  async refresh(): Promise<void> {
    const rows = await this.db.query(sql`
      SELECT shop_id, id, metric_name, property_conditions, contact_conditions, created_at, now() AS loaded_at FROM flows
      WHERE status = 'active' AND deleted_at IS NULL`);
    const loadedAt = rows.length > 0 ? new Date(rows[0].loaded_at).getTime() : new Date((await this.db.query(sql`SELECT now() AS t`))[0].t).getTime();
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
      list.push({ id: r.id, shop_id: r.shop_id, created_at: new Date(r.created_at).getTime(), trigger: t.data });
      next.set(k, list);
      n++;
    }
    this.byKey = next;
    this.loadedAt = loadedAt;
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
