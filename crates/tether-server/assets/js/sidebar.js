// The conversation list: title, agent, state badge and last activity; a "Sub" badge for
// delegated sub-conversations (shown only with their filter on) and archived ones behind
// their own filter. Refreshed every few seconds while the page is visible.

import { api } from "./api.js";
import { $, h, ago, stateLabel } from "./dom.js";

const POLL_MS = 4000;
const FILTER_KEY = "tether.filters";

export class Sidebar {
  /** `onSelect(id)` opens a conversation. */
  constructor({ onSelect }) {
    this.onSelect = onSelect;
    this.items = [];
    this.selected = null;
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
        this.refresh();
      });
    }
    $("conversation-list").addEventListener("keydown", (e) => this.onKey(e));
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) this.refresh();
    });
  }

  start() {
    this.stop();
    this.refresh();
    this.timer = setInterval(() => {
      if (!document.hidden) this.refresh();
    }, POLL_MS);
  }

  stop() {
    clearInterval(this.timer);
  }

  async refresh() {
    try {
      const archived = $("filter-archived").checked;
      this.items = await api("GET", `/api/v1/conversations?include_archived=${archived}`);
      $("connection").textContent = "";
      this.render();
    } catch (e) {
      $("connection").textContent = e.status === 0 ? "offline" : e.message;
    }
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
    const conv = await api("POST", "/api/v1/conversations", {});
    this.update(conv);
    return conv;
  }
}
