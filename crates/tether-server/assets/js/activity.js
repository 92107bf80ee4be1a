// What an agent does inside a turn, as DOM: tool calls (compact expandable rows with the
// command, its output and exit code, and the files touched), approval cards and question
// cards. Details come from different agents in different shapes; the extractors below
// read the common ones (ACP tool calls, Codex and Claude items) and fall back to JSON.

import { h, duration } from "./dom.js";
import { turnFileUrl, linkTo } from "./api.js";

const first = (...xs) => xs.find((x) => x !== undefined && x !== null && x !== "");
const asText = (v) =>
  Array.isArray(v) && v.every((x) => typeof x === "string") ? v.join(" ") : typeof v === "string" ? v : undefined;

/** The shell command a tool call runs, if it is one. */
export function commandOf(d) {
  if (!d || typeof d !== "object") return undefined;
  const input = d.rawInput || d.input || d.arguments || {};
  return asText(first(input.command, input.cmd, d.command, d.cmd));
}

/** Text output of a tool call. */
export function outputOf(d) {
  if (!d || typeof d !== "object") return undefined;
  const parts = [];
  if (Array.isArray(d.content)) {
    for (const c of d.content) {
      const inner = c && c.content;
      if (inner && inner.type === "text" && typeof inner.text === "string") parts.push(inner.text);
      else if (c && c.type === "text" && typeof c.text === "string") parts.push(c.text);
    }
  }
  if (parts.length) return parts.join("\n");
  const raw = d.rawOutput || d.output || d.result;
  if (typeof raw === "string") return raw;
  if (raw && typeof raw === "object") {
    return asText(first(raw.output, raw.aggregated_output, raw.aggregatedOutput, raw.formatted_output, raw.stdout, raw.content, raw.stderr));
  }
  return asText(first(d.aggregatedOutput, d.aggregated_output, d.formattedOutput, d.stdout));
}

/** Exit code of a command, if reported. */
export function exitCodeOf(d) {
  if (!d || typeof d !== "object") return undefined;
  const raw = d.rawOutput && typeof d.rawOutput === "object" ? d.rawOutput : {};
  const v = first(raw.exit_code, raw.exitCode, d.exit_code, d.exitCode);
  return typeof v === "number" ? v : undefined;
}

/** Paths of the files a tool call reads or changes. */
export function pathsOf(d) {
  if (!d || typeof d !== "object") return [];
  const out = new Set();
  const add = (p) => typeof p === "string" && p && out.add(p);
  for (const l of d.locations || []) add(l && l.path);
  for (const c of Array.isArray(d.content) ? d.content : []) if (c && c.type === "diff") add(c.path);
  const input = d.rawInput || d.input || {};
  for (const k of ["file_path", "path", "notebook_path"]) add(input[k]);
  for (const p of Array.isArray(input.paths) ? input.paths : []) add(p);
  const changes = d.changes;
  if (Array.isArray(changes)) for (const c of changes) add(c && c.path);
  else if (changes && typeof changes === "object") Object.keys(changes).forEach(add);
  for (const p of Array.isArray(d.paths) ? d.paths : []) add(p);
  return [...out];
}

/**
 * The changes a tool call makes, per file: `[{ path, text }]` with `text` a diff (`+`
 * added, `-` removed lines). Codex `fileChange` items carry a unified diff per change;
 * ACP diff content blocks and Claude's Edit / MultiEdit / Write inputs carry the old and
 * the new text.
 */
export function diffsOf(d) {
  if (!d || typeof d !== "object") return [];
  const out = [];
  const lines = (text, sign) =>
    typeof text === "string" && text !== "" ? text.replace(/\n$/, "").split("\n").map((l) => sign + l) : [];
  const pair = (path, oldText, newText) =>
    out.push({ path, text: [...lines(oldText, "-"), ...lines(newText, "+")].join("\n") });
  if (Array.isArray(d.changes)) {
    for (const c of d.changes) {
      const diff = c && first(c.diff, c.unified_diff);
      if (c && typeof c.path === "string" && typeof diff === "string") out.push({ path: c.path, text: diff });
    }
  }
  for (const c of Array.isArray(d.content) ? d.content : []) {
    if (c && c.type === "diff" && typeof c.path === "string") pair(c.path, c.oldText, c.newText);
  }
  const input = d.input || d.rawInput || {};
  const file = input.file_path;
  // An ACP agent may send Claude's input as rawInput next to its diff block: once.
  if (typeof file === "string" && !out.some((o) => o.path === file)) {
    if (Array.isArray(input.edits)) for (const e of input.edits) pair(file, e && e.old_string, e && e.new_string);
    else if (typeof input.old_string === "string" || typeof input.new_string === "string") pair(file, input.old_string, input.new_string);
    else if (typeof input.content === "string") pair(file, "", input.content);
  }
  return out.filter((o) => o.text);
}

