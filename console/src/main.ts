/** The console's shell: sign-in, routing (every page and filter is a URL under
 * /console/), the navigation, the theme and the keyboard. The pages are in views/. */
import { api, ApiError, devNamespace, setDevNamespace, setToken, token, type WhoAmI } from "./api";
import { h, replace, toast } from "./dom";
import { queuesPage } from "./views/queues";
import { queuePage } from "./views/queue";
import { jobPage } from "./views/job";
import { failuresPage } from "./views/failures";
import { schedulesPage } from "./views/schedules";
import { workersPage } from "./views/workers";
import { metricsPage } from "./views/metrics";
import { auditPage } from "./views/audit";
import { enginesPage, engineRunPage, flinkPage } from "./views/engines";
import { durablePage } from "./views/durable";

export const BASE = "/console";

export interface Ctx {
  me: WhoAmI;
  main: HTMLElement;
  url: URL;
  params: Record<string, string>;
  /** Register work to undo when the page is left (streams, timers, key handlers). */
  onLeave(fn: () => void): void;
}

export type Page = (ctx: Ctx) => Promise<void> | void;

const routes: [RegExp, Page, string][] = [
  [/^\/?$/, queuesPage, "queues"],
  [/^\/queues\/(?<queue>[^/]+)\/?$/, queuePage, "queues"],
  [/^\/queues\/(?<queue>[^/]+)\/jobs\/(?<job>[^/]+)\/?$/, jobPage, "queues"],
  [/^\/queues\/(?<queue>[^/]+)\/failures\/?$/, failuresPage, "queues"],
  [/^\/schedules\/?$/, schedulesPage, "schedules"],
  [/^\/workers\/?$/, workersPage, "workers"],
  [/^\/queues\/(?<queue>[^/]+)\/metrics\/?$/, metricsPage, "queues"],
  [/^\/audit\/?$/, auditPage, "audit"],
  [/^\/engines\/?$/, enginesPage, "engines"],
  [/^\/engines\/runs\/(?<run>[^/]+)\/?$/, engineRunPage, "engines"],
  [/^\/engines\/flink\/(?<name>[^/]+)\/?$/, flinkPage, "engines"],
  [/^\/durable(?:\/(?<root>[^/]+))?\/?$/, durablePage, "durable"],
];

let me: WhoAmI | null = null;
let leaving: (() => void)[] = [];

export function can(action: string): boolean {
  return !!me && me.actions.includes(action);
}

export const canAdmin = () => can("jobs:admin");

export function link(path: string): string {
  return BASE + path;
}

export function navigate(to: string, replaceState = false): void {
  if (replaceState) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  void render();
}

/** Change the page's query string (a filter) without adding a history entry per keystroke. */
export function setQuery(changes: Record<string, string | null>, push = true): void {
  const url = new URL(location.href);
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === "") url.searchParams.delete(k);
    else url.searchParams.set(k, v);
  }
  navigate(url.pathname + url.search, !push);
}

function nav(active: string): void {
  const items: [string, string, string][] = [
    ["queues", "Queues", "/"],
    ["schedules", "Schedules", "/schedules"],
    ["workers", "Workers", "/workers"],
    ["engines", "Engines", "/engines"],
    ["durable", "Durable", "/durable"],
    ["audit", "Audit", "/audit"],
  ];
  replace(
    document.getElementById("nav")!,
    items.map(([id, label, path]) =>
      h("a", { href: link(path), "aria-current": id === active ? "page" : false }, label),
    ),
  );
}

function who(): void {
  const theme = document.documentElement.dataset.theme ?? "auto";
  const themeButton = h(
    "button",
    {
      type: "button",
      "aria-label": `Theme: ${theme}. Switch theme`,
      on: {
        click: () => {
          const next = theme === "dark" ? "light" : theme === "light" ? "auto" : "dark";
          if (next === "auto") {
            delete document.documentElement.dataset.theme;
            localStorage.removeItem("loam.theme");
          } else {
            document.documentElement.dataset.theme = next;
            localStorage.setItem("loam.theme", next);
          }
          who();
        },
      },
    },
    theme === "dark" ? "Dark" : theme === "light" ? "Light" : "Auto",
  );
  const box = document.getElementById("who")!;
  if (!me) return replace(box, themeButton);
  // Without auth (loam dev) any namespace can be looked at: Celery apps on
  // loam://host/<namespace> put their queues in theirs.
  const nsInput = !me.auth && h("input", { id: "dev-namespace", value: me.namespace, size: 12, "aria-label": "Namespace",
    on: { change: (e: Event) => {
      setDevNamespace((e.target as HTMLInputElement).value.trim() || null);
      me = null;
      navigate(link("/"));
    } } });
  replace(
    box,
    nsInput ? h("label", { "data-testid": "namespace" }, "namespace ", nsInput)
      : h("span", { "data-testid": "namespace" }, `namespace ${me.namespace}`),
    h("span", { class: "hide-sm" }, me.auth ? me.actions.join(", ") : "(no auth)"),
    themeButton,
    me.auth &&
      h("button", { type: "button", on: { click: () => signOut() } }, "Sign out"),
  );
}

