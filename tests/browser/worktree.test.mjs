// The Worktree dialog (issue 32): an isolated conversation's branch and changed files
// show with their `--stat`; the patch opens; Merge lands the branch in the repository;
// Discard removes the worktree; a plain conversation offers isolation.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync, readFileSync, existsSync } from "node:fs";
import path from "node:path";
import { startDaemon, startBrowser, screenshot, openSignedIn } from "./harness.mjs";

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

const env = { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@t", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@t" };
const git = (dir, ...args) => execFileSync("git", ["-C", dir, ...args], { env }).toString();

async function turnEnds(conv, text) {
  const out = await daemon.api("POST", `/api/v1/conversations/${conv}/messages`, { text });
  for (let i = 0; i < 200; i++) {
    const turns = await daemon.api("GET", `/api/v1/sessions/${out.session_id}/turns`);
    if (turns.find((t) => t.id === out.turn_id && t.status === "completed")) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("the turn did not end");
}

test("a worktree's changes show, merge back and the next one is discarded", async () => {
  const repo = path.join(daemon.home, "work", "repo");
  mkdirSync(repo, { recursive: true });
  git(repo, "init", "--quiet", "-b", "main");
  writeFileSync(path.join(repo, "README.md"), "hello\n");
  git(repo, "add", ".");
  git(repo, "commit", "--quiet", "-m", "base");
  const conv = (await daemon.api("POST", "/api/v1/conversations", { cwd: repo, isolation: "worktree" })).id;
  await turnEnds(conv, "write notes.txt written in a worktree");

  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await page.evaluate((c) => { location.hash = `c=${c}`; }, conv);
  await page.click("#worktree");
  await page.locator("#worktree-files li", { hasText: "notes.txt" }).waitFor();
  await page.locator("#worktree-summary", { hasText: `tether/${conv.slice(0, 8)}` }).waitFor();
  await page.click("#worktree-patch");
  await page.locator("#worktree-stat", { hasText: "+written in a worktree" }).waitFor();
  await screenshot(page, "worktree");
  assert.ok(!existsSync(path.join(repo, "notes.txt")));
  await page.click("#worktree-merge");
  await page.locator("#worktree-note", { hasText: "Merged" }).waitFor();
  assert.equal(readFileSync(path.join(repo, "notes.txt"), "utf8"), "written in a worktree\n");
  await page.click("#worktree-discard");
  await page.locator("#worktree-note", { hasText: "Discarded" }).waitFor();
  await page.locator('#worktree-dialog[data-status="wanted"]').waitFor();
  assert.equal(git(repo, "status", "--porcelain"), "");
  await page.click("#worktree-close");

  // A plain conversation offers isolation.
  const plain = (await daemon.api("POST", "/api/v1/conversations", { cwd: repo })).id;
  await page.evaluate((c) => { location.hash = `c=${c}`; }, plain);
  await page.click("#worktree");
  await page.locator("#worktree-summary", { hasText: "its own directory" }).waitFor();
  await page.click("#worktree-isolate");
  await page.locator('#worktree-dialog[data-status="wanted"]').waitFor();
});

test("a delegated task's changes show on its card and merge into the parent's worktree", async () => {
  const repo = path.join(daemon.home, "work", "repo2");
  mkdirSync(repo, { recursive: true });
  git(repo, "init", "--quiet", "-b", "main");
  writeFileSync(path.join(repo, "README.md"), "hello\n");
  git(repo, "add", ".");
  git(repo, "commit", "--quiet", "-m", "base");
  const parent = (await daemon.api("POST", "/api/v1/conversations", { cwd: repo, isolation: "worktree" })).id;
  await turnEnds(parent, 'mcp delegate_to_agent {"agent_type": "fake", "task": "write child.txt from the task"}');

  page = await browser.newPage();
  await openSignedIn(page, daemon.base, daemon.token);
  await page.evaluate((c) => { location.hash = `c=${c}`; }, parent);
  const card = page.locator(".task-card");
  await card.locator(".task-changes", { hasText: "child.txt" }).waitFor();
  await screenshot(page, "task-worktree");
  await card.locator("[data-action=merge]").click();
  const w = await daemon.api("GET", `/api/v1/conversations/${parent}/worktree`);
  for (let i = 0; i < 100 && !existsSync(path.join(w.path, "child.txt")); i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(readFileSync(path.join(w.path, "child.txt"), "utf8"), "from the task\n");
  assert.ok(!existsSync(path.join(repo, "child.txt")), "the person's checkout is untouched");
});
