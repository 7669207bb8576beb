/** One job: its payload, result, progress, logs, every attempt's error with its stack
 * trace, its timeline (the record's times, then the events seen live), its children,
 * and the actions on it (retry, promote, cancel, remove, change priority). Live: the
 * queue's stream, filtered to this job, reloads the record when it changes. */
import { api, saveBlob, type Job, type JobDetail } from "../api";
import { duration, h, json, num, replace, time } from "../dom";
import { can, canAdmin, link, navigate, type Ctx } from "../main";
import { queueStream } from "../sse";
import { actionButton, empty, liveBadge, throttle } from "./common";
import { jobActions } from "./queue";
import { jobAudit } from "./audit";
import { graphSection } from "./dag";

const PAYLOAD_SHOWN = 20_000; // characters before "show all"

function payload(label: string, p: Job["payload"] | null | undefined): HTMLElement {
  if (!p || (!p.size && p.data == null && !p.data_base64)) return h("p", { class: "muted" }, `No ${label.toLowerCase()}.`);
  const text = p.data !== null && p.data !== undefined ? json(p.data) : p.data_base64 ?? "";
  const pre = h("pre", { tabindex: "0", "aria-label": label }, text.slice(0, PAYLOAD_SHOWN));
  const more = text.length > PAYLOAD_SHOWN &&
    h("button", { type: "button", on: { click: (e: Event) => { pre.textContent = text; (e.target as HTMLElement).remove(); } } },
      `Show all ${num(text.length)} characters`);
  return h("div", null, h("p", { class: "muted" }, `${p.content_type || "no content type"}, ${num(p.size)} bytes`,
    p.blob_ref ? " (in the blob store)" : ""), pre, more);
}

function timeline(j: Job): HTMLElement {
  const rows: [number, string][] = [
    [j.created_ns, "created"], [j.processed_ns, "started (last attempt)"], [j.finished_ns, "finished"],
    ...j.errors.map((e): [number, string] => [e.at_ns, `attempt ${e.attempt} failed: ${e.code || "error"}`]),
  ];
  if (j.state === "delayed" && j.due_ns) rows.push([j.due_ns, "due"]);
  rows.push([j.state_ns, `entered ${j.state}`]);
  return h("ol", { class: "timeline", "aria-label": "Timeline" },
    rows.filter(([t]) => t).sort((a, b) => a[0] - b[0]).map(([t, what]) => h("li", null, h("time", null, time(t)), " — ", what)));
}

/** A job's dependencies as a tree, each level read when it is opened: a flow of any
 * size costs one call per level looked at. */
async function childTree(queue: string, id: string): Promise<HTMLElement> {
  let kids;
  try {
    kids = (await api.children(queue, id)).children;
  } catch (e) {
    return h("p", { class: "muted" }, `Children unavailable: ${(e as Error).message}`);
  }
  if (!kids.length) return h("p", { class: "muted" }, "No children.");
  return h("ul", { class: "tree" }, kids.map((c) => {
    const below = h("div");
    let loaded = false;
    return h("li", { "data-child": c.job_id }, h("details", { on: { toggle: async (e: Event) => {
      if (loaded || !(e.target as HTMLDetailsElement).open) return;
      loaded = true;
      replace(below, await childTree(c.queue, c.job_id));
    } } },
      h("summary", null, h("a", { href: link(`/queues/${encodeURIComponent(c.queue)}/jobs/${encodeURIComponent(c.job_id)}`) }, `${c.queue} / ${c.job_id}`),
        " ", c.node && h("span", { class: "muted" }, `(${c.node})`), " ", h("span", { class: `badge ${c.state}` }, c.state),
        c.error ? ` ${c.error.message}` : ""),
      below));
  }));
}

