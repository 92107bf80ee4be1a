// The HTTP API client: token storage, JSON requests with the bearer token, and the
// conversation event stream (EventSource with `?token=`, resumed with Last-Event-ID).

const TOKEN_KEY = "tether.token";

export function getToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(token) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Private mode without storage: the token lives as long as the page.
  }
  memoryToken = token;
}

let memoryToken = getToken();

/** Called with no arguments when the server rejects the token. */
let onUnauthorized = () => {};
export function handleUnauthorized(fn) {
  onUnauthorized = fn;
}

/** Called with the message when the server answers that its store is unreachable. */
let onStoreUnavailable = () => {};
export function handleStoreUnavailable(fn) {
  onStoreUnavailable = fn;
}

/** Whether the store serves (`GET /api/v1/ready`, no token); `false` also offline. */
export async function storeReady() {
  try {
    const resp = await fetch("/api/v1/ready", { cache: "no-store" });
    return resp.ok;
  } catch {
    return false;
  }
}

/** A failed request: HTTP status plus the server's stable error code and message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** `api("POST", "/api/v1/...", body)` → the parsed JSON body; throws ApiError. */
/** The sign-in cookie's CSRF token (a session from "Sign in with…"), or "". */
export function csrfToken() {
  const m = document.cookie.match(/(?:^|;\s*)tether_csrf=([^;]*)/);
  return m ? decodeURIComponent(m[1]) : "";
}

/** With a token: the bearer header. Without one (signed in by cookie): the cookie goes
 * by itself, and a change carries the session's CSRF token. */
function authHeaders(token, method) {
  if (token) return { Authorization: `Bearer ${token}` };
  return method === "GET" || method === "HEAD" ? {} : { "X-Tether-CSRF": csrfToken() };
}

/** `?token=…&` for an EventSource URL (nothing when signed in by cookie). */
export function tokenParam() {
  return memoryToken ? `token=${enc(memoryToken)}` : "";
}

export async function api(method, path, body, opts = {}) {
  const headers = { ...authHeaders(opts.token ?? memoryToken, method), "X-Tether-Client": "web" };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch {
    throw new ApiError(0, "network", "cannot reach tether (network error)");
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!resp.ok) {
    const err = data && data.error ? data.error : {};
    const e = new ApiError(resp.status, err.code || "http_" + resp.status, err.message || resp.statusText);
    if (resp.status === 401 && !opts.token) onUnauthorized();
    if (e.code === "store_unavailable") onStoreUnavailable(e.message);
    throw e;
  }
  return data;
}

/** A GET whose answer is text (a worktree's patch). */
export async function apiText(path) {
  let resp;
  try {
    resp = await fetch(path, { headers: authHeaders(memoryToken, "GET"), cache: "no-store" });
  } catch {
    throw new ApiError(0, "network", "cannot reach tether (network error)");
  }
  if (!resp.ok) throw new ApiError(resp.status, "http_" + resp.status, resp.statusText);
  return resp.text();
}

/** Uploads files into a conversation (`multipart/form-data`); their attachment ids. */
export async function uploadFiles(convId, files) {
  const form = new FormData();
  for (const f of files) form.append("file", f, f.name || "pasted");
  let resp;
  try {
    resp = await fetch(`/api/v1/conversations/${encodeURIComponent(convId)}/attachments`, {
      method: "POST", headers: authHeaders(memoryToken, "POST"), body: form, cache: "no-store",
    });
  } catch {
    throw new ApiError(0, "network", "cannot reach tether (network error)");
  }
  const data = await resp.json().catch(() => null);
  if (!resp.ok) {
    const err = data && data.error ? data.error : {};
    if (err.code === "store_unavailable") onStoreUnavailable(err.message);
    throw new ApiError(resp.status, err.code || "http_" + resp.status, err.message || resp.statusText);
  }
  return data.attachments.map((a) => a.id);
}

/** Where an attachment's bytes are (unsigned: see `linkTo`). */
export function attachmentUrl(id) {
  return `/api/v1/attachments/${encodeURIComponent(id)}`;
}

/** A file of a turn's working directory (unsigned: see `linkTo`). */
export function turnFileUrl(turnId, path) {
  return `/api/v1/turns/${encodeURIComponent(turnId)}/files/content?path=${encodeURIComponent(path)}`;
}

// Signed links: `<img src>` and download links cannot send the token, and a token in
// their address would stay in the history and the download list. The server signs each
// address for a while (`POST /api/v1/links`); the asks of one moment go as one request.
let linkQueue = [];
function signedLink(path) {
  return new Promise((resolve, reject) => {
    linkQueue.push({ path, resolve, reject });
    if (linkQueue.length === 1) setTimeout(flushLinks, 0);
  });
}
async function flushLinks() {
  const batch = linkQueue.splice(0, 500);
  if (linkQueue.length) setTimeout(flushLinks, 0);
  try {
    const { links } = await api("POST", "/api/v1/links", { paths: batch.map((b) => b.path) });
    batch.forEach((b, i) => b.resolve(links[i]));
  } catch (e) {
    batch.forEach((b) => b.reject(e));
  }
}

