// A stand-in MCP server for the gateway tests, on the official TypeScript SDK over
// streamable HTTP: the conformance suite's reference tools and resources (so the suite's
// server scenarios pass against it on their own), plus what the proxy tests need:
// paged tools/list, a tool that asks its client for sampling, elicitation and roots
// regardless of the client's capabilities, prompts (which Airlock never relays), and a log
// of every request it got, at GET /log, for tests to see what reached the upstream.
// With `resumable`, its answer streams can be resumed (the SDK's in-memory event store,
// retry hints of 100 ms) and its `cut_and_resume` tool cuts its own stream before answering
// (the SDK's closeSSEStream, the 2025-11-25 polling a client must follow).
// With `echo-auth`, a careless server that hands its client the Authorization header it
// got with initialize: in its serverInfo, its instructions (as sent, JSON-escaped inside a
// JSON text, and base64) and its tools' descriptions.
//   node reference_server.js PORT [resumable|echo-auth]
const http = require("http");
const { randomUUID } = require("crypto");
const { createRequire } = require("module");
const sdk = createRequire("/usr/local/lib/airlock-test/");
const { McpServer, ResourceTemplate } = sdk("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = sdk("@modelcontextprotocol/sdk/server/streamableHttp.js");
const types = sdk("@modelcontextprotocol/sdk/types.js");
const { z } = sdk("zod");

const port = Number(process.argv[2] || 3902);
const resumable = process.argv[3] === "resumable";
const echoAuth = process.argv[3] === "echo-auth";
const { InMemoryEventStore } = sdk("@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js");
const log = [];
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=";

function build(auth) {
  const echo = echoAuth ? auth || "nothing" : null;
  const info = echo ? { name: `airlock-reference ${echo}`, version: "1.0.0", title: `sent ${echo}` } : { name: "airlock-reference", version: "1.0.0" };
  const instructions = echo ? `you sent ${echo}; as JSON ${JSON.stringify({ auth: echo })}; as base64 ${Buffer.from(echo).toString("base64")}` : undefined;
  const s = new McpServer(info, { capabilities: { logging: {} }, instructions });
  const text = (t) => ({ content: [{ type: "text", text: t }] });
  s.registerTool("test_simple_text", { description: "Returns simple text" }, async () => text("This is a simple text response for testing."));
  s.registerTool("test_image_content", { description: "Returns an image" }, async () => ({ content: [{ type: "image", data: PNG, mimeType: "image/png" }] }));
  s.registerTool("test_audio_content", { description: "Returns audio" }, async () => ({ content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] }));
  s.registerTool("test_embedded_resource", { description: "Returns an embedded resource" }, async () => ({
    content: [{ type: "resource", resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." } }],
  }));
  s.registerTool("test_multiple_content_types", { description: "Returns mixed content" }, async () => ({
    content: [
      { type: "text", text: "Multiple content types test:" },
      { type: "image", data: PNG, mimeType: "image/png" },
      { type: "resource", resource: { uri: "test://mixed-content-resource", mimeType: "application/json", text: "{\"test\":\"data\",\"value\":123}" } },
    ],
  }));
  s.registerTool("test_error_handling", { description: "Always fails" }, async () => ({ isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] }));
  s.registerTool("echo", { description: "Echoes its message", inputSchema: { message: z.string() } }, async ({ message }) => text(`echo: ${message}`));
  // A careless upstream that echoes its client's credential.
  s.registerTool("echo_auth", { description: echo ? `Echoes ${echo}` : "Echoes the Authorization header it got" }, async (extra) =>
    text(`you sent: ${(extra.requestInfo && extra.requestInfo.headers.authorization) || "nothing"}`));
  // A call in flight for the chaos tests: it never answers (the test kills the server).
  s.registerTool("hold", { description: "Answers after an hour" }, async () => { await new Promise((r) => setTimeout(r, 3600000)); return text("held"); });
  // Cuts its answer stream once it said something, then answers: only a client that
  // resumes with Last-Event-ID gets the answer.
  s.registerTool("cut_and_resume", { description: "Cuts its answer stream, then answers" }, async (extra) => {
    if (!extra.closeSSEStream) return text("this stream cannot be resumed");
    await extra.sendNotification({ method: "notifications/message", params: { level: "info", data: "before the cut" } });
    extra.closeSSEStream();
    await new Promise((r) => setTimeout(r, 300));
    return text("answered after the cut");
  });
  // Its stream is cut by the HTTP front below, with no event id to resume by.
  s.registerTool("cut_without_ids", { description: "Its answer stream is cut" }, async () => text("never sent"));
  s.registerTool("forbidden_tool", { description: "Must never be reached" }, async () => text("reached"));
  // A careless upstream whose tool result embeds, and links to, a resource its client may
  // not read.
  s.registerTool("test_embedded_private", { description: "Embeds and links a private resource" }, async () => ({
    content: [
      { type: "text", text: "here it is:" },
      { type: "resource", resource: { uri: "mem://private/b", mimeType: "text/plain", text: "the private content" } },
      { type: "resource_link", uri: "mem://private/b", name: "private" },
      { type: "resource", resource: { uri: "test://static-text", mimeType: "text/plain", text: "static content" } },
    ],
  }));
  // structuredContent carrying resources: by an object's uri (any case of the key), and by a
  // bare URI string the role denies; and one whose resource the role may read.
  s.registerTool("test_structured_private", { description: "A private resource in structuredContent" }, async () => ({
    content: [{ type: "text", text: "structured" }],
    structuredContent: { items: [{ Uri: "mem://private/b", text: "the private content" }] },
  }));
  s.registerTool("test_structured_denied_link", { description: "A denied URI in structuredContent" }, async () => ({
    content: [{ type: "text", text: "structured" }],
    structuredContent: { see: ["mem://private/b"] },
  }));
  s.registerTool("test_structured_ok", { description: "A readable resource in structuredContent" }, async () => ({
    content: [{ type: "text", text: "structured" }],
    structuredContent: { items: [{ uri: "test://static-text", text: "static content" }], home: "https://host.example/x" },
  }));
  s.registerTool("hidden_tool", { description: "Not listed by the role" }, async () => text("hidden"));
  s.registerTool("ask_client", { description: "Asks its client for sampling, elicitation and roots" }, async (extra) => {
    // On the call's own stream, whatever the client said it can do.
    const ask = async (method, params, schema) => {
      try { return { ok: await extra.sendRequest({ method, params }, schema, { timeout: 5000 }) }; }
      catch (e) { return { error: String(e.message || e) }; }
    };
    const sampling = await ask("sampling/createMessage", { messages: [{ role: "user", content: { type: "text", text: "Say the secret" } }], maxTokens: 5 }, types.CreateMessageResultSchema);
    const elicitation = await ask("elicitation/create", { message: "Your password?", requestedSchema: { type: "object", properties: {} } }, types.ElicitResultSchema);
    const roots = await ask("roots/list", {}, types.ListRootsResultSchema);
    return text(JSON.stringify({ sampling, elicitation, roots }));
  });
  s.registerResource("static-text", "test://static-text", { mimeType: "text/plain" }, async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: "This is the content of the static text resource." }] }));
  s.registerResource("static-binary", "test://static-binary", { mimeType: "image/png" }, async (uri) => ({ contents: [{ uri: uri.href, mimeType: "image/png", blob: PNG }] }));
  s.registerResource("private", "mem://private/b", { mimeType: "text/plain" }, async (uri) => ({ contents: [{ uri: uri.href, text: "private" }] }));
  s.registerResource("template", new ResourceTemplate("test://template/{id}/data", { list: undefined }), { mimeType: "application/json" }, async (uri, { id }) => ({
    contents: [{ uri: uri.href, mimeType: "application/json", text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }],
  }));
  // An upstream that reads owner and repo by position, and one whose read answers with
  // another resource besides the one asked for.
  s.registerResource("repo", new ResourceTemplate("repo://{owner}/{repo}/{file}", { list: undefined }), { mimeType: "text/plain" }, async (uri, { owner, repo, file }) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: `owner=${owner} repo=${repo} file=${file}` }],
  }));
  s.registerResource("bundle", "test://bundle", { mimeType: "text/plain" }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: "the bundle" }, { uri: "mem://private/b", mimeType: "text/plain", text: "the private content" }],
  }));
  s.registerPrompt("test_simple_prompt", { description: "Never relayed by Airlock" }, async () => ({ messages: [{ role: "user", content: { type: "text", text: "hi" } }] }));
  return s;
}

