// A scripted MCP client agent for the gateway tests, built on the official TypeScript SDK
// (installed by scripts/install-deps.sh under /usr/local/lib/airlock-test). It runs as the
// agent program inside a jail: `node -e <this file> STEPS_JSON`. Each step is one of
//   {"list": "tools"}                       tools/list on the server
//   {"list": "tools", "all": true}          every page, with descriptions
//   {"call": TOOL, "args": {...}}           tools/call ("full": true adds the content blocks)
//   {"raw": BODY, "headers": {...}}         a raw POST to the server's URL (no SDK)
//   {"js": BODY}                            in-process probes (see below)
// and every step prints one JSON line {"step": i, ...} to stdout. The server is
// $AIRLOCK_GATEWAY/mcp/$MCP_SERVER (default airlock).
const { createRequire } = require("module");
const sdk = createRequire("/usr/local/lib/airlock-test/");
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main() {
  // The last argument: a list of steps, or {server, steps} for another server than
  // Airlock's own.
  const arg = JSON.parse(process.argv[process.argv.length - 1]);
  const steps = Array.isArray(arg) ? arg : arg.steps;
  const server = (!Array.isArray(arg) && arg.server) || "airlock";
  const url = new URL(`${process.env.AIRLOCK_GATEWAY}/mcp/${server}`);
  // The agent offers sampling, elicitation and roots, and records whether anything ever
  // asks for them: through Airlock, nothing may.
  const asked = [];
  const client = new Client(
    { name: "airlock-test-agent", version: "1.0.0" },
    { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
  );
  const types = sdk("@modelcontextprotocol/sdk/types.js");
  client.setRequestHandler(types.CreateMessageRequestSchema, async () => {
    asked.push("sampling/createMessage");
    return { model: "x", role: "assistant", content: { type: "text", text: "from the agent's model" } };
  });
  client.setRequestHandler(types.ElicitRequestSchema, async () => {
    asked.push("elicitation/create");
    return { action: "accept", content: {} };
  });
  client.setRequestHandler(types.ListRootsRequestSchema, async () => {
    asked.push("roots/list");
    return { roots: [{ uri: "file:///", name: "everything" }] };
  });
  const transport = new StreamableHTTPClientTransport(url);
  await client.connect(transport);
  const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
  out({ step: "connected", protocol: transport.protocolVersion, session: !!transport.sessionId });
  const pending = [];
  for (const [i, s] of steps.entries()) {
    try {
      if (s.list === "tools" && s.all) {
        // Every page, with each tool's description.
        const tools = [];
        let cursor;
        do {
          const r = await client.listTools(cursor ? { cursor } : undefined);
          tools.push(...r.tools.map((t) => ({ name: t.name, description: t.description || null })));
          cursor = r.nextCursor;
        } while (cursor && tools.length < 1000);
        out({ step: i, tools });
      } else if (s.list === "tools") {
        const r = await client.listTools(s.cursor ? { cursor: s.cursor } : undefined);
        out({ step: i, tools: r.tools.map((t) => t.name), nextCursor: r.nextCursor || null });
      } else if (s.list === "resources") {
        const r = await client.listResources();
        out({ step: i, resources: r.resources.map((x) => x.uri), nextCursor: r.nextCursor || null });
      } else if (s.list === "templates") {
        const r = await client.listResourceTemplates();
        out({ step: i, templates: r.resourceTemplates.map((x) => x.uriTemplate) });
      } else if (s.read) {
        const r = await client.readResource({ uri: s.read });
        out({ step: i, contents: r.contents.length, uris: r.contents.map((c) => c.uri), texts: r.contents.map((c) => c.text || null) });
      } else if (s.request) {
        const r = await client.request({ method: s.request, params: s.params || {} }, types.ResultSchema);
        out({ step: i, result: r });
      } else if (s.big) {
        const body = JSON.stringify({ jsonrpc: "2.0", id: i, method: "ping", params: { pad: "a".repeat(s.big) } });
        const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-session-id": transport.sessionId }, body });
        out({ step: i, status: r.status, body: await r.text() });
      } else if (s.call && s.nowait) {
        pending.push(client.callTool({ name: s.call, arguments: s.args || {} }, undefined, { timeout: 600000 }));
        out({ step: i, started: s.call });
      } else if (s.call) {
        // "{{pid}}" in an argument is this agent's own pid.
        const args = JSON.parse(JSON.stringify(s.args || {}).split("{{pid}}").join(String(process.pid)));
        const r = await client.callTool({ name: s.call, arguments: args }, undefined, { timeout: 600000 });
        const o = { step: i, isError: !!r.isError, structured: r.structuredContent || null, text: (r.content || []).map((c) => c.text).join("") };
        // "full": the content blocks as they came (embedded resources and links too).
        if (s.full) o.content = r.content || [];
        out(o);
      } else if (s.js !== undefined) {
        // In-process probes of the agent side: the body of an async function; what it
        // returns is printed. `fs` and `try_` (the error code of a failing call, or "ok")
        // are in scope.
        const fs = require("fs");
        const try_ = (f) => { try { f(); return "ok"; } catch (e) { return e.code || String(e); } };
        const value = await (new Function("fs", "try_", "require", "return (async () => {" + s.js + "})()"))(fs, try_, require);
        out({ step: i, value });
      } else if (s.sleep_ms) {
        await new Promise((r) => setTimeout(r, s.sleep_ms));
        out({ step: i, slept: s.sleep_ms });
      } else if (s.probe === "blind") {
        // Every pid of the run's pid namespace but this agent's own: may it signal one, or
        // read its environment? And which does /proc show?
        const fs = require("fs");
        const r = { step: i, pid: process.pid, signalled: [], read: [], visible: [] };
        for (const name of fs.readdirSync("/proc")) {
          const pid = Number(name);
          if (pid && pid !== process.pid) r.visible.push(pid);
        }
        // Its own threads answer to their ids too: not another process.
        const own = new Set(fs.readdirSync("/proc/self/task").map(Number));
        for (let pid = 1; pid <= (s.max || 300); pid++) {
          if (own.has(pid)) continue;
          try { process.kill(pid, 0); r.signalled.push(pid); } catch (e) { if (e.code !== "ESRCH" && e.code !== "EPERM") r.signalled.push(`${pid}:${e.code}`); }
          try { fs.readFileSync(`/proc/${pid}/environ`); r.read.push(pid); } catch (e) {}
        }
        out(r);
      } else if (s.raw !== undefined) {
        const headers = Object.assign({ "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-session-id": transport.sessionId }, s.headers || {});
        if (s.nosession) delete headers["mcp-session-id"];
        const r = await fetch(url, { method: s.method || "POST", headers, body: s.method === "GET" || s.method === "DELETE" ? undefined : s.raw });
        out({ step: i, status: r.status, body: await r.text() });
      }
    } catch (e) {
      out({ step: i, thrown: String(e && e.message ? e.message : e) });
    }
  }
  await Promise.allSettled(pending);
  out({ step: "asked", asked, capabilities: client.getServerCapabilities() || null, server: client.getServerVersion() || null, instructions: client.getInstructions() || null });
  await transport.close();
}
main().catch((e) => {
  process.stdout.write(JSON.stringify({ step: "fatal", thrown: String(e && e.stack ? e.stack : e) }) + "\n");
  process.exit(3);
});
