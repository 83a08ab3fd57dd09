"""A scripted agent for Airlock's provider tests, run inside the jail: it calls its model
provider the way an agent CLI does, through the run's gateway with its run token, and prints
one JSON line per step.

argv[1]: a JSON list of steps:
  {"op": "call", "api": "anthropic"|"openai", "model": M, "stream": bool,
   "token": "own"|"wrong"|"none", "hold": bool, "extra": {...}, "drop": [KEY, ...],
   "mode": MODE, "raw": TEXT, "method": M, "path": REST, "headers": {...}, "gzip": bool,
   "keep_held": bool}
      extra: body members; drop: members left out; mode: the stand-in's behaviour
      (tests/agents/standin_provider.py); raw: the body as sent, instead of one built;
      path: the route's rest (with a query), instead of the API's model endpoint;
      gzip: the body compressed, with Content-Encoding: gzip; keep_held: a held stream is
      left held (not released by the agent once its first words came)
  {"op": "abandon", "api": A, "model": M, "extra": {...}}   a request the stand-in does not
      answer: once the stand-in says it waits, the agent closes its connection
  {"op": "scan", "out": PATH}   everything the agent can read that could hold a key, to PATH
  {"op": "loop", "api": A, "model": M, "seconds": N}   keep calling (ignoring SIGTERM)
  {"op": "sleep", "ms": N}   wait (a test reads the gateway's memory meanwhile)
"""

import gzip
import http.client
import json
import os
import signal
import sys
import time
import urllib.parse

GATEWAY = urllib.parse.urlsplit(os.environ["AIRLOCK_GATEWAY"])
NAME = {"anthropic": "claude", "openai": "codex"}
KEY_VAR = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def out(doc):
    print(json.dumps(doc), flush=True)


def conn():
    return http.client.HTTPConnection(GATEWAY.hostname, GATEWAY.port, timeout=60)


def headers(api, token):
    own = os.environ.get(KEY_VAR[api], "")
    t = {"own": own, "wrong": "airlock-run-" + "0" * 48, "none": None}[token]
    h = {"content-type": "application/json"}
    if api == "anthropic":
        h["anthropic-version"] = "2023-06-01"
        if t is not None:
            h["x-api-key"] = t
    elif t is not None:
        h["authorization"] = "Bearer " + t
    return h


def path(api, rest):
    return f"/provider/{NAME[api]}{rest}"


