// The chat history of one conversation as DOM. The stored history (user, agent, status
// and command messages) is the backbone; events add each turn's live detail: streamed
// text, thoughts, tool calls, approval and question cards, and a footer with the turn's
// status and duration. Every history message and every event is applied at most once.

import { h, duration, clock, shortId, errorNodes } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { attachmentUrl, linkTo } from "./api.js";
import {
  toolRow, updateTool, approvalCard, resolveApproval, questionCard, resolveQuestion, tickDeadline,
} from "./activity.js";

/** A message's files: images as thumbnails (linked to the full image), others as
 * download links; `null` when there are none. */
function attachmentsOf(m) {
  const list = m.attachments || [];
  if (!list.length) return null;
  return h("div", { class: "msg-files" }, list.map((a) => {
    const url = attachmentUrl(a.id);
    if (a.kind === "image") {
      return linkTo(h("a", { target: "_blank", rel: "noopener", class: "msg-thumb", title: a.name },
        linkTo(h("img", { alt: a.name, loading: "lazy" }), "src", url)), "href", url);
    }
    return linkTo(h("a", { download: a.name, class: "msg-file" }, `📄 ${a.name}`), "href", url);
  }));
}

const TERMINAL = { turn_completed: "completed", turn_failed: "failed", turn_cancelled: "cancelled", turn_interrupted: "interrupted" };

export class Timeline {
  /**
   * `actions`: { decide(approvalId, decision) → Promise<bool>, answer(questionId, text) →
   * Promise<bool>, taskCard(delegation_started payload) → the task's card element }
   */
  constructor(root, actions, { ticking = true } = {}) {
    this.root = root;
    this.actions = actions;
    this.reset();
    if (ticking) this.ticker = setInterval(() => this.tick(), 1000);
  }

  reset() {
    this.root.replaceChildren();
    this.lastMessageId = 0;
    this.lastSession = null;
    this.turns = new Map(); // turn id → turn view
    this.sessions = new Map(); // session id → { agent, model } from session_started
    this.queueLen = 0;
    this.dirty = new Set();
    this.frame = 0;
    // While a span is drawn: the turns shown already (from later spans), whose messages
    // and events belong to them.
    this.span = null;
    this.marker = null;
  }

  destroy() {
    clearInterval(this.ticker);
    cancelAnimationFrame(this.frame);
  }

  /** Whether the view already knows this turn (from history or events). */
  knowsTurn(id) {
    return this.turns.has(id);
  }

  // ---- history -------------------------------------------------------------------

  /** Appends stored messages (oldest first); ids at or below the last one are skipped. */
  addHistory(msgs) {
    const stick = this.nearBottom();
    for (const m of msgs) {
      if (m.id !== undefined) {
        if (m.id <= this.lastMessageId) continue;
        this.lastMessageId = m.id;
      }
      this.addMessage(m);
    }
    this.refreshQueue();
    if (stick) this.scrollToBottom();
  }

  addMessage(m) {
    if (m.session_id && m.session_id !== this.lastSession) {
      if (this.lastSession !== null || m.role !== "status") this.root.append(this.sessionDivider(m.session_id));
      this.lastSession = m.session_id;
    }
    const meta = h("span", { class: "msg-time", title: new Date(m.at_ms).toLocaleString() }, clock(m.at_ms));
    switch (m.role) {
      case "user": {
        // A later span shows this turn, and its input.
        if (this.span && m.turn_id && this.span.later.has(m.turn_id)) return;
        const isCmd = !m.turn_id && m.text.startsWith("/");
        const el = h("div", { class: `msg user${isCmd ? " cmd" : ""}`, dataset: { messageId: m.id } },
          h("div", { class: "bubble" }, m.text, attachmentsOf(m)), meta);
        if (!m.turn_id) return this.root.append(el);
        const turn = this.turns.get(m.turn_id);
        if (!turn) {
          this.root.append(el, this.createTurn(m.turn_id, m.session_id).el);
          this.turns.get(m.turn_id).hasUser = true;
        } else if (!turn.hasUser) {
          turn.el.before(el);
          turn.hasUser = true;
        } else {
          // A second message of the same turn answers the agent's question.
          el.classList.add("answer");
          turn.items.append(el);
        }
        return;
      }
      case "agent": {
        const turn = m.turn_id ? this.turns.get(m.turn_id) : null;
        // In a span, a reply whose turn is not in it belongs to another span (whose
        // turn_completed event carries the text).
        if (!turn && m.turn_id && this.span) return;
        if (turn) {
          // The turn's events (streamed text, then its end) draw the reply; this copy is
          // only used if the turn ended without streaming any text.
          turn.finalText = m.text;
          if (turn.ended && !turn.hasText && m.text) this.addText(turn, m.text, true);
          return;
        }
        return this.root.append(h("div", { class: "msg agent md", dataset: { messageId: m.id }, html: renderMarkdown(m.text) }));
      }
      case "status": {
        const line = h("div", { class: "msg status", dataset: { messageId: m.id } },
          h("span", { class: "status-icon", "aria-hidden": "true" }, "ⓘ"), h("span", { class: "status-text" }, m.text), meta);
        // A turn parked at the vendor's limit (issue 29): its continuation can be
        // cancelled here as with /cancel; a turn that starts later removes the button.
        if (this.actions.command && m.text.includes("— /cancel to stop")) {
          line.append(h("button", {
            type: "button", class: "small cancel-continuation", dataset: { atMs: String(m.at_ms) },
            onclick: (e) => { e.currentTarget.disabled = true; this.actions.command("/cancel"); },
          }, "Cancel continuation"));
        }
        return this.root.append(line);
      }
      case "command":
        return this.root.append(h("div", { class: "msg command", dataset: { messageId: m.id } },
          h("span", { class: "cmd-label" }, "tether"), h("div", { class: "command-text" }, m.text, attachmentsOf(m))));
      default:
        return this.root.append(h("div", { class: "msg status" }, m.text));
    }
  }

