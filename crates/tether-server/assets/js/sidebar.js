// The conversation list: title, agent, state badge and last activity; a "Sub" badge for
// delegated sub-conversations (shown only with their filter on) and archived ones behind
// their own filter. Loaded a page at a time (more as the list scrolls to its end) and
// kept fresh by the list event stream, which is read again after every (re)connect.

import { api, apiPage, followList } from "./api.js";
import { $, h, ago, stateLabel, setError } from "./dom.js";

const PAGE = 50;
const FILTER_KEY = "tether.filters";
const CWD_KEY = "tether.cwd";

export class Sidebar {
  /** `onSelect(id)` opens a conversation; `onChange(conv)` hears of every change. */
  constructor({ onSelect, onChange = () => {} }) {
    this.onSelect = onSelect;
    this.onChange = onChange;
    this.items = [];
    this.selected = null;
    this.next = null; // cursor of the next page, null when all are loaded
    this.generation = 0; // bumps when the filters change, so stale pages are dropped
    let saved = {};
    try {
      saved = JSON.parse(localStorage.getItem(FILTER_KEY) || "{}");
    } catch {
      saved = {};
    }
    $("filter-sub").checked = !!saved.sub;
    $("filter-archived").checked = !!saved.archived;
    for (const id of ["filter-sub", "filter-archived"]) {
      $(id).addEventListener("change", () => {
        try {
          localStorage.setItem(FILTER_KEY, JSON.stringify({ sub: $("filter-sub").checked, archived: $("filter-archived").checked }));
        } catch {
          // No storage: the filters last as long as the page.
        }
        if (id === "filter-archived") this.reload();
        else this.render();
      });
    }
    try {
      $("new-cwd").value = localStorage.getItem(CWD_KEY) || "";
    } catch {
      // No storage: the folder lasts as long as the page.
    }
    $("conversation-list").addEventListener("keydown", (e) => this.onKey(e));
    const nav = $("conversation-list").closest("nav");
    nav.addEventListener("scroll", () => {
      if (nav.scrollHeight - nav.scrollTop - nav.clientHeight < 120) this.more();
    });
  }

  start() {
    this.stop();
    // The folder of "+ New": the default one unless chosen, offered from the roots.
    this.folders = new Set();
    api("GET", "/api/v1/workspace").then((w) => {
      $("new-cwd").placeholder = w.default_cwd;
      for (const r of w.roots) this.folders.add(r);
      this.offerFolders();
    }, () => {});
    // "5 min ago" ages without any change to tell about.
    this.ticker = setInterval(() => {
      if (!document.hidden) this.render();
    }, 30000);
    this.items = [];
    this.next = null;
    this.stream = followList((msg) => this.changed(msg), () => this.refresh(), (state) => {
      const el = $("connection");
      el.textContent = state === "reconnecting" ? "reconnecting…" : "";
      el.hidden = state !== "reconnecting";
      el.dataset.state = state;
    });
  }

  stop() {
    clearInterval(this.ticker);
    if (this.stream) this.stream.close();
    this.stream = null;
  }

