// The page's entry point: sign-in (the token is asked once, or taken from the link
// `tether serve` prints, `/#token=…`, and kept in localStorage), the conversation list,
// the open chat, and the `#c=<id>` address of the open conversation.

import { api, getToken, setToken, handleUnauthorized, handleStoreUnavailable, storeReady, csrfToken, ApiError } from "./api.js";
import { $, setError } from "./dom.js";
import { Sidebar } from "./sidebar.js";
import { Chat } from "./chat.js";
import { Accounts } from "./people.js";
import { UsageView } from "./usage.js";
import { SchedulesView } from "./schedules.js";
import { WorktreeView } from "./worktree.js";

const sidebar = new Sidebar({ onSelect: (id) => go(id), onChange: (conv) => chat.listChanged(conv) });
const chat = new Chat({ onChange: (conv) => sidebar.update(conv) });
new Accounts();
new UsageView({ current: () => new URLSearchParams(location.hash.slice(1)).get("c") });
new SchedulesView({ current: () => new URLSearchParams(location.hash.slice(1)).get("c") });
new WorktreeView({ current: () => new URLSearchParams(location.hash.slice(1)).get("c") });

/** The token in the address (`#token=`, which never reaches a server or a log),
 * removed from it at once. A `?token=` is not taken (it was sent to the server and may
 * sit in a proxy's log); it is removed all the same. */
function tokenFromAddress() {
  const hash = new URLSearchParams(location.hash.slice(1));
  const query = new URLSearchParams(location.search);
  const token = hash.get("token");
  if (token || query.has("token")) {
    hash.delete("token");
    query.delete("token");
    const q = query.toString();
    const f = hash.toString();
    history.replaceState(null, "", location.pathname + (q ? "?" + q : "") + (f ? "#" + f : ""));
  }
  return token;
}

function selectedId() {
  return new URLSearchParams(location.hash.slice(1)).get("c");
}

function go(id) {
  closeMenu();
  if (selectedId() === id) return;
  location.hash = id ? `c=${encodeURIComponent(id)}` : "";
}

function route() {
  const id = selectedId();
  sidebar.select(id);
  if (id !== chat.id) chat.open(id);
}

/** Checks a token against the server: the agents list needs it. */
async function verify(token) {
  const agents = await api("GET", "/api/v1/agents", undefined, { token });
  return agents.map((a) => a.name);
}

async function enter(agents) {
  $("signin").hidden = true;
  $("app").hidden = false;
  chat.setAgents(agents);
  sidebar.start();
  route();
}

/** `problem`: text or an API error (shown with its code); empty for none. */
function showSignIn(problem) {
  closeMenu();
  sidebar.stop();
  chat.close();
  $("app").hidden = true;
  $("signin").hidden = false;
  setError($("signin-error"), problem);
  $("signin-token").focus();
}

async function signIn(token) {
  try {
    const agents = await verify(token);
    setToken(token);
    await enter(agents);
  } catch (e) {
    showSignIn(e instanceof ApiError && e.status === 401 ? { code: e.code, message: "That token is not right. Run `tether token` to see it." } : e);
  }
}

$("signin-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const token = $("signin-token").value.trim();
  if (token) signIn(token);
});

$("signout").addEventListener("click", async () => {
  // A cookie session ends on the server (on every node); a token is only forgotten here.
  if (!getToken() && csrfToken()) await api("POST", "/api/v1/auth/signout").catch(() => {});
  setToken("");
  showSignIn("");
});

/** Offers "Sign in with…" when the server has a provider. */
async function offerProvider() {
  try {
    const resp = await fetch("/api/v1/auth/providers", { cache: "no-store" });
    const p = await resp.json();
    if (p.oidc) {
      $("signin-oidc-link").textContent = `Sign in with ${new URL(p.oidc).host}`;
      $("signin-oidc").hidden = false;
    }
  } catch {
    // Tokens only.
  }
}

/** A failed "Sign in with…" comes back as `#signin_error=<code>`. */
function signInError() {
  const hash = new URLSearchParams(location.hash.slice(1));
  const code = hash.get("signin_error");
  if (!code) return null;
  hash.delete("signin_error");
  const f = hash.toString();
  history.replaceState(null, "", location.pathname + location.search + (f ? "#" + f : ""));
  return { code, message: "Signing in with your account did not work." };
}

handleUnauthorized(() => {
  setToken("");
  showSignIn("The token was refused. Sign in again.");
});

// The store is unreachable (a database restart): a banner until `/api/v1/ready` answers
// again, checked every 2 s meanwhile and every 15 s otherwise (no token needed); then
// the list and the open conversation are read again.
let storeCheck = null;
const STORE_CHECK_MS = 15000;
const STORE_RETRY_MS = 2000;
function storeDown() {
  const el = $("degraded");
  if (el.hidden) {
    el.textContent = "tether cannot reach its database: nothing new can be sent until it is back. "
      + "It reconnects by itself; what was already accepted is kept.";
    el.hidden = false;
    document.body.dataset.store = "unavailable";
  }
  scheduleStoreCheck(STORE_RETRY_MS);
}
function scheduleStoreCheck(ms) {
  clearTimeout(storeCheck);
  storeCheck = setTimeout(checkStore, ms);
}
async function checkStore() {
  if ($("app").hidden) return scheduleStoreCheck(STORE_CHECK_MS);
  if (!(await storeReady())) return storeDown();
  if (!$("degraded").hidden) {
    $("degraded").hidden = true;
    delete document.body.dataset.store;
    sidebar.refresh();
    chat.refreshSoon(0);
  }
  scheduleStoreCheck(STORE_CHECK_MS);
}
handleStoreUnavailable(storeDown);
scheduleStoreCheck(STORE_CHECK_MS);

$("new-conversation").addEventListener("click", async () => {
  try {
    const conv = await sidebar.create();
    go(conv.id);
  } catch (e) {
    chat.showError(e);
  }
});

// Phone width: the list is a drawer.
function closeMenu() {
  document.body.classList.remove("menu-open");
  $("menu").setAttribute("aria-expanded", "false");
  $("scrim").hidden = true;
}
$("menu").addEventListener("click", () => {
  const open = !document.body.classList.contains("menu-open");
  document.body.classList.toggle("menu-open", open);
  $("menu").setAttribute("aria-expanded", String(open));
  $("scrim").hidden = !open;
  if (open) $("conversation-list").querySelector(".conv-item")?.focus();
});
$("scrim").addEventListener("click", closeMenu);
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && document.body.classList.contains("menu-open")) closeMenu();
});

window.addEventListener("hashchange", () => {
  // The sign-in link opened in a tab that already shows the page.
  const token = tokenFromAddress();
  if (token) signIn(token);
  else if (!$("app").hidden) route();
});

const linked = tokenFromAddress();
const stored = getToken();
const refused = signInError();
offerProvider();
if (linked) signIn(linked);
else if (stored) signIn(stored);
else if (!refused && csrfToken()) signIn("");
else showSignIn(refused || "");