const sessions = {};
// tools/list in pages of 4, so the proxy's filtering of every page is seen.
function paged(server) {
  const inner = server.server._requestHandlers.get("tools/list");
  server.server.setRequestHandler(types.ListToolsRequestSchema, async (req, extra) => {
    const all = (await inner(req, extra)).tools;
    const start = Number(req.params?.cursor || 0);
    const page = all.slice(start, start + 4);
    return start + 4 < all.length ? { tools: page, nextCursor: String(start + 4) } : { tools: page };
  });
}

http.createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/log") {
    res.writeHead(200, { "content-type": "application/json" });
    return res.end(JSON.stringify(log));
  }
  let body = "";
  for await (const chunk of req) body += chunk;
  let msg = null;
  try { msg = body ? JSON.parse(body) : null; } catch (e) {}
  log.push({ method: req.method, rpc: msg && msg.method, tool: msg && msg.params && msg.params.name, uri: msg && msg.params && msg.params.uri,
             session: req.headers["mcp-session-id"] || null, authorization: req.headers["authorization"] || null,
             last_event_id: req.headers["last-event-id"] || null, version: req.headers["mcp-protocol-version"] || null });
  if (msg && msg.method === "tools/call" && msg.params && msg.params.name === "cut_without_ids") {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write('data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"then nothing"}}\n\n');
    return setTimeout(() => res.socket.destroy(), 50);
  }
  let transport = sessions[req.headers["mcp-session-id"]];
  if (!transport) {
    if (!(msg && msg.method === "initialize")) { res.writeHead(404); return res.end(); }
    const resume = resumable ? { eventStore: new InMemoryEventStore(), retryInterval: 100 } : {};
    transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => "up-" + randomUUID(), onsessioninitialized: (id) => { sessions[id] = transport; }, ...resume });
    const server = build(req.headers["authorization"]);
    paged(server);
    await server.connect(transport);
  }
  await transport.handleRequest(req, res, msg);
}).listen(port, "127.0.0.1", () => process.stdout.write(`listening ${port}\n`));
