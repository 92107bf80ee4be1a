// One person across channels on the page (issue 28): the Accounts dialog lists a
// person's linked chat accounts, takes a code from a channel's `/link` (a wrong one shows
// its stable code), makes a code to send on a channel, and unlinks; the binding bar's
// Chats row says where replies go, and "Continue on…" gives the `/here` command.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { startDaemon, startBrowser, screenshot, openSignedIn, newConversation } from "./harness.mjs";

let daemon;
let browser;
let page;
let ann;

before(async () => {
  daemon = await startDaemon();
  browser = await startBrowser();
  const person = await daemon.api("POST", "/api/v1/people", { name: "Ann", role: "member" });
  const token = await daemon.api("POST", "/api/v1/tokens", { name: "Ann's browser", person_id: person.id });
  ann = { id: person.id, token: token.secret };
});

after(async () => {
  await browser?.stop();
  await daemon?.stop();
});

afterEach(async () => {
  if (page) {
    const errors = page.errors.filter((e) => !/Failed to load resource: the server responded with a status of 4\d\d/.test(e));
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

test("a person sees, links and unlinks their chat accounts in the Accounts dialog", async () => {
  // An admin linked Ann's Telegram account already.
  await daemon.api("POST", `/api/v1/people/${ann.id}/accounts`, { channel: "telegram", user_id: "111", user_name: "ann_tg" });
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, ann.token);
  await page.click("#accounts");
  const dialog = page.locator("#accounts-dialog");
  await dialog.waitFor({ state: "visible" });
  await page.locator("#account-list li", { hasText: "Telegram" }).waitFor();
  assert.match(await page.locator("#account-list").innerText(), /ann_tg/);

  // A wrong code: its stable code, nothing linked.
  await page.fill("#link-code", "ZZZZ-ZZZZ");
  await page.click("#link-form button[type=submit]");
  await page.locator("#accounts-error .error-code[data-code=not_found]").waitFor();

  // A code to send on a channel.
  await page.click("#make-link-code");
  const made = await page.locator("#link-code-made code.send").innerText();
  assert.match(made, /^\/link [A-Z2-9]{4}-[A-Z2-9]{4}$/);
  await screenshot(page, "accounts-dialog");

  // Unlink: the list is empty, and the API agrees.
  await page.locator("#account-list li", { hasText: "Telegram" }).getByRole("button", { name: "Unlink" }).click();
  await page.locator("#account-empty").waitFor({ state: "visible" });
  const resp = await fetch(`${daemon.base}/api/v1/me/accounts`, { headers: { Authorization: `Bearer ${ann.token}` } });
  assert.deepEqual((await resp.json()).accounts, []);
  await page.click("#accounts-close");
});

test("the Chats row says the page only, and Continue on gives the /here command", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, ann.token);
  const id = await newConversation(page);
  await page.locator("#conv-chats", { hasText: "this page only" }).waitFor();
  await page.click("#continue-on");
  const command = await page.locator("#continue-hint code.send").innerText();
  assert.equal(command, `/here ${id}`);
});
