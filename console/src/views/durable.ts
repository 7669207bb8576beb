/** Durable executions (GET /v1/durable/promises/{id}): a workflow's promise tree from its
 * root, each promise's state, timing and tags, each task's state and attempts, as a
 * nested list that opens level by level. The root id is in the URL
 * (/console/durable/<root id>); the form asks for one. */
import { api, ApiError, type DurableNode } from "../api";
import { duration, h, replace, time } from "../dom";
import { link, navigate, type Ctx } from "../main";

const STATE_BADGE: Record<string, string> = { resolved: "completed", pending: "waiting", rejected: "failed",
  rejected_canceled: "canceled", rejected_timedout: "failed" };

function node(n: DurableNode, kids: Map<string, DurableNode[]>, depth: number): HTMLElement {
  const p = n.promise as Record<string, any>;
  const state = String(p.state ?? "").toLowerCase();
  const below = kids.get(String(p.id)) ?? [];
  const took = p.settledAt && p.createdAt ? ` · ${duration((p.settledAt - p.createdAt) * 1e6)}` : "";
  const task = n.task as Record<string, any> | null | undefined;
  const summary = h("summary", null, h("code", null, String(p.id)), " ",
    h("span", { class: `badge ${STATE_BADGE[state] ?? ""}` }, state), n.timedOut ? " (timed out)" : "",
    h("span", { class: "muted" }, ` ${time((p.createdAt ?? 0) * 1e6)}${took}`),
    task ? h("span", { class: "muted" }, ` · task ${task.state}${task.attempts != null ? `, ${task.attempts} attempts` : ""}`) : "",
    below.length ? h("span", { class: "muted" }, ` · ${below.length} under it`) : "");
  const tags = p.tags && Object.keys(p.tags).length
    ? h("p", { class: "muted" }, Object.entries(p.tags).map(([k, v]) => `${k}=${v}`).join(" ")) : null;
  return h("li", { "data-promise": String(p.id) }, h("details", { open: depth < 2 }, summary, tags,
    below.length ? h("ul", { class: "tree" }, below.map((c) => node(c, kids, depth + 1))) : null));
}

export async function durablePage(ctx: Ctx): Promise<void> {
  const root = ctx.params.root ?? "";
  const input = h("input", { id: "durable-root", value: root, "data-filter": true, required: true, size: 40,
    placeholder: "a workflow's root promise id", "aria-label": "Root promise id" });
  const form = h("form", { class: "row", role: "search", "aria-label": "Open a durable execution", on: { submit: (e: Event) => {
    e.preventDefault();
    const id = input.value.trim();
    if (id) navigate(link(`/durable/${encodeURIComponent(id)}`));
  } } }, input, h("button", { type: "submit" }, "Open"));
  const box = h("div");
  replace(ctx.main, h("h1", null, "Durable executions"),
    h("p", { class: "muted" }, "A workflow (Resonate protocol) as its promise tree: every step, its state and its task."), form, box);
  if (!root) return replace(box, h("p", { class: "muted" }, "Give a root promise id (the id a workflow was started with)."));
  try {
    const tree = await api.durableTree(root);
    const kids = new Map<string, DurableNode[]>();
    let top: DurableNode | undefined;
    for (const n of tree.promises) {
      const id = String((n.promise as any).id);
      if (id === tree.root) top = n;
      else if (n.parent) kids.set(n.parent, [...(kids.get(n.parent) ?? []), n]);
    }
    const count = tree.promises.length;
    replace(box, h("p", { "data-testid": "durable-count" }, `${count} promise${count === 1 ? "" : "s"} in this execution`),
      top ? h("ul", { class: "tree", "data-testid": "durable-tree" }, node(top, kids, 0)) : h("p", { class: "muted" }, "The root is gone."));
  } catch (e) {
    replace(box, h("p", { class: "error", role: "alert" }, e instanceof ApiError ? `${e.code}: ${e.message}` : String(e)));
  }
}
