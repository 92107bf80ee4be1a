// Sign-in, streaming, and the binding rules as the web page shows them: same session for
// follow-ups, New Session, Detach, model drift, and a reload that keeps everything.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import {
  startDaemon, startBrowser, screenshot, openSignedIn, newConversation, send, sessionId,
  waitSession, sendAndWait, turnTexts, waitIdle,
} from "./harness.mjs";

let daemon;
let browser;
let page;

before(async () => {
  daemon = await startDaemon();
  browser = await startBrowser();
});

after(async () => {
  await browser?.stop();
  await daemon?.stop();
});

afterEach(async () => {
  if (page) {
    const errors = page.errors;
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

test("sign-in asks for the token, refuses a wrong one and remembers the right one", async () => {
  page = await browser.newPage();
  await page.goto(daemon.base + "/");
  await page.locator("#signin").waitFor({ state: "visible" });
  await screenshot(page, "desktop-signin");
  await page.fill("#signin-token", "not-the-token");
  await page.click("#signin-form button[type=submit]");
  await page.locator("#signin-error").waitFor({ state: "visible" });
  assert.match(await page.textContent("#signin-error"), /not right/);
  // Chromium logs the refused check (a 401 the page expects) as a failed load; nothing else.
  page.errors = page.errors.filter((e) => !/Failed to load resource: the server responded with a status of 401/.test(e));

  await page.fill("#signin-token", daemon.token);
  await page.press("#signin-token", "Enter");
  await page.locator("#app").waitFor({ state: "visible" });
  assert.equal(await page.evaluate(() => localStorage.getItem("tether.token")), daemon.token);

  await page.reload();
  await page.locator("#app").waitFor({ state: "visible" });
  assert.equal(await page.isVisible("#signin"), false, "no sign-in after a reload");

  await page.click("#signout");
  await page.locator("#signin").waitFor({ state: "visible" });
  assert.equal(await page.evaluate(() => localStorage.getItem("tether.token")), null);

  // A `?token=` in the query (sent to the server, kept in logs) signs nobody in, and is
  // removed from the address all the same (issue 24 S7).
  await page.goto(`${daemon.base}/?token=${encodeURIComponent(daemon.token)}`);
  await page.locator("#signin").waitFor({ state: "visible" });
  assert.doesNotMatch(page.url(), /token/);

  // The link with the token signs in and leaves no token in the address.
  await page.goto(`${daemon.base}/#token=${encodeURIComponent(daemon.token)}`);
  await page.locator("#app").waitFor({ state: "visible" });
  assert.doesNotMatch(page.url(), /token/);
});

test("a message streams its reply live, rendered as Markdown", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await send(page, "stream 6 250");
  // Part of the reply is on screen while the turn still runs.
  await page.waitForFunction(() => {
    const t = document.querySelector("#timeline .turn:last-of-type");
    return t && t.dataset.status === "running" && t.innerText.includes("chunk 2") && !t.innerText.includes("chunk 6");
  }, null, { polling: "raf" });
  const [text] = await sendAndWait(page, null, "completed");
  assert.match(text, /chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 chunk 6\s*\nremembers 0: \[\]/);
  assert.equal((text.match(/chunk 3/g) || []).length, 1);
  // The reply is Markdown: `[...]` and the break are rendered, the message is in a .md block.
  assert.equal(await page.locator("#timeline .turn .msg.agent.md").count(), 1);
  await page.waitForFunction(() => document.querySelector("#conv-state").dataset.state === "bound/idle");
  assert.equal(await page.isVisible("#stop"), false, "no Stop button once the turn ended");

  await sendAndWait(page, "say **bold** and `code` and [docs](https://example.com/d)\n\n- one\n- two\n\n<img src=x onerror=alert(1)>");
  const reply = page.locator("#timeline .turn").last().locator(".msg.agent");
  assert.equal(await reply.locator("strong").first().textContent(), "bold");
  assert.equal(await reply.locator("code").first().textContent(), "code");
  assert.equal(await reply.locator("a[href='https://example.com/d']").count(), 1);
  assert.equal(await page.locator("#timeline img").count(), 0, "HTML in a reply stays text");
  assert.match(await reply.innerText(), /<img src=x onerror=alert\(1\)>/);
});

test("earlier completed turns stay visible while a new turn streams", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await sendAndWait(page, "first question");
  await sendAndWait(page, "second question");
  await send(page, "stream 8 250");
  // While the third turn streams, both earlier turns are on screen whole, completed.
  await page.waitForFunction(() => {
    const ts = document.querySelectorAll("#timeline .turn");
    return ts.length === 3 && ts[2].dataset.status === "running" && ts[2].innerText.includes("chunk 2")
      && !ts[2].innerText.includes("chunk 8");
  }, null, { polling: "raf" });
  const earlier = await page.$$eval("#timeline .turn", (ts) => ts.slice(0, 2).map((t) => ({
    status: t.dataset.status, text: t.innerText, visible: t.offsetParent !== null && t.getClientRects().length > 0,
  })));
  assert.deepEqual(earlier.map((t) => [t.status, t.visible]), [["completed", true], ["completed", true]]);
  assert.match(earlier[0].text, /echo: first question/);
  assert.match(earlier[1].text, /echo: second question/);
  const asked = await page.$$eval("#timeline .msg.user", (ms) => ms.map((m) => m.innerText.split("\n")[0]));
  assert.deepEqual(asked.slice(0, 2), ["first question", "second question"]);
  await sendAndWait(page, null, "completed");
  assert.equal(await page.locator("#timeline .turn").count(), 3);
  assert.match(await page.locator("#timeline .turn").first().innerText(), /echo: first question/);
});

test("a follow-up stays in the same session", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await sendAndWait(page, "first");
  const s1 = await waitSession(page);
  assert.ok(s1, "bound after the first message");
  assert.equal(await page.textContent("#session-id"), s1.slice(0, 8));
  const [reply] = await sendAndWait(page, "second");
  await waitIdle(page);
  assert.equal(await sessionId(page), s1);
  assert.match(reply, /remembers 1: \["first"\]/, "the agent kept its context");
  assert.equal(await page.locator("#timeline .session-divider").count(), 1);
});

