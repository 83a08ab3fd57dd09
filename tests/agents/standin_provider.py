"""A stand-in model provider for Airlock's tests: the Anthropic Messages API
(POST /v1/messages, /v1/messages/count_tokens, GET /v1/models) and the OpenAI Responses
API (POST /responses, GET /models), streamed (server-sent events) or not, over plain HTTP
on loopback.

Usage: standin_provider.py LOG_FILE PORT_FILE

Every request is appended to LOG_FILE as one JSON line: method, path, the key headers it
carried, the model, whether it streamed, and for a held stream how it was released. The
port it listens on is written to PORT_FILE.

Usage reported per answer (so a test can compute the spend):
  Anthropic: input 1000, cache creation 2000, cache read 3000, output 500
  OpenAI:    input 10000 of which 8000 cached, output 1000

`{"metadata": {"user_id": "big:N"}}` streams N more deltas of 1000 characters (for
throughput benchmarks).

A request whose metadata asks for it (`{"metadata": {"user_id": "hold"}}` or, for OpenAI,
`{"metadata": {"hold": "1"}}`) is a held stream: its first events are sent, then the
stand-in waits (at most 20 s) for a GET of the model list before it sends the rest, so a
test can show the first events reached the agent while the answer was still going.
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1]
PORT_FILE = sys.argv[2]
LOCK = threading.Lock()
RELEASE = threading.Event()

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

    def entry(self, body):
        return {
            "t": time.time(),
            "method": self.command,
            "path": self.path,
            "x_api_key": self.headers.get("x-api-key"),
            "authorization": self.headers.get("authorization"),
            "anthropic_version": self.headers.get("anthropic-version"),
            "accept_encoding": self.headers.get("accept-encoding"),
            "model": (body or {}).get("model"),
            "stream": bool((body or {}).get("stream")),
        }

    def send_json(self, status, doc):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def event(self, name, doc):
        data = f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def hold(self, entry):
        released = RELEASE.wait(20)
        RELEASE.clear()
        entry["released"] = "by_agent" if released else "by_timeout"

    def do_GET(self):
        entry = self.entry(None)
        if self.path.split("?")[0] in ("/v1/models", "/models"):
            RELEASE.set()
            log(entry)
            return self.send_json(200, {"data": [{"id": "stand-in"}], "object": "list"})
        log(entry)
        self.send_json(404, {"error": "no such endpoint"})

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        entry = self.entry(body)
        path = self.path.split("?")[0]
        held = (body.get("metadata") or {}).get("user_id") == "hold" or (
            body.get("metadata") or {}
        ).get("hold") == "1"
        if path == "/v1/messages/count_tokens":
            log(entry)
            return self.send_json(200, {"input_tokens": 42})
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
                        "content": [{"type": "text", "text": "hello from the stand-in"}],
                        "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": ANTHROPIC_USAGE,
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
                    "usage": {"output_tokens": ANTHROPIC_USAGE["output_tokens"]},
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
                "output": [
                    {
                        "type": "message",
                        "id": "msg_standin",
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "hello from the stand-in", "annotations": []}],
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


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
