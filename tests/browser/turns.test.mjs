// Steering a running agent from the page: approval and question cards (answered here or
// anywhere else), Stop, the queue, and a dropped event stream that catches up without
// duplicates.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import {
  startDaemon, startProxy, startBrowser, screenshot, openSignedIn, newConversation, send,
  sendAndWait, sessionId, waitSession, waitIdle,
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
    const errors = page.allowErrors ? page.errors.filter((e) => !page.allowErrors.test(e)) : page.errors;
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

const lastTurn = () => page.locator("#timeline .turn").last();

test("an approval card answered with Allow lets the turn finish", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await send(page, "approve rm -rf build");
  const card = page.locator(".card.approval.pending");
  await card.waitFor();
  assert.match(await card.innerText(), /Approval needed[\s\S]*rm -rf build[\s\S]*echo rm -rf build/);
  assert.deepEqual(await card.locator("button").allInnerTexts(), ["Allow", "Allow always", "Deny"]);
  await page.waitForFunction(() => document.querySelector("#conv-state").dataset.state === "bound/waiting_approval");
  assert.equal(await page.textContent("#conv-state"), "waiting for you");
  assert.match(await lastTurn().locator(".turn-foot").innerText(), /waiting for you/);
  await screenshot(page, "desktop-approval");

  await card.locator("button[data-decision=allow]").click();
  const [text] = await sendAndWait(page, null, "completed");
  assert.match(text, /approval: allowed/);
  assert.match(await page.locator(".card.approval").innerText(), /Allowed \(by owner on web\)/);
  assert.equal(await page.locator(".card.approval button").count(), 0, "no buttons once answered");
  // The tool call row: compact, expandable, with the command and its output.
  const tool = lastTurn().locator("details.tool");
  assert.match(await tool.locator("summary").innerText(), /rm -rf build[\s\S]*completed/);
  await tool.locator("summary").click();
  assert.match(await tool.locator(".tool-body").innerText(), /Command\s+echo rm -rf build\s+Output\s+rm -rf build/i);
  await screenshot(page, "desktop-chat");

  // Deny works the same way.
  await sendAndWait(page, "approve drop table", "completed", async () => {
    await page.locator(".card.approval.pending button[data-decision=deny]").click();
  });
  assert.match(await lastTurn().innerText(), /approval: denied/);
  assert.match(await lastTurn().locator("details.tool summary").innerText(), /failed/);
});

test("a card updates when the request is answered elsewhere", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  await send(page, "approve deploy");
  await page.locator(".card.approval.pending").waitFor();
  // Another channel (here the API, as Telegram or another tab would) answers first.
  const [pending] = await daemon.api("GET", "/api/v1/approvals?status=pending").then((a) => a.filter((x) => x.conversation_id === conv));
  await daemon.api("POST", `/api/v1/approvals/${pending.id}`, { decision: "allow_always" });
  await page.locator(".card.approval.resolved", { hasText: "Allowed always" }).waitFor();
  const [text] = await sendAndWait(page, null, "completed");
  assert.match(text, /approval: allowed_always/);
});

test("a question card takes the answer", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await send(page, "ask which colour?");
  const card = page.locator(".card.question.pending");
  await card.waitFor();
  assert.match(await card.innerText(), /which colour\?/);
  await card.locator("input.answer").fill("blue");
  await card.locator("input.answer").press("Enter");
  const [text] = await sendAndWait(page, null, "completed");
  assert.match(text, /answer: blue/);
  assert.match(await page.locator(".card.question").innerText(), /Answered: blue/);
});

test("Stop cancels a slow turn", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await send(page, "sleep 60000");
  await page.locator("#stop").waitFor({ state: "visible" });
  await page.waitForFunction(() => document.querySelector("#timeline .turn:last-of-type")?.dataset.status === "running");
  const started = Date.now();
  await page.click("#stop");
  await sendAndWait(page, null, "cancelled");
  assert.ok(Date.now() - started < 10000, "cancelled well before the sleep ends");
  await page.locator("#timeline .msg.status", { hasText: "turn cancelled" }).waitFor();
  await page.locator("#stop").waitFor({ state: "hidden" });
  await page.waitForFunction(() => document.querySelector("#conv-state").dataset.state === "bound/idle");
  // The session stays bound and answers the next message.
  const sid = await waitSession(page);
  const [text] = await sendAndWait(page, "still there?");
  assert.match(text, /echo: still there\?/);
  await waitIdle(page);
  assert.equal(await sessionId(page), sid);
});

