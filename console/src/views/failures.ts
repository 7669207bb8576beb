/** A queue's failures grouped by cause (error signature): how many, first and last seen,
 * an example; retry or remove a whole group as a tracked batch. */
import { api, ApiError } from "../api";
import { ago, h, num, replace, toast } from "../dom";
import { canAdmin, link, type Ctx } from "../main";
import { empty, rowKeys, watchBatch } from "./common";

export async function failuresPage(ctx: Ctx): Promise<void> {
  const queue = ctx.params.queue;
  const state = ctx.url.searchParams.get("state") === "dead-lettered" ? "dead-lettered" : "failed";
  const batchBox = h("div", { "aria-live": "polite" });
  const groupsBox = h("div");
  const base = link(`/queues/${encodeURIComponent(queue)}`);
  const act = (action: "retry" | "remove", signature: string, count: number) => h("button", {
    type: "button", class: action === "remove" ? "danger" : "",
    "aria-label": `${action === "retry" ? "Retry group" : "Remove group"}: the ${count} jobs failing with ${signature}`,
    on: { click: async () => {
      if (!confirm(`${action} every ${state} job of ${queue} failing with “${signature}”?`)) return;
      try {
        const batch = await api.startBatch(queue, { action, filter: { state, signature, field: "any" } });
        watchBatch(ctx, batchBox, batch, () => void load());
      } catch (e) {
        toast(e instanceof ApiError ? e.message : String(e));
      }
    } },
  }, action === "retry" ? "Retry group" : "Remove group");
  const tbody = h("tbody");
  async function load() {
    const data = await api.failures(queue, state);
    replace(tbody, data.groups.map((g) => h("tr", { "data-signature": g.signature },
      h("td", null, h("a", { href: `${base}?state=${state}&text=${encodeURIComponent(g.example.slice(0, 60))}&in=error` }, g.signature)),
      h("td", { class: "num" }, num(g.count)),
      h("td", { class: "hide-sm" }, ago(g.first_seen_ns)), h("td", null, ago(g.last_seen_ns)),
      h("td", null, canAdmin() && h("div", { class: "row", style: "margin:0" }, act("retry", g.signature, g.count), act("remove", g.signature, g.count))))));
    replace(groupsBox, data.groups.length ? h("div", { class: "wrap" }, h("table", null,
      h("caption", { class: "muted", style: "text-align:left" },
        `${num(data.examined)} ${state} jobs examined${data.complete ? "" : " (the newest; there are more)"}`),
      h("thead", null, h("tr", null, h("th", { scope: "col" }, "Cause"), h("th", { scope: "col", class: "num" }, "Jobs"),
        h("th", { scope: "col", class: "hide-sm" }, "First seen"), h("th", { scope: "col" }, "Last seen"), h("th", { scope: "col" }, "Actions"))),
      tbody)) : empty(`No ${state} jobs in ${queue}.`));
  }
  await load();
  replace(ctx.main,
    h("p", { class: "muted" }, h("a", { href: link("/") }, "Queues"), " / ", h("a", { href: base }, queue), " / failures"),
    h("h1", null, `Failures of ${queue} by cause`),
    h("nav", { class: "tabs", "aria-label": "Which failures" }, (["failed", "dead-lettered"] as const).map((s) =>
      h("a", { href: `${base}/failures?state=${s}`, "aria-current": s === state ? "page" : false }, s))),
    batchBox, groupsBox);
  rowKeys(ctx, tbody);
}
