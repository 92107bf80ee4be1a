// Test harness for the web page: a real `tether serve` (target/debug, built beforehand)
// in a temporary home with the fake agent registered, a loopback TCP proxy in front of it
// (to cut connections on purpose), and Debian's Chromium driven by Playwright.

import { spawn, execFile } from "node:child_process";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium } from "playwright-core";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const SCREENSHOTS = path.join(ROOT, ".artifacts", "screenshots");
const BIN = (name) => path.join(process.env.CARGO_TARGET_DIR ? path.resolve(ROOT, process.env.CARGO_TARGET_DIR) : path.join(ROOT, "target"), "debug", name);
const CHROMIUM = process.env.TETHER_CHROMIUM || "/usr/bin/chromium";

/** Rejects after `ms` with `what` in the message. */
export function within(what, ms, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const toml = (s) => JSON.stringify(s);

/**
 * A private PostgreSQL server (`tether-test-pg`, Debian's PostgreSQL) in a temporary
 * directory: `url`, `stop()` (immediate, like a crash), `startAgain()` (same port),
 * `remove()`.
 */
export async function startPostgres() {
  const dir = await mkdtemp(path.join(os.tmpdir(), "tether-browser-pg-"));
  const pg = (cmd) => within(`tether-test-pg ${cmd}`, 90000,
    promisify(execFile)(BIN("tether-test-pg"), [cmd, dir]));
  const { stdout } = await pg("start");
  return {
    url: stdout.trim().split("\n").at(-1),
    stop: () => pg("stop"),
    startAgain: () => pg("start-again"),
    async remove() {
      await pg("stop").catch(() => {});
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A running daemon; `stop()` kills it and removes its home. */
export async function startDaemon({ approvalTimeoutSecs = 1800, database = null, extraConfig = "" } = {}) {
  for (const b of ["tether", "fake-agent"]) {
    if (!existsSync(BIN(b))) throw new Error(`${BIN(b)} is missing: run \`cargo build --workspace --bins\` first`);
  }
  const home = await mkdtemp(path.join(os.tmpdir(), "tether-browser-"));
  const work = path.join(home, "work");
  const state = path.join(home, "fake-state");
  await mkdir(work, { recursive: true });
  const agent = (name, extra = "") =>
    `[agents.${name}]\ndriver = "acp"\ncommand = ${toml(BIN("fake-agent"))}\nargs = ["--state-dir", ${toml(state)}${extra}]\n\n`;
  const config = [
    `data_dir = ${toml(path.join(home, "data"))}`,
    `default_agent = "fake"`,
    `workspace_roots = [${toml(work)}]`,
    `default_cwd = ${toml(work)}`,
    `approval_timeout_secs = ${approvalTimeoutSecs}`,
    `turn_timeout_secs = 0`,
    `queue_cap = 16`,
    `start_timeout_secs = 10`,
    "",
    agent("fake") + agent("fake2") + agent("fake-broken", `, "--exit-on-start"`),
    database ? `[store]\nurl = ${toml(database)}\n` : "",
    extraConfig,
  ].join("\n");
  const configPath = path.join(home, "tether.toml");
  await writeFile(configPath, config);

  const env = { ...process.env, TETHER_LOG: process.env.TETHER_LOG || "warn" };
  delete env.TETHER_HOME;
  delete env.TETHER_CONFIG;
  delete env.TETHER_TOKEN;
  const child = spawn(BIN("tether"), ["--config", configPath, "serve", "--listen", "127.0.0.1:0"], {
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  const base = await within("tether serve prints its address", 20000, new Promise((resolve, reject) => {
    let buf = "";
    child.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/^tether listening on (\S+)/m);
      if (m) resolve(m[1]);
    });
    child.on("exit", (code) => reject(new Error(`tether serve exited early (${code})`)));
  }));
  child.stdout.resume();
  const { stdout } = await within("tether token", 20000,
    promisify(execFile)(BIN("tether"), ["--config", configPath, "token"], { env }));
  const token = stdout.trim();

  const daemon = {
    base,
    token,
    home,
    async api(method, p, body) {
      const resp = await within(`${method} ${p}`, 15000, fetch(base + p, {
        method,
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      }));
      const text = await resp.text();
      if (!resp.ok) throw new Error(`${method} ${p}: ${resp.status} ${text}`);
      return text ? JSON.parse(text) : null;
    },
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await within("tether exits", 15000, exited).catch(() => child.kill("SIGKILL"));
      }
      await rm(home, { recursive: true, force: true });
    },
  };
  return daemon;
}

/**
 * A TCP proxy on loopback in front of `base`. `cut(refuseMs)` drops every open connection
 * (the page's event stream among them) and refuses new ones for `refuseMs`.
 */
export async function startProxy(base) {
  const target = new URL(base);
  const sockets = new Set();
  const requests = [];
  let refuseUntil = 0;
  const server = net.createServer((client) => {
    if (Date.now() < refuseUntil) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(client);
    sockets.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    // Record each connection's first request head (method, path, headers).
    client.once("data", (d) => requests.push(d.toString("latin1").split("\r\n\r\n")[0]));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    /** The first request head of every connection, in order. */
    requests,
    cut(refuseMs = 0) {
      refuseUntil = Date.now() + refuseMs;
      const n = sockets.size;
      for (const s of [...sockets]) s.destroy();
      return n;
    },
    async stop() {
      for (const s of [...sockets]) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** Chromium with a new empty profile; `newPage()` records console errors. */
export async function startBrowser() {
  const profile = await mkdtemp(path.join(os.tmpdir(), "tether-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    timeout: 60000,
  });
  context.setDefaultTimeout(15000);
  return {
    context,
    /** A page whose console errors and uncaught exceptions land in `page.errors`. */
    async newPage() {
      const page = await context.newPage();
      page.errors = [];
      page.on("console", (msg) => {
        if (msg.type() === "error") page.errors.push(`console: ${msg.text()}`);
      });
      page.on("pageerror", (err) => page.errors.push(`exception: ${err.message}`));
      return page;
    },
    async stop() {
      await within("browser closes", 20000, context.close()).catch(() => {});
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a screenshot to .artifacts/screenshots/<name>.png. */
export async function screenshot(page, name) {
  await mkdir(SCREENSHOTS, { recursive: true });
  const file = path.join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage: false });
  return file;
}

// ---- page helpers ---------------------------------------------------------------

/** Opens the page signed in through the link with the token. */
export async function openSignedIn(page, base, token, convId) {
  await page.goto(`${base}/#token=${encodeURIComponent(token)}`);
  await page.locator("#app").waitFor({ state: "visible" });
  if (convId) await openConversation(page, convId);
}

export async function openConversation(page, convId) {
  await page.evaluate((id) => (location.hash = `c=${encodeURIComponent(id)}`), convId);
  await page.locator("#binding").waitFor({ state: "visible" });
  await page.waitForFunction(() => !document.querySelector("#timeline .loading"));
}

/** Creates a conversation with the "+ New" button; returns its id. */
export async function newConversation(page) {
  const before = await page.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("c"));
  // Phone width: the list is a drawer.
  if ((await page.isVisible("#menu")) && !(await page.evaluate(() => document.body.classList.contains("menu-open")))) {
    await page.click("#menu");
  }
  await page.click("#new-conversation");
  await page.waitForFunction((b) => {
    const c = new URLSearchParams(location.hash.slice(1)).get("c");
    return c && c !== b;
  }, before);
  await page.locator("#composer").waitFor({ state: "visible" });
  await page.waitForFunction(() => !document.querySelector("#timeline .loading"));
  return page.evaluate(() => new URLSearchParams(location.hash.slice(1)).get("c"));
}

/** Types a message and presses Enter. */
export async function send(page, text) {
  await page.fill("#composer-input", text);
  await page.press("#composer-input", "Enter");
}

/** The full id of the bound session shown in the binding bar ("" when unbound). */
export const sessionId = (page) => page.getAttribute("#session-id", "data-session-id");

/** Waits until the binding bar shows a bound session other than `not`; returns its id. */
export async function waitSession(page, not = "") {
  await page.waitForFunction((n) => {
    const id = document.querySelector("#session-id").dataset.sessionId;
    return id && id !== n;
  }, not);
  return sessionId(page);
}

/** The last turn block's text, once its status is `status`. */
export async function waitTurn(page, status, index = -1) {
  await page.waitForFunction(([s, i]) => {
    const turns = [...document.querySelectorAll("#timeline .turn")];
    const t = turns.at(i);
    return t && t.dataset.status === s;
  }, [status, index]);
  return page.evaluate((i) => [...document.querySelectorAll("#timeline .turn")].at(i).innerText, index);
}

/**
 * Sends `text` (or, with `null`, watches the last turn already on screen) and waits until
 * that turn has `status`; `during()` runs once the turn is on screen. Returns the turn's
 * text.
 */
export async function sendAndWait(page, text, status = "completed", during) {
  const n = await page.locator("#timeline .turn").count();
  if (text !== null) await send(page, text);
  const target = text === null ? n : n + 1;
  await page.waitForFunction((k) => document.querySelectorAll("#timeline .turn").length >= k, target);
  if (during) await during();
  await page.waitForFunction(([k, s]) => {
    const ts = document.querySelectorAll("#timeline .turn");
    return ts.length >= k && ts[k - 1].dataset.status === s;
  }, [target, status]);
  return [await page.locator("#timeline .turn").nth(target - 1).innerText()];
}

/** The text of every turn block. */
export const turnTexts = (page) => page.locator("#timeline .turn").allInnerTexts();

/** Waits until the binding bar shows a bound, idle conversation (refreshed after a turn). */
export const waitIdle = (page) =>
  page.waitForFunction(() => document.querySelector("#conv-state").dataset.state === "bound/idle");