test("a message sent while a turn runs waits in the queue with its place", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await send(page, "sleep 1500");
  await page.waitForFunction(() => document.querySelector("#timeline .turn:last-of-type")?.dataset.status === "running");
  await send(page, "queued one");
  await send(page, "queued two");
  await page.waitForFunction(() => {
    const ts = [...document.querySelectorAll("#timeline .turn")];
    return ts.length === 3 && ts[1].innerText.includes("queued · #1") && ts[2].innerText.includes("queued · #2");
  });
  await screenshot(page, "desktop-queue");
  await page.waitForFunction(() => [...document.querySelectorAll("#timeline .turn")].every((t) => t.dataset.status === "completed"), null, { timeout: 20000 });
  const texts = await page.locator("#timeline .turn").allInnerTexts();
  assert.match(texts[1], /echo: queued one\s+remembers 1: \["sleep 1500"\]/);
  assert.match(texts[2], /echo: queued two\s+remembers 2/);
});

test("a forced event-stream disconnect catches up without duplicates", async () => {
  const proxy = await startProxy(daemon.base);
  try {
    page = await browser.newPage();
    // The browser sees failed loads while the proxy refuses connections: expected here.
    page.allowErrors = /ERR_|Failed to load resource|EventSource/;
    await openSignedIn(page, proxy.url, daemon.token);
    await newConversation(page);
    await send(page, "stream 16 150");
    await page.waitForFunction(() => document.querySelector("#timeline .turn:last-of-type")?.innerText.includes("chunk 2"));
    // Drop every connection (the event stream among them) and refuse new ones for a while,
    // so the rest of the reply is produced while the page is cut off.
    assert.ok(proxy.cut(2500) > 0, "there were open connections to cut");
    const cutAt = proxy.requests.length;
    await page.locator("#stream-state[data-state=reconnecting]").waitFor({ state: "visible" });
    const alive = await daemon.api("GET", "/api/v1/conversations").then((cs) => cs[0]);
    assert.ok(alive, "the daemon kept running");
    // Back: EventSource reconnects with Last-Event-ID and gets what it missed, once.
    const [text] = await sendAndWait(page, null, "completed");
    const expected = Array.from({ length: 16 }, (_, i) => `chunk ${i + 1}`).join(" ");
    assert.ok(text.includes(expected), `the whole reply once: ${text}`);
    for (let i = 1; i <= 16; i++) {
      assert.equal(text.split(`chunk ${i} `).length - 1 + (text.includes(`chunk ${i}\n`) ? 1 : 0), 1, `chunk ${i} once`);
    }
    assert.equal((text.match(/remembers 0/g) || []).length, 1);
    await page.locator("#stream-state").waitFor({ state: "hidden" });
    // The proxy logs the reopened stream when its request head arrives; give it a moment.
    const isStream = (r) => /^GET \/api\/v1\/conversations\/[^/]+\/events/.test(r);
    let resumed;
    for (let i = 0; i < 100 && !resumed; i++) {
      resumed = proxy.requests.slice(cutAt).find(isStream);
      if (!resumed) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(resumed, "the stream was opened again");
    assert.match(resumed, /^last-event-id: *[1-9]\d*\r?$/im, "resumed with Last-Event-ID");
    assert.equal(await page.locator("#timeline .turn").count(), 1);
    assert.equal(await page.locator("#timeline .msg.user").count(), 1);
    // The page keeps working on the new connection.
    const [next] = await sendAndWait(page, "after the drop");
    assert.match(next, /echo: after the drop/);
  } finally {
    await proxy.stop();
  }
});

test("an approval that nobody answers in time shows as expired", async () => {
  const quick = await startDaemon({ approvalTimeoutSecs: 1 });
  try {
    page = await browser.newPage();
    await openSignedIn(page, quick.base, quick.token);
    await newConversation(page);
    await send(page, "approve wait for me");
    await page.locator(".card.approval.pending").waitFor();
    await page.locator(".card.approval.resolved", { hasText: "Expired" }).waitFor();
    assert.equal(await page.locator(".card.approval button").count(), 0);
    const [text] = await sendAndWait(page, null, "completed");
    assert.match(text, /approval: (denied|cancelled)/, "the agent was told no");
  } finally {
    await page?.close();
    const errors = page?.errors ?? [];
    page = null;
    await quick.stop();
    assert.deepEqual(errors, [], "no console errors");
  }
});
