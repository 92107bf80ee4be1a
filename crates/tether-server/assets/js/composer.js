// The message box: Enter sends, Shift+Enter adds a line, a leading "/" opens a small
// completion list of tether's commands (arrows to move, Tab or Enter to take, Escape to
// close), and a Stop button while a turn runs.

import { $, h } from "./dom.js";

export const COMMANDS = [
  ["/new", "[agent] [task]", "start a new session (now, with a task)"],
  ["/detach", "", "unbind; the next message starts a new session"],
  ["/status", "", "show the binding and what is running"],
  ["/stop", "", "cancel the running turn"],
  ["/approve", "[id]", "allow the pending approval"],
  ["/deny", "[id]", "deny the pending approval"],
  ["/agent", "<name>", "agent for new sessions"],
  ["/model", "<name>", "model for new sessions"],
  ["/sessions", "", "list this conversation's sessions"],
  ["/file", "<path>", "send a file from the working directory"],
  ["/help", "", "list the commands"],
];

export class Composer {
  /** `send(text, files)` → Promise<bool>; `stop()`. Files come from the button, a paste
   * or a drop on the message box. */
  constructor(form, { send, stop }) {
    this.form = form;
    this.files = [];
    this.fileInput = $("composer-files");
    this.fileList = $("composer-files-list");
    this.fileInput.addEventListener("change", () => {
      this.addFiles(this.fileInput.files);
      this.fileInput.value = "";
    });
    form.addEventListener("paste", (e) => {
      if (e.clipboardData && e.clipboardData.files.length) {
        e.preventDefault();
        this.addFiles(e.clipboardData.files);
      }
    });
    form.addEventListener("dragover", (e) => e.preventDefault());
    form.addEventListener("drop", (e) => {
      if (e.dataTransfer && e.dataTransfer.files.length) {
        e.preventDefault();
        this.addFiles(e.dataTransfer.files);
      }
    });
    this.input = $("composer-input");
    this.list = $("completions");
    this.sendFn = send;
    this.matches = [];
    this.active = 0;
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.submit();
    });
    this.input.addEventListener("keydown", (e) => this.onKey(e));
    this.input.addEventListener("input", () => {
      this.autosize();
      this.complete();
    });
    this.input.addEventListener("blur", () => setTimeout(() => this.closeList(), 150));
    $("stop").addEventListener("click", () => stop());
  }

  focus() {
    if (window.matchMedia("(hover: hover)").matches) this.input.focus();
  }

  setRunning(running) {
    $("stop").hidden = !running;
  }

  /** `reason` (text) disables the box and says why; `null` enables it. */
  setLocked(reason) {
    this.input.disabled = !!reason;
    $("send").disabled = !!reason;
    this.input.placeholder = reason || "Message the agent — / for commands";
    const note = $("composer-note");
    note.textContent = reason || "";
    note.hidden = !reason;
  }

  addFiles(list) {
    for (const f of list) this.files.push(f);
    this.renderFiles();
  }

  renderFiles() {
    this.fileList.replaceChildren(...this.files.map((f, i) => {
      const remove = h("button", { type: "button", class: "link", title: `Remove ${f.name}` }, "×");
      remove.addEventListener("click", () => {
        this.files.splice(i, 1);
        this.renderFiles();
      });
      return h("li", { class: "composer-file" }, f.name || "pasted", remove);
    }));
    this.fileList.hidden = !this.files.length;
  }

  async submit() {
    const text = this.input.value.trim();
    if (!text && !this.files.length) return;
    this.closeList();
    const keep = this.input.value;
    const files = this.files;
    this.input.value = "";
    this.autosize();
    const ok = await this.sendFn(text, files);
    if (ok) {
      this.files = [];
      this.renderFiles();
    } else if (!this.input.value) {
      this.input.value = keep;
      this.autosize();
    }
  }

  onKey(e) {
    if (!this.list.hidden && this.matches.length) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        const n = this.matches.length;
        this.active = (this.active + (e.key === "ArrowDown" ? 1 : n - 1)) % n;
        this.renderList();
        return;
      }
      if (e.key === "Tab" || (e.key === "Enter" && !e.shiftKey && this.takesCompletion())) {
        e.preventDefault();
        this.take(this.active);
        return;
      }
      if (e.key === "Escape") {
        e.preventDefault();
        this.closeList();
        return;
      }
    }
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      this.submit();
    }
  }

  /** Enter takes the completion only while the typed word is not already a full command. */
  takesCompletion() {
    const word = this.input.value.trim();
    return !COMMANDS.some(([c]) => c === word);
  }

  complete() {
    const v = this.input.value;
    const m = v.match(/^\/(\w*)$/);
    if (!m) return this.closeList();
    this.matches = COMMANDS.filter(([c]) => c.startsWith("/" + m[1]));
    this.active = 0;
    if (!this.matches.length) return this.closeList();
    this.list.hidden = false;
    this.renderList();
  }

  renderList() {
    this.list.replaceChildren(...this.matches.map(([cmd, args, help], i) =>
      h("li", {
        id: `completion-${i}`,
        role: "option",
        class: i === this.active ? "active" : "",
        "aria-selected": i === this.active ? "true" : "false",
        onmousedown: (e) => {
          e.preventDefault();
          this.take(i);
        },
      }, h("code", null, cmd), args ? h("span", { class: "args" }, ` ${args}`) : null, h("span", { class: "muted" }, ` — ${help}`))));
    this.input.setAttribute("aria-expanded", "true");
    this.input.setAttribute("aria-activedescendant", `completion-${this.active}`);
  }

  take(i) {
    const [cmd, args] = this.matches[i];
    this.input.value = cmd + (args ? " " : "");
    this.closeList();
    this.input.focus();
    if (!args) this.autosize();
  }

  closeList() {
    this.list.hidden = true;
    this.matches = [];
    this.input.setAttribute("aria-expanded", "false");
    this.input.removeAttribute("aria-activedescendant");
  }

  autosize() {
    const el = this.input;
    el.style.height = "auto";
    el.style.height = `${Math.min(el.scrollHeight, 220)}px`;
  }
}
