// Files from the page: the 📎 button takes several files (real files on disk), they go
// with the message (uploaded, then named by id), the agent gets them (the fake agent
// takes no images: files under .tether/attachments/), and the timeline shows the image
// as a thumbnail that loads and the other file as a download link.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { startDaemon, startBrowser, screenshot, openSignedIn, newConversation, waitTurn } from "./harness.mjs";

// A real 1×1 PNG.
const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC",
  "base64",
);

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

test("files chosen with the button go with the message and show as a thumbnail and a link", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tether-attach-"));
  const png = path.join(dir, "screen.png");
  const log = path.join(dir, "app.log");
  fs.writeFileSync(png, PNG);
  fs.writeFileSync(log, "error: it broke\n");

  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await page.setInputFiles("#composer-files", [png, log]);
  const chosen = await page.locator("#composer-files-list li").allInnerTexts();
  assert.equal(chosen.length, 2, String(chosen));
  await page.fill("#composer-input", "what broke?");
  await page.press("#composer-input", "Enter");

  await waitTurn(page, "completed");
  const turn = await page.locator("#timeline .turn").last().innerText();
  assert.match(turn, /\.tether\/attachments\/[0-9a-f]{32}\/[0-9a-f]{8}-app\.log/);
  assert.match(turn, /\.tether\/attachments\/[0-9a-f]{32}\/[0-9a-f]{8}-screen\.png/);
  const thumb = page.locator("#timeline .msg.user .msg-thumb img");
  await thumb.waitFor({ state: "visible" });
  await page.waitForFunction(() => {
    const img = document.querySelector("#timeline .msg.user .msg-thumb img");
    return img && img.complete && img.naturalWidth === 1;
  });
  assert.equal(await page.locator("#timeline .msg.user .msg-file").innerText(), "📄 app.log");
  // The links are signed for their one object and never carry the token (issue 24 S7).
  const src = await thumb.getAttribute("src");
  const href = await page.locator("#timeline .msg.user .msg-file").getAttribute("href");
  for (const link of [src, href]) {
    assert.match(link, /^\/api\/v1\/attachments\/[^?]+\?by=[^&]+&exp=\d+&sig=[0-9a-f]{64}$/, link);
    assert.ok(!link.includes(daemon.token), link);
  }
  const got = await page.evaluate(async (u) => {
    const r = await fetch(u, { cache: "no-store" });
    return { status: r.status, cache: r.headers.get("cache-control"), body: await r.text() };
  }, href);
  assert.deepEqual(got, { status: 200, cache: "no-store, private", body: "error: it broke\n" });
  const tampered = href.replace(/sig=./, (m) => (m.endsWith("0") ? "sig=1" : "sig=0"));
  // (From outside the page: its console must stay clean of the 401s.)
  assert.equal((await fetch(daemon.base + tampered)).status, 401);
  const withToken = href.split("?")[0] + "?token=" + encodeURIComponent(daemon.token);
  assert.equal((await fetch(daemon.base + withToken)).status, 401, "the token in the address opens nothing");
  const [download] = await Promise.all([
    page.waitForEvent("download", { timeout: 10_000 }),
    page.click("#timeline .msg.user .msg-file"),
  ]);
  assert.equal(download.suggestedFilename(), "app.log");
  assert.equal(await page.isVisible("#composer-files-list"), false, "the chosen files are cleared");
  await screenshot(page, "desktop-attachments");
});
