"""A stand-in model provider for Airlock's tests: the Anthropic Messages API
(POST /v1/messages, /v1/messages/count_tokens, GET /v1/models) and the OpenAI Responses
API (POST /responses, GET /models), streamed (server-sent events) or not, over plain HTTP
on loopback.

Usage: standin_provider.py LOG_FILE PORT_FILE [SCRIPT_FILE]

With SCRIPT_FILE it is a scripted model: `{"turns": [TURN, ...]}` answers the agent's
requests that offer tools (an agent's main loop), one turn each, in order:
  {"text": "..."}                           a final answer
  {"tool": NAME, "input": {...}}            a call of the offered tool named NAME, or whose
                                            name ends with `__NAME` (mcp__airlock__bash);
                                            NAME may be a list: the first offered;
                                            with "force": true, called even if not offered;
                                            "$WORKSPACE" in the input's strings becomes the
                                            working directory the agent told the model
Past the last turn it answers "done". Requests without tools (an agent's side calls:
titles, summaries) get a short text answer and use no turn. Each scripted request's log
line has the turn it was served, the tools offered, and the tool results it carried back
(`results`: the text of each), so a test can check what came back to the model.

Every request is appended to LOG_FILE as one JSON line: method, path (with its query), the
key headers it carried and all of them (`headers`), the raw body as it arrived (`raw_body`,
its bytes as latin-1 text), the model, whether it streamed, and for a held stream how it
was released. The port it listens on is written to PORT_FILE.

Usage reported per answer (so a test can compute the spend):
  Anthropic: input 1000, cache creation 2000, cache read 3000, output 500
  OpenAI:    input 10000 of which 8000 cached, output 1000

`{"metadata": {"user_id": "big:N"}}` streams N more deltas of 1000 characters (for
throughput benchmarks).

A request that offers a web search tool (Anthropic `web_search_*`, OpenAI `web_search*`)
is answered as a model that searched: Anthropic with a `server_tool_use` block and its
`web_search_tool_result`, and `usage.server_tool_use.web_search_requests`; OpenAI with
`web_search_call` output items. It searches as often as the request lets it (the tools'
`max_uses`, OpenAI's `max_tool_calls`), 2 times when it names no limit.

Behaviours a request's metadata asks for (Anthropic `{"metadata": {"user_id": MODE}}`,
OpenAI `{"metadata": {"mode": MODE}}`):
  wait   logged as it arrives (`"arrived": true`), then no answer until the gateway closes
         the connection (logged `"closed_by_peer": true`) or 15 s pass; the model list
         says how many wait (`"waiting": N`), so an agent can tell its request got here
  cut    a stream that breaks off after its first delta (the connection closed, no end)
  many   the answer (its message_delta event, streamed) also holds `"pad"`: an array of
         about 4.9 million empty objects (14 MiB), which a reader building a JSON value per
         object would need half a gigabyte for
  echo   the answer carries the key it was sent: in a header (`x-echo-key`) and in its
         text, which a stream sends split across two writes

A request whose metadata asks for it (`{"metadata": {"user_id": "hold"}}` or, for OpenAI,
`{"metadata": {"hold": "1"}}`) is a held stream: its first events are sent, then the
stand-in waits (at most 20 s) for a GET of the model list before it sends the rest, so a
test can show the first events reached the agent while the answer was still going.
"""

import json
import os
import re
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1]
PORT_FILE = sys.argv[2]
SCRIPT = json.load(open(sys.argv[3]))["turns"] if len(sys.argv) > 3 else None
TURN = [0]
NAMESPACES = set()
LOCK = threading.Lock()
RELEASE = threading.Event()
WAITING = [0]

ANTHROPIC_USAGE = {
    "input_tokens": 1000,
    "cache_creation_input_tokens": 2000,
    "cache_read_input_tokens": 3000,
    "output_tokens": 500,
}
OPENAI_USAGE = {
    "input_tokens": 10000,
    "input_tokens_details": {"cached_tokens": 8000},
    "output_tokens": 1000,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 11000,
}