test("New Session unbinds on the server; the next message starts a new session", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  await sendAndWait(page, "before");
  const s1 = await waitSession(page);
  await page.click("#new-session");
  await page.waitForFunction(() => document.querySelector("#conv-state").dataset.state === "unbound");
  assert.equal((await daemon.api("GET", `/api/v1/conversations/${conv}`)).binding, null);
  await page.locator("#timeline .msg.command", { hasText: "the next message starts a new" }).waitFor();

  const [reply] = await sendAndWait(page, "after");
  const s2 = await waitSession(page, s1);
  assert.notEqual(s2, s1);
  assert.match(reply, /remembers 0: \[\]/, "a fresh agent session");
  await page.locator("#timeline .msg.status", { hasText: "new session requested" }).waitFor();
  assert.equal(await page.locator("#timeline .session-divider").count(), 2);
});

test("the chat shows its folder and + New uses the folder chosen in the list", async () => {
  const ws = await daemon.api("GET", "/api/v1/workspace");
  const proj = path.join(ws.default_cwd, "proj-folder");
  fs.mkdirSync(proj, { recursive: true });
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await page.waitForFunction((d) => document.querySelector("#new-cwd").placeholder === d, ws.default_cwd);
  const first = await newConversation(page);
  await page.waitForFunction((d) => document.querySelector("#conv-cwd").textContent === d, ws.default_cwd);
  assert.equal((await daemon.api("GET", `/api/v1/conversations/${first}`)).cwd, ws.default_cwd);
  // The roots are offered; a chosen folder goes with the next "+ New" and is remembered.
  const offered = await page.$$eval("#cwd-options option", (os) => os.map((o) => o.value));
  assert.ok(offered.includes(ws.roots[0]), String(offered));
  await page.fill("#new-cwd", proj);
  const second = await newConversation(page);
  await page.waitForFunction((d) => document.querySelector("#conv-cwd").textContent === d, proj);
  assert.equal((await daemon.api("GET", `/api/v1/conversations/${second}`)).cwd, proj);
  await page.reload();
  await page.locator("#app").waitFor({ state: "visible" });
  assert.equal(await page.inputValue("#new-cwd"), proj);
  await page.evaluate(() => localStorage.removeItem("tether.cwd"));
});

test("Detach shows unbound", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  await sendAndWait(page, "hello");
  assert.ok(await waitSession(page));
  await page.click("#detach");
  await page.waitForFunction(() => document.querySelector("#conv-state").dataset.state === "unbound");
  assert.equal(await page.textContent("#session-id"), "none");
  assert.equal(await page.textContent("#conv-state"), "unbound");
  assert.equal(await page.isDisabled("#detach"), true);
  await page.locator("#timeline .msg.command", { hasText: "detached" }).waitFor();
  assert.equal((await daemon.api("GET", `/api/v1/conversations/${conv}`)).state, "unbound");
  // The conversation list agrees.
  await page.locator(`.conv-item[data-id="${conv}"][data-state="unbound"]`).waitFor();
});

test("changing the model shows the drift notice, then a status message and a new session", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await sendAndWait(page, "one");
  const s1 = await waitSession(page);
  assert.equal(await page.isVisible("#drift"), false);

  await page.fill("#model-picker", "big-model");
  await page.locator("#drift").waitFor({ state: "visible" });
  assert.match(await page.textContent("#drift"), /next message starts a new session \(model default → big-model\)/);
  await screenshot(page, "desktop-drift-notice");

  const [reply] = await sendAndWait(page, "two");
  const s2 = await waitSession(page, s1);
  assert.notEqual(s2, s1);
  assert.match(reply, /remembers 0: \[\]/);
  const status = page.locator("#timeline .msg.status", { hasText: "model changed from default to big-model: started a new session" });
  await status.waitFor();
  await page.waitForFunction(() => document.querySelector("#session-status").textContent.includes("big-model"));
  assert.equal(await page.isVisible("#drift"), false, "no drift once the session matches");

  // Same model again: same session.
  await sendAndWait(page, "three");
  await waitIdle(page);
  assert.equal(await sessionId(page), s2);

  // Changing the agent drifts too.
  await page.selectOption("#agent-picker", "fake2");
  assert.match(await page.textContent("#drift"), /agent fake → fake2/);
  await sendAndWait(page, "four");
  const s3 = await waitSession(page, s2);
  assert.notEqual(s3, s2);
  await page.locator("#timeline .msg.status", { hasText: "agent changed from fake to fake2" }).waitFor();
  assert.match(await page.textContent("#session-status"), /^fake2/);
});

