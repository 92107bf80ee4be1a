// The Schedules dialog (issue 30): a schedule made from the page shows with its next
// run, pauses, resumes and is deleted with its buttons; a bad "when" is named.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { startDaemon, startBrowser, screenshot, openSignedIn, newConversation } from "./harness.mjs";

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
    const errors = page.errors.filter((e) => !/Failed to load resource: the server responded with a status of 4\d\d/.test(e));
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

test("a schedule is made, paused, resumed and deleted in the Schedules dialog", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  await page.click("#schedules");
  await page.locator("#schedule-empty").waitFor();
  // A bad "when" is refused, naming it.
  await page.fill("#schedule-when", "now and then");
  await page.fill("#schedule-prompt", "check the build");
  await page.click("#schedule-form button[type=submit]");
  await page.locator("#schedules-error", { hasText: "when" }).waitFor();
  await page.fill("#schedule-when", "weekday 09:00");
  await page.click("#schedule-form button[type=submit]");
  const row = page.locator("#schedule-list li.schedule");
  await row.locator("text=cron 0 9 * * 1-5").waitFor();
  await screenshot(page, "schedules");
  const [made] = (await daemon.api("GET", `/api/v1/schedules?conversation_id=${conv}`)).schedules;
  assert.equal(made.prompt, "check the build");
  assert.ok(made.next_run_ms > Date.now());
  await row.locator("button", { hasText: "Pause" }).click();
  await page.locator('#schedule-list li[data-state="paused"]').waitFor();
  await page.locator("#schedule-list li button", { hasText: "Resume" }).click();
  await page.locator('#schedule-list li[data-state="active"]').waitFor();
  await page.locator("#schedule-list li button", { hasText: "Delete" }).click();
  await page.locator("#schedule-empty").waitFor({ state: "visible" });
  assert.equal((await daemon.api("GET", `/api/v1/schedules?conversation_id=${conv}`)).schedules.length, 0);
});
