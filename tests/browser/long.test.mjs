// A long conversation (a few thousand events) opens at its end: the page reads the latest
// events, not the whole log, and reads older ones as the person scrolls up, showing each
// turn once and in order.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { startDaemon, startBrowser, screenshot, openSignedIn, openConversation, within, sendAndWait } from "./harness.mjs";

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

const TURNS = 30;
const CHUNKS = 100;

/** Sends `text` through the API and waits until the conversation is idle again. */
async function sayAndWait(conv, text) {
  await daemon.api("POST", `/api/v1/conversations/${conv}/messages`, { text });
  await within(`"${text}" ends`, 30000, (async () => {
    for (;;) {
      const c = await daemon.api("GET", `/api/v1/conversations/${conv}`);
      if (c.state === "bound/idle" && !c.running_turn_id && c.queue_len === 0) return;
      await new Promise((r) => setTimeout(r, 30));
    }
  })());
}

/** What the page shows: turn ids and the "remembers N" of each turn, top to bottom. */
const shown = () => page.evaluate(() => [...document.querySelectorAll("#timeline .turn")].map((t) => ({
  id: t.dataset.turnId,
  remembers: Number((t.innerText.match(/remembers (\d+)/) || [])[1]),
  text: t.innerText,
})));

test("a long conversation opens at its end and loads older turns on scroll, each once", async () => {
  const conv = (await daemon.api("POST", "/api/v1/conversations", { title: "Long one" })).id;
  for (let i = 0; i < TURNS; i++) await sayAndWait(conv, `stream ${CHUNKS} 0`);
  const total = (await daemon.api("GET", `/api/v1/conversations/${conv}/events/page?limit=1000`)).has_more;
  assert.ok(total, "more than 1000 events");

  page = await browser.newPage();
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  await openSignedIn(page, daemon.base, daemon.token);
  const opened = Date.now();
  await openConversation(page, conv);
  // The end is on screen at once: the last turn, complete.
  await page.waitForFunction((n) => {
    const ts = [...document.querySelectorAll("#timeline .turn")];
    return ts.length && ts.at(-1).innerText.includes(`remembers ${n - 1}`);
  }, TURNS);
  const openMs = Date.now() - opened;
  assert.ok(openMs < 8000, `opened in ${openMs} ms`);
  const timeline = page.locator("#timeline");
  assert.ok(await timeline.evaluate((t) => t.scrollHeight - t.scrollTop - t.clientHeight < 5), "scrolled to the end");
  const first = await shown();
  assert.ok(first.length < TURNS / 2, `only the latest turns: ${first.length}`);
  // It read the latest events, and follows the stream from the last one (not from 0).
  const stream = requests.find((u) => /\/conversations\/[^/]+\/events\?/.test(u));
  assert.ok(stream && !/after_id=0(&|$)/.test(stream), `the stream resumes after the latest event: ${stream}`);
  await screenshot(page, "desktop-long-end");

  // Scrolling up loads older turns above, until the first one.
  for (let i = 0; i < 60 && (await page.locator("#timeline .older").count()); i++) {
    await timeline.evaluate((t) => (t.scrollTop = 0));
    await page.waitForTimeout(150);
  }
  assert.equal(await page.locator("#timeline .older").count(), 0, "everything is loaded");
  const all = await shown();
  assert.equal(all.length, TURNS, "every turn");
  assert.equal(new Set(all.map((t) => t.id)).size, TURNS, "each turn once");
  assert.deepEqual(all.map((t) => t.remembers), [...Array(TURNS).keys()], "in order");
  const reply = Array.from({ length: CHUNKS }, (_, i) => `chunk ${i + 1}`).join(" ");
  for (const t of all) {
    assert.equal(t.text.split(reply).length - 1, 1, `the whole reply once in turn ${t.remembers}`);
  }
  assert.equal(await page.locator("#timeline .msg.user").count(), TURNS, "one prompt per turn");
  const prompts = await page.evaluate(() => [...document.querySelectorAll("#timeline .turn")].map((t) => {
    const prev = t.previousElementSibling;
    return prev && prev.matches(".msg.user") ? prev.querySelector(".bubble").textContent : null;
  }));
  assert.deepEqual(prompts, Array(TURNS).fill(`stream ${CHUNKS} 0`), "each turn right after its prompt");
  await screenshot(page, "desktop-long-start");

  // Still live at the end.
  await timeline.evaluate((t) => (t.scrollTop = t.scrollHeight));
  const [next] = await sendAndWait(page, "still live");
  assert.match(next, /echo: still live/);
});
