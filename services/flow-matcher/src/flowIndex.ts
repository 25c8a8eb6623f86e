import type { Db } from '@shopstream/db';
import { flowVersions } from '@shopstream/flows';
import { flowTriggerSchema, type FlowTrigger } from '@shopstream/contracts';
import { gauge, type Logger } from '@shopstream/telemetry';

const activeFlows = gauge('shopstream_flow_matcher_active_flows', "Active flows in the matcher's in-memory index.");

export interface IndexedFlow {
  id: string;
  shop_id: string;
  trigger: FlowTrigger;
}

/** One state of a flow (008_flow_versions.sql), from valid_from until the next version. */
interface FlowVersion {
  seq: number;
  /** ms since the epoch */
  validFrom: number;
  status: 'active' | 'paused' | 'deleted';
  metricName: string;
  /** null when the stored conditions no longer parse (edited by hand): such a version matches nothing. */
  trigger: FlowTrigger | null;
}

interface IndexedHistory {
  id: string;
  shop_id: string;
  versions: FlowVersion[];
}

const keyOf = (shopId: string, metricName: string) => `${shopId}\u0000${metricName}`;

/**
 * A transaction that writes a flow stamps its version with its start time but is seen only once it
 * committed: a load treats versions as complete up to this long before its own time.
 */
const COMMIT_MARGIN_MS = 1_000;

/**
 * Every flow's history (flow_versions) by (shop_id, metric_name), in memory. A metric event is matched
 * against the version of each flow in effect when it was recorded, so the live matcher and a rebuild decide
 * alike whatever happened to the flow since (paused, edited, deleted). Reloaded every refreshMs, and before a
 * batch holding a metric event recorded after the last load (`upTo`), so a flow created or changed a moment
 * before an event applies to it however late the matcher reads it.
 */
export class FlowIndex {
  private byKey = new Map<string, IndexedHistory[]>();
  private parsed = new Map<number, FlowTrigger | null>();
  private timer: NodeJS.Timeout | null = null;
  private loaded = false;
  /** Versions that took effect up to this time (ms) are all in the index. */
  private completeUpTo = -Infinity;
  /** max(seq)/count(*) of flow_versions when the index was loaded. */
  private stamp = '';

  constructor(
    private readonly db: Db,
    private readonly logger: Logger,
  ) {}

  /** The flows of the shop whose version in effect at `recordedAt` (RFC 3339) is active on this metric. */
  candidates(shopId: string, metricName: string, recordedAt: string): IndexedFlow[] {
    const histories = this.byKey.get(keyOf(shopId, metricName));
    if (!histories) return [];
    const at = Date.parse(recordedAt);
    const out: IndexedFlow[] = [];
    for (const h of histories) {
      let current: FlowVersion | undefined;
      for (const v of h.versions) {
        if (v.validFrom > at) break;
        current = v;
      }
      if (current && current.status === 'active' && current.metricName === metricName && current.trigger) {
        out.push({ id: h.id, shop_id: h.shop_id, trigger: current.trigger });
      }
    }
    return out;
  }

  get ready(): boolean {
    return this.loaded;
  }

  /** Reloads first when a metric event was recorded after what the index holds for certain. */
  async upTo(recordedAt: string[]): Promise<void> {
    let latest = -Infinity;
    for (const r of recordedAt) latest = Math.max(latest, Date.parse(r));
    if (latest >= this.completeUpTo) await this.refresh();
  }

  async refresh(): Promise<void> {
    // The same stamp means the same rows (flow_versions only grows): the index stands and only its time moves
    // on. One small query every refreshMs instead of the whole table (the idle process's most frequent work).
    const { now, stamp } = await flowVersions.stamp(this.db);
    if (this.loaded && stamp === this.stamp) {
      this.completeUpTo = now - COMMIT_MARGIN_MS;
      return;
    }
    const { versions } = await flowVersions.all(this.db);
    const byFlow = new Map<string, IndexedHistory>();
    for (const r of versions) {
      let trigger = this.parsed.get(r.seq);
      if (trigger === undefined) {
        // Flows are validated on the way in; a version that does not parse (edited by hand) matches nothing.
        const t = flowTriggerSchema.safeParse({
          metric_name: r.metric_name,
          property_conditions: r.property_conditions,
          contact_conditions: r.contact_conditions,
        });
        if (!t.success) this.logger.warn({ flow_id: r.flow_id, shop_id: r.shop_id, seq: r.seq }, 'flow trigger does not parse; that version matches nothing');
        trigger = t.success ? t.data : null;
        this.parsed.set(r.seq, trigger);
      }
      const k = `${r.shop_id}/${r.flow_id}`;
      let h = byFlow.get(k);
      if (!h) byFlow.set(k, (h = { id: r.flow_id, shop_id: r.shop_id, versions: [] }));
      h.versions.push({ seq: r.seq, validFrom: r.valid_from, status: r.status, metricName: r.metric_name, trigger });
    }
    const next = new Map<string, IndexedHistory[]>();
    let active = 0;
    for (const h of byFlow.values()) {
      // Under every metric the flow ever had: an event is matched against the version of its own time.
      for (const metric of new Set(h.versions.map((v) => v.metricName))) {
        const k = keyOf(h.shop_id, metric);
        const list = next.get(k) ?? [];
        list.push(h);
        next.set(k, list);
      }
      if (h.versions[h.versions.length - 1].status === 'active') active++;
    }
    this.byKey = next;
    // The rows read include every row the stamp counted (read after it): a later change shows as a new stamp.
    this.stamp = stamp;
    this.completeUpTo = now - COMMIT_MARGIN_MS;
    this.loaded = true;
    activeFlows.set(active);
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
