// Sign-in on the page with OpenID Connect (issue 28), through a real provider
// (`oidc-provider`, see oidc.mjs) in Chromium: the first sign-in adds the person (the
// provider's group maps to a role), the page works on the cookie alone (changes carry the
// CSRF token; a change without it is refused), signing out ends the session for every
// holder of the cookie, a replayed callback and an address from a domain not allowed are
// refused with their code on the page, and token sign-in stays.

import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { startDaemon, startBrowser, screenshot, newConversation, sendAndWait, within } from "./harness.mjs";
import { freePort, startProvider, providerLogin, CLIENT_ID, CLIENT_SECRET } from "./oidc.mjs";

let daemon;
let provider;
let browser;
let page;

before(async () => {
  const port = await freePort();
  daemon = await startDaemon({
    extraConfig: [
      "[auth.oidc]",
      `issuer = "http://127.0.0.1:${port}"`,
      `client_id = "${CLIENT_ID}"`,
      `client_secret = "${CLIENT_SECRET}"`,
      `allowed_domains = ["example.com"]`,
      `role_claim = "groups"`,
      `roles = { "tether-admins" = "admin" }`,
      "",
    ].join("\n"),
  });
  provider = await startProvider({ port, redirectUri: `${daemon.base}/api/v1/auth/oidc/callback` });
  browser = await startBrowser();
});

after(async () => {
  await browser?.stop();
  await provider?.stop();
  await daemon?.stop();
});

afterEach(async () => {
  if (page) {
    // The provider's development pages load fonts from the Internet, which is not here.
    const errors = page.errors.filter((e) => !/Failed to load resource: (the server responded with a status of 4\d\d|net::ERR_NAME_NOT_RESOLVED)/.test(e));
    await page.close();
    page = null;
    assert.deepEqual(errors, [], "no console errors");
  }
});

/** From the sign-in screen through the provider, as `login`. */
async function signInAs(login) {
  await page.context().clearCookies();
  await page.goto(daemon.base + "/");
  await page.locator("#signin-oidc-link").waitFor({ state: "visible" });
  await page.click("#signin-oidc-link");
  await providerLogin(page, login);
}

const me = () => page.evaluate(async () => {
  const r = await fetch("/api/v1/me");
  return { status: r.status, body: await r.json() };
});

test("signing in through the provider adds the person, the page works on the cookie, and signing out ends it everywhere", async () => {
  page = await browser.newPage();
  await signInAs("alice");
  await page.locator("#app").waitFor({ state: "visible" });
  const who = await me();
  assert.equal(who.status, 200);
  assert.equal(who.body.person.email, "alice@example.com");
  assert.equal(who.body.person.role, "member");
  await screenshot(page, "signed-in-with-oidc");

  // The page works: a conversation and a turn, with no token anywhere.
  await newConversation(page);
  await sendAndWait(page, "hello from alice");
  assert.equal(await page.evaluate(() => localStorage.getItem("tether.token")), null);

  // A change riding the cookie without the CSRF token is refused, changes nothing.
  const forged = await page.evaluate(async () => {
    const r = await fetch("/api/v1/conversations", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    return { status: r.status, body: await r.json() };
  });
  assert.equal(forged.status, 403);
  assert.equal(forged.body.error.code, "forbidden");

  // Sign out: the cookie stops working for whoever holds it.
  const cookie = (await page.context().cookies()).find((c) => c.name === "tether_session");
  assert.ok(cookie && cookie.httpOnly, "the session cookie is HttpOnly");
  assert.equal(cookie.sameSite, "Lax");
  const before = await fetch(`${daemon.base}/api/v1/me`, { headers: { Cookie: `tether_session=${cookie.value}` } });
  assert.equal(before.status, 200);
  await page.click("#signout");
  await page.locator("#signin").waitFor({ state: "visible" });
  const after = await fetch(`${daemon.base}/api/v1/me`, { headers: { Cookie: `tether_session=${cookie.value}` } });
  assert.equal(after.status, 401);

  // The audit log has the sign-in and the sign-out.
  const audit = await daemon.api("GET", "/api/v1/audit");
  const actions = audit.entries.map((e) => e.action);
  assert.ok(actions.includes("sign_in") && actions.includes("sign_out"), actions.join(","));
});

test("the provider's group maps to a role", async () => {
  page = await browser.newPage();
  await signInAs("boss");
  await page.locator("#app").waitFor({ state: "visible" });
  const who = await me();
  assert.equal(who.body.person.role, "admin");
});

test("a replayed callback and a domain that is not allowed are refused with their code", async () => {
  page = await browser.newPage();
  let callback = null;
  page.on("request", (r) => {
    if (r.url().includes("/api/v1/auth/oidc/callback")) callback = r.url();
  });
  await signInAs("carol");
  await page.locator("#app").waitFor({ state: "visible" });
  assert.ok(callback, "the callback was seen");
  await page.goto(callback);
  await page.locator("#signin-error .error-code[data-code=bad_state]").waitFor();
  await signInAs("eve@elsewhere.test");
  await page.locator("#signin-error .error-code[data-code=domain_not_allowed]").waitFor();
  const people = await daemon.api("GET", "/api/v1/people");
  assert.ok(!people.people.some((p) => p.email === "eve@elsewhere.test"), "nobody was added");
  await screenshot(page, "signin-refused");
});

test("token sign-in stays beside the provider", async () => {
  page = await browser.newPage();
  await page.context().clearCookies();
  await page.goto(daemon.base + "/");
  await page.fill("#signin-token", daemon.token);
  await page.click("#signin-form button[type=submit]");
  await within("signed in with the token", 15000, page.locator("#app").waitFor({ state: "visible" }));
});
