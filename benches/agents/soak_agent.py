"""The soak's scripted agent (benches/soak.sh), run in a jail: one model request through
the run's provider route, one bash tool call (`ls`, run on the command side) and one
tools/call of the bench connector's `echo`, each through the run's gateway; prints
{"ok": true} when all three were answered, else what failed."""

import http.client
import json
import os
import sys
import urllib.parse

GW = urllib.parse.urlsplit(os.environ["AIRLOCK_GATEWAY"])


def post(path, doc, headers, session=None):
    c = http.client.HTTPConnection(GW.hostname, GW.port, timeout=60)
    h = {"content-type": "application/json", "accept": "application/json, text/event-stream", **headers}
    if session:
        h["mcp-session-id"] = session
    c.request("POST", path, body=json.dumps(doc), headers=h)
    r = c.getresponse()
    body = r.read().decode("utf-8", "replace")
    sid = r.getheader("mcp-session-id")
    c.close()
    return r.status, body, sid


def mcp(path, tool, args):
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "soak", "version": "1"}}}
    _, _, sid = post(path, init, {})
    post(path, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {}, sid)
    status, body, _ = post(path, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": tool, "arguments": args}}, {}, sid)
    return status == 200 and '"result"' in body and '"isError":true' not in body.replace(" ", ""), body


failed = []
status, body, _ = post("/provider/claude/v1/messages",
                       {"model": "claude-sonnet-4-5", "max_tokens": 64,
                        "messages": [{"role": "user", "content": "hi"}]},
                       {"x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""),
                        "anthropic-version": "2023-06-01"})
if status != 200:
    failed.append(f"provider {status}: {body[:200]}")
ok, body = mcp("/mcp/airlock", "bash", {"command": "ls"})
if not ok:
    failed.append(f"bash: {body[:200]}")
ok, body = mcp("/mcp/bench", "echo", {"message": "soak"})
if not ok:
    failed.append(f"echo: {body[:200]}")
print(json.dumps({"ok": not failed, "failed": failed}))
sys.exit(0 if not failed else 1)
