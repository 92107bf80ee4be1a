// A delegated sub-conversation (kind `delegate`, made by a parent agent over MCP): the
// binding bar shows the task's availability and its parent; a person continues it with a
// message or closes it, through the continuation endpoints that share the parent agents'
// idempotency ledger (each action carries a fresh continuation id).

import { api, enc } from "./api.js";
import { $, toast } from "./dom.js";

const AVAILABILITY = {
  running: "running",
  continuable_live: "can continue (live)",
  continuable_resume: "can continue (resumes)",
  released: "closed",
  not_continuable: "cannot continue",
};

/** Why the composer of a task in this state is locked. */
const LOCKED = {
  released: "This task was closed: it takes no more messages (its history is kept).",
  not_continuable: "This task cannot continue: its agent never started a session it could resume.",
};

/** A new continuation id (crypto.randomUUID needs a secure context; this does not). */
export function continuationId() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return "web-" + [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
}

export class DelegateBar {
  /** `act(call)` runs an API call and shows its error; `after()` refreshes the chat. */
  constructor({ act, after, changed }) {
    this.act = act;
    this.after = after;
    this.changed = changed;
    this.id = null;
    this.availability = null;
    $("close-task").addEventListener("click", () => this.close());
  }

  /** Shows (or hides, for a chat) the sub-task row for `conv`. */
  async show(conv) {
    const isTask = conv && conv.kind === "delegate";
    $("delegate-row").hidden = !isTask;
    $("picker-row").hidden = isTask;
    $("new-session").hidden = $("detach").hidden = isTask;
    if (this.id !== (isTask ? conv.id : null)) this.availability = null;
    this.id = isTask ? conv.id : null;
    if (!isTask) return;
    let c;
    try {
      c = await api("GET", `/api/v1/conversations/${enc(conv.id)}/continuation`);
    } catch {
      return;
    }
    if (this.id !== conv.id) return;
    const info = $("delegate-info");
    info.textContent = `${c.agent_type} · turn ${c.turn_version} · ${AVAILABILITY[c.availability] || c.availability}`;
    info.dataset.availability = c.availability;
    const parent = $("delegate-parent");
    parent.hidden = !c.parent_conversation_id;
    if (c.parent_conversation_id) parent.href = `#c=${encodeURIComponent(c.parent_conversation_id)}`;
    $("close-task").disabled = c.availability === "released";
    if (this.availability !== c.availability) {
      this.availability = c.availability;
      this.changed();
    }
  }

  /** Why a delegated conversation cannot take messages, or null when it can. */
  lockReason(conv) {
    if (!conv || conv.kind !== "delegate" || this.id !== conv.id) return null;
    return LOCKED[this.availability] || null;
  }

  /** Continues the task with `text`; false when it was refused. */
  send(text) {
    const id = this.id;
    return this.act(() => api("POST", `/api/v1/conversations/${enc(id)}/continue`, { message: text, continuation_id: continuationId() }));
  }

  async close() {
    const id = this.id;
    if (!id) return;
    const ok = await this.act(() => api("POST", `/api/v1/conversations/${enc(id)}/close`, { continuation_id: continuationId() }));
    if (ok) toast("Task closed");
    this.after();
  }
}

/** Whether a message in a delegated conversation goes to /continue (not a command). */
export const continues = (conv, text) => conv && conv.kind === "delegate" && !text.startsWith("/");
