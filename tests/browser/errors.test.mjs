// Errors carry their stable code next to the message (API errors are `{code, message}`,
// a failed turn has the code of its `turn_failed` event), and the model picker offers
// the agent's default model explicitly.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import {
  startDaemon, startBrowser, screenshot, openSignedIn, newConversation, send, sendAndWait,
  waitSession, waitIdle,
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
    // Refused requests are what these tests make on purpose.
    const errors = page.errors.filter((e) => !/Failed to load resource: the server responded with a status of 4\d\d/.test(e));
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

test("an API error shows its stable code next to the message", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await send(page, "/frobnicate");
  const err = page.locator("#composer-error");
  await err.waitFor({ state: "visible" });
  assert.equal(await err.locator("code.error-code").innerText(), "unknown_command");
  assert.equal(await err.locator("code.error-code").getAttribute("data-code"), "unknown_command");
  assert.match(await err.innerText(), /^unknown_command\s+\S.*\/help/s, "code, then the server's message");
  await screenshot(page, "desktop-error-code");

  // A conversation that does not exist says so, with the code.
  await page.evaluate(() => (location.hash = "c=no-such-conversation"));
  const missing = page.locator("#timeline p.error");
  await missing.waitFor();
  assert.equal(await missing.locator("code.error-code").innerText(), "not_found");
  assert.match(await missing.innerText(), /does not exist/);
});

test("a failed turn shows the code and message of its turn_failed event", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  await sendAndWait(page, "fail", "failed");
  const env = await failedEvent(conv);
  const box = page.locator("#timeline .turn").last().locator(".turn-error");
  await box.waitFor();
  assert.equal(await box.locator("code.error-code").innerText(), env.payload.code);
  assert.match(await box.innerText(), new RegExp(`${env.payload.code}\\s+.*fake failure as asked`, "s"));
  // Opened again, the failed turn still shows it.
  await page.reload();
  await page.locator("#timeline .turn .turn-error code.error-code").waitFor();
  assert.equal(await page.locator("#timeline .turn-error code.error-code").innerText(), env.payload.code);
});

/** The `turn_failed` event of a conversation, read from the API. */
async function failedEvent(conv) {
  const page = await daemon.api("GET", `/api/v1/conversations/${conv}/events/page?limit=50`);
  const env = page.events.find((e) => e.payload.type === "turn_failed");
  assert.ok(env, "a turn_failed event");
  return env;
}

test("the model picker offers the agent's default model and sends it explicitly", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  // A new conversation is on the agent's default model, and says so.
  assert.equal(await page.inputValue("#model-picker"), "default");
  assert.equal(await page.locator("#model-options option[value=default]").count(), 1);
  assert.match(await page.getAttribute("#model-options option[value=default]", "label"), /agent's default model/);

  await page.fill("#model-picker", "big-model");
  await sendAndWait(page, "one");
  const s1 = await waitSession(page);
  await page.waitForFunction(() => document.querySelector("#session-status").textContent.includes("big-model"));
  await waitIdle(page);

  // Back to the default: that is drift too, and the message asks for it explicitly.
  await page.fill("#model-picker", "default");
  await page.locator("#drift").waitFor({ state: "visible" });
  assert.match(await page.textContent("#drift"), /model big-model → default/);
  const request = page.waitForRequest((r) => r.method() === "POST" && /\/messages$/.test(r.url()));
  await sendAndWait(page, "two");
  const body = (await request).postDataJSON();
  assert.equal(body.model, "default");
  assert.notEqual(await waitSession(page, s1), s1, "a new session");

  // A blank box changes nothing: no override is sent.
  await waitIdle(page);
  await page.fill("#model-picker", "");
  const next = page.waitForRequest((r) => r.method() === "POST" && /\/messages$/.test(r.url()));
  await sendAndWait(page, "three");
  assert.equal((await next).postDataJSON().model, undefined);
});
