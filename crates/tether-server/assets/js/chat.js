// One open conversation: header (title, rename, archive), binding bar (session id, status,
// New Session, Detach, agent and model pickers with the drift notice), the timeline fed by
// the history and the live event stream, and sending messages.

import { api, enc, followEvents, historyAfter, uploadFiles, ApiError } from "./api.js";
import { $, h, shortId, stateLabel, copyText, toast, setError, errorNodes } from "./dom.js";
import { Timeline } from "./timeline.js";
import { Composer } from "./composer.js";
import { DelegateBar, continues } from "./delegate.js";
import { TaskCards } from "./tasks.js";
import { loadSpan } from "./spans.js";
import { renderChats, continueOn } from "./people.js";

/** Older messages load when the view is this close to the top (px). */
const NEAR_TOP = 300;

const REFRESH_EVENTS = new Set(["message_delta", "thought_delta"]);
/** What the model picker shows and sends for the agent's own default model. */
export const DEFAULT_MODEL = "default";

const HISTORY_EVENTS = new Set(["status", "session_started", "turn_completed", "turn_failed", "turn_cancelled", "turn_interrupted", "question_resolved"]);

export class Chat {
  /** `onChange(conversation)` tells the list that a conversation changed. */
  constructor({ onChange }) {
    this.onChange = onChange;
    this.conv = null;
    this.agents = [];
    this.tasks = new TaskCards({ act: (call) => this.act(call) });
    this.timeline = new Timeline($("timeline"), {
      taskCard: (p) => this.tasks.card(p),
      decide: (id, decision) => this.act(() => api("POST", `/api/v1/approvals/${enc(id)}`, { decision })),
      answer: (id, answer) => this.act(() => api("POST", `/api/v1/questions/${enc(id)}`, { answer })),
      command: (text) => this.send(text),
    });
    this.composer = new Composer($("composer"), { send: (text, files) => this.send(text, files), stop: () => this.stop() });
    this.delegate = new DelegateBar({ act: (call) => this.act(call), after: () => this.loadHistory(), changed: () => this.renderLock() });
    this.bind();
  }

