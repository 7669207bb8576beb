/** Engine runs and Flink deployments (REST `/v1/engines/...`):
 * - Engines: the namespace's engine runs (Spark batches, spark-submit, Flink jobs), newest
 *   first, and its Flink deployments;
 * - a run: its state, attempts with exit codes and errors, its output (followed while it
 *   runs: the logs call waits for the next line), cancel;
 * - a deployment: its state, Flink's view of the job, versions, savepoints, its lifecycle
 *   log, and savepoint / suspend / resume / cancel.
 * A server that runs no engine answers these with its reason, which the page shows. */
import { api, ApiError, type EngineRun, type FlinkDeployment } from "../api";
import { ago, duration, h, num, replace, time } from "../dom";
import { can, link, type Ctx } from "../main";
import { actionButton, empty, rowKeys } from "./common";

const runLink = (r: EngineRun) => h("a", { href: link(`/engines/runs/${encodeURIComponent(r.id)}`) }, r.name || r.id);
const deploymentLink = (d: FlinkDeployment) => h("a", { href: link(`/engines/flink/${encodeURIComponent(d.name)}`) }, d.name);
const FINISHED = new Set(["succeeded", "failed", "canceled"]);

export async function enginesPage(ctx: Ctx): Promise<void> {
  const cursor = ctx.url.searchParams.get("cursor") ?? "";
  const [runs, flink] = await Promise.all([
    api.engineRuns(cursor).catch((e: ApiError) => e),
    api.flinkDeployments().catch((e: ApiError) => e),
  ]);
  const runsBody = runs instanceof Error ? null : h("tbody", null, runs.runs.map((r) => h("tr", { "data-run": r.id },
    h("td", null, runLink(r)), h("td", null, `${r.engine} ${r.kind}`), h("td", null, r.entrypoint),
    h("td", null, h("span", { class: `badge ${r.state === "succeeded" ? "completed" : r.state}` }, r.state)),
    h("td", null, ago(r.created_ns)),
    h("td", { class: "num" }, r.finished_ns && r.started_ns ? duration(r.finished_ns - r.started_ns) : "—"),
    h("td", { class: "num hide-sm" }, num(r.attempts.length)), h("td", { class: "hide-sm" }, r.schedule || ""))));
  const flinkBody = flink instanceof Error ? null : h("tbody", null, flink.deployments.map((d) => h("tr", { "data-deployment": d.name },
    h("td", null, deploymentLink(d)), h("td", null, d.kind), h("td", null, h("span", { class: "badge" }, d.state)),
    h("td", { class: "num" }, `v${d.version}`), h("td", { class: "num" }, num(d.savepoints.length)),
    h("td", null, ago(d.updated_ns)), h("td", { class: "hide-sm" }, d.last_error))));
  replace(ctx.main, h("h1", null, "Engines"),
    h("section", { "aria-labelledby": "h-runs" }, h("h2", { id: "h-runs" }, "Engine runs"),
      runs instanceof Error ? h("p", { class: "error", role: "alert" }, `${runs.code}: ${runs.message}`)
        : runs.runs.length ? h("div", { class: "wrap" }, h("table", null, h("thead", null, h("tr", null,
          ["Run", "Engine", "Entry point", "State", "Created", "Ran for", "Attempts", "Schedule"].map((t, i) =>
            h("th", { scope: "col", class: i === 5 ? "num" : i === 6 ? "num hide-sm" : i === 7 ? "hide-sm" : "" }, t)))), runsBody))
          : empty(cursor ? "No more runs." : "No engine runs. Submit one with POST /v1/engines/spark/runs or loam spark submit."),
      !(runs instanceof Error) && runs.next_page_token &&
        h("p", null, h("a", { class: "btn", href: link(`/engines?cursor=${encodeURIComponent(runs.next_page_token)}`) }, "Next page"))),
    h("section", { "aria-labelledby": "h-flink" }, h("h2", { id: "h-flink" }, "Flink deployments"),
      flink instanceof Error ? h("p", { class: "muted", role: "status" }, `${flink.message}`)
        : flink.deployments.length ? h("div", { class: "wrap" }, h("table", null, h("thead", null, h("tr", null,
          ["Deployment", "Kind", "State", "Version", "Savepoints", "Updated", "Last error"].map((t, i) =>
            h("th", { scope: "col", class: i === 3 || i === 4 ? "num" : i === 6 ? "hide-sm" : "" }, t)))), flinkBody))
          : empty("No Flink deployments.")));
  if (runsBody) rowKeys(ctx, runsBody);
}

