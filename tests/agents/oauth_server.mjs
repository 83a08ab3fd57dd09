// A real OAuth 2.1 authorization server (oidc-provider, configured here) and an MCP
// resource server in front of a plain MCP upstream, for the OAuth connector tests.
//
//   node oauth_server.mjs AS_PORT RS_PORT RESOURCE_URL UPSTREAM_PORT CLIENT_SECRET TTL MODE
//
// The authorization server (http://127.0.0.1:AS_PORT) knows one confidential client,
// `airlock-host-7`, for client_credentials, and issues opaque tokens for RESOURCE_URL only
// (RFC 8707), living TTL seconds. The resource server (RS_PORT, plain: the test puts a
// TLS terminator in front, whose public URL is RESOURCE_URL) serves its RFC 9728 metadata,
// answers 401 with `resource_metadata` to a request without a live token (checked by the
// authorization server's introspection endpoint), and passes the others to the upstream.
// MODE: `ok`, or a misbehaving discovery: `prm-not-json`, `as-foreign` (metadata naming a
// token endpoint on another origin), `no-access-token` (a token response without one),
// `refuse-later` (the resource server refuses every token, live or not, once it passed
// on two requests: the session's initialize and initialized); or
// an operator's login: `login-device` (the device flow, RFC 8628, for the public client
// `airlock-device`), `login-code` (no device flow; dynamic client registration, RFC 7591,
// then the authorization code grant with PKCE). Refresh tokens are rotated at each use.
// The login's user is played by POST /browse {url, stop}: a browser that keeps cookies,
// follows redirects and submits the server's own forms, its one interaction (login and
// consent) approved; it answers the URL it was sent to once that starts with `stop`.
// Test hooks: GET /stats, POST /revoke-last (the last token it saw is revoked), POST
// /revoke-grants (every grant made at a login is revoked, its tokens with it).
import http from "node:http";
import { createRequire } from "node:module";

const require = createRequire("/usr/local/lib/airlock-test/node_modules/");
const Provider = require("oidc-provider").default || require("oidc-provider");

const [asPort, rsPort, resource, upPort, clientSecret, ttl, mode] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${asPort}`;
const rsSecret = "resource-server-secret-0";
const rsOrigin = `http://127.0.0.1:${rsPort}`;

const login = mode.startsWith("login-");
// The test reads one line ("listening") and closes its end: later notices must not kill us.
process.stdout.on("error", () => {});
const provider = new Provider(issuer, {
  clients: [
    { client_id: "airlock-host-7", client_secret: clientSecret, grant_types: ["client_credentials"], redirect_uris: [], response_types: [] },
    { client_id: "resource-server", client_secret: rsSecret, grant_types: [], redirect_uris: [], response_types: [] },
    {
      client_id: "airlock-device", token_endpoint_auth_method: "none", application_type: "native",
      grant_types: ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token", "authorization_code"],
      redirect_uris: ["http://127.0.0.1:8976/callback"], response_types: ["code"],
    },
  ],
  scopes: ["read", "write"],
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed("refresh_token"),
  rotateRefreshToken: true,
  features: {
    devInteractions: { enabled: false },
    deviceFlow: { enabled: mode === "login-device" },
    registration: { enabled: mode === "login-code" },
    clientCredentials: { enabled: true },
    introspection: { enabled: true, allowedPolicy: async (ctx, client) => client.clientId === "resource-server" },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) throw new Provider.errors.InvalidTarget();
        return { scope: "read write", audience: resource, accessTokenTTL: Number(ttl), accessTokenFormat: "opaque" };
      },
    },
  },
  findAccount: async (ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  ttl: {
    Interaction: 600,
    Grant: 3600,
    Session: 3600,
    ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL || Number(ttl),
    AccessToken: (ctx, token) => token.resourceServer?.accessTokenTTL || Number(ttl),
  },
});
const stats = {
  issued: 0, tokenRequests: 0, unauthorized: 0, forwarded: 0, tokens: [], resources: [],
  refreshes: 0, revocations: 0, registrations: 0, grants: [],
};
provider.on("client_credentials.saved", () => { stats.issued += 1; });
provider.on("access_token.saved", () => { stats.issued += 1; });
provider.on("grant.saved", (g) => { if (!stats.grants.includes(g.jti)) stats.grants.push(g.jti); });
provider.use(async (ctx, next) => {
  if (ctx.path === "/token" && ctx.method === "POST") stats.tokenRequests += 1;
  if (ctx.path === "/token/revocation" && ctx.method === "POST") stats.revocations += 1;
  if (ctx.path === "/reg" && ctx.method === "POST") stats.registrations += 1;
  await next();
  if (ctx.path === "/token" && ctx.method === "POST" && ctx.oidc?.params?.grant_type === "refresh_token" && ctx.status === 200) stats.refreshes += 1;
});

// The one interaction of a login: the operator signs in and consents to the resource.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const accountId = "operator";
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId, clientId: details.params.client_id });
  // What the server asks consent for, all of it (as oidc-provider's own example does).
  const missing = details.prompt.details || {};
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(" "));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(" "));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { login: { accountId }, consent: { grantId } }, { mergeWithLastSubmission: false });
}
const callback = provider.callback();
http.createServer((req, res) => {
  if (req.url.startsWith("/interaction/")) {
    interaction(req, res).catch((e) => { res.writeHead(500); res.end(String(e)); });
  } else {
    callback(req, res);
  }
}).listen(Number(asPort), "127.0.0.1");

