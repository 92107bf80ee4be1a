// The usage view (issue 29): the Usage dialog shows a conversation's ledger totals and a
// chart of its tokens, the team's for an admin, and the budgets that apply (a reached
// one says new turns are refused); a delegated task's card shows its tree's total.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { startDaemon, startBrowser, screenshot, openSignedIn, newConversation, sendAndWait } from "./harness.mjs";

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

test("the Usage dialog shows the conversation's tokens, a chart, the team and the budgets", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  // The fake agent reports 3 × 100 tokens at the turn's end (ACP).
  await sendAndWait(page, "spend 3 100 0");
  await daemon.api("POST", "/api/v1/budgets", { scope: "conversation", scope_id: conv, limit: 250 });

  await page.click("#usage");
  await page.locator("#usage-dialog").waitFor({ state: "visible" });
  await page.locator("#usage-totals", { hasText: "300 tokens" }).waitFor();
  assert.equal(await page.locator("#usage-chart rect.usage-bar").count(), 1, "one day with usage");
  const budget = page.locator("#usage-budgets li.over");
  await budget.waitFor();
  assert.match(await budget.innerText(), /300 tokens of 250 tokens.*refused/);
  await screenshot(page, "usage-dialog");

  // The team's total (the owner is an admin) holds it too.
  await page.click(".usage-scopes [data-scope=team]");
  await page.locator(".usage-scopes [data-scope=team][aria-pressed=true]").waitFor();
  await page.locator("#usage-totals", { hasText: "300 tokens" }).waitFor();
  await page.click("#usage-close");
});

test("a delegated task's card shows its tree's total", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const parent = await newConversation(page);
  const args = JSON.stringify({ agent_type: "fake", task: "spend 2 50 0" });
  await sendAndWait(page, `mcp delegate_to_agent ${args}`);
  const [task] = await daemon.api("GET", `/api/v1/conversations/${parent}/delegations`);
  const card = page.locator(`#timeline .task-card[data-task-id="${task.task_id}"]`);
  await card.waitFor();
  // The child's turn ends on its own; the card's state (and total) follow.
  await card.locator(".task-usage", { hasText: "100 tokens" }).waitFor({ timeout: 15000 });
});

test("a turn parked at the vendor's limit can be cancelled from the page", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const conv = await newConversation(page);
  // Gemini's shape from the fake agent: ACP error 429, "Suggested retry after 600s."
  await sendAndWait(page, "limit 600", "failed");
  const line = page.locator("#timeline .msg.status", { hasText: "I will continue at" });
  await line.waitFor();
  await screenshot(page, "parked");
  await line.locator("button.cancel-continuation").click();
  await page.locator("#timeline", { hasText: "The automatic continuation was cancelled." }).waitFor();
  const again = await daemon.api("POST", `/api/v1/conversations/${conv}/messages`, { text: "/cancel" });
  assert.equal(again.reply, "No continuation is waiting.");
});