  // ---- spans (opening at the end, older on scroll) ----------------------------------

  /**
   * Draws a span from `spans.js` (whole turns with their messages): the newest into the
   * empty timeline, older ones above what is shown, keeping the view where it is.
   */
  showSpan({ events, messages }) {
    const older = this.root.childElementCount > (this.marker ? 1 : 0);
    const target = older ? new Timeline(h("div"), this.actions, { ticking: false }) : this;
    if (older) target.sessions = this.sessions;
    target.span = { later: new Set(this.turns.keys()) };
    target.addHistory(withTurnInputs(messages, events, target.span.later));
    const here = new Set(events.filter((e) => e.payload.type === "turn_started").map((e) => e.turn_id));
    for (const m of messages) if (m.turn_id && !target.span.later.has(m.turn_id)) here.add(m.turn_id);
    // Events of turns that start elsewhere (late strays of older turns) stay out.
    for (const env of events) if (!env.turn_id || here.has(env.turn_id)) target.applyEvent(env);
    cancelAnimationFrame(target.frame);
    target.flush();
    target.span = null;
    if (!older) return;
    const first = this.marker ? this.marker.nextSibling : this.root.firstChild;
    // The session divider at the join is already in the span above it.
    if (first && first.classList && first.classList.contains("session-divider") && first.dataset.sessionId === target.lastSession) first.remove();
    const r = this.root;
    const height = r.scrollHeight;
    const top = r.scrollTop;
    if (this.marker) this.marker.after(...target.root.childNodes);
    else r.prepend(...target.root.childNodes);
    r.scrollTop = top + (r.scrollHeight - height);
    this.turns = new Map([...target.turns, ...this.turns]);
  }

  /** The line at the top while there is more above: `loading`, or a button for `load()`. */
  setOlder(state, load) {
    if (!state) {
      this.marker?.remove();
      this.marker = null;
      return;
    }
    if (!this.marker) {
      this.marker = h("div", { class: "older" });
      this.root.prepend(this.marker);
    }
    this.marker.dataset.state = state;
    this.marker.replaceChildren(state === "loading"
      ? h("span", { class: "muted" }, "Loading earlier messages…")
      : h("button", { type: "button", class: "small", onclick: load }, "Load earlier messages"));
  }

  sessionDivider(sessionId) {
    const info = this.sessions.get(sessionId);
    return h("div", { class: "session-divider", dataset: { sessionId }, role: "separator" },
      h("span", null, `session ${shortId(sessionId)}${info ? ` · ${info.agent}${info.model ? " · " + info.model : ""}` : ""}`));
  }

  // ---- turns ---------------------------------------------------------------------

  createTurn(id, sessionId) {
    const items = h("div", { class: "turn-items" });
    const foot = h("div", { class: "turn-foot" });
    const el = h("article", { class: "turn", dataset: { turnId: id, sessionId: sessionId || "" } }, items, foot);
    const turn = { id, el, items, foot, status: "pending", startedAt: null, endedAt: null, hasUser: false, hasText: false, seg: null, tools: new Map(), cards: new Map(), detail: "" };
    this.turns.set(id, turn);
    this.renderFoot(turn);
    return turn;
  }

  /** The turn of an event, created at the end of the timeline when history lacks it. */
  turnFor(env) {
    if (!env.turn_id) return null;
    return this.turns.get(env.turn_id) || (() => {
      const t = this.createTurn(env.turn_id, env.session_id);
      this.root.append(t.el);
      return t;
    })();
  }