PAD_MARK = b'"@@pad@@"'
PAD = b"[" + b"{}," * (14 * (1 << 20) // 3) + b"{}]"


def searches(body):
    """How many web searches the stand-in runs for this request (0: no search tool)."""
    tools = [t for t in (body.get("tools") or []) if isinstance(t, dict) and str(t.get("type", "")).startswith("web_search")]
    if not tools:
        return 0
    if "max_tool_calls" in body or not any("max_uses" in t for t in tools):
        n = body.get("max_tool_calls")
        return n if isinstance(n, int) else 2
    return sum(t.get("max_uses", 2) for t in tools)


def search_blocks(n):
    """Anthropic content blocks of `n` searches: each a server_tool_use and its result."""
    out = []
    for i in range(n):
        out.append({"type": "server_tool_use", "id": "srvtoolu_%d" % i, "name": "web_search", "input": {"query": "q%d" % i}})
        out.append({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_%d" % i,
                    "content": [{"type": "web_search_result", "url": "https://result.example/%d" % i, "title": "r", "encrypted_content": "x"}]})
    return out


def search_items(n):
    """OpenAI output items of `n` searches."""
    return [{"type": "web_search_call", "id": "ws_%d" % i, "status": "completed", "action": {"type": "search", "query": "q%d" % i}} for i in range(n)]


def padded(data):
    """`data` with the pad marker (mode many) replaced by the pad."""
    return data.replace(PAD_MARK, PAD) if PAD_MARK in data else data


def log(entry):
    with LOCK:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's algorithm and the
    # peer's delayed ACK hold each answer back some 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def entry(self, body, raw=b""):
        return {
            "t": time.time(),
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "raw_body": raw.decode("latin-1"),
            "x_api_key": self.headers.get("x-api-key"),
            "authorization": self.headers.get("authorization"),
            "anthropic_version": self.headers.get("anthropic-version"),
            "accept_encoding": self.headers.get("accept-encoding"),
            "model": (body or {}).get("model"),
            "stream": bool((body or {}).get("stream")),
        }

    def send_json(self, status, doc):
        data = padded(json.dumps(doc).encode())
        self.send_response(status)
        if self.echoing:
            self.send_header("x-echo-key", self.sent_key())
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        if self.echoing:
            self.send_header("x-echo-key", self.sent_key())
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def event(self, name, doc, split=None):
        data = padded(f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode())
        if split and split.encode() in data:
            # Two writes, cut inside the secret: each its own chunk, a moment apart.
            at = data.index(split.encode()) + len(split) // 2
            for part in (data[:at], data[at:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
                time.sleep(0.05)
            return
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def hold(self, entry):
        # LOG_FILE.holding says a held stream is in flight (its first events sent).
        open(LOG + ".holding", "w").close()
        released = RELEASE.wait(20)
        RELEASE.clear()
        entry["released"] = "by_agent" if released else "by_timeout"

    def read_body(self):
        n = int(self.headers.get("content-length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    echoing = False

    def do_GET(self):
        self.echoing = False
        raw = self.read_body()
        entry = self.entry(None, raw)
        if self.path.split("?")[0] in ("/v1/models", "/models"):
            RELEASE.set()
            log(entry)
            return self.send_json(200, {"data": [{"id": "stand-in"}], "object": "list", "waiting": WAITING[0]})
        log(entry)
        self.send_json(404, {"error": "no such endpoint"})

    def wait_for_close(self, entry):
        """No answer: wait until the peer closes the connection (or 15 s pass)."""
        entry["arrived"] = True
        log(entry)
        with LOCK:
            WAITING[0] += 1
        sock = self.connection
        end = time.time() + 15
        closed = False
        try:
            while time.time() < end and not closed:
                r, _, _ = select.select([sock], [], [], 0.2)
                if r:
                    closed = sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            closed = True
        with LOCK:
            WAITING[0] -= 1
        log({"t": time.time(), "path": self.path, "closed_by_peer": closed})
        self.close_connection = True

    def cut(self):
        """Break the connection off mid-stream: no final chunk."""
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def sent_key(self):
        auth = self.headers.get("authorization") or ""
        return self.headers.get("x-api-key") or auth.split(" ", 1)[-1]

    def do_POST(self):
        self.echoing = False
        raw = self.read_body()
        body = json.loads(raw or b"{}")
        entry = self.entry(body, raw)
        path = self.path.split("?")[0]
        if SCRIPT is not None and path in ("/v1/messages", "/responses"):
            return self.scripted(path, body, entry)
        meta = body.get("metadata") or {}
        mode = meta.get("user_id") or meta.get("mode")
        if mode == "wait":
            return self.wait_for_close(entry)
        held = mode == "hold" or meta.get("hold") == "1"
        self.echoing = mode == "echo"
        echo = "the key I was sent is %s, as you see" % self.sent_key() if self.echoing else None
        if path == "/v1/messages/count_tokens":
            log(entry)
            return self.send_json(200, {"input_tokens": 42})
        n_search = searches(body)
        if path == "/v1/messages":
            if not body.get("stream"):
                log(entry)
                return self.send_json(
                    200,
                    {
                        "id": "msg_standin",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model"),
                        "content": search_blocks(n_search) + [{"type": "text", "text": echo or "hello from the stand-in"}],
                        "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": dict(ANTHROPIC_USAGE, server_tool_use={"web_search_requests": n_search}) if n_search else ANTHROPIC_USAGE,
                        **({"pad": "@@pad@@"} if mode == "many" else {}),
                    },
                )
            self.start_stream()
            start = dict(ANTHROPIC_USAGE, output_tokens=1)
            self.event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_standin",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model"),
                        "content": [],
                        "stop_reason": None,
                        "usage": start,
                    },
                },
            )
            self.event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
            self.event(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello "}},
            )
            if mode == "cut":
                log(entry)
                return self.cut()
            if echo:
                self.event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": echo + " "}},
                    split=self.sent_key(),
                )
            if held:
                self.hold(entry)
            big = str((body.get("metadata") or {}).get("user_id") or "")
            if big.startswith("big:"):
                # A long answer for throughput: N deltas of 1000 characters.
                chunk = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x" * 1000}}
                for _ in range(int(big[4:])):
                    self.event("content_block_delta", chunk)
            self.event(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "from the stand-in"}},
            )
            self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
            self.event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": dict({"output_tokens": ANTHROPIC_USAGE["output_tokens"]}, **({"server_tool_use": {"web_search_requests": n_search}} if n_search else {})),
                    **({"pad": "@@pad@@"} if mode == "many" else {}),
                },
            )
            self.event("message_stop", {"type": "message_stop"})
            self.end_stream()
            log(entry)
            return
        if path == "/responses":
            response = {
                "id": "resp_standin",
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": body.get("model"),
                "output": search_items(n_search) + [
                    {
                        "type": "message",
                        "id": "msg_standin",
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": echo or "hello from the stand-in", "annotations": []}],
                    }
                ],
                "usage": OPENAI_USAGE,
            }
            if not body.get("stream"):
                log(entry)
                return self.send_json(200, response)
            self.start_stream()
            self.event(
                "response.created",
                {"type": "response.created", "response": dict(response, status="in_progress", output=[], usage=None)},
            )
            self.event(
                "response.output_text.delta",
                {"type": "response.output_text.delta", "item_id": "msg_standin", "output_index": 0, "content_index": 0, "delta": "hello "},
            )
            if mode == "cut":
                log(entry)
                return self.cut()
            if echo:
                self.event(
                    "response.output_text.delta",
                    {"type": "response.output_text.delta", "item_id": "msg_standin", "output_index": 0, "content_index": 0, "delta": echo + " "},
                    split=self.sent_key(),
                )
            if held:
                self.hold(entry)
            self.event(
                "response.output_text.delta",
                {"type": "response.output_text.delta", "item_id": "msg_standin", "output_index": 0, "content_index": 0, "delta": "from the stand-in"},
            )
            self.event("response.completed", {"type": "response.completed", "response": response})
            self.end_stream()
            log(entry)
            return
        log(entry)
        self.send_json(404, {"error": "no such endpoint"})


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
    return json.dumps(content)


