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
// token endpoint on another origin), `no-access-token` (a token response without one).
// Test hooks: GET /stats, POST /revoke-last (the last token it saw is revoked).
import http from "node:http";
import { createRequire } from "node:module";

const require = createRequire("/usr/local/lib/airlock-test/node_modules/");
const Provider = require("oidc-provider").default || require("oidc-provider");

const [asPort, rsPort, resource, upPort, clientSecret, ttl, mode] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${asPort}`;
const rsSecret = "resource-server-secret-0";
const rsOrigin = `http://127.0.0.1:${rsPort}`;

const provider = new Provider(issuer, {
  clients: [
    { client_id: "airlock-host-7", client_secret: clientSecret, grant_types: ["client_credentials"], redirect_uris: [], response_types: [] },
    { client_id: "resource-server", client_secret: rsSecret, grant_types: [], redirect_uris: [], response_types: [] },
  ],
  scopes: ["read", "write"],
  features: {
    devInteractions: { enabled: false },
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
  ttl: { ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL || Number(ttl) },
});
const stats = { issued: 0, tokenRequests: 0, unauthorized: 0, forwarded: 0, tokens: [], resources: [] };
provider.on("client_credentials.saved", () => { stats.issued += 1; });
provider.use(async (ctx, next) => {
  if (ctx.path === "/token" && ctx.method === "POST") stats.tokenRequests += 1;
  await next();
});
provider.listen(Number(asPort), "127.0.0.1");

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
  if (path === "/revoke-last" && req.method === "POST") {
    const t = last && (await provider.ClientCredentials.find(last));
    if (t) await t.destroy();
    return json(res, 200, { revoked: !!t });
  }
  if (path.startsWith("/.well-known/oauth-protected-resource")) {
    if (mode === "prm-not-json") { res.writeHead(200, { "content-type": "text/html" }); return res.end("<html>metadata</html>"); }
    const servers = mode === "ok" ? [issuer] : [rsOrigin];
    return json(res, 200, { resource, authorization_servers: servers, scopes_supported: ["read", "write"] });
  }
  // The misbehaving modes' authorization server: this very server, on its plain port.
  if (path === "/.well-known/oauth-authorization-server") {
    const token_endpoint = mode === "as-foreign" ? `http://127.0.0.2:${rsPort}/token` : `${rsOrigin}/token`;
    return json(res, 200, { issuer: rsOrigin, token_endpoint, grant_types_supported: ["client_credentials"] });
  }
  if (path === "/token") return json(res, 200, { token_type: "Bearer", expires_in: 60 });
  const auth = req.headers.authorization || "";
  const token = auth.startsWith("Bearer ") ? auth.slice(7) : null;
  const info = token ? await introspect(token) : { active: false };
  const aud = [].concat(info.aud || []);
  if (!info.active || !aud.includes(resource)) {
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
