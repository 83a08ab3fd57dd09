// A TLS front that speaks HTTP/2 (and HTTP/1.1 to a client that offers no h2), Node's own
// http2, in front of a plain MCP server; for the test that an https connector takes
// HTTP/2 when its server does.
//
//   node h2_front.mjs PORT CERT KEY UPSTREAM_PORT LOG
//
// LOG gets one JSON line per request: its HTTP version, which connection it came on (1,
// 2, ... in order of first use) and its method.
import fs from "node:fs";
import http from "node:http";
import http2 from "node:http2";

const [port, cert, key, upPort, log] = process.argv.slice(2);
const ids = new WeakMap();
let next = 0;
const hop = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "host"]);

http2.createSecureServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key), allowHTTP1: true }, (req, res) => {
  const conn = req.httpVersion === "2.0" ? req.stream.session : req.socket;
  if (!ids.has(conn)) ids.set(conn, ++next);
  fs.appendFileSync(log, JSON.stringify({ version: req.httpVersion, connection: ids.get(conn), method: req.method }) + "\n");
  const headers = { host: `127.0.0.1:${upPort}` };
  for (const [k, v] of Object.entries(req.headers)) if (!k.startsWith(":") && !hop.has(k)) headers[k] = v;
  const up = http.request({ host: "127.0.0.1", port: Number(upPort), path: req.url, method: req.method, headers }, (ur) => {
    const back = {};
    for (const [k, v] of Object.entries(ur.headers)) if (!hop.has(k)) back[k] = v;
    res.writeHead(ur.statusCode, back);
    ur.pipe(res);
  });
  up.on("error", () => { res.writeHead(502); res.end(); });
  req.pipe(up);
}).listen(Number(port), "127.0.0.1", () => process.stdout.write("listening\n"));