test("a page reload keeps everything", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  await sendAndWait(page, "keep me");
  await waitSession(page);
  await sendAndWait(page, "approve touch file", "completed", async () => {
    await page.locator(".card.approval.pending").waitFor();
    await page.click(".card.approval button[data-decision=allow]");
  });
  await sendAndWait(page, "stream 3 10");
  await page.click("#rename");
  await page.fill("#rename-input", "Kept across reloads");
  await page.press("#rename-input", "Enter");
  await page.waitForFunction(() => document.querySelector("#chat-title").textContent === "Kept across reloads");

  const snapshot = async () => ({
    sid: await sessionId(page),
    title: await page.textContent("#chat-title"),
    state: await page.getAttribute("#conv-state", "data-state"),
    turns: await turnTexts(page),
    statuses: await page.locator("#timeline .turn").evaluateAll((ts) => ts.map((t) => t.dataset.status)),
    tools: await page.locator("#timeline .tool").count(),
    cards: await page.locator("#timeline .card.resolved").allInnerTexts(),
    timeline: await page.innerText("#timeline"),
  });
  const before = await snapshot();
  assert.equal(before.turns.length, 3);
  await page.reload();
  await page.locator("#binding").waitFor({ state: "visible" });
  await page.waitForFunction((n) => {
    const ts = document.querySelectorAll("#timeline .turn");
    return ts.length === n && [...ts].every((t) => t.dataset.status === "completed");
  }, before.turns.length);
  assert.match(page.url(), new RegExp(`#c=${conv}`));
  assert.deepEqual(await snapshot(), before);
});

test("a delegated sub-conversation: Sub badge behind its filter, continue and close from the page, then a locked composer", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const parent = await newConversation(page);
  // The fake agent calls tether's MCP tool when told to: it delegates a task to `fake`.
  await sendAndWait(page, 'mcp delegate_to_agent {"agent_type": "fake", "task": "child work"}');
  const [child] = await daemon.api("GET", `/api/v1/conversations/${parent}/delegations`);
  assert.ok(child && child.task_id, "a delegated task");
  const task = child.task_id;
  for (let i = 0; i < 200 && (await daemon.api("GET", `/api/v1/conversations/${task}/continuation`)).availability === "running"; i++) {
    await new Promise((r) => setTimeout(r, 50));
  }

  // Hidden from the list unless the filter is on; then shown with its badge.
  await page.uncheck("#filter-sub");
  await page.locator(`.conv-item[data-id="${parent}"]`).waitFor();
  assert.equal(await page.locator(`.conv-item[data-id="${task}"]`).count(), 0);
  await page.check("#filter-sub");
  const item = page.locator(`.conv-item[data-id="${task}"]`);
  await item.waitFor();
  assert.equal(await item.locator(".badge.sub").innerText(), "Sub");
  await item.click();

  await page.locator("#delegate-row").waitFor({ state: "visible" });
  assert.equal(await page.isVisible("#picker-row"), false);
  assert.equal(await page.isVisible("#new-session"), false);
  await page.waitForFunction(() => /can continue/.test(document.querySelector("#delegate-info").textContent));
  await page.locator("#timeline .turn", { hasText: "echo: child work" }).waitFor();

  // A person continues the task in the same child session.
  const [more] = await sendAndWait(page, "more please");
  assert.match(more, /echo: more please\s+remembers 1: \["child work"\]/);
  await screenshot(page, "desktop-subtask");

  await page.click("#close-task");
  await page.waitForFunction(() => document.querySelector("#delegate-info").dataset.availability === "released");
  assert.equal(await page.isDisabled("#close-task"), true);
  // A closed task takes no more messages: the composer is locked and says why.
  await page.waitForFunction(() => document.querySelector("#composer-input").disabled);
  assert.equal(await page.isDisabled("#send"), true);
  await page.locator("#composer-note").waitFor({ state: "visible" });
  assert.match(await page.textContent("#composer-note"), /task was closed/);
  await screenshot(page, "desktop-subtask-closed");
  // Opened afresh (another tab, a reload), it is locked too.
  await page.reload();
  await page.locator("#delegate-row").waitFor({ state: "visible" });
  await page.waitForFunction(() => document.querySelector("#composer-input").disabled);
  assert.match(await page.textContent("#composer-note"), /task was closed/);

  await page.click("#delegate-parent");
  await page.waitForFunction((p) => location.hash === `#c=${p}`, parent);
  await page.locator("#picker-row").waitFor({ state: "visible" });
  await page.uncheck("#filter-sub");
});
