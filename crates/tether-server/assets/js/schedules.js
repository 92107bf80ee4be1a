// The Schedules dialog (issue 30): this conversation's schedules with their next run,
// paused, resumed or deleted with a button, and a new one from a plain form ("weekday
// 09:00", "2h") and a prompt. The same as /every and /schedules in the composer.

import { api, enc } from "./api.js";
import { $, h, setError } from "./dom.js";

export class SchedulesView {
  /** `current()` is the open conversation's id (or null). */
  constructor({ current }) {
    this.current = current;
    $("schedules").addEventListener("click", () => this.open());
    $("schedules-close").addEventListener("click", () => $("schedules-dialog").close());
    $("schedule-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.add();
    });
  }

  async open() {
    $("schedules-dialog").showModal();
    await this.load();
  }

  async act(call) {
    setError($("schedules-error"), "");
    try {
      await call();
    } catch (e) {
      setError($("schedules-error"), e.message || String(e));
    }
    await this.load();
  }

  async add() {
    const conv = this.current();
    if (!conv) return setError($("schedules-error"), "Open a conversation first.");
    await this.act(async () => {
      await api("POST", "/api/v1/schedules", {
        conversation_id: conv,
        every: $("schedule-when").value.trim(),
        prompt: $("schedule-prompt").value,
        fresh_session: $("schedule-fresh").checked,
        time_zone: Intl.DateTimeFormat().resolvedOptions().timeZone,
      });
      $("schedule-prompt").value = "";
    });
  }

  async load() {
    const conv = this.current();
    const list = $("schedule-list");
    list.replaceChildren();
    if (!conv) {
      $("schedule-empty").hidden = false;
      return;
    }
    let all = [];
    try {
      all = (await api("GET", `/api/v1/schedules?conversation_id=${enc(conv)}`)).schedules;
    } catch (e) {
      return setError($("schedules-error"), e.message || String(e));
    }
    $("schedule-empty").hidden = all.length > 0;
    for (const s of all) {
      const next = s.next_run_ms ? new Date(s.next_run_ms).toLocaleString() : "none";
      const paused = s.state === "paused";
      const toggle = h("button", { type: "button", class: "small", onclick: () => this.act(() =>
        api("PATCH", `/api/v1/schedules/${enc(s.id)}`, { paused: !paused })) }, paused ? "Resume" : "Pause");
      const remove = h("button", { type: "button", class: "small", onclick: () => this.act(() =>
        api("DELETE", `/api/v1/schedules/${enc(s.id)}`)) }, "Delete");
      list.append(h("li", { class: "schedule", dataset: { scheduleId: s.id, state: s.state } },
        h("strong", {}, s.when), ` (${s.time_zone}) — ${s.prompt} — ${s.state}`,
        s.note ? ` (${s.note})` : "", ` — next: ${next} `, toggle, " ", remove));
    }
  }
}
