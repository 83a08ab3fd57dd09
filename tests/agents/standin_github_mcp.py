#!/usr/bin/env python3
"""A stand-in for GitHub's MCP server on loopback (streamable HTTP, JSON answers), for
the GitHub route's connector test.

usage: standin_github_mcp.py DIR

Writes DIR/port, and DIR/calls.jsonl: each tools/call with its name, arguments and the
Authorization header it came with.
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIR = sys.argv[1]
TOOLS = ["get_issue", "add_issue_comment", "create_issue", "push_files", "fork_repository"]


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def reply(self, status, body=None, session=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if session:
            self.send_header("Mcp-Session-Id", session)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            return self.reply(202)
        if method == "initialize":
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "standin-github-mcp", "version": "1"}}}, session="s-1")
        if method == "tools/list":
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {"tools": [
                {"name": t, "description": t, "inputSchema": {"type": "object"}} for t in TOOLS]}})
        if method == "tools/call":
            p = msg["params"]
            with open(os.path.join(DIR, "calls.jsonl"), "a") as f:
                f.write(json.dumps({"name": p["name"], "arguments": p.get("arguments"),
                                    "auth": self.headers.get("Authorization", "")}) + "\n")
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "done " + p["name"]}]}})
        return self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})

    def do_DELETE(self):
        self.reply(200)


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(os.path.join(DIR, "port.tmp"), "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(os.path.join(DIR, "port.tmp"), os.path.join(DIR, "port"))
srv.serve_forever()
