import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { envSchema } from '@shopstream/config';
import { hostFigures, type HostFigures } from '@shopstream/testkit/measurementRun';
import type { Figures, Options } from './types.js';

export interface Machine extends HostFigures {
  platform: string;
}

export function machine(): Machine {
  return {
    ...hostFigures(),
    platform: `${os.platform()} ${os.release()}`,
  };
}

const fmt = (v: number | string) =>
  typeof v === 'string' ? v : Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', { maximumFractionDigits: 2 });

/** The rows as the Markdown table of faults/README.md: measure, value, goal, met. */
export function tableOf(f: Figures): string {
  const head = ['measure', 'value', 'goal', 'met'];
  const lines = f.rows.map((x) => [
    x.measure,
    x.unit ? `${fmt(x.value)} ${x.unit}` : fmt(x.value),
    x.goal?.text ?? '',
    x.goal ? (x.goal.met ? 'yes' : 'NO') : '',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const row = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  return [row(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...lines.map(row)].join('\n');
}

export function writeResult(
  dir: string,
  scenario: string,
  f: Figures,
  meta: { machine: Machine; options: Options; startedAt: Date; loadAvgBefore: number[] },
): string {
  mkdirSync(dir, { recursive: true });
  // A --quick run is a look, not the figures of record: it never overwrites a full run's file.
  const file = path.join(dir, `${scenario}${meta.options.quick ? '.quick' : ''}.json`);
  const body = {
    scenario,
    date: meta.startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    machine: meta.machine,
    // The services' Kafka adapter (KAFKA_CLIENT as they read it, default included): the figures differ by it.
    versions: { node: process.version, ...f.versions, 'Kafka client': envSchema.shape.KAFKA_CLIENT.parse(process.env.KAFKA_CLIENT || undefined) },
    loadAvgBefore: meta.loadAvgBefore,
    options: meta.options,
    goalsMet: f.rows.every((r) => !r.goal || r.goal.met),
    rows: f.rows,
    notes: f.notes,
    details: f.details,
  };
  writeFileSync(file, JSON.stringify(body, null, 2) + '\n');
  return file;
}