  query(cursor) {
    const archived = $("filter-archived").checked;
    return `/api/v1/conversations?include_archived=${archived}&limit=${PAGE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
  }

  /** The archived filter changed: start the list again. */
  reload() {
    this.generation++;
    this.items = [];
    this.next = null;
    this.refresh();
  }

  /** Reads the first page again and merges it (pages further down stay as they are). */
  async refresh() {
    const gen = this.generation;
    try {
      const { data, next } = await apiPage(this.query(null));
      if (gen !== this.generation) return;
      const first = !this.items.length;
      // Whatever this page should hold but does not (archived, say) has gone away; rows
      // older than the page belong to the pages after it.
      const ids = new Set(data.map((c) => c.id));
      const floor = data.length ? data[data.length - 1].updated_at_ms : Infinity;
      this.items = this.items.filter((c) => ids.has(c.id) || (next && c.updated_at_ms < floor));
      for (const c of data) this.upsert(c);
      if (first) this.next = next;
      setError($("connection"), "");
      this.render();
      this.fill();
    } catch (e) {
      setError($("connection"), e.status === 0 ? "offline" : e);
    }
  }

  /** The next page, when the end of the list is in sight. */
  async more() {
    if (!this.next || this.loadingMore) return;
    const gen = this.generation;
    this.loadingMore = true;
    try {
      const { data, next } = await apiPage(this.query(this.next));
      if (gen !== this.generation) return;
      for (const c of data) this.upsert(c);
      this.next = next;
      this.render();
      this.fill();
    } catch (e) {
      setError($("connection"), e.status === 0 ? "offline" : e);
    } finally {
      this.loadingMore = false;
    }
  }

  /** Loads more while the list does not fill its column. */
  fill() {
    const nav = $("conversation-list").closest("nav");
    if (this.next && nav.scrollHeight <= nav.clientHeight + 120) this.more();
  }

  /** One message of the list stream. */
  changed({ change, conversation }) {
    if (!conversation) return;
    if (change === "archived" && !$("filter-archived").checked) {
      this.items = this.items.filter((c) => c.id !== conversation.id);
      this.render();
    } else {
      this.update(conversation);
    }
    this.onChange(conversation);
  }

  upsert(conv) {
    const i = this.items.findIndex((c) => c.id === conv.id);
    if (i < 0) this.items.push(conv);
    else this.items[i] = conv;
  }

  /** Puts a fresher copy of one conversation in the list (from the open chat). */
  update(conv) {
    const i = this.items.findIndex((c) => c.id === conv.id);
    if (i >= 0) this.items[i] = conv;
    else this.items.unshift(conv);
    this.render();
  }

  select(id) {
    this.selected = id;
    this.render();
  }

  visible() {
    const sub = $("filter-sub").checked;
    const archived = $("filter-archived").checked;
    return this.items
      .filter((c) => (sub || c.kind !== "delegate") && (archived || !c.archived))
      .sort((a, b) => b.updated_at_ms - a.updated_at_ms);
  }

  render() {
    if (this.folders) this.offerFolders();
    const list = $("conversation-list");
    const focused = document.activeElement && document.activeElement.closest(".conv-item");
    const focusId = focused && focused.dataset.id;
    const now = Date.now();
    const rows = this.visible().map((c) => {
      const [label, cls] = stateLabel(c.state);
      const current = c.id === this.selected;
      return h("li", null, h("a", {
        class: `conv-item${current ? " current" : ""}${c.archived ? " archived" : ""}`,
        href: `#c=${encodeURIComponent(c.id)}`,
        dataset: { id: c.id, kind: c.kind, state: c.state },
        "aria-current": current ? "page" : null,
        onclick: (e) => {
          e.preventDefault();
          this.onSelect(c.id);
        },
      },
      h("span", { class: "conv-line" },
        h("span", { class: "conv-title" }, c.title),
        c.kind === "delegate" ? h("span", { class: "badge sub", title: "Delegated sub-conversation" }, "Sub") : null,
        c.archived ? h("span", { class: "badge archived-badge" }, "archived") : null),
      h("span", { class: "conv-line meta" },
        h("span", { class: "conv-agent" }, c.agent),
        h("span", { class: `badge ${cls}` }, label),
        c.pending_approvals.length + c.pending_questions.length ? h("span", { class: "badge s-waiting", title: "Pending approvals and questions" }, `${c.pending_approvals.length + c.pending_questions.length} pending`) : null,
        h("span", { class: "conv-time", title: new Date(c.updated_at_ms).toLocaleString() }, ago(c.updated_at_ms, now)))));
    });
    list.replaceChildren(...rows);
    $("conversation-empty").hidden = rows.length > 0;
    if (focusId) list.querySelector(`.conv-item[data-id="${CSS.escape(focusId)}"]`)?.focus();
  }

  /** Up and down arrows move between conversations. */
  onKey(e) {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
    const links = [...$("conversation-list").querySelectorAll(".conv-item")];
    const i = links.indexOf(document.activeElement);
    if (i < 0) return;
    e.preventDefault();
    links[Math.max(0, Math.min(links.length - 1, i + (e.key === "ArrowDown" ? 1 : -1)))].focus();
  }

  async create() {
    const cwd = $("new-cwd").value.trim();
    const conv = await api("POST", "/api/v1/conversations", cwd ? { cwd } : {});
    try {
      if (cwd) localStorage.setItem(CWD_KEY, cwd);
      else localStorage.removeItem(CWD_KEY);
    } catch {
      // No storage.
    }
    this.update(conv);
    return conv;
  }

  /** The folders "+ New" offers: the workspace roots and those of listed conversations. */
  offerFolders() {
    for (const c of this.items) if (c.cwd) this.folders.add(c.cwd);
    const list = $("cwd-options");
    const want = [...this.folders].sort();
    if (list.options.length === want.length && [...list.options].every((o, i) => o.value === want[i])) return;
    list.replaceChildren(...want.map((f) => h("option", { value: f })));
  }
}
