/** Durable executions. Without a root in the URL, the list (GET /v1/durable/executions):
 * every root promise, 50 a page by cursor, filtered by state and id prefix (kept in the
 * URL: /console/durable?state=pending&q=wf-&cursor=...). With one
 * (/console/durable/<root id>; the form opens any), its promise tree
 * (GET /v1/durable/promises/{id}): each promise's state, timing and tags, each task's
 * state and attempts, as a nested list that opens level by level. */
import { api, ApiError, type DurableNode } from "../api";
import { duration, h, replace, time } from "../dom";
import { link, navigate, setQuery, type Ctx } from "../main";
import { empty } from "./common";

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
  if (!root) return executionsList(ctx, box);
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

/** The list of executions (root promises) with its filters (in the URL), into `box`. */
async function executionsList(ctx: Ctx, box: HTMLElement): Promise<void> {
  const params = ctx.url.searchParams;
  const state = params.get("state") ?? "", prefix = params.get("q") ?? "", cursor = params.get("cursor") ?? "";
  const stateSelect = h("select", { id: "durable-state", "aria-label": "State" },
    ["", "pending", "resolved", "rejected"].map((s) => h("option", { value: s, selected: s === state }, s || "any state")));
  const prefixInput = h("input", { id: "durable-prefix", value: prefix, size: 24, placeholder: "id starts with…",
    "aria-label": "Root id starts with" });
  const filter = () => setQuery({ state: stateSelect.value, q: prefixInput.value.trim(), cursor: null });
  const filters = h("form", { class: "row", role: "search", "aria-label": "Filter durable executions", on: { submit: (e: Event) => {
    e.preventDefault();
    filter();
  } } }, stateSelect, prefixInput, h("button", { type: "submit" }, "Filter"));
  stateSelect.addEventListener("change", filter);
  replace(box, h("h2", null, "Executions"), filters, h("p", { class: "muted" }, "Loading…"));
  try {
    const page = await api.durableExecutions({ state, prefix, cursor });
    const rows = page.executions.map((e) => {
      const p = e.promise as Record<string, any>;
      const id = String(p.id), st = String(p.state ?? "").toLowerCase();
      const took = p.settledAt && p.createdAt ? duration((p.settledAt - p.createdAt) * 1e6) : "";
      return h("tr", { "data-root": id },
        h("td", null, h("a", { href: link(`/durable/${encodeURIComponent(id)}`) }, h("code", null, id))),
        h("td", null, h("span", { class: `badge ${STATE_BADGE[st] ?? ""}` }, st), e.timedOut ? " (timed out)" : ""),
        h("td", null, p.createdAt ? time(p.createdAt * 1e6) : ""),
        h("td", { class: "num" }, took));
    });
    const at = (pageCursor: string | null | undefined) => {  // this list's address at a page
      const p = new URLSearchParams(params);
      if (pageCursor) p.set("cursor", pageCursor);
      else p.delete("cursor");
      return link(`/durable${p.size ? `?${p}` : ""}`);
    };
    const pager = h("nav", { class: "row", "aria-label": "Pages" },
      cursor && h("a", { class: "btn", href: at(null), "data-key": "p" }, "First page"),
      page.cursor && h("a", { class: "btn", href: at(page.cursor), "data-key": "n", rel: "next" }, "Next page"));
    replace(box, h("h2", null, "Executions"), filters,
      rows.length
        ? h("table", { "data-testid": "durable-executions" },
            h("thead", null, h("tr", null, h("th", null, "root promise"), h("th", null, "state"),
              h("th", null, "started"), h("th", { class: "num" }, "took"))),
            h("tbody", null, rows))
        : empty(state || prefix ? "No durable execution matches." : "No durable executions yet: a workflow's root promise shows here once it is created."),
      pager);
  } catch (e) {
    replace(box, h("h2", null, "Executions"), filters,
      h("p", { class: "error", role: "alert" }, e instanceof ApiError ? `${e.code}: ${e.message}` : String(e)));
  }
}