/** A diff as a <pre>, one line per span, coloured by its sign. */
function diffView(text) {
  return h("pre", { class: "diff" }, text.split("\n").map((l) => {
    const cls = l.startsWith("@@") ? "hunk" : l.startsWith("+") && !l.startsWith("+++") ? "add"
      : l.startsWith("-") && !l.startsWith("---") ? "del" : "";
    return h("span", { class: cls }, `${l}\n`);
  }));
}

/** Why the agent wants to do this, if it said. */
export function reasonOf(d) {
  if (!d || typeof d !== "object") return undefined;
  const input = d.rawInput || d.input || {};
  return asText(first(d.reason, input.reason, input.description, d.justification, input.justification));
}

const KIND_ICON = { execute: "›_", edit: "✎", delete: "✕", move: "⇄", read: "📄", search: "🔍", fetch: "⇣", think: "…" };

/** A tool call row (a <details> element); update it with `updateTool`. */
export function toolRow(call) {
  const el = h("details", { class: "tool", dataset: { toolId: call.id } });
  el._call = { ...call };
  renderTool(el);
  return el;
}

export function updateTool(el, patch) {
  const c = el._call;
  if (patch.title) c.title = patch.title;
  if (patch.status) c.status = patch.status;
  if (patch.detail && typeof patch.detail === "object") c.detail = { ...(c.detail || {}), ...patch.detail };
  if (patch.endedAt) c.endedAt = patch.endedAt;
  renderTool(el);
}

function renderTool(el) {
  const { title, kind, status, detail, startedAt, endedAt, turnId } = el._call;
  const cmd = commandOf(detail);
  const output = outputOf(detail);
  const code = exitCodeOf(detail);
  const paths = pathsOf(detail);
  const diffs = diffsOf(detail);
  // A file the turn changed can be downloaded (inside the working directory only).
  const fileItem = (p) => turnId && (kind === "edit" || diffs.some((d) => d.path === p))
    ? linkTo(h("a", { download: p.split("/").pop(), class: "file-link" }, h("code", null, p)), "href", turnFileUrl(turnId, p))
    : h("code", null, p);
  const st = status || "pending";
  const summary = h("summary", null,
    h("span", { class: "tool-icon", "aria-hidden": "true" }, KIND_ICON[kind] || "⚙"),
    h("span", { class: "tool-title" }, title || cmd || "tool call"),
    paths.length && !title?.includes(paths[0]) ? h("span", { class: "tool-paths muted" }, paths.join(", ")) : null,
    code !== undefined ? h("span", { class: `exit ${code === 0 ? "ok" : "bad"}` }, `exit ${code}`) : null,
    h("span", { class: `tool-status t-${st}` }, st.replace(/_/g, " ")),
    endedAt && startedAt ? h("span", { class: "muted small-text" }, duration(endedAt - startedAt)) : null,
  );
  const body = h("div", { class: "tool-body" });
  if (cmd) body.append(h("div", { class: "label" }, "Command"), h("pre", { class: "cmd" }, cmd));
  if (paths.length) {
    body.append(h("div", { class: "label" }, paths.length > 1 ? "Files" : "File"),
      h("ul", { class: "paths" }, paths.map((p) => h("li", null, fileItem(p)))));
  }
  for (const d of diffs) body.append(h("div", { class: "label" }, `Changes to ${d.path}`), diffView(d.text));
  if (output !== undefined && output !== "") body.append(h("div", { class: "label" }, "Output"), h("pre", { class: "out" }, output));
  if (code !== undefined) body.append(h("div", { class: "label" }, `Exit code ${code}`));
  if (!cmd && !paths.length && output === undefined && detail) {
    body.append(h("pre", { class: "out" }, JSON.stringify(detail, null, 2)));
  }
  const open = el.open;
  el.replaceChildren(summary, body);
  el.open = open;
  el.classList.toggle("failed", st === "failed");
}