const unhtml = (v) => v.replace(/&quot;/g, '"').replace(/&#x27;/g, "'").replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
async function browse(start, stop) {
  const jar = new Map();
  let url = start, method = "GET", body;
  const trace = [];
  for (let i = 0; i < 20; i++) {
    trace.push(`${method} ${url}`);
    const headers = { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join("; ") };
    if (body) headers["content-type"] = "application/x-www-form-urlencoded";
    const r = await fetch(url, { method, body, headers, redirect: "manual" });
    for (const c of r.headers.getSetCookie()) {
      const kv = c.split(";")[0];
      const at = kv.indexOf("=");
      jar.set(kv.slice(0, at), kv.slice(at + 1));
    }
    const loc = r.headers.get("location");
    if (r.status >= 300 && r.status < 400 && loc) {
      const next = new URL(loc, url).href;
      if (stop && next.startsWith(stop)) return { redirected: next };
      url = next; method = "GET"; body = undefined;
      continue;
    }
    const html = await r.text();
    const form = html.match(/<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/i);
    if (!form) return { done: r.status === 200, status: r.status };
    const inputs = [...form[2].matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"\/>/g)];
    body = new URLSearchParams(inputs.map((m) => [m[1], unhtml(m[2])])).toString();
    url = new URL(unhtml(form[1]), url).href;
    method = "POST";
  }
  return { done: false, status: 0, trace };
}
const readBody = (req) => new Promise((ok) => { let b = ""; req.on("data", (c) => { b += c; }); req.on("end", () => ok(b)); });

async function introspect(token) {
  const r = await fetch(`${issuer}/token/introspection`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", authorization: "Basic " + Buffer.from(`resource-server:${rsSecret}`).toString("base64") },
    body: new URLSearchParams({ token }),
  });
  return r.json();
}

const json = (res, status, v) => { res.writeHead(status, { "content-type": "application/json" }); res.end(JSON.stringify(v)); };
let last = null;

http.createServer(async (req, res) => {
  const path = req.url.split("?")[0];
  if (path === "/stats") return json(res, 200, stats);
  if (path === "/browse" && req.method === "POST") {
    const { url, stop } = JSON.parse(await readBody(req));
    try {
      return json(res, 200, await browse(url, stop));
    } catch (e) {
      return json(res, 200, { error: String(e) });
    }
  }
  if (path === "/revoke-grants" && req.method === "POST") {
    for (const id of stats.grants) {
      await provider.RefreshToken.revokeByGrantId(id);
      await provider.AccessToken.revokeByGrantId(id);
      const g = await provider.Grant.find(id);
      if (g) await g.destroy();
    }
    return json(res, 200, { revoked: stats.grants.length });
  }
  if (path === "/revoke-last" && req.method === "POST") {
    const t = last && (await provider.ClientCredentials.find(last));
    if (t) await t.destroy();
    return json(res, 200, { revoked: !!t });
  }
  if (path.startsWith("/.well-known/oauth-protected-resource")) {
    if (mode === "prm-not-json") { res.writeHead(200, { "content-type": "text/html" }); return res.end("<html>metadata</html>"); }
    const servers = mode === "ok" || mode === "refuse-later" || login ? [issuer] : [rsOrigin];
    return json(res, 200, { resource, authorization_servers: servers, scopes_supported: ["read", "write"] });
  }
  // The misbehaving modes' authorization server: this very server, on its plain port.
  if (path === "/.well-known/oauth-authorization-server") {
    const token_endpoint = mode === "as-foreign" ? `http://127.0.0.2:${rsPort}/token` : `${rsOrigin}/token`;
    return json(res, 200, { issuer: rsOrigin, token_endpoint, grant_types_supported: ["client_credentials"] });
  }
  if (path === "/token") {
    // The misbehaving server as a token endpoint: did a client's secret reach it?
    stats.foreignTokenRequests = (stats.foreignTokenRequests || 0) + 1;
    if (req.headers.authorization) stats.foreignBasic = (stats.foreignBasic || 0) + 1;
    return json(res, 200, { token_type: "Bearer", expires_in: 60 });
  }
  const auth = req.headers.authorization || "";
  const token = auth.startsWith("Bearer ") ? auth.slice(7) : null;
  const info = token ? await introspect(token) : { active: false };
  const aud = [].concat(info.aud || []);
  if (!info.active || !aud.includes(resource) || (mode === "refuse-later" && stats.forwarded >= 2)) {
    stats.unauthorized += 1;
    res.writeHead(401, { "www-authenticate": `Bearer error="invalid_token", resource_metadata="${new URL(resource).origin}/.well-known/oauth-protected-resource${new URL(resource).pathname}"` });
    return res.end();
  }
  last = token;
  if (!stats.tokens.includes(token)) stats.tokens.push(token);
  stats.forwarded += 1;
  const up = http.request({ host: "127.0.0.1", port: Number(upPort), path: req.url, method: req.method, headers: { ...req.headers, host: `127.0.0.1:${upPort}` } }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    ur.pipe(res);
  });
  up.on("error", () => { res.writeHead(502); res.end(); });
  req.pipe(up);
}).listen(Number(rsPort), "127.0.0.1", () => {
  process.stdout.write("listening\n");
});
