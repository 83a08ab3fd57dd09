// Benchmark client and upstream for benches/gateway.sh (plain Node http, keep-alive, no
// SDK, so the MCP library's own cost does not hide the gateway's).
//   node bench_mcp.js serve PORT                     a minimal streamable-HTTP MCP server
//   node bench_mcp.js latency URL N TOOL ARGS_JSON   N sequential tools/call: p50/p99 in us
//   node bench_mcp.js rate URL SECONDS CONC TOOL ARGS_JSON   calls per second, CONC at once
const http = require("http");
// As a file (`node bench_mcp.js MODE ...`) or from -e in a jail (`node -e CODE -- MODE ...`).
const argv = process.argv.slice(1);
const at = argv.findIndex((a) => ["serve", "latency", "rate"].includes(a));
const [mode, ...rest] = argv.slice(at);

if (mode === "serve") {
  let n = 0;
  http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const m = JSON.parse(body || "{}");
      if (m.id === undefined) { res.writeHead(202); return res.end(); }
      let result;
      if (m.method === "initialize") {
        result = { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "bench", version: "1" } };
      } else if (m.method === "tools/list") {
        result = { tools: [{ name: "echo", description: "echo", inputSchema: { type: "object" } }] };
      } else if (m.method === "tools/call") {
        result = { content: [{ type: "text", text: JSON.stringify(m.params.arguments) }] };
      } else {
        result = {};
      }
      const out = JSON.stringify({ jsonrpc: "2.0", id: m.id, result });
      const h = { "content-type": "application/json", "content-length": Buffer.byteLength(out) };
      if (m.method === "initialize") h["mcp-session-id"] = "bench-" + ++n;
      res.writeHead(200, h);
      res.end(out);
    });
  }).listen(Number(rest[0]), "127.0.0.1", () => process.stdout.write("listening\n"));
} else {
  const url = new URL(rest[0]);
  // An https URL (benches/mcp_https.sh, straight to the TLS upstream): its CA comes from
  // NODE_EXTRA_CA_CERTS.
  const client = url.protocol === "https:" ? require("https") : http;
  const agent = new client.Agent({ keepAlive: true, maxSockets: 64 });
  let session = null;
  const post = (msg) => new Promise((resolve, reject) => {
    const body = JSON.stringify(msg);
    const headers = { "content-type": "application/json", accept: "application/json, text/event-stream", "content-length": Buffer.byteLength(body) };
    if (session) headers["mcp-session-id"] = session;
    const req = client.request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST", headers, agent }, (res) => {
      let data = "";
      res.on("data", (c) => (data += c));
      res.on("end", () => { if (res.headers["mcp-session-id"]) session = res.headers["mcp-session-id"]; resolve(data); });
    });
    req.on("error", reject);
    req.end(body);
  });
  const call = (id, tool, args) => post({ jsonrpc: "2.0", id, method: "tools/call", params: { name: tool, arguments: args } });
  (async () => {
    await post({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "bench", version: "1" } } });
    await post({ jsonrpc: "2.0", method: "notifications/initialized" });
    if (mode === "latency") {
      const [, n, tool, args] = rest;
      const a = JSON.parse(args);
      for (let i = 0; i < 50; i++) await call(i, tool, a); // warm up
      const t = [];
      for (let i = 0; i < Number(n); i++) {
        const s = process.hrtime.bigint();
        const r = await call(i, tool, a);
        t.push(Number(process.hrtime.bigint() - s) / 1000);
        if (i === 0 && !r.includes("result")) throw new Error("no result: " + r);
      }
      t.sort((x, y) => x - y);
      const q = (p) => t[Math.min(t.length - 1, Math.floor(p * t.length))];
      process.stdout.write(JSON.stringify({ n: t.length, p50_us: q(0.5), p90_us: q(0.9), p99_us: q(0.99) }) + "\n");
    } else if (mode === "rate") {
      const [, secs, conc, tool, args] = rest;
      const a = JSON.parse(args);
      const end = Date.now() + Number(secs) * 1000;
      let done = 0;
      await Promise.all([...Array(Number(conc))].map(async (_, w) => {
        while (Date.now() < end) { await call(w, tool, a); done++; }
      }));
      process.stdout.write(JSON.stringify({ calls: done, per_second: Math.round(done / Number(secs)) }) + "\n");
    }
    agent.destroy();
  })().catch((e) => { process.stdout.write(JSON.stringify({ error: String(e) }) + "\n"); process.exit(1); });
}