def body(api, model, stream, hold, extra=None, drop=(), mode=None):
    if api == "anthropic":
        b = {"model": model, "max_tokens": 600, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        if hold:
            b["metadata"] = {"user_id": "hold"}
        if mode:
            b["metadata"] = {"user_id": mode}
    else:
        b = {"model": model, "input": "hi", "stream": stream, "max_output_tokens": 1200}
        if hold:
            b["metadata"] = {"hold": "1"}
        if mode:
            b["metadata"] = {"mode": mode}
    b.update(extra or {})
    for k in drop:
        b.pop(k, None)
    return json.dumps(b)


def release(api, token):
    c = conn()
    c.request("GET", path(api, "/v1/models" if api == "anthropic" else "/models"), headers=headers(api, token))
    r = c.getresponse()
    r.read()
    return r.status


def model_path(api):
    return "/v1/messages" if api == "anthropic" else "/responses"


def call(i, s):
    api, token = s["api"], s.get("token", "own")
    c = conn()
    t0 = time.monotonic()
    data = s["raw"] if "raw" in s else body(api, s.get("model"), s.get("stream", False), s.get("hold", False),
                                            s.get("extra"), s.get("drop", ()), s.get("mode"))
    data = data.encode() if data is not None else None
    h = headers(api, token)
    h.update(s.get("headers") or {})
    if s.get("gzip"):
        data = gzip.compress(data)
        h["content-encoding"] = "gzip"
    c.request(s.get("method", "POST"), path(api, s.get("path", model_path(api))), body=data, headers=h)
    r = c.getresponse()
    doc = {"step": i, "status": r.status, "headers": {k.lower(): v for k, v in r.getheaders()}}
    if r.status != 200 or not s.get("stream"):
        raw = r.read()
        if s.get("quiet"):
            # A large answer: its size only (parsing it here would cost the jail's memory).
            doc["body"] = {"bytes": len(raw)}
            out(doc)
            return
        try:
            j = json.loads(raw)
        except ValueError:
            j = {"raw": raw.decode(errors="replace")}
        doc["body"] = j
        err = j.get("error") if isinstance(j, dict) else None
        if isinstance(err, dict):
            doc["error_type"] = err.get("type")
            doc["message"] = err.get("message")
        out(doc)
        return
    text, events, released = "", 0, None
    seen = b""
    while True:
        try:
            line = r.readline()
        except (http.client.HTTPException, OSError) as e:
            # The answer broke off: what came so far is what the agent got.
            doc["broken"] = type(e).__name__
            break
        seen += line
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        if s.get("quiet") and len(line) > (1 << 20):
            # A large event: counted, not parsed.
            seen, events = b"", events + 1
            continue
        ev = json.loads(line[5:])
        events += 1
        delta = ev.get("delta")
        if isinstance(delta, dict) and delta.get("type") == "text_delta":
            text += delta["text"]
        elif isinstance(delta, str):
            text += delta
        if s.get("hold") and released is None and text and not s.get("keep_held"):
            # The first words are here while the stand-in holds the rest back.
            doc["first_text_s"] = round(time.monotonic() - t0, 3)
            released = release(api, token)
    doc.update({"events": events, "text": text, "released_status": released,
                "raw": seen.decode(errors="replace")})
    out(doc)


def sleep(i, s):
    out({"step": i, "sleeping": s["ms"]})
    time.sleep(s["ms"] / 1000)


def abandon(i, s):
    """A request the stand-in will not answer: sent, seen to arrive, then given up on."""
    api = s["api"]
    c = conn()
    c.request("POST", path(api, model_path(api)),
              body=body(api, s["model"], False, False, s.get("extra"), s.get("drop", ()), "wait"),
              headers=headers(api, "own"))
    waiting = 0
    for _ in range(200):
        m = conn()
        m.request("GET", path(api, "/v1/models" if api == "anthropic" else "/models"), headers=headers(api, "own"))
        waiting = json.loads(m.getresponse().read()).get("waiting", 0)
        if waiting:
            break
        time.sleep(0.05)
    c.close()
    out({"step": i, "waiting": waiting})


def scan(i, s):
    """Everything readable that could carry a key: the environment, every visible
    process's environ and cmdline, and the files of the writable and config places."""
    seen = 0
    with open(s["out"], "wb") as f:
        for k, v in os.environ.items():
            f.write(f"{k}={v}\n".encode())
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            for leaf in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{leaf}", "rb") as p:
                        f.write(p.read() + b"\n")
                        seen += 1
                except OSError:
                    pass
        roots = ["/etc", "/tmp", "/run", "/dev/shm", "/var", os.environ.get("HOME", "/"), os.environ.get("AIRLOCK_WORKSPACE", "/")]
        for root in roots:
            for d, dirs, files in os.walk(root):
                for name in files:
                    p = os.path.join(d, name)
                    if p == s["out"]:
                        continue
                    try:
                        with open(p, "rb") as x:
                            f.write(x.read(1 << 20) + b"\n")
                            seen += 1
                    except OSError:
                        pass
    out({"step": i, "scanned": seen})


def loop(i, s):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    end = time.monotonic() + s["seconds"]
    n = 0
    while time.monotonic() < end:
        c = conn()
        c.request("POST", path(s["api"], "/v1/messages" if s["api"] == "anthropic" else "/responses"),
                  body=body(s["api"], s["model"], False, False), headers=headers(s["api"], "own"))
        r = c.getresponse()
        raw = r.read()
        try:
            err = (json.loads(raw).get("error") or {}).get("message")
        except ValueError:
            err = None
        out({"step": i, "n": n, "status": r.status, "t": time.time(), "message": err})
        n += 1
        time.sleep(0.1)


for i, s in enumerate(json.loads(sys.argv[1])):
    {"call": call, "scan": scan, "loop": loop, "abandon": abandon, "sleep": sleep}[s["op"]](i, s)
