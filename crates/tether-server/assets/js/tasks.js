// Delegated tasks as cards in the parent's timeline: each `delegation_started` event
// places a card (in the parent turn that delegated); its live state (status, turn
// version, availability, what it waits for) comes from the parent's delegations list,
// read again when a delegation event arrives or the list stream says a task changed.
// A person continues a task with a message or closes it, with a fresh continuation id.

import { api, enc } from "./api.js";
import { h, toast } from "./dom.js";
import { continuationId } from "./delegate.js";
import { treeTotal } from "./usage.js";

const AVAILABILITY = {
  running: "running",
  continuable_live: "can continue (live)",
  continuable_resume: "can continue (resumes)",
  released: "closed",
  not_continuable: "cannot continue",
};

export class TaskCards {
  /** `act(call)` runs an API call and shows its error. */
  constructor({ act }) {
    this.act = act;
    this.reset(null);
  }

  /** Forgets the cards (a new parent conversation is shown). */
  reset(parentId) {
    this.parentId = parentId;
    this.cards = new Map(); // task id → card element
    this.states = new Map(); // task id → last Continuation seen
    clearTimeout(this.timer);
  }

  has(taskId) {
    return this.cards.has(taskId);
  }

  /** The card of a `delegation_started` payload (made once per task). */
  card(p) {
    const existing = this.cards.get(p.task_id);
    if (existing) return existing;
    const message = h("input", { class: "task-message", placeholder: "Message to continue the task with", "aria-label": "Message for the task" });
    const cont = h("button", { type: "button", class: "small", dataset: { action: "continue" }, disabled: true }, "Continue");
    const close = h("button", { type: "button", class: "small", dataset: { action: "close" } }, "Close");
    const el = h("div", { class: "task-card", dataset: { taskId: p.task_id, status: "running" } },
      h("header", null,
        h("strong", null, "Delegated task"),
        h("span", { class: "task-agent" }, p.agent_type),
        h("a", { class: "task-link", href: `#c=${encodeURIComponent(p.task_id)}` }, "Open sub-conversation")),
      h("p", { class: "task-text" }, p.task),
      h("div", { class: "task-state" },
        h("span", { class: "badge task-status" }, "running"),
        h("span", { class: "task-version" }, "turn 1"),
        h("span", { class: "task-availability-label" }, "availability:"),
        h("span", { class: "task-availability" }, "")),
      h("p", { class: "task-blocked", hidden: true }),
      h("p", { class: "task-usage muted small-text" }),
      h("div", { class: "task-worktree", hidden: true },
        h("span", { class: "task-changes" }),
        h("button", { type: "button", class: "small primary", dataset: { action: "merge" } }, "Merge"),
        h("button", { type: "button", class: "small", dataset: { action: "discard" } }, "Discard")),
      h("div", { class: "card-actions" }, message, cont, close));
    cont.addEventListener("click", () => this.continueTask(p.task_id, message));
    message.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        if (!cont.disabled) this.continueTask(p.task_id, message);
      }
    });
    close.addEventListener("click", () => this.closeTask(p.task_id));
    el.querySelector("[data-action=merge]").addEventListener("click", () =>
      this.worktreeAction(p.task_id, "merge", "Merged into this conversation's branch"));
    el.querySelector("[data-action=discard]").addEventListener("click", () =>
      this.worktreeAction(p.task_id, "discard", "The task's changes were discarded and the task closed"));
    this.cards.set(p.task_id, el);
    const known = this.states.get(p.task_id);
    if (known) this.paint(el, known);
    this.refreshSoon();
    return el;
  }

  /** Reads the tasks' live state soon (coalescing bursts). */
  refreshSoon(ms = 100) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), ms);
  }

  async refresh() {
    const parent = this.parentId;
    if (!parent || !this.cards.size) return;
    let tasks;
    try {
      tasks = await api("GET", `/api/v1/conversations/${enc(parent)}/delegations`);
    } catch {
      return; // The next event or change reads it again.
    }
    if (parent !== this.parentId) return;
    for (const c of tasks) {
      this.states.set(c.task_id, c);
      const el = this.cards.get(c.task_id);
      if (el) this.paint(el, c);
    }
  }

  paint(el, c) {
    el.dataset.status = c.status;
    el.dataset.availability = c.availability;
    const status = el.querySelector(".task-status");
    status.textContent = c.status;
    status.className = `badge task-status t-${c.status}`;
    el.querySelector(".task-version").textContent = `turn ${c.turn_version}`;
    el.querySelector(".task-version").dataset.turnVersion = c.turn_version;
    el.querySelector(".task-availability").textContent = AVAILABILITY[c.availability] || c.availability;
    const blocked = el.querySelector(".task-blocked");
    blocked.hidden = !c.blocked_on;
    blocked.textContent = c.blocked_on ? `Waiting for a person: ${c.blocked_on.kind} “${c.blocked_on.title}” — open the sub-conversation to answer.` : "";
    const continuable = c.availability === "continuable_live" || c.availability === "continuable_resume";
    el.querySelector("[data-action=continue]").disabled = !continuable;
    el.querySelector(".task-message").disabled = !continuable;
    el.querySelector("[data-action=close]").disabled = c.availability === "released";
    // The task's own worktree (issue 32): its changes, to merge into this conversation's
    // branch or discard.
    if (c.status !== "running") this.paintWorktree(el, c.task_id);
    // The tree's total (the child and anything it delegated), read with the state.
    treeTotal(c.task_id)
      .then((text) => { el.querySelector(".task-usage").textContent = text; })
      .catch(() => {});
  }

  async paintWorktree(el, taskId) {
    const box = el.querySelector(".task-worktree");
    let w = null;
    try {
      w = await api("GET", `/api/v1/conversations/${enc(taskId)}/worktree`);
    } catch {
      box.hidden = true; // The next refresh reads it again.
      return;
    }
    box.hidden = w.status !== "active";
    box.dataset.files = w.changed_files.length;
    el.querySelector(".task-changes").textContent = w.changed_files.length
      ? `Changes on ${w.branch}: ${w.changed_files.join(", ")} `
      : `No changes on ${w.branch} `;
    el.querySelector("[data-action=merge]").disabled = !w.changed_files.length;
  }

  async worktreeAction(taskId, action, done) {
    const ok = await this.act(() => api("POST", `/api/v1/conversations/${enc(taskId)}/worktree`, { action }));
    if (ok) toast(done);
    this.refreshSoon(0);
  }

  async continueTask(taskId, input) {
    const text = input.value.trim();
    if (!text) {
      input.focus();
      return;
    }
    const ok = await this.act(() => api("POST", `/api/v1/conversations/${enc(taskId)}/continue`, { message: text, continuation_id: continuationId() }));
    if (ok) input.value = "";
    this.refreshSoon(0);
  }

  async closeTask(taskId) {
    const ok = await this.act(() => api("POST", `/api/v1/conversations/${enc(taskId)}/close`, { continuation_id: continuationId() }));
    if (ok) toast("Task closed");
    this.refreshSoon(0);
  }
}