export async function engineRunPage(ctx: Ctx): Promise<void> {
  const id = ctx.params.run;
  let run = await api.engineRun(id);
  const box = h("div");
  const out = h("pre", { tabindex: "0", "aria-label": "Output", "data-testid": "run-output" });
  let after = 0;
  let stopped = false;
  ctx.onLeave(() => (stopped = true));
  const draw = () => replace(box,
    h("h1", null, `Run ${run.name || run.id}`, h("span", { class: `badge ${run.state === "succeeded" ? "completed" : run.state}`,
      "data-testid": "run-state" }, run.state)),
    h("div", { class: "row" }, can("jobs:engine") && !FINISHED.has(run.state) && actionButton("Cancel", async () => {
      run = await api.engineRunCancel(run.id);
      draw();
      return `Run ${run.id} canceled`;
    }, { danger: true, confirmText: `Cancel run ${run.id}?` })),
    h("dl", { class: "kv panel" },
      h("dt", null, "Engine"), h("dd", null, `${run.engine} (${run.kind})`),
      h("dt", null, "Entry point"), h("dd", null, run.entrypoint),
      h("dt", null, "Created"), h("dd", null, time(run.created_ns)),
      h("dt", null, "Started"), h("dd", null, time(run.started_ns)),
      h("dt", null, "Finished"), h("dd", null, time(run.finished_ns)),
      h("dt", null, "Exit code"), h("dd", null, run.exit_code ?? "—"),
      run.schedule && [h("dt", null, "Schedule"), h("dd", null, run.schedule)],
      run.error && [h("dt", null, "Error"), h("dd", { class: "error-text" }, run.error)]),
    h("h2", null, `Attempts (${run.attempts.length})`),
    run.attempts.length ? h("ol", { class: "timeline" }, run.attempts.map((a) => h("li", null,
      `attempt ${a.attempt}: ${time(a.started_ns)} → ${time(a.finished_ns)}, exit ${a.exit_code ?? "—"}`, a.error ? ` — ${a.error}` : "")))
      : h("p", { class: "muted" }, "Not started yet."),
    h("h2", null, "Output"), out);
  replace(ctx.main, h("p", { class: "muted" }, h("a", { href: link("/engines") }, "Engines"), " / ", run.id), box);
  draw();
  // Follow the output: each call returns the lines after `after` (the server waits for one).
  void (async () => {
    while (!stopped) {
      let page;
      try {
        page = await api.engineRunLogs(run.id, after);
      } catch {
        return;
      }
      if (stopped) return;
      for (const l of page.lines) {
        out.append(`${l.stream === "stderr" ? "! " : ""}${l.line}\n`);
        after = l.n;
      }
      if (page.finished || !page.lines.length) {
        run = await api.engineRun(run.id).catch(() => run);
        draw();
        if (page.finished || FINISHED.has(run.state)) return;
      }
    }
  })();
}

export async function flinkPage(ctx: Ctx): Promise<void> {
  const name = ctx.params.name;
  const box = h("div");
  const load = async () => {
    const [d, logs] = await Promise.all([api.flinkDeployment(name), api.flinkLogs(name).catch(() => ({ lines: [] }))]);
    const act = (verb: "savepoint" | "suspend" | "resume" | "cancel", label: string, danger = false) =>
      can("jobs:engine") && actionButton(label, async () => {
        await api.flinkAction(name, verb);
        await load();
        return `${label}: done`;
      }, { danger, confirmText: danger ? `${label} ${name}?` : undefined });
    replace(box,
      h("h1", null, `Flink: ${d.name}`, h("span", { class: "badge", "data-testid": "deployment-state" }, d.state)),
      h("div", { class: "row", role: "group", "aria-label": "Deployment actions" },
        act("savepoint", "Take a savepoint"), act("suspend", "Suspend"), act("resume", "Resume"), act("cancel", "Cancel", true)),
      h("dl", { class: "kv panel" },
        h("dt", null, "Kind"), h("dd", null, d.kind), h("dt", null, "Version"), h("dd", null, `v${d.version}`),
        h("dt", null, "Flink job"), h("dd", null, d.job_id || "—"),
        d.job && [h("dt", null, "Job state"), h("dd", null, `${d.job.state}, ${d.job.restarts} restarts, ${d.job.checkpoints} checkpoints`)],
        d.pending && [h("dt", null, "In progress"), h("dd", null, `${d.pending.action} (${d.pending.step})`)],
        d.last_error && [h("dt", null, "Last error"), h("dd", null, d.last_error)],
        h("dt", null, "Updated"), h("dd", null, time(d.updated_ns))),
      h("h2", null, `Savepoints (${d.savepoints.length})`),
      d.savepoints.length ? h("ul", null, d.savepoints.map((s) => h("li", null, `${time(s.taken_ns)} — v${s.version} — ${s.reason}: `, h("code", null, s.path))))
        : h("p", { class: "muted" }, "No savepoints."),
      h("h2", null, `Versions (${d.versions.length})`),
      h("ul", null, d.versions.map((v) => h("li", null, `v${v.number}, ${time(v.created_ns)}`))),
      h("h2", null, "Lifecycle log"),
      logs.lines.length ? h("pre", { tabindex: "0", "aria-label": "Lifecycle log" }, logs.lines.map((l) => `${time(l.at_ns)}  ${l.text}`).join("\n"))
        : h("p", { class: "muted" }, "Nothing logged."));
  };
  await load();
  replace(ctx.main, h("p", { class: "muted" }, h("a", { href: link("/engines") }, "Engines"), " / ", name), box);
}
