// Small DOM and formatting helpers shared by the page's modules.

/** `h("div", {class: "x", onclick: fn}, child, "text", ...)` → an element. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "html") el.innerHTML = v; // only ever given renderMarkdown() output
      else if (v === true) el.setAttribute(k, "");
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

export const $ = (id) => document.getElementById(id);

/** The first 8 characters of an id, for display. */
export const shortId = (id) => (id ? String(id).slice(0, 8) : "");

/** "just now", "5 min ago", "3 h ago", or a date. */
export function ago(ms, now = Date.now()) {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 45) return "just now";
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(ms).toLocaleDateString();
}

/** "850 ms", "3.2 s", "2 min 5 s". */
export function duration(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} min ${Math.round((ms % 60000) / 1000)} s`;
}

export const clock = (ms) =>
  new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

/** Conversation state → [label, css class]. */
export function stateLabel(state) {
  switch (state) {
    case "unbound": return ["unbound", "s-unbound"];
    case "bound/idle": return ["idle", "s-idle"];
    case "bound/running": return ["running", "s-running"];
    case "bound/waiting_user": return ["waiting for you", "s-waiting"];
    case "bound/waiting_approval": return ["waiting for you", "s-waiting"];
    default: return [state || "unknown", "s-unbound"];
  }
}

/** Copies text; falls back to a hidden textarea where the clipboard API is missing. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const ta = h("textarea", { class: "visually-hidden", readonly: true });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch {
      ok = false;
    }
    ta.remove();
    return ok;
  }
}

let toastTimer = null;
/** A short message at the bottom of the screen. */
export function toast(text) {
  const el = $("toast");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (el.hidden = true), 2500);
}

/**
 * Shows an error in `el`: its stable code (a `code.error-code` with `data-code`) next to
 * its message. `e` is text, or anything with `message` and `code` (an API error, a failed
 * turn); nothing hides `el`.
 */
export function setError(el, e) {
  if (!e) {
    el.replaceChildren();
    el.hidden = true;
    return;
  }
  el.replaceChildren(...errorNodes(e));
  el.hidden = false;
}

/** The nodes of an error: `[code, " ", message]` (just the message when it has no code). */
export function errorNodes(e) {
  const message = typeof e === "string" ? e : e.message || String(e);
  const code = typeof e === "object" && e.code ? String(e.code) : "";
  return code ? [h("code", { class: "error-code", dataset: { code } }, code), " ", message] : [message];
}