def tool_results(path, body):
    """The text of every tool result in the request's newest turn."""
    out = []
    if path == "/v1/messages":
        msgs = body.get("messages") or []
        last = msgs[-1] if msgs else {}
        for c in last.get("content") or [] if isinstance(last.get("content"), list) else []:
            if isinstance(c, dict) and c.get("type") == "tool_result":
                out.append({"error": bool(c.get("is_error")), "text": text_of(c.get("content"))})
    else:
        items = body.get("input") or []
        tail = []
        for it in reversed(items if isinstance(items, list) else []):
            if isinstance(it, dict) and it.get("type", "").endswith("_call_output"):
                tail.append({"error": False, "text": text_of(it.get("output"))})
            elif tail:
                break
        out = list(reversed(tail))
    return out


def tool_names(path, body):
    names = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace":
            # Codex offers an MCP server's tools as one namespace: mcp__<server> with its
            # tools inside; a call names the tool as <namespace>__<tool>.
            NAMESPACES.add(t["name"])
            names.extend(t["name"] + "__" + x.get("name", "") for x in t.get("tools") or [] if isinstance(x, dict))
        elif t.get("name"):
            names.append(t["name"])
        elif isinstance(t.get("function"), dict):
            names.append(t["function"].get("name"))
    return [n for n in names if n]


def working_directory(body):
    """The working directory the agent states in its prompt: Claude Code's system prompt
    (`Primary working directory: /path`), Codex's environment context (`<cwd>/path</cwd>`)."""
    # The system prompt first: a tool result or a brief may mention a working directory too.
    for text in (json.dumps(body.get("system") or body.get("instructions") or ""), json.dumps(body)):
        found = first_match(text)
        if found:
            return found
    return None