const DECISION_LABEL = { allow: "Allow", allow_always: "Allow always", deny: "Deny" };
const APPROVAL_DONE = {
  allowed: "Allowed", allowed_always: "Allowed always", denied: "Denied",
  expired: "Expired — the agent was told no", cancelled: "Cancelled",
};

/** An approval card; `onDecide(decision)` answers it. Update with `resolveApproval`. */
export function approvalCard(a, onDecide) {
  const cmd = commandOf(a.detail);
  const paths = pathsOf(a.detail);
  const reason = reasonOf(a.detail);
  const buttons = h("div", { class: "card-actions" },
    (a.options || ["allow", "deny"]).map((d) => h("button", {
      type: "button",
      class: d === "deny" ? "danger" : d === "allow" ? "primary" : "",
      dataset: { decision: d },
      onclick: async (ev) => {
        const all = buttons.querySelectorAll("button");
        all.forEach((b) => (b.disabled = true));
        const ok = await onDecide(d);
        if (!ok) all.forEach((b) => (b.disabled = false));
        ev.target.blur();
      },
    }, DECISION_LABEL[d] || d)));
  const deadline = a.deadline_ms ? h("span", { class: "muted small-text deadline", dataset: { deadline: a.deadline_ms } }) : null;
  const el = h("section", { class: "card approval pending", dataset: { approvalId: a.approval_id }, "aria-label": "Approval request" },
    h("header", null, h("strong", null, "Approval needed"), deadline),
    h("div", { class: "card-title" }, a.title),
    cmd && cmd !== a.title ? h("pre", { class: "cmd" }, cmd) : null,
    paths.length ? h("ul", { class: "paths" }, paths.map((p) => h("li", null, h("code", null, p)))) : null,
    reason ? h("p", { class: "reason" }, reason) : null,
    buttons,
    h("p", { class: "card-result", hidden: true }));
  tickDeadline(el);
  return el;
}

export function resolveApproval(el, status, by) {
  el.querySelector("header strong").textContent = "Approval";
  el.classList.remove("pending");
  el.classList.add("resolved", `r-${status}`);
  el.querySelector(".card-actions")?.remove();
  el.querySelector(".deadline")?.remove();
  const res = el.querySelector(".card-result");
  res.hidden = false;
  res.textContent = (APPROVAL_DONE[status] || status) + (by && status !== "expired" ? ` (by ${by})` : "");
}

/** A question card with an answer box; `onAnswer(text)` answers it. */
export function questionCard(q, onAnswer) {
  const input = h("input", { type: "text", class: "answer", "aria-label": "Your answer", placeholder: "Your answer" });
  const form = h("form", {
    class: "card-actions",
    onsubmit: async (ev) => {
      ev.preventDefault();
      const text = input.value.trim();
      if (!text) return;
      form.querySelectorAll("input,button").forEach((b) => (b.disabled = true));
      const ok = await onAnswer(text);
      if (!ok) form.querySelectorAll("input,button").forEach((b) => (b.disabled = false));
    },
  }, input, h("button", { type: "submit", class: "primary" }, "Answer"));
  const deadline = q.deadline_ms ? h("span", { class: "muted small-text deadline", dataset: { deadline: q.deadline_ms } }) : null;
  const el = h("section", { class: "card question pending", dataset: { questionId: q.question_id }, "aria-label": "Question from the agent" },
    h("header", null, h("strong", null, "The agent asks"), deadline),
    h("div", { class: "card-title" }, q.prompt),
    form,
    h("p", { class: "card-result", hidden: true }));
  tickDeadline(el);
  return el;
}

export function resolveQuestion(el, status, answer) {
  el.querySelector("header strong").textContent = "Question";
  el.classList.remove("pending");
  el.classList.add("resolved", `r-${status}`);
  el.querySelector(".card-actions")?.remove();
  el.querySelector(".deadline")?.remove();
  const res = el.querySelector(".card-result");
  res.hidden = false;
  res.textContent = status === "answered" ? `Answered: ${answer ?? ""}` : status === "expired" ? "Expired without an answer" : "Cancelled";
}

/** Refreshes the "expires in" text of a pending card. */
export function tickDeadline(card, now = Date.now()) {
  const d = card.querySelector(".deadline");
  if (!d) return;
  const left = Number(d.dataset.deadline) - now;
  d.textContent = left > 0 ? `expires in ${duration(left).replace(/ \d+ s$/, "")}` : "expiring";
}
