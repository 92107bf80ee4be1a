// The conversation list: loaded a page at a time (more as it scrolls), and kept fresh by
// the list event stream (no polling), reconnecting after a dropped connection.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { startDaemon, startProxy, startBrowser, screenshot, openSignedIn } from "./harness.mjs";

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

const itemIds = () => page.locator("#conversation-list .conv-item").evaluateAll((els) => els.map((e) => e.dataset.id));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("a long conversation list loads a page at a time as it scrolls, without duplicates", async () => {
  const made = [];
  for (let i = 0; i < 120; i++) made.push((await daemon.api("POST", "/api/v1/conversations", { title: `Paged ${i}` })).id);
  page = await browser.newPage();
  const lists = [];
  page.on("request", (r) => {
    if (/\/api\/v1\/conversations\?/.test(r.url())) lists.push(new URL(r.url()));
  });
  await openSignedIn(page, daemon.base, daemon.token);
  await page.locator("#conversation-list .conv-item").first().waitFor();
  await page.waitForTimeout(300);
  const first = await itemIds();
  assert.ok(first.length >= 50 && first.length < made.length, `a first page, not everything: ${first.length}`);
  assert.equal(first[0], made.at(-1), "newest first");
  assert.ok(lists.every((u) => u.searchParams.get("limit") === "50"), "pages of 50");

  // Scrolling to the end loads the rest, page by page.
  for (let i = 0; i < 20 && (await itemIds()).length < made.length; i++) {
    await page.locator("#sidebar nav").evaluate((nav) => (nav.scrollTop = nav.scrollHeight));
    await sleep(150);
  }
  const all = await itemIds();
  assert.equal(all.length, made.length);
  assert.equal(new Set(all).size, made.length, "no duplicates");
  assert.deepEqual(new Set(all), new Set(made));
  assert.ok(lists.some((u) => u.searchParams.get("cursor")), "later pages asked with a cursor");
  for (const id of made) await daemon.api("PATCH", `/api/v1/conversations/${id}`, { archived: true });
});

test("the list follows created, renamed, running and archived conversations from its event stream, without polling", async () => {
  const proxy = await startProxy(daemon.base);
  try {
    page = await browser.newPage();
    page.allowErrors = /ERR_|Failed to load resource|EventSource/;
    const lists = [];
    page.on("request", (r) => {
      if (/\/api\/v1\/conversations(\?|$)/.test(r.url()) && r.method() === "GET") lists.push(Date.now());
    });
    await openSignedIn(page, proxy.url, daemon.token);
    await page.locator("#connection[data-state=live]").waitFor({ state: "attached" });

    const conv = (await daemon.api("POST", "/api/v1/conversations", { title: "Made elsewhere" })).id;
    const item = page.locator(`.conv-item[data-id="${conv}"]`);
    await item.waitFor({ timeout: 3000 });
    await daemon.api("PATCH", `/api/v1/conversations/${conv}`, { title: "Renamed elsewhere" });
    await page.waitForFunction((id) => document.querySelector(`.conv-item[data-id="${id}"] .conv-title`)?.textContent === "Renamed elsewhere", conv, { timeout: 3000 });
    await daemon.api("POST", `/api/v1/conversations/${conv}/messages`, { text: "sleep 1500" });
    await page.waitForFunction((id) => document.querySelector(`.conv-item[data-id="${id}"]`)?.dataset.state === "bound/running", conv, { timeout: 3000 });
    await screenshot(page, "desktop-list-live");
    await page.waitForFunction((id) => document.querySelector(`.conv-item[data-id="${id}"]`)?.dataset.state === "bound/idle", conv, { timeout: 6000 });

    // Nothing polls the list: it was read once, when the stream opened.
    const reads = lists.length;
    await sleep(5000);
    assert.equal(lists.length, reads, "no list requests while nothing reconnects");
    assert.ok(reads <= 2, `the list was read ${reads} times`);

    // A dropped stream reconnects and reads the list again: a change made meanwhile shows.
    proxy.cut(1500);
    await page.locator("#connection[data-state=reconnecting]").waitFor({ state: "attached" });
    const during = (await daemon.api("POST", "/api/v1/conversations", { title: "Made while cut off" })).id;
    await page.locator("#connection[data-state=live]").waitFor({ state: "attached", timeout: 15000 });
    await page.locator(`.conv-item[data-id="${during}"]`).waitFor({ timeout: 5000 });

    // Archived elsewhere: it leaves the list.
    await daemon.api("PATCH", `/api/v1/conversations/${conv}`, { archived: true });
    await item.waitFor({ state: "detached", timeout: 3000 });
  } finally {
    await proxy.stop();
  }
});