/**
 * Points `el`'s `attr` (`src` of an image, `href` of a link) at a signed link to `path`,
 * and keeps a link working past its expiry (a click on an expired one signs it anew).
 * Returns `el`.
 */
export function linkTo(el, attr, path) {
  let expires = 0;
  const sign = () => signedLink(path).then((l) => {
    expires = l.expires_at_ms;
    el.setAttribute(attr, l.url);
  });
  sign().catch(() => {});
  if (attr === "href") {
    el.addEventListener("click", (ev) => {
      if (Date.now() < expires - 10_000) return;
      ev.preventDefault();
      sign().then(() => el.click(), () => {});
    });
  }
  return el;
}

/** Every page of a conversation's history after `afterId`, oldest first. */
export async function historyAfter(convId, afterId) {
  const out = [];
  let after = afterId;
  for (;;) {
    const page = await api("GET", `/api/v1/conversations/${enc(convId)}/messages?after_id=${after}&limit=500`);
    out.push(...page);
    if (page.length < 500) return out;
    after = page[page.length - 1].id;
  }
}

/** `GET path` → `{ data, next }`: the body and the `X-Next-Cursor` header (or null). */
export async function apiPage(path) {
  let resp;
  try {
    resp = await fetch(path, { headers: authHeaders(memoryToken, "GET"), cache: "no-store" });
  } catch {
    throw new ApiError(0, "network", "cannot reach tether (network error)");
  }
  const data = await resp.json().catch(() => null);
  if (!resp.ok) {
    const err = data && data.error ? data.error : {};
    if (resp.status === 401) onUnauthorized();
    throw new ApiError(resp.status, err.code || "http_" + resp.status, err.message || resp.statusText);
  }
  return { data, next: resp.headers.get("X-Next-Cursor") };
}

export const enc = encodeURIComponent;

const EVENT_TYPES = [
  "session_started", "session_live", "session_dormant", "turn_started", "message_delta",
  "thought_delta", "tool_call", "tool_call_update", "approval_requested", "approval_resolved",
  "question_asked", "question_resolved", "turn_completed", "turn_failed", "turn_cancelled",
  "turn_interrupted", "status", "delegation_started", "delegation_completed",
  "delegation_session_update",
];

/**
 * An EventSource on `url()` (which adds `?token=`) that never gives up: EventSource
 * reconnects by itself (sending Last-Event-ID); when it stops (an HTTP error) this
 * reopens it after a growing pause. `handlers` maps SSE event names to functions of the
 * parsed data; `onState("live" | "reconnecting" | "closed")` reports the connection;
 * `check()` runs after a refusal (a request that signs out when the token is the reason).
 */
export function followStream(url, handlers, onState, check) {
  let source = null;
  let stopped = false;
  let retry = null;
  let delay = 500;

  const open = () => {
    if (stopped) return;
    source = new EventSource(url());
    source.onopen = () => {
      delay = 500;
      onState("live");
    };
    for (const [type, fn] of Object.entries(handlers)) {
      source.addEventListener(type, (msg) => {
        let data;
        try {
          data = JSON.parse(msg.data);
        } catch {
          return;
        }
        fn(data);
      });
    }
    source.onerror = () => {
      if (stopped) return;
      onState("reconnecting");
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        check();
        retry = setTimeout(open, delay);
        delay = Math.min(delay * 2, 8000);
      }
    };
  };
  open();

  return {
    /** Drops the connection now and reconnects at once. */
    reconnect() {
      if (stopped) return;
      if (source) source.close();
      clearTimeout(retry);
      onState("reconnecting");
      open();
    },
    close() {
      stopped = true;
      clearTimeout(retry);
      if (source) source.close();
      onState("closed");
    },
  };
}

/**
 * Follows a conversation's events after `afterId`. `onEvent(envelope)` gets every event
 * once and in order (a reopened stream resumes after the last id seen).
 */
export function followEvents(convId, afterId, onEvent, onState) {
  let last = afterId;
  const handle = (env) => {
    if (typeof env.id !== "number" || env.id <= last) return;
    last = env.id;
    onEvent(env);
  };
  const handlers = Object.fromEntries(EVENT_TYPES.map((t) => [t, handle]));
  handlers.message = handle;
  const stream = followStream(
    () => `/api/v1/conversations/${enc(convId)}/events?after_id=${last}&${tokenParam()}`,
    handlers,
    onState,
    () => api("GET", `/api/v1/conversations/${enc(convId)}`).catch(() => {}));
  return {
    get lastId() {
      return last;
    },
    reconnect: () => stream.reconnect(),
    close: () => stream.close(),
  };
}

/**
 * Follows the conversation list: `onChange({change, conversation})` for each change,
 * `onResync()` when the list must be read again (also after every (re)connect, since the
 * stream does not replay).
 */
export function followList(onChange, onResync, onState) {
  return followStream(
    () => `/api/v1/conversations/events?${tokenParam()}`,
    { conversation: onChange, resync: () => onResync() },
    (state) => {
      if (state === "live") onResync();
      onState(state);
    },
    () => api("GET", "/api/v1/agents").catch(() => {}));
}
