/** The queue list: counts by state, paused, depth and the oldest waiting job's age per
 * queue, filtered by name (`?q=`, kept in the URL). Live: one event stream for the queues
 * shown (`/v1/events`); an event reads the counts again. */
import { api, type Counts, type QueueStats, type QueueSummary } from "../api";
import { duration, h, num, replace } from "../dom";
import { link, type Ctx } from "../main";
import { queuesStream, type EventStream } from "../sse";
import { empty, liveBadge, removeView, rowKeys, savedViews, throttle } from "./common";

export function depth(c: Counts): number {
  return c.waiting + c.prioritized + c.delayed;
}

export async function queuesPage(ctx: Ctx): Promise<void> {
  let filter = ctx.url.searchParams.get("q") ?? "";
  // The counts first; the oldest-waiting ages (one read over every queue's indexes) fill
  // in when they come, so a namespace of many queues shows at once.
  let list = await api.queues();
  const statsOf = new Map<string, QueueStats>();
  const loadStats = async () => {
    try {
      const stats = await api.queueStats();
      statsOf.clear();
      for (const s of stats.queues) statsOf.set(s.name, s);
      draw();
    } catch { /* the ages stay as they were */ }
  };
  const live = liveBadge();
  const input = h("input", { type: "search", value: filter, "data-filter": true, id: "queue-filter",
    placeholder: "name contains…", "aria-label": "Filter queues by name" });
  // Filtering is local (every queue is loaded); the URL keeps it for deep links.
  input.addEventListener("input", () => {
    filter = input.value;
    const url = new URL(location.href);
    if (filter) url.searchParams.set("q", filter);
    else url.searchParams.delete("q");
    history.replaceState(null, "", url.pathname + url.search);
    draw();
  });
  const tbody = h("tbody");
  const shown = () => list.queues.filter((q) => q.name.includes(filter)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  function row(q: QueueSummary) {
    const c = q.counts, s = statsOf.get(q.name);
    return h("tr", { "data-queue": q.name },
      h("td", null, h("a", { href: link(`/queues/${encodeURIComponent(q.name)}`) }, q.name), " ",
        c.paused && h("span", { class: "badge paused" }, "paused")),
      h("td", { class: "num", "data-count": "waiting" }, num(c.waiting + c.prioritized)),
      h("td", { class: "num hide-sm" }, num(c.delayed)),
      h("td", { class: "num", "data-count": "active" }, num(c.active)),
      h("td", { class: "num hide-sm", "data-count": "completed" }, num(c.completed)),
      h("td", { class: "num", "data-count": "failed" }, num(c.failed)),
      h("td", { class: "num hide-sm" }, num(c.dead_lettered)),
      h("td", { class: "num", "data-count": "depth" }, num(depth(c))),
      h("td", { class: "num hide-sm" }, s && s.oldest_waiting_age_ns ? duration(s.oldest_waiting_age_ns) : "—"),
    );
  }

  // A screenful of rows at once, the rest a chunk per frame: a thousand queues show
  // without holding the page.
  const FIRST_ROWS = 100, CHUNK_ROWS = 250;
  let drawing = 0;
  function draw() {
    const queues = shown();
    const generation = ++drawing;
    replace(tbody, queues.slice(0, FIRST_ROWS).map(row));
    const more = (from: number) => {
      if (generation !== drawing || from >= queues.length) return;
      tbody.append(...queues.slice(from, from + CHUNK_ROWS).map(row));
      requestAnimationFrame(() => more(from + CHUNK_ROWS));
    };
    requestAnimationFrame(() => more(FIRST_ROWS));
    replace(body, queues.length ? table : list.queues.length
      ? empty(`No queue name contains “${filter}”.`)
      : empty("No queues yet. A queue appears when its first job is enqueued."));
  }

  const table = h("div", { class: "wrap" }, h("table", null,
    h("caption", { class: "muted", style: "text-align:left" }, "Counts by state; depth = waiting + delayed"),
    h("thead", null, h("tr", null,
      h("th", { scope: "col" }, "Queue"), h("th", { scope: "col", class: "num" }, "Waiting"),
      h("th", { scope: "col", class: "num hide-sm" }, "Delayed"), h("th", { scope: "col", class: "num" }, "Active"),
      h("th", { scope: "col", class: "num hide-sm" }, "Completed"), h("th", { scope: "col", class: "num" }, "Failed"),
      h("th", { scope: "col", class: "num hide-sm" }, "Dead-lettered"), h("th", { scope: "col", class: "num" }, "Depth"),
      h("th", { scope: "col", class: "num hide-sm" }, "Oldest waiting"))),
    tbody));
  const body = h("div");
  const views = h("div");
  const drawViews = () => {
    const saved = savedViews();
    replace(views, saved.length > 0 && h("nav", { class: "row", "aria-label": "Saved views" }, h("span", { class: "muted" }, "Saved views:"),
      saved.map((v) => h("span", { class: "chip" }, h("a", { href: v.url }, v.name),
        h("button", { type: "button", class: "link", "aria-label": `Forget view ${v.name}`, on: { click: () => { removeView(v.name); drawViews(); } } }, "×")))));
  };
  drawViews();
  replace(ctx.main, h("h1", null, "Queues ", h("span", { class: "count" }, `(${list.queues.length})`), live.el),
    views, h("div", { class: "row" }, input), body);
  draw();
  performance.mark("loam:queues-drawn"); // the bench reads it: navigation start to the list shown
  rowKeys(ctx, tbody);
  void loadStats();

  const refreshStats = throttle(() => void loadStats(), 5000);
  const refresh = throttle(async () => {
    try {
      list = await api.queues();
      draw();
      refreshStats();
    } catch { /* the next event tries again */ }
  }, 500);
  // Live for the first queues shown (one stream carries at most MAX_QUEUES of them); any
  // event re-reads every count, so the others move too.
  let stream: EventStream | null = null;
  const watched = shown().map((q) => q.name);
  if (watched.length) stream = queuesStream(watched, (e) => { if (e.type !== "snapshot") refresh(); }, live.set);
  ctx.onLeave(() => stream?.stop());
}
