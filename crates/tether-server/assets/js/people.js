// One person across channels on the page (issue 28): the Accounts dialog (the channel
// accounts linked to the signed-in person, a code from a channel's `/link` entered here,
// a code made here to send on a channel as `/link <code>`, unlinking), and the binding
// bar's Chats row (the chats a conversation is in, which one gets its replies, and
// "Continue on…", which gives the `/here <id>` to send in another chat).

import { api, enc } from "./api.js";
import { $, h, ago, copyText, setError, toast } from "./dom.js";

const LABELS = { telegram: "Telegram", slack: "Slack", discord: "Discord", feishu: "Feishu" };
const label = (channel) => LABELS[channel] || channel;

/** The Accounts dialog. */
export class Accounts {
  constructor() {
    $("accounts").addEventListener("click", () => this.open());
    $("accounts-close").addEventListener("click", () => $("accounts-dialog").close());
    $("link-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.redeem();
    });
    $("make-link-code").addEventListener("click", () => this.makeCode());
  }

  async open() {
    setError($("accounts-error"), null);
    $("link-code-made").hidden = true;
    $("accounts-dialog").showModal();
    await this.load();
  }

  async load() {
    try {
      const { accounts } = await api("GET", "/api/v1/me/accounts");
      const list = $("account-list");
      list.replaceChildren(...accounts.map((a) => h("li", { class: "account", dataset: { channel: a.channel, user: a.user_id } },
        h("strong", null, label(a.channel)), " ", a.user_name,
        h("span", { class: "muted small-text" }, ` linked ${ago(a.linked_at_ms)}`),
        h("button", { type: "button", class: "small link", onclick: () => this.unlink(a) }, "Unlink"))));
      $("account-empty").hidden = accounts.length > 0;
    } catch (e) {
      setError($("accounts-error"), e);
    }
  }

  async redeem() {
    const input = $("link-code");
    const code = input.value.trim();
    if (!code) return;
    try {
      const a = await api("POST", "/api/v1/me/accounts", { code });
      input.value = "";
      setError($("accounts-error"), null);
      toast(`Linked: ${label(a.channel)} ${a.user_name}`);
      await this.load();
    } catch (e) {
      setError($("accounts-error"), e);
    }
  }

  async makeCode() {
    try {
      const c = await api("POST", "/api/v1/me/link-codes", {});
      const out = $("link-code-made");
      out.replaceChildren("Send ", h("code", { class: "send" }, c.send),
        " from the chat account to link (valid ten minutes, once). ",
        h("button", { type: "button", class: "small", onclick: async () => toast((await copyText(c.send)) ? "Copied" : "Copy it by hand") }, "Copy"));
      out.hidden = false;
    } catch (e) {
      setError($("accounts-error"), e);
    }
  }

  async unlink(a) {
    try {
      await api("DELETE", `/api/v1/me/accounts/${enc(a.channel)}/${enc(a.user_id)}`);
      await this.load();
    } catch (e) {
      setError($("accounts-error"), e);
    }
  }
}

/** The binding bar's Chats row for conversation `id`. */
export async function renderChats(id) {
  const row = $("conv-chats");
  let chats = [];
  try {
    ({ chats } = await api("GET", `/api/v1/conversations/${enc(id)}/chats`));
  } catch {
    // No channels here (or not reachable now): the page alone.
  }
  if (row.dataset.conversation !== id) row.dataset.conversation = id;
  row.replaceChildren(...(chats.length
    ? chats.map((c) => h("span", { class: c.replies ? "badge chat replies" : "badge chat", title: c.replies ? "Replies go here (the latest message came from it)" : "Quiet: the latest message came from another chat" },
      `${label(c.channel)}${c.replies ? " · replies" : ""}`))
    : [h("span", { class: "muted" }, "this page only")]));
}

/** "Continue on…": the command to send in another chat. */
export function continueOn(id) {
  const hint = $("continue-hint");
  const command = `/here ${id}`;
  hint.replaceChildren("Send ", h("code", { class: "send" }, command),
    " in a chat whose account is linked to you: the same session goes on there, and replies follow. ",
    h("button", { type: "button", class: "small", onclick: async () => toast((await copyText(command)) ? "Copied" : "Copy it by hand") }, "Copy"));
  hint.hidden = !hint.hidden;
}
