"""Times model requests against a provider base URL: time to first byte of a whole answer
and of a stream, and the throughput of one long stream. Run on the host (straight to the
stand-in, with the real key) and in a jail (through the run's gateway, with the run
token); prints one JSON line.

argv: BASE_URL KEY N BIG, or `env env N BIG` in a jail: the gateway's provider route
and the run token from the run's environment.
"""

import http.client
import json
import os
import sys
import time
import urllib.parse

if sys.argv[1] == "env":
    sys.argv[1] = os.environ["ANTHROPIC_BASE_URL"]
    sys.argv[2] = os.environ["ANTHROPIC_API_KEY"]
base = urllib.parse.urlsplit(sys.argv[1])
key, n, big = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
conn = http.client.HTTPConnection(base.hostname, base.port, timeout=60)
H = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": key}
MODEL = "claude-sonnet-4-5"


def post(body):
    conn.request("POST", base.path + "/v1/messages", body=json.dumps(body), headers=H)
    r = conn.getresponse()
    # A refusal (a budget, a turn limit) answers quickly: timed, it would pass for a fast
    # answer. Every answer must be a 200.
    if r.status != 200:
        sys.exit(f"bench_provider: request answered {r.status}: {r.read()[:300]!r}")
    return r


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * p))] * 1e6)


whole, first = [], []
for _ in range(n):
    t = time.perf_counter()
    r = post({"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
    r.read(1)
    whole.append(time.perf_counter() - t)
    r.read()
for _ in range(n):
    t = time.perf_counter()
    r = post({"model": MODEL, "max_tokens": 16, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    r.readline()
    first.append(time.perf_counter() - t)
    r.read()
t = time.perf_counter()
r = post({"model": MODEL, "max_tokens": 16, "stream": True, "metadata": {"user_id": f"big:{big}"},
          "messages": [{"role": "user", "content": "hi"}]})
size = 0
while True:
    b = r.read(1 << 16)
    if not b:
        break
    size += len(b)
secs = time.perf_counter() - t
# BIG deltas of 1000 characters, each an SSE event of more than that.
if size < big * 1000:
    sys.exit(f"bench_provider: the long stream brought {size} bytes, fewer than its {big} deltas")
print(json.dumps({
    "whole_p50_us": pct(whole, 0.5), "whole_p99_us": pct(whole, 0.99),
    "stream_p50_us": pct(first, 0.5), "stream_p99_us": pct(first, 0.99),
    "stream_mib_s": round(size / secs / (1 << 20), 1), "stream_mib": round(size / (1 << 20), 1),
}))
