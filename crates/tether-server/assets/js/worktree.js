// The Worktree dialog (issue 32): this conversation's isolated git worktree — its branch,
// base and changed files with `git diff --stat`, the patch — and the person's choice:
// merge the branch back, keep it, or discard it. Isolation for the next session is
// switched on here too. The same as /worktree, /diff and /merge in the composer.

import { api, apiText, enc } from "./api.js";
import { $, h, setError } from "./dom.js";

export class WorktreeView {
  /** `current()` is the open conversation's id (or null). */
  constructor({ current }) {
    this.current = current;
    $("worktree").addEventListener("click", () => this.open());
    $("worktree-close").addEventListener("click", () => $("worktree-dialog").close());
    $("worktree-merge").addEventListener("click", () => this.act({ action: "merge" }, "Merged into the repository's checked-out branch."));
    $("worktree-discard").addEventListener("click", () => this.act({ action: "discard" }, "Discarded (its last state is kept as a snapshot)."));
    $("worktree-isolate").addEventListener("click", () => this.act({ action: "isolate", on: true }, "The next session works in a new worktree."));
  }

  async open() {
    $("worktree-dialog").showModal();
    await this.load();
  }

  async act(body, done) {
    const conv = this.current();
    if (!conv) return setError($("worktree-error"), "Open a conversation first.");
    setError($("worktree-error"), "");
    $("worktree-note").textContent = "";
    try {
      await api("POST", `/api/v1/conversations/${enc(conv)}/worktree`, body);
      $("worktree-note").textContent = done;
    } catch (e) {
      setError($("worktree-error"), e.message || String(e));
    }
    await this.load();
  }

  async load() {
    const conv = this.current();
    const files = $("worktree-files");
    files.replaceChildren();
    $("worktree-stat").textContent = "";
    let w = null;
    if (conv) {
      try {
        w = await api("GET", `/api/v1/conversations/${enc(conv)}/worktree`);
      } catch (e) {
        setError($("worktree-error"), e.message || String(e));
      }
    }
    if (w?.status === "none") w = null;
    const active = w?.status === "active";
    $("worktree-summary").textContent = !w
      ? "This conversation works in its own directory."
      : active
        ? `Branch ${w.branch}, from ${(w.base || "").slice(0, 10)}, in ${w.path}`
        : w.status === "wanted"
          ? `Isolation is on: the next session works in a new worktree on ${w.branch}.`
          : `Worktree ${w.status}.`;
    $("worktree-dialog").dataset.status = w?.status || "none";
    $("worktree-merge").hidden = !active;
    $("worktree-discard").hidden = !active;
    $("worktree-isolate").hidden = Boolean(w && (active || w.status === "wanted"));
    $("worktree-patch").hidden = !active;
    if (active) {
      $("worktree-patch").href = "#";
      $("worktree-patch").onclick = async (e) => {
        e.preventDefault();
        try {
          $("worktree-stat").textContent = await apiText(`/api/v1/conversations/${enc(conv)}/worktree/diff`);
        } catch (err) {
          setError($("worktree-error"), err.message || String(err));
        }
      };
      for (const f of w.changed_files) files.append(h("li", {}, f));
      if (!w.changed_files.length) files.append(h("li", { class: "muted" }, "No changes yet."));
      $("worktree-stat").textContent = w.stat;
    }
  }
}
