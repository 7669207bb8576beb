/** One queue: its counts as tabs by state, the jobs of the chosen state a page at a time
 * (cursor paging: `?state=failed&name=send&cursor=…`, every filter in the URL), the
 * queue's actions (pause/resume, drain, clean by state and age, redrive its dead letters)
 * and each job's (retry, promote, cancel, remove). Live: the queue's event stream moves
 * the counts and, on the first page, the list. */
import { api, ApiError, download, STATES, type Batch, type Counts, type Job, type QueueDetail, type StateName } from "../api";
import { ago, h, num, replace, toast } from "../dom";
import { can, canAdmin, link, setQuery, type Ctx } from "../main";
import { queueStream } from "../sse";
import { actionButton, empty, liveBadge, rowKeys, saveView, throttle, watchBatch } from "./common";

const COUNT_FIELD: Record<StateName, keyof Counts> = {
  waiting: "waiting", prioritized: "prioritized", delayed: "delayed", active: "active",
  "waiting-children": "waiting_children", completed: "completed", failed: "failed",
  "dead-lettered": "dead_lettered", canceled: "canceled",
};
const PAGE_SIZE = 50;
const WORKER_LIVE_NS = 5 * 60e9; // a worker seen this recently counts as live
const LEASE_WARN_NS = 10e9; // an active job whose lease ends sooner is flagged
const SEARCH_FIELDS = ["any", "id", "name", "payload", "result", "error"];
const RETRYABLE = new Set<StateName>(["failed", "completed", "dead-lettered", "canceled"]);
const CANCELABLE = new Set<StateName>(["waiting", "prioritized", "delayed", "waiting-children"]);

export function jobActions(queue: string, job: Job, done: () => void): HTMLElement[] {
  if (!canAdmin()) return [];
  const id = job.id, out: HTMLElement[] = [];
  const label = (verb: string) => `${verb} job ${id}`;
  if (RETRYABLE.has(job.state))
    out.push(actionButton("Retry", async () => (await api.jobAction(queue, id, "retry"), `Job ${id} retried`),
      { done, ariaLabel: label("Retry") }));
  if (job.state === "delayed")
    out.push(actionButton("Promote", async () => (await api.jobAction(queue, id, "promote"), `Job ${id} promoted`),
      { done, ariaLabel: label("Promote") }));
  if (CANCELABLE.has(job.state))
    out.push(actionButton("Cancel", async () => (await api.jobAction(queue, id, "cancel"), `Job ${id} canceled`),
      { done, ariaLabel: label("Cancel") }));
  if (job.state !== "active")
    out.push(actionButton("Remove", async () => (await api.jobAction(queue, id, "remove"), `Job ${id} removed`),
      { done, danger: true, confirmText: `Remove job ${id}? This cannot be undone.`, ariaLabel: label("Remove") }));
  return out;
}

function queueActions(queue: string, detail: QueueDetail, reload: () => void): HTMLElement {
  if (!canAdmin()) return h("p", { class: "muted" }, "Read only: this token cannot change the queue.");
  const paused = detail.counts.paused;
  const affected = (verb: string) => (r: { affected: number }) => `${verb}: ${num(r.affected)} jobs`;
  const cleanState = h("select", { id: "clean-state", "aria-label": "State to clean" },
    ["completed", "failed", "dead-lettered", "canceled", "waiting", "delayed", "prioritized"].map((s) => h("option", { value: s }, s)));
  const cleanAge = h("input", { id: "clean-age", type: "number", min: "0", value: "0", style: "width:6rem",
    "aria-label": "Only jobs older than this many minutes" });
  return h("div", { class: "row", role: "group", "aria-label": "Queue actions" },
    actionButton(paused ? "Resume" : "Pause", async () => {
      await api.queueAction(queue, paused ? "resume" : "pause");
      return `Queue ${queue} ${paused ? "resumed" : "paused"}`;
    }, { done: reload }),
    actionButton("Drain", async () => affected("Drained")(await api.queueAction(queue, "drain", { delayed: false })),
      { danger: true, confirmText: `Remove every waiting job of ${queue}?`, done: reload }),
    h("span", { class: "row", style: "margin:0" },
      h("label", { for: "clean-state" }, "Clean"), cleanState,
      h("label", { for: "clean-age" }, "older than (min)"), cleanAge,
      actionButton("Clean", async () => affected("Cleaned")(await api.queueAction(queue, "clean", {
        state: cleanState.value, grace_ns: Math.max(0, Number(cleanAge.value) || 0) * 60e9,
      })), { danger: true, confirmText: `Remove the ${cleanState.value} jobs of ${queue} older than ${cleanAge.value} min?`, done: reload })),
    h("button", { type: "button", on: { click: () => void showRedrivePreview(queue, reload) } }, "Redrive dead letters…"),
  );
}

