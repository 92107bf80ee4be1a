// The page as a person meets it: phone width, the keyboard alone, the conversation list
// (create, rename, archive, filters), and screenshots of the main screens.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import {
  startDaemon, startBrowser, screenshot, openSignedIn, newConversation, send, sendAndWait,
} from "./harness.mjs";

let daemon;
let browser;
let page;

const PHONE = { width: 390, height: 844 };

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

const noSideScroll = () => page.evaluate(() => document.scrollingElement.scrollWidth <= window.innerWidth);

test("the keyboard alone: slash completion, Enter sends, Shift+Enter adds a line", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  const box = page.locator("#composer-input");
  await box.focus();
  await page.keyboard.type("/de");
  await page.locator("#completions").waitFor({ state: "visible" });
  assert.deepEqual(await page.locator("#completions li code").allInnerTexts(), ["/detach", "/deny"]);
  await page.keyboard.press("ArrowDown");
  assert.equal(await page.locator("#completions li.active code").innerText(), "/deny");
  await page.keyboard.press("ArrowUp");
  await page.keyboard.press("Tab");
  assert.equal(await box.inputValue(), "/detach");
  assert.equal(await page.isVisible("#completions"), false);
  await page.keyboard.press("Escape");
  await page.keyboard.press("Enter");
  await page.locator("#timeline .msg.command", { hasText: "detached" }).waitFor();
  assert.equal(await box.inputValue(), "");

  // An unknown command is refused with the list of commands, and is not sent to the agent.
  await send(page, "/nope");
  await page.locator("#composer-error").waitFor({ state: "visible" });
  assert.match(await page.textContent("#composer-error"), /unknown command \/nope/);
  // Chromium logs the refused message (a 400 the page shows) as a failed load.
  page.errors = page.errors.filter((e) => !/Failed to load resource: the server responded with a status of 400/.test(e));
  assert.equal(await page.locator("#timeline .turn").count(), 0);

  await box.fill("");
  await page.keyboard.type("line one");
  await page.keyboard.press("Shift+Enter");
  await page.keyboard.type("line two");
  assert.equal(await box.inputValue(), "line one\nline two");
  const n = await page.locator("#timeline .turn").count();
  await page.keyboard.press("Enter");
  await page.waitForFunction((k) => document.querySelectorAll("#timeline .turn")[k]?.dataset.status === "completed", n);
  assert.match(await page.locator("#timeline .turn").nth(n).innerText(), /echo: line one\s+line two/);
  assert.equal(await page.locator("#timeline .msg.user .bubble").last().innerText(), "line one\nline two");

  // Every control in the chat can be reached with Tab (once the binding bar shows the
  // new session: a disabled button is not focusable).
  await page.waitForFunction(() => !document.getElementById("session-id").disabled);
  const reached = new Set();
  await page.locator("#new-conversation").focus();
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press("Tab");
    reached.add(await page.evaluate(() => document.activeElement.id || document.activeElement.className));
  }
  for (const id of ["rename", "archive", "session-id", "new-session", "agent-picker", "model-picker", "composer-input", "send"]) {
    assert.ok(reached.has(id), `Tab reaches #${id}`);
  }
});

test("the conversation list: create, rename, archive, filters", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  const item = page.locator(`.conv-item[data-id="${conv}"]`);
  await item.waitFor();
  assert.match(await item.innerText(), /New conversation[\s\S]*fake[\s\S]*unbound[\s\S]*just now/);
  assert.equal(await item.getAttribute("aria-current"), "page");

  await page.click("#rename");
  await page.fill("#rename-input", "Fix the flaky test");
  await page.press("#rename-input", "Enter");
  await item.locator(".conv-title", { hasText: "Fix the flaky test" }).waitFor();
  assert.equal((await daemon.api("GET", `/api/v1/conversations/${conv}`)).title, "Fix the flaky test");

  await sendAndWait(page, "hello");
  await page.locator(`.conv-item[data-id="${conv}"][data-state="bound/idle"]`).waitFor();
  assert.match(await item.innerText(), /idle/);

  await page.click("#archive");
  await item.waitFor({ state: "detached" });
  assert.equal((await daemon.api("GET", `/api/v1/conversations/${conv}`)).archived, true);
  assert.equal(await page.isDisabled("#composer-input"), true, "an archived conversation takes no messages");
  await page.check("#filter-archived");
  await item.locator(".badge", { hasText: "archived" }).waitFor();
  await page.click("#archive");
  await page.uncheck("#filter-archived");
  await item.waitFor();
  assert.equal(await page.isDisabled("#composer-input"), false);

  // Sub-conversations are listed only with their filter on.
  assert.equal(await page.locator('.conv-item[data-kind="delegate"]').count(), 0);
  await page.check("#filter-sub");
  assert.equal(await page.evaluate(() => JSON.parse(localStorage.getItem("tether.filters")).sub), true);
  await page.uncheck("#filter-sub");
});