function signOut(): void {
  setToken(null);
  me = null;
  navigate(link("/signin"));
}

function signInPage(main: HTMLElement, message?: string): void {
  nav("");
  who();
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true,
    placeholder: "loam_…", "aria-describedby": "token-help" });
  const error = h("p", { class: "error", role: "alert", hidden: !message }, message ?? "");
  const form = h(
    "form",
    {
      class: "signin panel",
      on: {
        submit: async (e: Event) => {
          e.preventDefault();
          setToken(input.value.trim());
          try {
            me = await api.whoami();
            const back = new URL(location.href).searchParams.get("next");
            navigate(back && back.startsWith(BASE + "/") ? back : link("/"));
          } catch (err) {
            setToken(null);
            error.hidden = false;
            error.textContent = err instanceof ApiError ? err.message : String(err);
          }
        },
      },
    },
    h("h1", null, "Sign in"),
    h("p", null, h("label", { for: "token" }, "API token")),
    input,
    h("p", { id: "token-help", class: "muted" },
      "The token is kept in this tab only (session storage) and sent as a bearer header. ",
      "Create one with ", h("code", null, "loam tokens create --namespace NS --actions jobs:read"), "."),
    error,
    h("button", { class: "primary", type: "submit" }, "Sign in"),
  );
  replace(main, form);
  input.focus();
}

async function render(): Promise<void> {
  for (const fn of leaving) fn();
  leaving = [];
  const main = document.getElementById("main")!;
  const url = new URL(location.href);
  if (!url.pathname.startsWith(BASE)) return navigate(link("/"), true);
  const path = url.pathname.slice(BASE.length) || "/";
  if (path === "/signin") return signInPage(main);
  if (!me) {
    try {
      me = await api.whoami();
    } catch (e) {
      if (e instanceof ApiError && e.code === "invalid_argument" && devNamespace()) {
        setDevNamespace(null); // not a namespace name: back to the default one
        toast(e.message);
        return render();
      }
      if (e instanceof ApiError && (e.status === 401 || e.status === 403)) {
        if (token()) setToken(null);
        history.replaceState(null, "", link(`/signin?next=${encodeURIComponent(url.pathname + url.search)}`));
        return signInPage(main, token() ? (e as ApiError).message : undefined);
      }
      replace(main, h("p", { class: "error", role: "alert" }, `Cannot reach the server: ${(e as Error).message}`));
      return;
    }
  }
  who();
  for (const [re, page, section] of routes) {
    const m = re.exec(path);
    if (!m) continue;
    nav(section);
    const params = Object.fromEntries(  // an optional group that did not match is left out
      Object.entries(m.groups ?? {}).filter(([, v]) => v !== undefined).map(([k, v]) => [k, decodeURIComponent(v)]),
    );
    const ctx: Ctx = { me: me!, main, url, params, onLeave: (fn) => leaving.push(fn) };
    replace(main, h("p", { class: "loading", role: "status" }, "Loading…"));
    try {
      await page(ctx);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return signOut();
      replace(main, h("div", { class: "error", role: "alert" },
        h("p", null, e instanceof ApiError ? `${e.code}: ${e.message}` : String(e)),
        h("p", null, h("a", { href: link("/") }, "Back to the queues"))));
    }
    return;
  }
  nav("");
  replace(main, h("div", { class: "empty" }, h("h1", null, "Not found"),
    h("p", null, "No page at this address. ", h("a", { href: link("/") }, "See the queues"), ".")));
}

// Links inside the app navigate without a reload.
document.addEventListener("click", (e) => {
  const a = (e.target as Element).closest?.("a");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith(BASE + "/") && url.pathname !== BASE) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener("popstate", () => void render());

// Keyboard: g q / g s / g w go to a section, / focuses the page's filter, ? lists the keys.
let pendingG = false;
document.addEventListener("keydown", (e) => {
  const t = e.target as HTMLElement;
  if (e.ctrlKey || e.metaKey || e.altKey || t.closest("input, textarea, select, [contenteditable]")) return;
  if (pendingG) {
    pendingG = false;
    const to = { q: "/", s: "/schedules", w: "/workers", e: "/engines", d: "/durable", a: "/audit" }[e.key];
    if (to) {
      e.preventDefault();
      navigate(link(to));
    }
    return;
  }
  if (e.key === "g") pendingG = true;
  else if (e.key === "/") {
    const filter = document.querySelector<HTMLInputElement>("[data-filter]");
    if (filter) {
      e.preventDefault();
      filter.focus();
    }
  } else if (e.key === "?") {
    toast("Keys: g q queues · g s schedules · g w workers · g e engines · g d durable · g a audit · / filter · j/k move · Enter open · n/p next/first page");
  }
});

void render();
