// Sign-in on a cluster (issue 28): two nodes on one PostgreSQL store with the same
// provider. Signing in on one node gives a session every node accepts (and an event
// stream opened on the other node with it); signing out on the first ends it on both, and
// the open stream closes.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startDaemon, startPostgres, startBrowser, within } from "./harness.mjs";
import { freePort, startProvider, providerLogin, CLIENT_ID, CLIENT_SECRET } from "./oidc.mjs";

let pg;
let nodeA;
let nodeB;
let provider;
let browser;

before(async () => {
  pg = await startPostgres();
  const port = await freePort();
  const extraConfig = [
    "[auth.oidc]",
    `issuer = "http://127.0.0.1:${port}"`,
    `client_id = "${CLIENT_ID}"`,
    `client_secret = "${CLIENT_SECRET}"`,
    "",
  ].join("\n");
  nodeA = await startDaemon({ database: pg.url, extraConfig });
  nodeB = await startDaemon({ database: pg.url, extraConfig });
  provider = await startProvider({ port, redirectUri: `${nodeA.base}/api/v1/auth/oidc/callback` });
  browser = await startBrowser();
});

after(async () => {
  await browser?.stop();
  await provider?.stop();
  await nodeB?.stop();
  await nodeA?.stop();
  await pg?.remove();
});

test("a session made on one node works on the other, and signing out ends it on both", async () => {
  const page = await browser.newPage();
  await page.context().clearCookies();
  await page.goto(nodeA.base + "/");
  await page.locator("#signin-oidc-link").waitFor({ state: "visible" });
  await page.click("#signin-oidc-link");
  await providerLogin(page, "dana");
  await page.locator("#app").waitFor({ state: "visible" });
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === "tether_session").value;
  const csrf = cookies.find((c) => c.name === "tether_csrf").value;
  const onB = (path, init = {}) => fetch(nodeB.base + path, {
    ...init,
    headers: { Cookie: `tether_session=${session}`, ...(init.headers || {}) },
  });

  // Node B: reads, and a change with the CSRF token.
  const me = await onB("/api/v1/me");
  assert.equal(me.status, 200);
  assert.equal((await me.json()).person.email, "dana@example.com");
  const made = await onB("/api/v1/conversations", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Tether-CSRF": csrf },
    body: JSON.stringify({ title: "made on B" }),
  });
  assert.equal(made.status, 201, await made.text());

  // An event stream on node B, open until the session ends.
  const ac = new AbortController();
  const stream = await onB("/api/v1/conversations/events", { signal: ac.signal });
  assert.equal(stream.status, 200);
  const closed = (async () => {
    const reader = stream.body.getReader();
    for (;;) {
      const { done } = await reader.read();
      if (done) return true;
    }
  })();

  // Sign out on node A.
  await page.click("#signout");
  await page.locator("#signin").waitFor({ state: "visible" });
  assert.equal((await onB("/api/v1/me")).status, 401);
  assert.equal(await within("the stream on node B closes", 10000, closed), true);
  ac.abort();
  await page.close();
});
