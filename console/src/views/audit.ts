/** The audit log (GET /v1/audit): who did what to which queue or job, when, with which
 * token and role, by which transport (REST or Connect) and as part of which batch, newest first; filtered by queue (and job) in the URL, paged by the
 * `before` cursor. A job page shows its own entries with `auditList`. */
import { api, type AuditEntry } from "../api";
import { ago, h, num, replace, time } from "../dom";
import { link, setQuery, type Ctx } from "../main";
import { empty, rowKeys } from "./common";

const jobLink = (e: AuditEntry) => e.job
  ? h("a", { href: link(`/queues/${encodeURIComponent(e.queue)}/jobs/${encodeURIComponent(e.job)}`) }, e.job)
  : "";

export function auditRows(entries: AuditEntry[], withQueue = true): HTMLElement {
  return h("tbody", null, entries.map((e) => h("tr", { "data-audit": e.id },
    h("td", null, h("time", { title: time(e.at_ns) }, ago(e.at_ns))),
    h("td", null, h("code", null, e.action)),
    withQueue && h("td", null, e.queue ? h("a", { href: link(`/queues/${encodeURIComponent(e.queue)}`) }, e.queue) : ""),
    h("td", null, jobLink(e)),
    h("td", { class: "num" }, num(e.count)),
    h("td", null, e.token_id || h("span", { class: "muted" }, "no auth"), " ", h("span", { class: "badge" }, e.role),
      e.via && h("span", { class: "muted" }, ` via ${e.via}`)),
    h("td", { class: "hide-sm" }, e.detail, e.batch && h("span", { class: "muted" }, `${e.detail ? "; " : ""}batch ${e.batch}`)))));
}

export function auditTable(tbody: HTMLElement, withQueue = true): HTMLElement {
  const cols = ["When", "Action", ...(withQueue ? ["Queue"] : []), "Job", "Jobs", "Who", "Detail"];
  return h("div", { class: "wrap" }, h("table", null, h("thead", null, h("tr", null,
    cols.map((t) => h("th", { scope: "col", class: t === "Jobs" ? "num" : t === "Detail" ? "hide-sm" : "" }, t)))), tbody));
}

export async function auditPage(ctx: Ctx): Promise<void> {
  const sp = ctx.url.searchParams;
  const queue = sp.get("queue") ?? "", job = sp.get("job") ?? "", before = sp.get("before") ?? "";
  const page = await api.audit({ queue: queue || undefined, job: (queue && job) || undefined, before: before || undefined });
  const input = h("input", { type: "search", id: "audit-queue", value: queue, "data-filter": true, placeholder: "queue name",
    "aria-label": "Only this queue's entries" });
  const form = h("form", { class: "row", role: "search", "aria-label": "Filter the audit log", on: { submit: (e: Event) => {
    e.preventDefault();
    setQuery({ queue: input.value.trim(), job: null, before: null });
  } } }, input, h("button", { type: "submit" }, "Filter"));
  const tbody = auditRows(page.entries);
  const here = link("/audit") + (queue ? `?queue=${encodeURIComponent(queue)}${job ? `&job=${encodeURIComponent(job)}` : ""}` : "");
  const sep = here.includes("?") ? "&" : "?";
  replace(ctx.main, h("h1", null, "Audit log"),
    h("p", { class: "muted" }, "Every action on a job or a queue made through the API (the console's included): who, what, when."),
    form,
    !page.enabled ? empty("This server keeps no audit log (it runs without a store).")
      : page.entries.length ? auditTable(tbody)
        : empty(before ? "No older entries." : queue ? `No action recorded on ${queue}${job ? ` / ${job}` : ""}.` : "No action recorded yet."),
    h("nav", { class: "row", "aria-label": "Pages" },
      before && h("a", { class: "btn", href: here }, "Newest"),
      page.next_before && h("a", { class: "btn", href: `${here}${sep}before=${encodeURIComponent(page.next_before)}`, rel: "next" }, "Older")));
  rowKeys(ctx, tbody);
}

/** A job's own entries, for its page. */
export async function jobAudit(queue: string, job: string): Promise<HTMLElement> {
  try {
    const page = await api.audit({ queue, job, limit: 20 });
    if (!page.enabled) return h("p", { class: "muted" }, "This server keeps no audit log.");
    if (!page.entries.length) return h("p", { class: "muted" }, "No action recorded on this job.");
    return h("div", null, auditTable(auditRows(page.entries, false), false),
      h("p", null, h("a", { href: link(`/audit?queue=${encodeURIComponent(queue)}&job=${encodeURIComponent(job)}`) }, "All of this job's entries")));
  } catch (e) {
    return h("p", { class: "muted" }, `History unavailable: ${(e as Error).message}`);
  }
}
