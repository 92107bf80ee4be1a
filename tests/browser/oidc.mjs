// A real OpenID provider for the browser tests: the certified `oidc-provider` package
// (pinned in package-lock.json), with its development login and consent pages, one
// confidential client (tether) and PKCE required. Every login name is an account:
// `alice` is alice@example.com, a name with an `@` is that address, `boss` is in the
// `tether-admins` group.

import net from "node:net";
import Provider from "oidc-provider";

/** A free port on loopback (for an issuer the daemon is configured with first). */
export async function freePort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

export const CLIENT_ID = "tether";
export const CLIENT_SECRET = "tether-test-secret";

function claimsOf(id) {
  const email = id.includes("@") ? id : `${id}@example.com`;
  return {
    sub: id,
    email,
    email_verified: true,
    name: id.split("@")[0].replace(/^./, (c) => c.toUpperCase()),
    groups: id === "boss" ? ["tether-admins"] : ["staff"],
  };
}

/** Starts the provider on `port` for a client returning to `redirectUri`. */
export async function startProvider({ port, redirectUri }) {
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    }],
    async findAccount(_ctx, id) {
      return { accountId: id, async claims() { return claimsOf(id); } };
    },
    claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name", "groups"] },
    // The ID token carries the scopes' claims (tether reads them there).
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    features: { devInteractions: { enabled: true } },
    cookies: { keys: ["tether-browser-tests"] },
  });
  const server = provider.listen(port, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  return {
    issuer,
    async stop() {
      await new Promise((r) => server.close(r));
    },
  };
}

/** Signs in on the provider's development pages as `login` (any password). */
export async function providerLogin(page, login) {
  await page.locator("input[name=login]").waitFor();
  await page.fill("input[name=login]", login);
  await page.fill("input[name=password]", "any");
  await page.click("button[type=submit]");
  // The consent page (first sign-in of this account to the client).
  await page.locator("button[type=submit]").click();
}
