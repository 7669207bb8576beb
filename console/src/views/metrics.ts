/** A queue's metrics history, kept by the server (GET /v1/queues/{q}/metrics): charts of
 * throughput, failures, depth and the oldest waiting age, and wait and run time
 * percentiles over 1 h, 24 h or 7 d (`?range=` in the URL). Drawn with uPlot; the page
 * reads the history again each time the server takes a step (a point per 10 s on 1 h). */
import uPlot from "uplot";
import { api, type MetricsHistory, type MetricsPoint } from "../api";
import { duration, h, num, replace } from "../dom";
import { link, type Ctx } from "../main";
import { empty } from "./common";

const RANGES = ["1h", "24h", "7d"] as const;

type Series = { label: string; value: (p: MetricsPoint, stepS: number) => number | null; color: string; dash?: number[] };

interface Chart { id: string; title: string; unit: string; series: Series[] }

const perSecond = (n: number, stepS: number) => (stepS > 0 ? n / stepS : 0);

const CHARTS: Chart[] = [
  { id: "throughput", title: "Throughput", unit: "jobs/s", series: [
    { label: "completed", value: (p, s) => perSecond(p.completed, s), color: "--ok" },
    { label: "enqueued", value: (p, s) => perSecond(p.enqueued, s), color: "--accent", dash: [6, 4] },
  ] },
  { id: "failures", title: "Failures", unit: "failed attempts/s, %", series: [
    { label: "failed/s", value: (p, s) => perSecond(p.failed, s), color: "--danger" },
    { label: "failure rate %", value: (p) => (p.completed + p.failed ? (100 * p.failed) / (p.completed + p.failed) : null),
      color: "--warn", dash: [6, 4] },
  ] },
  { id: "depth", title: "Depth and oldest waiting", unit: "jobs, s", series: [
    { label: "depth", value: (p) => p.depth, color: "--accent" },
    { label: "active", value: (p) => p.active, color: "--ok", dash: [2, 3] },
    { label: "oldest waiting s", value: (p) => p.oldest_wait_s, color: "--warn", dash: [6, 4] },
  ] },
  { id: "latency", title: "Wait and run time", unit: "s", series: [
    { label: "wait p50", value: (p) => p.wait_p50_s ?? null, color: "--accent" },
    { label: "wait p95", value: (p) => p.wait_p95_s ?? null, color: "--accent", dash: [6, 4] },
    { label: "wait p99", value: (p) => p.wait_p99_s ?? null, color: "--accent", dash: [2, 3] },
    { label: "run p50", value: (p) => p.run_p50_s ?? null, color: "--ok" },
    { label: "run p95", value: (p) => p.run_p95_s ?? null, color: "--ok", dash: [6, 4] },
    { label: "run p99", value: (p) => p.run_p99_s ?? null, color: "--ok", dash: [2, 3] },
  ] },
];

function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

/** The columns uPlot draws: x in seconds, one array per series. */
function columns(history: MetricsHistory, chart: Chart): uPlot.AlignedData {
  const stepS = history.step_ns / 1e9;
  const xs = history.points.map((p) => p.t_ns / 1e9);
  return [xs, ...chart.series.map((s) => history.points.map((p) => s.value(p, stepS)))];
}

function summary(history: MetricsHistory): string {
  const stepS = history.step_ns / 1e9;
  const pts = history.points;
  const done = pts.reduce((n, p) => n + p.completed, 0), failed = pts.reduce((n, p) => n + p.failed, 0);
  const last = pts[pts.length - 1];
  return `${num(done)} completed, ${num(failed)} failed attempts over ${duration(pts.length * stepS * 1e9)}` +
    (last ? `; now ${num(last.depth)} waiting, the oldest for ${last.oldest_wait_s.toFixed(1)} s` : "");
}

export async function metricsPage(ctx: Ctx): Promise<void> {
  const queue = ctx.params.queue;
  const asked = ctx.url.searchParams.get("range") ?? "1h";
  const range = (RANGES as readonly string[]).includes(asked) ? asked : "1h";
  let history = await api.metrics(queue, range);
  const tabs = h("nav", { class: "tabs", "aria-label": "Range" }, RANGES.map((r) =>
    h("a", { href: link(`/queues/${encodeURIComponent(queue)}/metrics?range=${r}`), "aria-current": r === range ? "page" : false }, r)));
  const box = h("div", { class: "charts" });
  const caption = h("p", { class: "muted", "data-testid": "metrics-summary", "aria-live": "polite" });
  replace(ctx.main,
    h("p", { class: "muted" }, h("a", { href: link("/") }, "Queues"), " / ",
      h("a", { href: link(`/queues/${encodeURIComponent(queue)}`) }, queue), " / metrics"),
    h("h1", null, `${queue}: metrics`), tabs, caption, box);
  const plots: uPlot[] = [];
  const draw = () => {
    for (const p of plots) p.destroy();
    plots.length = 0;
    if (!history.enabled) return replace(box, empty("This server keeps no metrics history."));
    if (!history.points.length) {
      caption.textContent = "";
      return replace(box, empty(`No points yet: the server takes one every ${duration(history.step_ns)} on this range.`));
    }
    caption.textContent = summary(history);
    replace(box);
    const width = Math.max(280, Math.min(box.clientWidth || 640, 1400) / (box.clientWidth > 900 ? 2 : 1) - 16);
    for (const c of CHARTS) {
      const figure = h("figure", { class: "panel chart", "data-chart": c.id, "aria-label": `${c.title} (${c.unit})` },
        h("figcaption", null, h("strong", null, c.title), " ", h("span", { class: "muted" }, c.unit)));
      box.appendChild(figure);
      const fg = cssVar("--fg"), line = cssVar("--line");
      const axis = { stroke: fg, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 } };
      plots.push(new uPlot({
        width, height: 200,
        series: [{}, ...c.series.map((s) => ({ label: s.label, stroke: cssVar(s.color), width: 2, dash: s.dash, spanGaps: false,
          value: (_u: uPlot, v: number | null) => (v == null ? "—" : v < 10 ? v.toFixed(3) : num(Math.round(v))) }))],
        axes: [axis, { ...axis, size: 56 }],
        scales: { x: { time: true } },
        legend: { live: true },
      }, columns(history, c), figure));
    }
  };
  draw();
  // The server adds a point per step: read the history again at that pace.
  const timer = setInterval(async () => {
    if (document.hidden) return;
    try {
      history = await api.metrics(queue, range);
      draw();
    } catch { /* the next tick tries again */ }
  }, Math.max(history.step_ns / 1e6, 5_000));
  ctx.onLeave(() => {
    clearInterval(timer);
    for (const p of plots) p.destroy();
  });
}
