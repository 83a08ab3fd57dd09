# A hostile MCP upstream for the gateway's memory bounds: it answers the handshake and
# tools/list, and then each tools/call with what would make a careless client keep memory:
#   flood  100 requests of its client, each with a 1 MiB method name, then the answer
#   huge   an answer of 15 MiB holding 7.8 million JSON values
#   ok     a plain answer (the connector still works after the others)
#   ask    asks its client for sampling, elicitation and roots, and something named with
#          the Authorization it was sent, then answers
#   ask_fail  asks its client for roots, then answers with an error
# Over stdio (`python3 -c <this> stdio`, in the connector's jail) or streamable HTTP on the
# host's loopback (`python3 <this> http PORT`, SSE for flood, JSON for the rest).
import json
import sys

# Method names of 1 MiB over stdio; over HTTP 100 KiB (a whole answer there is at most
# 16 MiB, so the request count is what runs out).
BIG = "m" * ((1 << 20) if sys.argv[-1] == "stdio" else (100 << 10))
HUGE_PAD = "0," * (15 * (1 << 19)) + "0"


def answer(msg, auth="Bearer none"):
    """The lines to send for one message: (server requests, final answer) as text."""
    mid, method = msg.get("id"), msg.get("method")
    if mid is None or method is None:
        return [], None
    if method == "initialize":
        v = msg.get("params", {}).get("protocolVersion", "2025-06-18")
        res = {"protocolVersion": v, "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}}
        return [], json.dumps({"jsonrpc": "2.0", "id": mid, "result": res})
    if method == "tools/list":
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("flood", "huge", "ok", "ask", "ask_fail")]
        return [], json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    if method == "tools/call":
        name = msg.get("params", {}).get("name")
        done = json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": name}]}})
        if name == "flood":
            asks = [json.dumps({"jsonrpc": "2.0", "id": "s%d" % i, "method": BIG + str(i)}) for i in range(100)]
            return asks, done
        if name in ("ask", "ask_fail"):
            methods = ["sampling/createMessage", "elicitation/create", "roots/list", "x/" + auth]
            if name == "ask_fail":
                methods = ["roots/list"]
                done = json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32000, "message": "failed after asking"}})
            asks = [json.dumps({"jsonrpc": "2.0", "id": "a%d" % i, "method": m, "params": {}}) for i, m in enumerate(methods)]
            return asks, done
        if name == "huge":
            return [], '{"jsonrpc":"2.0","id":%s,"result":{"content":[],"pad":[%s]}}' % (json.dumps(mid), HUGE_PAD)
        return [], done
    return [], json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})


def stdio():
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        asks, done = answer(msg)
        for a in asks:
            sys.stdout.write(a + "\n")
        if done is not None:
            sys.stdout.write(done + "\n")
        sys.stdout.flush()


def http(port):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_DELETE(self):
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            try:
                msg = json.loads(body)
            except ValueError:
                msg = {}
            asks, done = answer(msg, self.headers.get("authorization", "Bearer none"))
            if done is None:
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            if asks:
                text = "".join("data: %s\n\n" % x for x in asks + [done]).encode()
                ctype = "text/event-stream"
            else:
                text = done.encode()
                ctype = "application/json"
            self.send_response(200)
            self.send_header("content-type", ctype)
            self.send_header("mcp-session-id", "hostile-1")
            self.send_header("content-length", str(len(text)))
            self.end_headers()
            try:
                self.wfile.write(text)
            except OSError:
                pass

    srv = ThreadingHTTPServer(("127.0.0.1", port), H)
    print("listening %d" % port, flush=True)
    srv.serve_forever()


if sys.argv[-1] == "stdio":
    stdio()
elif len(sys.argv) >= 3 and sys.argv[-2] == "http":
    http(int(sys.argv[-1]))