/** Before a redrive: what it would move and where each job goes; then "Redrive now". */
async function showRedrivePreview(queue: string, reload: () => void): Promise<void> {
  const box = document.getElementById("redrive")!;
  replace(box, h("p", { class: "loading", role: "status" }, "Reading the dead letters…"));
  try {
    const p = await api.redrivePreview(queue);
    const where = Object.entries(p.to_queues).map(([q, n]) => `${n} to ${q || "nowhere (no origin queue: they stay)"}`).join(", ");
    replace(box, h("section", { class: "panel", "aria-labelledby": "h-redrive", "data-testid": "redrive-preview" },
      h("h2", { id: "h-redrive" }, `Redrive preview: ${num(p.ready)} dead letters would move`),
      p.ready ? h("p", null, `Of the first ${p.sample.length}: ${where}.`) : h("p", { class: "muted" }, "Nothing to redrive."),
      p.sample.length > 0 && h("div", { class: "wrap" }, h("table", null,
        h("thead", null, h("tr", null, ["Job", "Task", "Goes to", "Last error"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", null, p.sample.map((m) => h("tr", null,
          h("td", null, h("a", { href: link(`/queues/${encodeURIComponent(queue)}/jobs/${encodeURIComponent(m.job.id)}`) }, m.job.id)),
          h("td", null, m.job.name), h("td", null, m.to_queue || "—"),
          h("td", null, m.job.headers["x-loam-errors"]?.slice(0, 120) ?? "")))))),
      h("div", { class: "row" },
        p.ready > 0 && actionButton("Redrive now", async () => {
          const r = await api.redrive(queue);
          replace(box);
          return `Redriven: ${num(r.affected)} jobs`;
        }, { done: reload }),
        h("button", { type: "button", on: { click: () => replace(box) } }, "Close"))));
  } catch (e) {
    replace(box, h("p", { class: "error", role: "alert" }, `No preview: ${(e as Error).message}`));
  }
}

/** Enqueue a job by hand (a re-run, a test): task name, JSON payload, priority, delay. */
function enqueueForm(queue: string, done: () => void): HTMLElement | false {
  if (!can("jobs:enqueue")) return false;
  const name = h("input", { id: "enqueue-name", required: true, placeholder: "task name" });
  const data = h("textarea", { id: "enqueue-data", rows: 4, style: "width:100%;font-family:monospace" }, "{}");
  const priority = h("input", { id: "enqueue-priority", type: "number", min: "0", value: "0", style: "width:6rem" });
  const delay = h("input", { id: "enqueue-delay", type: "number", min: "0", value: "0", style: "width:6rem" });
  const error = h("p", { class: "error", role: "alert", hidden: true });
  return h("details", { class: "panel" }, h("summary", null, "Enqueue a job"),
    h("form", { on: { submit: async (e: Event) => {
      e.preventDefault();
      error.hidden = true;
      try {
        let payload: unknown;
        try { payload = JSON.parse(data.value || "null"); } catch (err) { throw new Error(`the payload is not JSON: ${(err as Error).message}`); }
        const r = await api.enqueue(queue, { name: name.value.trim(), data: payload, priority: Number(priority.value) || 0,
          delay_ns: Math.round((Number(delay.value) || 0) * 1e9) } as any);
        toast(`Enqueued job ${r.job} (${r.state})`);
        done();
      } catch (err) {
        error.hidden = false;
        error.textContent = (err as Error).message;
      }
    } } },
      h("div", { class: "row" }, h("label", { for: "enqueue-name" }, "Task"), name,
        h("label", { for: "enqueue-priority" }, "Priority"), priority,
        h("label", { for: "enqueue-delay" }, "Delay (s)"), delay),
      h("p", null, h("label", { for: "enqueue-data" }, "Payload (JSON)")), data, error,
      h("button", { type: "submit", class: "primary" }, "Enqueue")));
}