def first_match(text):
    for pattern in (r"[Ww]orking directory: ([^\s\\]+)", r"<cwd>([^<\\]+)</cwd>"):
        m = re.search(pattern, text)
        if m:
            return m.group(1)
    return None


def with_workspace(value, cwd):
    if isinstance(value, str):
        return value.replace("$WORKSPACE", cwd) if cwd else value
    if isinstance(value, list):
        return [with_workspace(v, cwd) for v in value]
    if isinstance(value, dict):
        return {k: with_workspace(v, cwd) for k, v in value.items()}
    return value


def pick(names, want):
    """The offered tool named `want` (or ending in `__want`); `want` may be a list of
    names, the first offered wins (a tool one agent version names otherwise)."""
    for w in want if isinstance(want, list) else [want]:
        for n in names:
            if n == w or n.endswith("__" + w):
                return n
    return None


def _scripted(self, path, body, entry):
    names = tool_names(path, body)
    if not names:
        turn = {"text": "ok"}
    else:
        i = TURN[0]
        TURN[0] += 1
        turn = SCRIPT[i] if i < len(SCRIPT) else {"text": "done"}
        entry.update({"turn": i, "tools": names, "results": tool_results(path, body)})
    call = None
    if "tool" in turn:
        name = pick(names, turn["tool"])
        if name is None and turn.get("force"):
            # A model may name a tool it was not offered: the agent must refuse it.
            name = turn["tool"][0] if isinstance(turn["tool"], list) else turn["tool"]
        if name is None:
            turn = {"text": f"the tool {turn['tool']} was not offered"}
        else:
            call = (name, with_workspace(turn.get("input") or {}, working_directory(body)))
    entry["answer"] = {"tool": call[0]} if call else {"text": turn["text"]}
    log(entry)
    if path == "/v1/messages":
        return self.anthropic_turn(body, turn, call)
    return self.openai_turn(body, turn, call)


def _anthropic_turn(self, body, turn, call):
    usage = {"input_tokens": 10, "output_tokens": 5}
    if call:
        block = {"type": "tool_use", "id": "toolu_%d" % TURN[0], "name": call[0], "input": call[1]}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": turn["text"]}
        stop = "end_turn"
    if not body.get("stream"):
        return self.send_json(200, {"id": "msg_s", "type": "message", "role": "assistant", "model": body.get("model"),
                                    "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage})
    self.start_stream()
    self.event("message_start", {"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant",
               "model": body.get("model"), "content": [], "stop_reason": None, "usage": dict(usage, output_tokens=1)}})
    if call:
        self.event("content_block_start", {"type": "content_block_start", "index": 0,
                   "content_block": {"type": "tool_use", "id": block["id"], "name": call[0], "input": {}}})
        self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": json.dumps(call[1])}})
    else:
        self.event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        self.event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": turn["text"]}})
    self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
    self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}})
    self.event("message_stop", {"type": "message_stop"})
    self.end_stream()


def _openai_turn(self, body, turn, call):
    n = TURN[0]
    if call:
        item = {"type": "function_call", "id": "fc_%d" % n, "call_id": "call_%d" % n, "name": call[0],
                "arguments": json.dumps(call[1]), "status": "completed"}
        ns, _, tool = call[0].rpartition("__")
        if ns.startswith("mcp__") and ns in NAMESPACES:
            # A tool of a namespace is called by its own name, with the namespace beside it.
            item.update({"name": tool, "namespace": ns})
    else:
        item = {"type": "message", "id": "msg_%d" % n, "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": turn["text"], "annotations": []}]}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    resp = {"id": "resp_%d" % n, "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": body.get("model"), "output": [item], "usage": usage}
    if not body.get("stream"):
        return self.send_json(200, resp)
    self.start_stream()
    self.event("response.created", {"type": "response.created", "response": dict(resp, status="in_progress", output=[], usage=None)})
    self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
               "item": dict(item, status="in_progress", **({"arguments": ""} if call else {"content": []}))})
    if call:
        self.event("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                   "item_id": item["id"], "output_index": 0, "delta": item["arguments"]})
        self.event("response.function_call_arguments.done", {"type": "response.function_call_arguments.done",
                   "item_id": item["id"], "output_index": 0, "arguments": item["arguments"]})
    else:
        self.event("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                   "output_index": 0, "content_index": 0, "delta": turn["text"]})
    self.event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
    self.event("response.completed", {"type": "response.completed", "response": resp})
    self.end_stream()


Handler.scripted = _scripted
Handler.anthropic_turn = _anthropic_turn
Handler.openai_turn = _openai_turn

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