export async function jobPage(ctx: Ctx): Promise<void> {
  const { queue, job: ref } = ctx.params;
  let detail: JobDetail = await api.job(queue, ref);
  const live = liveBadge();
  const events = h("ol", { class: "timeline", "aria-label": "Events seen live", "data-testid": "live-events" });
  const box = h("div");
  const load = async () => {
    detail = await api.job(queue, ref);
    draw();
  };
  // an action taken here: the job again, and its history (the push may not have arrived yet)
  const afterAction = () => {
    void load();
    reloadHistory();
  };
  const children = h("div", null, h("p", { class: "muted" }, "Loading children…"));
  void childTree(queue, detail.job.id).then((tree) => replace(children, tree));

  function priorityForm(j: Job): HTMLElement | false {
    if (!canAdmin() || !["waiting", "prioritized"].includes(j.state)) return false;
    const input = h("input", { id: "priority", type: "number", min: "0", max: String(2 ** 21 - 1), value: String(j.priority), style: "width:7rem" });
    return h("span", { class: "row", style: "margin:0" }, h("label", { for: "priority" }, "Priority"), input,
      actionButton("Change priority", async () => {
        await api.changePriority(queue, j.id, Number(input.value));
        return `Job ${j.id} now has priority ${input.value}`;
      }, { done: () => afterAction() }));
  }

  function editAndRetry(j: Job): HTMLElement | false {
    if (!canAdmin() || !["failed", "completed", "dead-lettered", "canceled"].includes(j.state) || j.payload.data_base64) return false;
    const area = h("textarea", { id: "new-payload", rows: 8, style: "width:100%;font-family:monospace",
      "aria-describedby": "new-payload-help" }, json(j.payload.data ?? null));
    const error = h("p", { class: "error", role: "alert", hidden: true });
    return h("details", { class: "panel" }, h("summary", null, "Edit the payload, then retry"),
      h("p", null, h("label", { for: "new-payload" }, "New payload (JSON)")), area,
      h("p", { id: "new-payload-help", class: "muted" }, "The job runs again from its first attempt with this payload."),
      error,
      actionButton("Save and retry", async () => {
        let data: unknown;
        try {
          data = JSON.parse(area.value);
        } catch (e) {
          error.hidden = false;
          error.textContent = `Not JSON: ${(e as Error).message}`;
          throw new Error("the payload is not JSON");
        }
        await api.retryWithPayload(queue, j.id, data);
        return `Job ${j.id} retried with the new payload`;
      }, { done: () => afterAction() }));
  }

  const seen: unknown[] = []; // the events this page received, for the bundle
  async function bundle() {
    const kids = await api.children(queue, detail.job.id).catch((e) => ({ error: String(e) }));
    const doc = { exported_at: new Date().toISOString(), server: location.origin, detail, children: kids, events_seen: seen };
    saveBlob(new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" }), `job-${detail.job.id}.json`);
  }

  function draw() {
    const j = detail.job;
    const parents = j.parents ?? [], childCount = j.children ?? 0, pending = j.pending_children ?? 0;
    replace(box,
      h("h1", null, `Job ${j.id}`, h("span", { class: `badge ${j.state}`, "data-testid": "job-state" }, j.state), live.el),
      h("div", { class: "row", role: "group", "aria-label": "Job actions" },
        jobActions(queue, j, () => {
          reloadHistory();
          if (j.state !== "active") void load().catch(() => navigate(link(`/queues/${encodeURIComponent(queue)}`)));
        }), priorityForm(j),
        can("jobs:enqueue") && j.payload.data_base64 == null && actionButton("Run again as a new job", async () => {
          const r = await api.enqueue(queue, { name: j.name, data: j.payload.data ?? null, priority: j.priority } as any);
          navigate(link(`/queues/${encodeURIComponent(queue)}/jobs/${encodeURIComponent(r.job)}`));
          return `Enqueued job ${r.job}`;
        }),
        h("button", { type: "button", on: { click: () => void bundle() } }, "Download diagnostic bundle")),
      h("div", { class: "grid2" },
        h("section", { class: "panel", "aria-labelledby": "h-summary" }, h("h2", { id: "h-summary" }, "Summary"),
          h("dl", { class: "kv" },
            h("dt", null, "Queue"), h("dd", null, h("a", { href: link(`/queues/${encodeURIComponent(queue)}`) }, queue)),
            h("dt", null, "Task"), h("dd", null, j.name),
            h("dt", null, "Attempts"), h("dd", null, `${j.attempt} of ${j.attempts_max || "∞"}`),
            h("dt", null, "Priority"), h("dd", null, `${j.priority}${j.lifo ? " (LIFO)" : ""}`),
            j.job_key && [h("dt", null, "Job key"), h("dd", null, j.job_key)],
            j.subject && [h("dt", null, "Subject"), h("dd", null, j.subject)],
            j.worker && [h("dt", null, "Worker"), h("dd", null, j.worker)],
            j.origin_queue && [h("dt", null, "From queue"), h("dd", null, j.origin_queue)],
            parents.length > 0 && [h("dt", null, parents.length > 1 ? "Parents" : "Parent"), h("dd", { "data-testid": "parents" },
              parents.map((x) => h("a", { href: link(`/queues/${encodeURIComponent(x.queue)}/jobs/${encodeURIComponent(x.job_id)}`),
                style: "margin-right:.5rem" }, `${x.queue} / ${x.job_id}`)))],
            j.flow && [h("dt", null, "Flow"), h("dd", null, j.flow)],
            childCount > 0 && [h("dt", null, "Children"), h("dd", null, `${childCount - pending} of ${childCount} finished`)],
            j.processed_ns && j.finished_ns ? [h("dt", null, "Ran for"), h("dd", null, duration(j.finished_ns - j.processed_ns))] : null,
            j.stalled ? [h("dt", null, "Stalled"), h("dd", null, `${j.stalled} times`)] : null)),
        h("section", { class: "panel", "aria-labelledby": "h-timeline" }, h("h2", { id: "h-timeline" }, "Timeline"),
          timeline(j), h("h3", null, "Live"), events)),
      h("section", { "aria-labelledby": "h-payload" }, h("h2", { id: "h-payload" }, "Payload"), payload("Payload", j.payload),
        editAndRetry(j)),
      h("section", { "aria-labelledby": "h-result" }, h("h2", { id: "h-result" }, "Result"), payload("Result", j.result)),
      h("section", { "aria-labelledby": "h-progress" }, h("h2", { id: "h-progress" }, "Progress"),
        j.progress != null ? h("pre", { tabindex: "0" }, json(j.progress)) : h("p", { class: "muted" }, "No progress reported.")),
      h("section", { "aria-labelledby": "h-errors" }, h("h2", { id: "h-errors" }, `Attempts with errors (${j.errors.length})`),
        j.errors.length ? j.errors.map((e) => h("details", { class: "panel", open: e === j.errors[j.errors.length - 1] },
          h("summary", null, `Attempt ${e.attempt} — ${time(e.at_ns)} — ${e.code ? `${e.code}: ` : ""}${e.message}`),
          e.stacktrace ? h("pre", { tabindex: "0", "aria-label": `Stack trace of attempt ${e.attempt}` }, e.stacktrace)
            : h("p", { class: "muted" }, "No stack trace.")))
          : h("p", { class: "muted" }, "No failed attempts.")),
      h("section", { "aria-labelledby": "h-logs" }, h("h2", { id: "h-logs" }, `Logs (${num(detail.log_count)})`),
        detail.logs.length ? h("pre", { tabindex: "0", "aria-label": "Logs" },
          detail.logs.map((l) => `${time(l.at_ns)}  ${l.line}`).join("\n")) : h("p", { class: "muted" }, "No log lines.")),
      h("section", { "aria-labelledby": "h-children" }, h("h2", { id: "h-children" }, "Children"), children),
    );
  }
  // Drawn once (not on each live reload): the graph keeps what was expanded and where it was looked at.
  const history = h("div", null, h("p", { class: "muted" }, "Loading…"));
  let historyAsked = 0; // the last reading asked for wins, whatever order the answers come in
  const reloadHistory = () => {
    const n = ++historyAsked;
    void jobAudit(queue, detail.job.id).then((el) => n === historyAsked && replace(history, el));
  };
  reloadHistory();
  replace(ctx.main, h("p", { class: "muted" }, h("a", { href: link("/") }, "Queues"), " / ",
    h("a", { href: link(`/queues/${encodeURIComponent(queue)}`) }, queue), " / ", detail.job.id), box,
    h("section", { "aria-labelledby": "h-graph" }, h("h2", { id: "h-graph" }, "Flow graph"), graphSection(queue, detail.job)),
    h("section", { "aria-labelledby": "h-history" }, h("h2", { id: "h-history" }, "History (audit log)"), history));
  draw();
  if (!detail.job) replace(box, empty("No such job."));

  const reload = throttle(() => void load().catch(() => {}), 200);
  const stream = queueStream(queue, (e) => {
    const ev = e.data?.data;
    if (!ev || ev.job_id !== detail.job.id) return;
    seen.push(e.data);
    events.appendChild(h("li", null, h("time", null, time(Number(ev.time_ns))), " — ", ev.event));
    reload();
    reloadHistory();
  }, live.set);
  ctx.onLeave(() => stream.stop());
}