  bind() {
    $("session-id").addEventListener("click", async () => {
      const id = $("session-id").dataset.sessionId;
      if (id && (await copyText(id))) toast("Session id copied");
    });
    $("new-session").addEventListener("click", () => this.control("new-session"));
    $("detach").addEventListener("click", () => this.control("detach"));
    $("continue-on").addEventListener("click", () => this.id && continueOn(this.id));
    $("agent-picker").addEventListener("change", () => this.pickerChanged());
    $("model-picker").addEventListener("input", () => this.pickerChanged());
    $("rename").addEventListener("click", () => this.startRename());
    $("chat-title").addEventListener("dblclick", () => this.startRename());
    $("rename-cancel").addEventListener("click", () => this.endRename());
    $("rename-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.rename($("rename-input").value);
    });
    $("rename-input").addEventListener("keydown", (e) => {
      if (e.key === "Escape") this.endRename();
    });
    $("archive").addEventListener("click", () => this.toggleArchive());
    $("timeline").addEventListener("scroll", () => this.fillOlder(), { passive: true });
  }

  setAgents(names) {
    this.agents = names;
    if (this.conv) this.renderBinding();
  }

  /** Shows conversation `id` (or nothing when `id` is null). */
  async open(id) {
    this.close();
    if (!id) return;
    const token = (this.openToken = {});
    this.timeline.reset();
    this.tasks.reset(id);
    $("timeline").append(h("p", { class: "muted loading" }, "Loading…"));
    let conv;
    try {
      conv = await api("GET", `/api/v1/conversations/${enc(id)}`);
    } catch (e) {
      if (token !== this.openToken) return;
      this.timeline.reset();
      $("timeline").append(h("p", { class: "error" }, ...errorNodes(e instanceof ApiError && e.status === 404 ? { code: e.code, message: "This conversation does not exist." } : e)));
      return;
    }
    if (token !== this.openToken) return;
    this.timeline.reset();
    this.picker = { agent: conv.agent, model: conv.model || DEFAULT_MODEL, touched: false };
    this.showConversation(conv);
    this.pending = [];
    this.triedHistory = new Set();
    $("timeline").append(h("p", { class: "muted loading" }, "Loading…"));
    // The latest span only; older ones load as the person scrolls up.
    let span;
    try {
      span = await loadSpan(id, null);
    } catch (e) {
      if (token !== this.openToken) return;
      this.timeline.reset();
      $("timeline").append(h("p", { class: "error" }, ...errorNodes(e)));
      return;
    }
    if (token !== this.openToken) return;
    this.timeline.reset();
    this.timeline.showSpan(span);
    this.timeline.lastMessageId = Math.max(this.timeline.lastMessageId, span.newestMessageId);
    this.older = span.older;
    this.timeline.setOlder(this.older ? "more" : null, () => this.loadOlder());
    this.timeline.scrollToBottom();
    const last = span.events.length ? span.events[span.events.length - 1].id : 0;
    this.stream = followEvents(id, last, (env) => this.onEvent(env), (s) => this.streamState(s));
    this.composer.focus();
    this.fillOlder();
  }

  /** Loads the span before the oldest one shown. */
  async loadOlder() {
    if (!this.older || this.loadingOlder) return;
    const id = this.id;
    this.loadingOlder = true;
    this.timeline.setOlder("loading");
    try {
      const span = await loadSpan(id, this.older);
      if (this.id !== id) return;
      this.timeline.showSpan(span);
      this.older = span.older;
    } catch (e) {
      if (this.id === id) this.showError(e);
    } finally {
      if (this.id === id) {
        this.loadingOlder = false;
        this.timeline.setOlder(this.older ? "more" : null, () => this.loadOlder());
        this.fillOlder();
      }
    }
  }

  /** Goes on loading while the top is in sight (a short span, or the person is there). */
  fillOlder() {
    if (this.older && $("timeline").scrollTop < NEAR_TOP) this.loadOlder();
  }

  close() {
    this.openToken = null;
    if (this.stream) this.stream.close();
    this.stream = null;
    this.conv = null;
    this.older = null;
    this.loadingOlder = false;
    this.tasks.reset(null);
    clearTimeout(this.convTimer);
    this.historyRun = null;
    $("binding").hidden = true;
    $("composer").hidden = true;
    $("stream-state").hidden = true;
    $("rename").disabled = $("archive").disabled = true;
    $("chat-title").textContent = "Select a conversation";
    this.timeline.reset();
    $("timeline").append(h("div", { class: "placeholder" },
      h("p", null, "Pick a conversation, or start a new one."),
      h("button", { type: "button", class: "primary", onclick: () => $("new-conversation").click() }, "+ New conversation")));
  }

  get id() {
    return this.conv && this.conv.id;
  }

  // ---- conversation view --------------------------------------------------------

  showConversation(conv) {
    this.conv = conv;
    if (!this.picker.touched) {
      this.picker.agent = conv.agent;
      this.picker.model = conv.model || DEFAULT_MODEL;
    }
    $("chat-title").textContent = conv.title;
    document.title = `${conv.title} · tether`;
    $("rename").disabled = $("archive").disabled = false;
    $("archive").textContent = conv.archived ? "Unarchive" : "Archive";
    $("binding").hidden = false;
    $("composer").hidden = false;
    this.renderLock();
    const busy = conv.state === "bound/running" || conv.state === "bound/waiting_user" || conv.state === "bound/waiting_approval";
    this.composer.setRunning(busy);
    this.timeline.setQueueLen(conv.queue_len || 0);
    this.renderBinding();
    // Which chat gets the replies can change with each message (any channel's).
    const chatsKey = `${conv.id} ${conv.state} ${conv.updated_at_ms}`;
    if (this.chatsKey !== chatsKey) {
      if (!this.conv || $("conv-chats").dataset.conversation !== conv.id) $("continue-hint").hidden = true;
      this.chatsKey = chatsKey;
      renderChats(conv.id);
    }
    this.delegate.show(conv);
    this.onChange(conv);
  }

  renderBinding() {
    const conv = this.conv;
    const b = conv.binding;
    const sid = $("session-id");
    sid.textContent = b ? shortId(b.session_id) : "none";
    sid.dataset.sessionId = b ? b.session_id : "";
    sid.disabled = !b;
    sid.title = b ? `Copy the session id ${b.session_id}` : "No session is bound";
    const status = $("session-status");
    status.textContent = b ? `${b.agent}${b.model ? " · " + b.model : ""} · ${b.status}` : "no session";
    status.className = `badge ss-${b ? b.status : "none"}`;
    const [label, cls] = stateLabel(conv.state);
    const state = $("conv-state");
    state.textContent = label;
    state.className = `badge ${cls}`;
    state.dataset.state = conv.state;
    $("new-session").disabled = $("detach").disabled = !b;
    $("conv-cwd").textContent = conv.cwd;

    const picker = $("agent-picker");
    const names = this.agents.includes(this.picker.agent) ? this.agents : [...this.agents, this.picker.agent];
    if (picker.options.length !== names.length || [...picker.options].some((o, i) => o.value !== names[i])) {
      picker.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
    }
    picker.value = this.picker.agent;
    const model = $("model-picker");
    if (document.activeElement !== model) model.value = this.picker.model;
    // Offer the agent's default model, then the models this conversation's sessions used.
    const seen = new Set([DEFAULT_MODEL, conv.model, b && b.model, ...[...this.timeline.sessions.values()].map((x) => x.model)].filter(Boolean));
    const list = $("model-options");
    if (list.options.length !== seen.size) {
      list.replaceChildren(...[...seen].map((m) => h("option", { value: m, label: m === DEFAULT_MODEL ? "the agent's default model" : null })));
    }
    this.renderDrift();
  }

  pickerChanged() {
    this.picker.agent = $("agent-picker").value;
    // A blank box changes nothing; "default" asks for the agent's default model.
    this.picker.model = $("model-picker").value.trim() || (this.conv && this.conv.model) || DEFAULT_MODEL;
    this.picker.touched = true;
    this.renderDrift();
  }

  /** Tells that the next message starts a new session when the pickers differ. */
  renderDrift() {
    const b = this.conv && this.conv.binding;
    const el = $("drift");
    let text = "";
    if (b) {
      const model = this.picker.model;
      const bound = b.model || DEFAULT_MODEL;
      if (this.picker.agent !== b.agent) text = `agent ${b.agent} → ${this.picker.agent}`;
      else if (model !== bound) text = `model ${bound} → ${model}`;
    }
    el.hidden = !text;
    el.textContent = text ? `The next message starts a new session (${text}).` : "";
  }

  /** Re-reads the conversation soon (coalescing bursts of events). */
  refreshSoon(ms = 120) {
    clearTimeout(this.convTimer);
    this.convTimer = setTimeout(() => this.refresh(), ms);
  }

  async refresh() {
    const id = this.id;
    if (!id) return;
    try {
      const conv = await api("GET", `/api/v1/conversations/${enc(id)}`);
      if (this.id === id) this.showConversation(conv);
    } catch {
      // Shown by the next successful refresh; the stream state shows connectivity.
    }
  }

  /** Loads history after the last message shown; concurrent calls share one run. */
  loadHistory() {
    if (this.historyRun) {
      this.historyAgain = true;
      return this.historyRun;
    }
    const id = this.id;
    const run = async () => {
      do {
        this.historyAgain = false;
        try {
          const msgs = await historyAfter(id, this.timeline.lastMessageId);
          if (this.id !== id) return;
          this.timeline.addHistory(msgs);
        } catch (e) {
          if (this.id === id) this.showError(e);
          return;
        }
      } while (this.historyAgain);
    };
    this.historyRun = run().finally(() => (this.historyRun = null));
    return this.historyRun;
  }

  // ---- events -------------------------------------------------------------------

  onEvent(env) {
    this.pending.push(env);
    this.drain();
  }

  /** Applies events in order; one about a turn the page does not know waits for history. */
  async drain() {
    if (this.draining) return;
    this.draining = true;
    const id = this.id;
    try {
      while (this.pending.length && this.id === id) {
        const env = this.pending[0];
        if (env.turn_id && !this.timeline.knowsTurn(env.turn_id) && !this.triedHistory.has(env.turn_id)) {
          this.triedHistory.add(env.turn_id);
          await this.loadHistory();
          continue;
        }
        this.pending.shift();
        this.timeline.applyEvent(env);
        if (env.payload.type.startsWith("delegation_")) this.tasks.refreshSoon();
        if (!REFRESH_EVENTS.has(env.payload.type)) this.refreshSoon();
        if (HISTORY_EVENTS.has(env.payload.type)) this.loadHistory();
      }
    } finally {
      this.draining = false;
    }
  }

  /** The list stream saw `conv` change: this conversation, or one of its tasks. */
  listChanged(conv) {
    if (conv.id === this.id) this.showConversation(conv);
    else if (this.tasks.has(conv.id)) this.tasks.refreshSoon();
  }

  streamState(state) {
    const el = $("stream-state");
    el.hidden = state !== "reconnecting";
    el.textContent = state === "reconnecting" ? "Connection lost — reconnecting…" : "";
    el.dataset.state = state;
    if (state === "live") {
      // Messages that are not events (command replies, other tabs) may have been missed.
      this.refreshSoon(0);
      this.tasks.refreshSoon();
      if (this.id) this.loadHistory();
    }
  }

  // ---- actions ------------------------------------------------------------------

  /** Runs an API call; shows its error and returns whether it worked. */
  async act(call) {
    this.showError("");
    try {
      await call();
      this.refreshSoon(0);
      return true;
    } catch (e) {
      this.showError(e);
      this.refreshSoon(0);
      return false;
    }
  }

  /** Shows an error (text, or an API error with its stable code) above the composer. */
  showError(e) {
    setError($("composer-error"), e);
  }

  /** Locks the composer when the conversation cannot take messages, saying why. */
  renderLock() {
    const conv = this.conv;
    if (!conv) return;
    const reason = conv.archived ? "This conversation is archived — unarchive it to write." : this.delegate.lockReason(conv);
    this.composer.setLocked(reason);
  }

  async send(text, files = []) {
    const conv = this.conv;
    if (!conv) return false;
    const body = { text };
    if (files.length) {
      try {
        body.attachments = await uploadFiles(conv.id, files);
      } catch (e) {
        this.showError(e);
        return false;
      }
    }
    if (this.picker.agent && this.picker.agent !== conv.agent) body.agent = this.picker.agent;
    if (this.picker.model !== (conv.model || DEFAULT_MODEL)) body.model = this.picker.model;
    this.showError("");
    if (!files.length && continues(conv, text)) {
      const ok = await this.delegate.send(text);
      if (ok) await this.loadHistory();
      return ok;
    }
    try {
      const out = await api("POST", `/api/v1/conversations/${enc(conv.id)}/messages`, body);
      this.picker.touched = false;
      if (out.outcome === "queued") toast(`Queued — #${out.queue_position} in line`);
      await this.loadHistory();
      this.timeline.scrollToBottom();
      this.refreshSoon(0);
      return true;
    } catch (e) {
      this.showError(e);
      this.loadHistory();
      return false;
    }
  }

  async stop() {
    if (!this.conv) return;
    await this.act(() => api("POST", `/api/v1/conversations/${enc(this.conv.id)}/stop`));
  }

  async control(action) {
    if (!this.conv) return;
    const ok = await this.act(() => api("POST", `/api/v1/conversations/${enc(this.conv.id)}/${action}`));
    if (ok) {
      this.picker.touched = false;
      await this.loadHistory();
      await this.refresh();
    }
  }

  startRename() {
    if (!this.conv) return;
    $("chat-title").hidden = true;
    $("rename-form").hidden = false;
    $("rename-input").value = this.conv.title;
    $("rename-input").select();
    $("rename-input").focus();
  }

  endRename() {
    $("rename-form").hidden = true;
    $("chat-title").hidden = false;
    $("rename").focus();
  }

  async rename(title) {
    const t = title.trim();
    if (!t || !this.conv) return this.endRename();
    const ok = await this.act(async () => this.showConversation(await api("PATCH", `/api/v1/conversations/${enc(this.conv.id)}`, { title: t })));
    if (ok) this.endRename();
  }

  async toggleArchive() {
    if (!this.conv) return;
    const archived = !this.conv.archived;
    const ok = await this.act(async () => this.showConversation(await api("PATCH", `/api/v1/conversations/${enc(this.conv.id)}`, { archived })));
    if (ok) toast(archived ? "Archived" : "Unarchived");
  }
}
