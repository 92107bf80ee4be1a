// Delegated tasks seen from the parent: a card per task in the parent's timeline with the
// task's live state (status, turn version, availability, what it waits for), a link to
// the sub-conversation, and Continue / Close; a sub-conversation that cannot take more
// messages has its composer locked with the reason.

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
    const errors = page.errors;
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

const delegate = (agent, task) => `mcp delegate_to_agent ${JSON.stringify({ agent_type: agent, task })}`;

test("a delegated task shows as a card in the parent's timeline, with its live state, Continue and Close", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const parent = await newConversation(page);
  await sendAndWait(page, delegate("fake", "approve deploy"));
  const [task] = await daemon.api("GET", `/api/v1/conversations/${parent}/delegations`);
  assert.ok(task, "the parent delegated a task");

  // The card sits in the parent turn that delegated.
  const card = page.locator(`#timeline .turn .task-card[data-task-id="${task.task_id}"]`);
  await card.waitFor();
  assert.equal(await card.locator(".task-agent").innerText(), "fake");
  assert.match(await card.locator(".task-text").innerText(), /approve deploy/);
  assert.equal(await card.locator(".task-link").getAttribute("href"), `#c=${encodeURIComponent(task.task_id)}`);

  // The child waits for a person: the card says for what, and cannot be continued yet.
  await card.locator(".task-blocked").waitFor({ state: "visible" });
  assert.match(await card.locator(".task-blocked").innerText(), /approval “deploy”/);
  assert.equal(await card.getAttribute("data-status"), "running");
  assert.equal(await card.getAttribute("data-availability"), "running");
  assert.equal(await card.locator("[data-action=continue]").isDisabled(), true);
  await screenshot(page, "desktop-task-card-blocked");

  // Answered elsewhere: the card follows to completed, continuable.
  const [approval] = (await daemon.api("GET", "/api/v1/approvals?status=pending")).filter((a) => a.conversation_id === task.task_id);
  await daemon.api("POST", `/api/v1/approvals/${approval.id}`, { decision: "allow" });
  await page.locator(`.task-card[data-task-id="${task.task_id}"][data-status=completed]`).waitFor();
  await card.locator(".task-blocked").waitFor({ state: "hidden" });
  assert.equal(await card.locator(".task-version").innerText(), "turn 1");
  assert.equal(await card.getAttribute("data-availability"), "continuable_live");

  // Continue from the card: a second turn of the same task.
  await card.locator(".task-message").fill("and once more");
  await card.locator("[data-action=continue]").click();
  await page.locator(`.task-card[data-task-id="${task.task_id}"] .task-version[data-turn-version="2"]`).waitFor();
  await page.locator(`.task-card[data-task-id="${task.task_id}"][data-status=completed][data-availability=continuable_live]`).waitFor();
  const turns = await daemon.api("GET", `/api/v1/sessions/${(await daemon.api("GET", `/api/v1/conversations/${task.task_id}`)).binding.session_id}/turns`);
  assert.equal(turns.length, 2);
  assert.match(turns[1].result_text, /echo: and once more/);
  await screenshot(page, "desktop-task-card");

  // Close from the card.
  await card.locator("[data-action=close]").click();
  await page.locator(`.task-card[data-task-id="${task.task_id}"][data-availability=released]`).waitFor();
  assert.equal(await card.locator("[data-action=continue]").isDisabled(), true);
  assert.equal(await card.locator("[data-action=close]").isDisabled(), true);
  assert.equal(await card.locator(".task-availability").innerText(), "closed");

  // The link opens the sub-conversation, whose composer is locked with the reason.
  await card.locator(".task-link").click();
  await page.waitForFunction((t) => location.hash === `#c=${encodeURIComponent(t)}`, task.task_id);
  await page.locator("#delegate-row").waitFor({ state: "visible" });
  await page.waitForFunction(() => document.querySelector("#composer-input").disabled);
  assert.match(await page.textContent("#composer-note"), /task was closed/);
});

test("a task that can never continue shows so on its card, and its composer is locked with the reason", async () => {
  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  const parent = await newConversation(page);
  // This agent exits as it starts: the task never gets a session to resume.
  await sendAndWait(page, delegate("fake-broken", "never runs"));
  const [task] = await daemon.api("GET", `/api/v1/conversations/${parent}/delegations`);
  const card = page.locator(`.task-card[data-task-id="${task.task_id}"]`);
  await page.locator(`.task-card[data-task-id="${task.task_id}"][data-availability=not_continuable]`).waitFor();
  assert.equal(await card.getAttribute("data-status"), "failed");
  assert.equal(await card.locator("[data-action=continue]").isDisabled(), true);

  await page.goto(`${daemon.base}/#c=${encodeURIComponent(task.task_id)}`);
  await page.locator("#delegate-row").waitFor({ state: "visible" });
  await page.waitForFunction(() => document.querySelector("#composer-input").disabled);
  assert.equal(await page.isDisabled("#send"), true);
  assert.match(await page.textContent("#composer-note"), /cannot continue/);
  assert.match(await page.getAttribute("#composer-input", "placeholder"), /cannot continue/);
  await screenshot(page, "desktop-subtask-not-continuable");
});
