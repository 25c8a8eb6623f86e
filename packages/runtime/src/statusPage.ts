/**
 * GET /status: one HTML document with its style and script inline (no build step, nothing fetched but
 * status.json, so it works offline and behind any proxy path). The script redraws the page in place from
 * status.json every 5 s; text goes in through textContent only, never as HTML.
 */
export const STATUS_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Shopstream status</title>
<style>
  :root { --fg: #1d232b; --muted: #66707c; --line: #dde2e8; --ok: #1f8a4c; --warn: #b7791f; --bad: #c53030; --bg: #f6f8fa; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
  header { display: flex; align-items: baseline; gap: 16px; padding: 14px 24px; background: #fff; border-bottom: 1px solid var(--line); }
  header h1 { font-size: 18px; margin: 0; }
  header .meta { color: var(--muted); }
  main { padding: 18px 24px; display: grid; gap: 18px; max-width: 1200px; }
  section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; }
  h2 { font-size: 15px; margin: 0 0 10px; }
  .cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 12px; }
  .card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
  .card h3 { margin: 0 0 6px; font-size: 14px; display: flex; justify-content: space-between; }
  .card dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 12px; margin: 0; }
  .card dt { color: var(--muted); }
  .card dd { margin: 0; font-variant-numeric: tabular-nums; }
  .pill { font-size: 12px; padding: 1px 8px; border-radius: 10px; color: #fff; }
  .ok { background: var(--ok); } .warn { background: var(--warn); } .bad { background: var(--bad); }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); }
  th { color: var(--muted); font-weight: 600; }
  .legend { display: flex; gap: 14px; margin-top: 6px; color: var(--muted); }
  .legend span::before { content: ""; display: inline-block; width: 10px; height: 10px; margin-right: 5px; border-radius: 2px; background: var(--c); }
  #error { color: var(--bad); }
  svg { width: 100%; height: 160px; display: block; }
</style>
</head>
<body>
<header><h1>Shopstream status</h1><span class="meta" id="meta">loading…</span><span id="error"></span></header>
<main>
  <section><h2>Projections</h2><div class="cards" id="projections"></div></section>
  <section><h2>Ingest answers per second, by status</h2><svg id="chart" viewBox="0 0 600 160" preserveAspectRatio="none" role="img" aria-label="ingest answers per second"></svg><div class="legend" id="legend"></div><table id="ingest"></table></section>
  <section><h2>Consumers in this process</h2><table id="consumers"></table></section>
