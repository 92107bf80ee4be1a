// A database restart seen from the page (issue 25): while the store is unreachable the
// page says so in a banner (and a message is refused with \`store_unavailable\`, nothing
// stored); once the database is back the banner goes by itself and messages go through.
// The daemon runs on a private PostgreSQL server the test stops and starts.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import {
  startDaemon, startPostgres, startBrowser, screenshot, openSignedIn, newConversation, send,
  sendAndWait, waitIdle,
} from "./harness.mjs";

let pg;
let daemon;
let browser;
let page;

before(async () => {
  pg = await startPostgres();
  daemon = await startDaemon({ database: pg.url });
  browser = await startBrowser();
});

after(async () => {
  await browser?.stop();
  await daemon?.stop();
  await pg?.remove();
});

afterEach(async () => {
  if (page) {
    // The 503s of the outage are what this test makes on purpose.
    const errors = page.errors.filter((e) => !/Failed to load resource: the server responded with a status of 503|EventSource|ERR_/.test(e));
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

test("the page shows a database outage and recovers by itself when it is back", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await sendAndWait(page, "before the outage");
  await waitIdle(page);
  const banner = page.locator("#degraded");
  assert.equal(await banner.isVisible(), false, "no banner while the store serves");

  await pg.stop();
  await send(page, "while it is down");
  const err = page.locator("#composer-error");
  await err.waitFor({ state: "visible", timeout: 10000 });
  assert.equal(await err.locator("code.error-code").innerText(), "store_unavailable");
  await banner.waitFor({ state: "visible", timeout: 5000 });
  assert.match(await banner.innerText(), /cannot reach its database/);
  assert.equal(await page.evaluate(() => document.body.dataset.store), "unavailable");
  // What was typed stays in the box to send again.
  assert.equal(await page.inputValue("#composer-input"), "while it is down");
  await screenshot(page, "desktop-store-unavailable");

  await pg.startAgain();
  await banner.waitFor({ state: "hidden", timeout: 20000 });
  assert.equal(await page.evaluate(() => document.body.dataset.store), undefined);
  const [text] = await sendAndWait(page, "after the outage");
  assert.match(text, /after the outage/);
  // Nothing of the refused message was stored: two turns, the first and the last.
  const turns = await page.locator("#timeline .turn").allInnerTexts();
  assert.equal(turns.length, 2, turns.join("\n---\n"));
  assert.ok(!turns.some((t) => t.includes("while it is down")), "the refused message left no turn");
});