export async function queuePage(ctx: Ctx): Promise<void> {
  const queue = ctx.params.queue;
  const sp = ctx.url.searchParams;
  const state = (STATES.includes(sp.get("state") as StateName) ? sp.get("state") : "waiting") as StateName;
  const name = sp.get("name") ?? "";
  const cursor = sp.get("cursor") ?? "";
  const text = sp.get("text") ?? "";
  const field = SEARCH_FIELDS.includes(sp.get("in") ?? "") ? sp.get("in")! : "any";
  // With a text, the server searches (a page may come back short: "Next page" goes on).
  const fetchPage = () => text
    ? api.search(queue, { text, field, states: [state], name, pageToken: cursor })
    : api.jobs(queue, { states: [state], name, pageSize: PAGE_SIZE, pageToken: cursor });
  const [detail, page, workers] = await Promise.all([api.queue(queue), fetchPage(), api.workers(queue).catch(() => null)]);
  let counts = detail.counts;
  const live = liveBadge();
  const filters = (without?: string) => {
    const p = new URLSearchParams();
    if (name && without !== "name") p.set("name", name);
    if (text && without !== "text") {
      p.set("text", text);
      if (field !== "any") p.set("in", field);
    }
    return p.toString();
  };
  const qs = (s: StateName, without?: string) => `?state=${s}${filters(without) ? `&${filters(without)}` : ""}`;
  const tabs = h("nav", { class: "tabs", "aria-label": "Job states" });
  const drawTabs = () => replace(tabs, STATES.map((s) =>
    h("a", { href: link(`/queues/${encodeURIComponent(queue)}`) + qs(s), "aria-current": s === state ? "page" : false,
      "data-state": s },
      s, " ", h("span", { class: "count", "data-testid": `count-${s}` }, num(counts[COUNT_FIELD[s]] as number)))));
  drawTabs();

  const nameInput = h("input", { type: "search", id: "name-filter", value: name,
    placeholder: "exact task name", "aria-label": "Only jobs with this task name" });
  const textInput = h("input", { type: "search", id: "text-filter", value: text, "data-filter": true,
    placeholder: "id, payload, result, error…", "aria-label": "Search text" });
  const fieldSelect = h("select", { id: "text-field", "aria-label": "Where to search" },
    SEARCH_FIELDS.map((f) => h("option", { value: f, selected: f === field }, f === "any" ? "anywhere" : `in ${f}`)));
  const nameForm = h("form", { class: "row", role: "search", "aria-label": "Filter jobs", on: { submit: (e: Event) => {
    e.preventDefault();
    setQuery({ name: nameInput.value.trim(), text: textInput.value.trim(), in: fieldSelect.value === "any" ? null : fieldSelect.value, cursor: null });
  } } }, textInput, fieldSelect, nameInput, h("button", { type: "submit" }, "Search"),
    (name || text) && h("button", { type: "button", on: { click: () => saveView(`${queue} · ${state}${name ? ` · ${name}` : ""}${text ? ` · “${text}”` : ""}`) } }, "Save view"));
  const chip = (label: string, without: string) => h("a", { class: "chip", href: link(`/queues/${encodeURIComponent(queue)}`) + qs(state, without),
    "aria-label": `Remove filter ${label}` }, label, " ×");
  const chips = (name || text) && h("div", { class: "row", "aria-label": "Active filters", role: "group" },
    name && chip(`task: ${name}`, "name"), text && chip(`${field === "any" ? "text" : field}: ${text}`, "text"));
  const tbody = h("tbody");
  let jobs = page.jobs;
  const reloadPage = async () => {
    jobs = (await fetchPage()).jobs;
    drawRows();
  };
  const reloadAll = () => void Promise.all([reloadPage(), reloadCounts()]).catch(() => {});
  const drawRows = () => {
    replace(tbody, jobs.map((j) => h("tr", { "data-job": j.id },
      canAdmin() && h("td", null, h("input", { type: "checkbox", "aria-label": `Select job ${j.id}`, checked: selected.has(j.id),
        on: { change: (e: Event) => { (e.target as HTMLInputElement).checked ? selected.add(j.id) : selected.delete(j.id); drawBulk(); } } })),
      h("td", null, h("a", { href: link(`/queues/${encodeURIComponent(queue)}/jobs/${encodeURIComponent(j.id)}`) }, j.id)),
      h("td", null, j.name),
      h("td", { class: "hide-sm" }, h("span", { class: `badge ${j.state}` }, j.state)),
      h("td", { class: "num hide-sm" }, `${j.attempt}/${j.attempts_max || "∞"}`),
      h("td", { class: "num hide-sm" }, j.priority || "—"),
      h("td", null, ago(j.state_ns || j.created_ns),
        j.state === "active" && j.deadline_ns && j.deadline_ns - Date.now() * 1e6 < LEASE_WARN_NS &&
          h("span", { class: "badge failed", title: "the worker must extend or complete it soon, or it is reclaimed as stalled" },
            j.deadline_ns < Date.now() * 1e6 ? "lease expired" : "lease ending")),
      h("td", { class: "hide-sm" }, j.errors.length ? j.errors[j.errors.length - 1].message.slice(0, 120) : ""),
      h("td", null, h("div", { class: "row", style: "margin:0" }, jobActions(queue, j, reloadAll))))));
    replace(listBox, jobs.length ? table : empty(cursor ? "No more jobs here." :
      `No ${state} jobs${name ? ` named “${name}”` : ""}${text ? ` matching “${text}”` : ""} in ${queue}${page.next_page_token ? " among the first examined: go on with Next page" : ""}.`));
  };
  const table = h("div", { class: "wrap" }, h("table", null,
    h("thead", null, h("tr", null, canAdmin() && h("th", { scope: "col" }, h("input", { type: "checkbox", "aria-label": "Select every job of this page",
      on: { change: (e: Event) => {
        const on = (e.target as HTMLInputElement).checked;
        for (const j of jobs) on ? selected.add(j.id) : selected.delete(j.id);
        drawRows();
        drawBulk();
      } } })), h("th", { scope: "col" }, "Job"), h("th", { scope: "col" }, "Task"),
      h("th", { scope: "col", class: "hide-sm" }, "State"), h("th", { scope: "col", class: "num hide-sm" }, "Attempts"),
      h("th", { scope: "col", class: "num hide-sm" }, "Priority"), h("th", { scope: "col" }, "In state since"),
      h("th", { scope: "col", class: "hide-sm" }, "Last error"), h("th", { scope: "col" }, "Actions"))),
    tbody));
  const listBox = h("div");
  // -- bulk actions: on the rows ticked, or on every job matching the filter, as a batch
  const selected = new Set<string>();
  const bulkBox = h("div");
  const batchBox = h("div", { "aria-live": "polite" });
  const bulkAction = h("select", { id: "bulk-action", "aria-label": "Bulk action" },
    ["retry", "remove", "cancel", "promote"].map((a) => h("option", { value: a }, a)));
  async function startBatch(all: boolean) {
    const action = bulkAction.value as Batch["action"];
    const what = all ? `every ${state} job${name ? ` named ${name}` : ""}${text ? ` matching “${text}”` : ""}` : `${selected.size} selected jobs`;
    if (!confirm(`${action} ${what} in ${queue}?`)) return;
    try {
      const batch = await api.startBatch(queue, all
        ? { action, filter: { state, name: name || null, text: text || null, field: field as any } }
        : { action, ids: [...selected] });
      selected.clear();
      drawBulk();
      void followBatch(batch);
    } catch (e) {
      toast(e instanceof ApiError ? `Bulk ${action} refused: ${e.message}` : String(e));
    }
  }
  function drawBulk() {
    if (!canAdmin()) return;
    replace(bulkBox, h("div", { class: "row", role: "group", "aria-label": "Bulk actions" },
      h("label", { for: "bulk-action" }, "Bulk"), bulkAction,
      h("button", { type: "button", disabled: selected.size === 0, on: { click: () => void startBatch(false) } },
        `Apply to ${selected.size} selected`),
      h("button", { type: "button", on: { click: () => void startBatch(true) } }, "Apply to every matching job")));
  }
  const followBatch = (batch: Batch) => watchBatch(ctx, batchBox, batch, reloadAll);
  const base = link(`/queues/${encodeURIComponent(queue)}`) + qs(state);
  const exportLinks = h("div", { class: "row", role: "group", "aria-label": "Export" }, h("span", { class: "muted" }, "Export these jobs:"),
    ["ndjson", "json", "csv"].map((format) => h("button", { type: "button", on: { click: () =>
      download(api.exportPath(queue, format, { states: [state], name, text, field }), `${queue}-${state}.${format}`)
        .catch((e) => toast(`Export failed: ${e.message}`)) } }, format.toUpperCase())));
  const pager = h("nav", { class: "row", "aria-label": "Pages" },
    cursor && h("a", { class: "btn", href: base, "data-key": "p" }, "First page"),
    page.next_page_token && h("a", { class: "btn", href: `${base}&cursor=${encodeURIComponent(page.next_page_token)}`,
      "data-key": "n", rel: "next" }, "Next page"));
  const pausedBadge = h("span", { class: "badge paused", hidden: !counts.paused }, "paused");
  const actionsBox = h("div");
  const drawActions = (d: QueueDetail) => replace(actionsBox, queueActions(queue, d, () => void reloadCounts()));
  async function reloadCounts() {
    const d = await api.queue(queue);
    counts = d.counts;
    pausedBadge.hidden = !counts.paused;
    drawTabs();
    drawActions(d);
    drawHealth();
  }
  drawActions(detail);
  drawBulk();
  // Worker health next to the backlog: jobs ready but no worker seen lately.
  const health = h("div", { "aria-live": "polite" });
  const drawHealth = () => {
    const ready = counts.waiting + counts.prioritized;
    const nowNs = Date.now() * 1e6;
    const live = (workers?.workers ?? []).filter((w) => nowNs - w.last_seen_ns < WORKER_LIVE_NS);
    replace(health, workers && ready > 0 && !counts.paused && live.length === 0 &&
      h("p", { class: "error", role: "status", "data-testid": "no-workers" },
        `${num(ready)} jobs are ready but no worker has leased from ${queue} in the last ${WORKER_LIVE_NS / 60e9} minutes`,
        (workers.workers.length ? ` (last seen ${ago(workers.workers[0].last_seen_ns)})` : " (none ever)"), "."));
  };
  drawHealth();
  replace(ctx.main,
    h("p", { class: "muted" }, h("a", { href: link("/") }, "Queues"), " / ", queue),
    h("h1", null, queue, pausedBadge, live.el),
    health, actionsBox, enqueueForm(queue, () => reloadAll()), h("div", { id: "redrive" }), tabs,
    h("p", { class: "row" }, h("a", { href: link(`/queues/${encodeURIComponent(queue)}/failures`) }, "Failures grouped by cause"),
      h("a", { href: link(`/queues/${encodeURIComponent(queue)}/metrics`) }, "Metrics history"),
      h("a", { href: link(`/audit?queue=${encodeURIComponent(queue)}`) }, "Audit log")), nameForm, chips, bulkBox, batchBox, listBox, pager, exportLinks);
  drawRows();
  rowKeys(ctx, tbody);
  const onKey = (e: KeyboardEvent) => {
    if ((e.target as HTMLElement).closest("input, textarea, select") || e.ctrlKey || e.metaKey) return;
    const a = pager.querySelector<HTMLAnchorElement>(`[data-key="${e.key}"]`);
    if (a) { e.preventDefault(); a.click(); }
  };
  document.addEventListener("keydown", onKey);
  ctx.onLeave(() => document.removeEventListener("keydown", onKey));

  // Push: counts always; the list on the first page (later pages keep their place).
  const refreshCounts = throttle(() => void reloadCounts().catch(() => {}), 250);
  const refreshList = throttle(() => void reloadPage().catch(() => {}), 250);
  const stream = queueStream(queue, (e) => {
    if (e.type === "snapshot") {
      if (e.data.counts) { counts = e.data.counts; pausedBadge.hidden = !counts.paused; drawTabs(); }
      return;
    }
    if (e.type === "ready") return;
    refreshCounts();
    if (!cursor || jobs.some((j) => j.id === e.data?.data?.job_id)) refreshList();
  }, live.set);
  ctx.onLeave(() => stream.stop());
}