</main>
<script>
"use strict";
const REFRESH_MS = 5000;
const token = new URLSearchParams(location.search).get("token");
const url = "status.json" + (token ? "?token=" + encodeURIComponent(token) : "");
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const e = tag === "svg" || ["path", "line", "text", "rect", "polyline"].includes(tag) ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
const num = (n) => Number(n).toLocaleString("en-US");
function ago(iso) {
  if (!iso) return "never";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  const text = s < 60 ? s + " s" : s < 3600 ? Math.round(s / 60) + " min" : s < 86400 ? Math.round(s / 3600) + " h" : Math.round(s / 86400) + " d";
  return text + " ago (" + iso.replace("T", " ").replace(/\\.\\d+Z$/, "Z") + ")";
}
function rebuildText(r) {
  if (!r) return "never rebuilt";
  if (r.running) return "running since " + ago(r.startedAt) + ", " + num(r.applied) + " records applied";
  return r.status + (r.finishedAt ? " " + ago(r.finishedAt) : "") + ", " + num(r.applied) + " records";
}
function projectionCard(p) {
  const state = p.rebuild && p.rebuild.running ? ["rebuilding", "warn"] : p.lag > 1000 ? ["lagging", "warn"] : p.deadLetters > p.deadLettersRedriven ? ["dead letters", "bad"] : ["ok", "ok"];
  const dl = el("dl", {},
    el("dt", {}, "group"), el("dd", {}, p.group),
    el("dt", {}, "reads"), el("dd", {}, p.topic),
    el("dt", {}, "lag"), el("dd", { "data-field": "lag" }, num(p.lag) + " records"),
    el("dt", {}, "last applied"), el("dd", {}, ago(p.lastAppliedAt)),
    el("dt", {}, "dead letters"), el("dd", {}, num(p.deadLetters) + (p.deadLettersRedriven ? " (" + num(p.deadLettersRedriven) + " redriven)" : "")),
    el("dt", {}, "last rebuild"), el("dd", {}, rebuildText(p.rebuild)));
  return el("div", { class: "card", "data-projection": p.projection }, el("h3", {}, p.projection + " v" + p.version, el("span", { class: "pill " + state[1] }, state[0])), dl);
}
const COLORS = { "2xx": "#1f8a4c", "4xx": "#b7791f", "429": "#805ad5", "499": "#718096", "503": "#c53030", "5xx": "#e53e3e" };
const classOf = (status) => (status === "429" || status === "499" || status === "503" ? status : status[0] + "xx");
function drawIngest(ingest) {
  const series = {};
  ingest.buckets.forEach((b, i) => {
    for (const [status, n] of Object.entries(b.counts)) {
      const c = classOf(status);
      (series[c] ||= new Array(ingest.buckets.length).fill(0))[i] += n / b.seconds;
    }
  });
  const max = Math.max(1, ...Object.values(series).flat());
  const w = 600, h = 150, step = w / Math.max(1, ingest.buckets.length - 1);
  const svg = $("chart");
  svg.replaceChildren(el("line", { x1: 0, y1: h, x2: w, y2: h, stroke: "#dde2e8" }), el("text", { x: 4, y: 12, fill: "#66707c", "font-size": 11 }, num(Math.round(max)) + "/s"));
  for (const [c, values] of Object.entries(series)) {
    const points = values.map((v, i) => (i * step).toFixed(1) + "," + (h - (v / max) * (h - 16)).toFixed(1)).join(" ");
    svg.append(el("polyline", { points, fill: "none", stroke: COLORS[c] || "#333", "stroke-width": 2, "data-class": c }));
  }
  $("legend").replaceChildren(...Object.keys(series).map((c) => el("span", { style: "--c:" + (COLORS[c] || "#333") }, c)));
  const totals = {};
  for (const b of ingest.buckets) for (const [s, n] of Object.entries(b.counts)) totals[s] = (totals[s] || 0) + n;
  const minutes = Math.round((ingest.buckets.length * ingest.bucketSeconds) / 60);
  // The last whole slice: the current one is still filling.
  const last = ingest.buckets[Math.max(0, ingest.buckets.length - 2)];
  const rows = Object.entries(totals).sort().map(([s, n]) => el("tr", { "data-status": s }, el("td", {}, s), el("td", {}, num(n)), el("td", {}, ((last.counts[s] || 0) / last.seconds).toFixed(1) + "/s")));
  $("ingest").replaceChildren(el("tr", {}, el("th", {}, "status"), el("th", {}, "answers, last " + minutes + " minutes"), el("th", {}, "per second, last " + last.seconds + " s")), ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 3 }, "no ingest answers in this process in the last " + minutes + " minutes"))]));
}
function drawConsumers(consumers) {
  const rows = consumers.map((c) => el("tr", {}, el("td", {}, c.group), el("td", {}, el("span", { class: "pill " + (c.up ? "ok" : "bad") }, c.up ? "up" : "down")), el("td", {}, ago(c.since))));
  $("consumers").replaceChildren(el("tr", {}, el("th", {}, "group"), el("th", {}, "state"), el("th", {}, "since")), ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 3 }, "no consumer runs in this process"))]));
}
async function refresh() {
  try {
    const res = await fetch(url, { cache: "no-store" });
    if (!res.ok) throw new Error("status.json answered " + res.status);
    const s = await res.json();
    $("meta").textContent = s.service + " · " + new Date(s.generatedAt).toLocaleTimeString() + " · refreshes every " + REFRESH_MS / 1000 + " s";
    $("error").textContent = s.projectionsError || "";
    if (s.projections) $("projections").replaceChildren(...s.projections.map(projectionCard));
    drawIngest(s.ingest);
    drawConsumers(s.consumers);
    document.body.dataset.loaded = "true";
  } catch (e) {
    $("error").textContent = String(e.message || e);
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}
refresh();
</script>
</body>
</html>
`;