test("phone width: the list is a drawer, the chat fits, screenshots", async () => {
  page = await browser.newPage();
  await page.setViewportSize(PHONE);
  // Signed in by an earlier test: sign out from the drawer first.
  await page.goto(daemon.base + "/");
  await page.waitForFunction(() => !document.querySelector("#app").hidden || !document.querySelector("#signin").hidden);
  if (await page.isVisible("#app")) {
    await page.click("#menu");
    await page.click("#signout");
  }
  await page.locator("#signin").waitFor({ state: "visible" });
  assert.ok(await noSideScroll());
  await screenshot(page, "phone-signin");

  await openSignedIn(page, daemon.base, daemon.token);
  assert.equal(await page.isVisible("#menu"), true, "the menu button shows at phone width");
  const conv = await newConversation(page);
  await sendAndWait(page, "Here is a list:\n\n1. `cargo test`\n2. **fix** it\n\n```sh\ncargo build --workspace --bins\n```");
  await send(page, "approve cargo publish --dry-run");
  await page.locator(".card.approval.pending").waitFor();
  assert.ok(await noSideScroll(), "no sideways scrolling in the chat");
  await screenshot(page, "phone-chat");
  await page.locator(".card.approval.pending button[data-decision=allow]").click();
  await sendAndWait(page, null, "completed");

  // The list opens as a drawer and closes on choosing a conversation.
  await page.click("#menu");
  await page.locator("#scrim").waitFor({ state: "visible" });
  assert.equal(await page.getAttribute("#menu", "aria-expanded"), "true");
  await page.waitForFunction(() => document.querySelector("#sidebar").getBoundingClientRect().left >= 0);
  await screenshot(page, "phone-list");
  await page.locator(`.conv-item[data-id="${conv}"]`).click();
  await page.locator("#scrim").waitFor({ state: "hidden" });
  assert.ok(await noSideScroll());
});

test("desktop screenshots of the main screens", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await newConversation(page);
  await page.click("#rename");
  await page.fill("#rename-input", "Refactor the parser");
  await page.press("#rename-input", "Enter");
  await sendAndWait(page, "## Plan\n\n- read `parser.rs`\n- split **tokens** from *syntax*\n\n```rust\nfn parse(input: &str) -> Ast { todo!() }\n```\n\nSee [the docs](https://example.com/parser).");
  await sendAndWait(page, "approve cargo test -p parser", "completed", async () => {
    await page.locator(".card.approval.pending button[data-decision=allow]").click();
  });
  await page.locator("#timeline details.tool").last().locator("summary").click();
  await send(page, "stream 40 100");
  await page.waitForFunction(() => document.querySelector("#timeline .turn:last-of-type")?.innerText.includes("chunk 3"));
  await screenshot(page, "desktop-streaming");
  await sendAndWait(page, null, "completed");
  await page.fill("#model-picker", "gpt-large");
  await page.locator("#composer-input").focus();
  await page.keyboard.type("/");
  await page.locator("#completions").waitFor({ state: "visible" });
  await screenshot(page, "desktop-commands");
  assert.ok(await noSideScroll());
  await page.keyboard.press("Escape");
  await page.emulateMedia({ colorScheme: "dark" });
  await screenshot(page, "desktop-dark");
  await page.emulateMedia({ colorScheme: "light" });
});