  /** Streamed (or final) agent text; consecutive pieces share one Markdown block. */
  addText(turn, text, final = false) {
    if (!turn.seg || turn.seg.kind !== "text" || turn.items.lastElementChild !== turn.seg.el) {
      const el = h("div", { class: "msg agent md" });
      turn.items.append(el);
      turn.seg = { kind: "text", el, text: "" };
    }
    turn.seg.text += text;
    turn.hasText = true;
    if (final) turn.seg.el.innerHTML = renderMarkdown(turn.seg.text);
    else this.markDirty(turn.seg);
  }

  addThought(turn, text) {
    if (!turn.seg || turn.seg.kind !== "thought" || turn.items.lastElementChild !== turn.seg.el) {
      const body = h("div", { class: "thought-text" });
      const el = h("details", { class: "thought" }, h("summary", null, "Thinking"), body);
      turn.items.append(el);
      turn.seg = { kind: "thought", el, body, text: "" };
    }
    turn.seg.text += text;
    this.markDirty(turn.seg);
  }

  markDirty(seg) {
    this.dirty.add(seg);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  /** Renders streamed segments (at most once per frame). */
  flush() {
    this.frame = 0;
    const stick = this.nearBottom();
    for (const seg of this.dirty) {
      if (seg.kind === "text") seg.el.innerHTML = renderMarkdown(seg.text);
      else seg.body.textContent = seg.text;
    }
    this.dirty.clear();
    if (stick) this.scrollToBottom();
  }

  // ---- events --------------------------------------------------------------------

  /** Applies one event (each event id once; the caller dedupes). */
  applyEvent(env) {
    const p = env.payload;
    const stick = this.nearBottom();
    switch (p.type) {
      case "session_started":
        this.sessions.set(env.session_id, { agent: p.agent, model: p.model });
        for (const d of this.root.querySelectorAll(`.session-divider[data-session-id="${CSS.escape(env.session_id)}"]`)) {
          d.replaceWith(this.sessionDivider(env.session_id));
        }
        break;
      case "turn_started": {
        // A turn started after the parking line: the continuation ran or was superseded.
        for (const b of this.root.querySelectorAll(".cancel-continuation")) {
          if (Number(b.dataset.atMs) < env.at_ms) b.remove();
        }
        const t = this.turnFor(env);
        t.input = p.input;
        t.status = "running";
        t.startedAt = env.at_ms;
        this.renderFoot(t);
        this.refreshQueue();
        break;
      }
      case "message_delta":
        if (env.turn_id) this.addText(this.turnFor(env), p.text);
        break;
      case "thought_delta":
        if (env.turn_id) this.addThought(this.turnFor(env), p.text);
        break;
      case "tool_call": {
        const t = this.turnFor(env);
        if (!t) break;
        const existing = t.tools.get(p.tool_call_id);
        if (existing) updateTool(existing, { title: p.title, status: p.status, detail: p.detail });
        else {
          const row = toolRow({ id: p.tool_call_id, title: p.title, kind: p.kind, status: p.status, detail: p.detail, startedAt: env.at_ms, turnId: env.turn_id });
          t.tools.set(p.tool_call_id, row);
          t.items.append(row);
        }
        break;
      }
      case "tool_call_update": {
        const t = this.turnFor(env);
        const row = t && t.tools.get(p.tool_call_id);
        if (!row) break;
        const done = p.status === "completed" || p.status === "failed";
        updateTool(row, { title: p.title, status: p.status, detail: p.detail, endedAt: done ? env.at_ms : undefined });
        break;
      }
      case "approval_requested": {
        const t = this.turnFor(env);
        if (!t || t.cards.has(p.approval_id)) break;
        const card = approvalCard(p, (d) => this.actions.decide(p.approval_id, d));
        t.cards.set(p.approval_id, card);
        t.items.append(card);
        t.waiting = (t.waiting || 0) + 1;
        this.renderFoot(t);
        break;
      }
      case "approval_resolved":
      case "question_resolved": {
        const t = this.turnFor(env);
        const id = p.approval_id || p.question_id;
        const card = t && t.cards.get(id);
        if (!card || card.classList.contains("resolved")) break;
        if (p.type === "approval_resolved") resolveApproval(card, p.status, p.decided_by);
        else resolveQuestion(card, p.status, p.answer);
        t.waiting = Math.max(0, (t.waiting || 0) - 1);
        this.renderFoot(t);
        break;
      }
      case "question_asked": {
        const t = this.turnFor(env);
        if (!t || t.cards.has(p.question_id)) break;
        const card = questionCard(p, (text) => this.actions.answer(p.question_id, text));
        t.cards.set(p.question_id, card);
        t.items.append(card);
        t.waiting = (t.waiting || 0) + 1;
        this.renderFoot(t);
        break;
      }
      case "turn_completed":
      case "turn_failed":
      case "turn_cancelled":
      case "turn_interrupted": {
        const t = this.turnFor(env);
        if (!t) break;
        t.status = TERMINAL[p.type];
        t.endedAt = env.at_ms;
        t.ended = true;
        const text = (p.type === "turn_completed" && p.text) || t.finalText;
        if (!t.hasText && text) this.addText(t, text, true);
        if (p.type === "turn_failed") {
          t.detail = p.code;
          // The reason, with its stable code, where the reply would be.
          t.items.append(h("div", { class: "turn-error" }, ...errorNodes(p)));
        }
        if (p.type === "turn_interrupted") t.detail = p.reason;
        for (const card of t.cards.values()) {
          if (card.classList.contains("pending")) {
            if (card.dataset.approvalId) resolveApproval(card, "cancelled");
            else resolveQuestion(card, "cancelled");
          }
        }
        t.waiting = 0;
        // The reply is complete: draw it now, together with the final status.
        for (const seg of this.dirty) {
          if (t.items.contains(seg.el)) {
            this.dirty.delete(seg);
            if (seg.kind === "text") seg.el.innerHTML = renderMarkdown(seg.text);
            else seg.body.textContent = seg.text;
          }
        }
        this.renderFoot(t);
        this.refreshQueue();
        break;
      }
      case "delegation_started": {
        // A card for the task, in the parent turn that delegated.
        const t = this.turnFor(env);
        const card = this.actions.taskCard(p);
        if (!card.isConnected || !this.root.contains(card)) (t ? t.items : this.root).append(card);
        break;
      }
      default:
        break;
    }
    if (stick) this.scrollToBottom();
  }

  renderFoot(t) {
    let label;
    let cls = t.status;
    if (t.status === "running" && t.waiting) {
      label = "waiting for you";
      cls = "waiting";
    } else if (t.status === "running") label = "running";
    else if (t.status === "queued") label = t.queuePos ? `queued · #${t.queuePos} in line` : "queued";
    else if (t.status === "pending") label = "";
    else label = t.status + (t.detail ? ` · ${t.detail}` : "");
    const time = t.startedAt ? duration((t.endedAt || Date.now()) - t.startedAt) : "";
    t.el.dataset.status = t.status;
    t.el.classList.toggle("live", t.status === "running");
    t.foot.className = `turn-foot f-${cls}`;
    t.foot.replaceChildren(
      label ? h("span", { class: "turn-status" }, t.status === "running" ? h("span", { class: "dots", "aria-hidden": "true" }) : null, label) : "",
      time ? h("span", { class: "turn-time" }, time) : "");
  }

  /** Marks the last `queueLen` turns that have not started as queued, with their place. */
  setQueueLen(n) {
    this.queueLen = n;
    this.refreshQueue();
  }

  refreshQueue() {
    const waiting = [...this.turns.values()].filter((t) => t.status === "pending" || t.status === "queued");
    const queued = new Set(waiting.slice(Math.max(0, waiting.length - this.queueLen)));
    let pos = 0;
    for (const t of waiting) {
      const next = queued.has(t) ? "queued" : "pending";
      const p = next === "queued" ? ++pos : 0;
      if (t.status !== next || t.queuePos !== p) {
        t.status = next;
        t.queuePos = p;
        this.renderFoot(t);
      }
    }
  }

  /** Running turns' clocks and pending cards' deadlines. */
  tick() {
    const now = Date.now();
    for (const t of this.turns.values()) {
      if (t.status === "running") this.renderFoot(t);
    }
    for (const card of this.root.querySelectorAll(".card.pending")) tickDeadline(card, now);
  }

  nearBottom() {
    const r = this.root;
    return r.scrollHeight - r.scrollTop - r.clientHeight < 80;
  }

  scrollToBottom() {
    this.root.scrollTop = this.root.scrollHeight;
  }
}

/**
 * `messages` with a user message made from `turn_started.input` for each turn that starts
 * in `events` but whose own message is in an older span, placed at the time it started.
 */
function withTurnInputs(messages, events, later) {
  const has = new Set(messages.filter((m) => m.role === "user" && m.turn_id).map((m) => m.turn_id));
  const out = [...messages];
  for (const env of events) {
    if (env.payload.type !== "turn_started" || has.has(env.turn_id) || later.has(env.turn_id)) continue;
    const m = { role: "user", text: env.payload.input, turn_id: env.turn_id, session_id: env.session_id, at_ms: env.at_ms };
    const i = out.findIndex((x) => x.at_ms > env.at_ms);
    out.splice(i < 0 ? out.length : i, 0, m);
  }
  return out;
}
