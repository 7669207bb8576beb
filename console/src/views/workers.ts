/** Workers: every worker seen on a queue of the namespace, when it was last seen, and the
 * jobs it holds now (the active jobs whose worker it is). */
import { api, type Job, type Worker } from "../api";
import { ago, h, replace } from "../dom";
import { link, type Ctx } from "../main";
import { empty, rowKeys } from "./common";

const HELD_PAGE = 200; // active jobs read per queue to show who holds what

export async function workersPage(ctx: Ctx): Promise<void> {
  const { queues } = await api.queues();
  const seen = new Map<string, Worker>();
  const held = new Map<string, Job[]>();
  await Promise.all(queues.map(async (q) => {
    const [w, active] = await Promise.all([
      api.workers(q.name),
      q.counts.active ? api.jobs(q.name, { states: ["active"], pageSize: HELD_PAGE }) : Promise.resolve({ jobs: [] as Job[] }),
    ]);
    for (const x of w.workers) {
      const prev = seen.get(x.id);
      seen.set(x.id, prev ? { ...prev, last_seen_ns: Math.max(prev.last_seen_ns, x.last_seen_ns),
        queues: [...new Set([...prev.queues, ...x.queues])] } : x);
    }
    for (const j of active.jobs) if (j.worker) held.set(j.worker, [...(held.get(j.worker) ?? []), j]);
  }));
  const workers = [...seen.values()].sort((a, b) => b.last_seen_ns - a.last_seen_ns);
  const tbody = h("tbody", null, workers.map((w) => h("tr", { "data-worker": w.id },
    h("td", null, w.id), h("td", null, w.queues.join(", ")), h("td", null, ago(w.last_seen_ns)),
    h("td", null, (held.get(w.id) ?? []).map((j) =>
      h("a", { href: link(`/queues/${encodeURIComponent(j.queue)}/jobs/${encodeURIComponent(j.id)}`), style: "margin-right:.5rem" },
        `${j.queue}/${j.id}`)), (held.get(w.id) ?? []).length ? null : h("span", { class: "muted" }, "idle")))));
  replace(ctx.main, h("h1", null, "Workers"),
    workers.length ? h("div", { class: "wrap" }, h("table", null,
      h("thead", null, h("tr", null, ["Worker", "Queues", "Last seen", "Holds"].map((t) => h("th", { scope: "col" }, t)))), tbody))
      : empty("No worker has leased a job in this namespace yet."));
  rowKeys(ctx, tbody);
}
