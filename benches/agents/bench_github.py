"""Times GitHub API requests over one kept-alive connection: N GETs, then prints
{"p50_us", "p99_us", "n"} as JSON.

usage: bench_github.py direct HOST:PORT TOKEN N   (plain HTTP straight to the stand-in)
       bench_github.py jail N                      (https://api.github.com through the
                                                   run's HTTPS_PROXY, token GH_TOKEN)
"""
import http.client
import json
import os
import ssl
import sys
import time

if sys.argv[1] == "direct":
    host, port = sys.argv[2].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port))
    token, n = sys.argv[3], int(sys.argv[4])
else:
    proxy = os.environ["HTTPS_PROXY"].removeprefix("http://").rstrip("/")
    phost, pport = proxy.rsplit(":", 1)
    conn = http.client.HTTPSConnection(phost, int(pport), context=ssl.create_default_context())
    conn.set_tunnel("api.github.com", 443)
    token, n = os.environ["GH_TOKEN"], int(sys.argv[2])
headers = {"Authorization": f"token {token}", "User-Agent": "bench"}
times = []
for i in range(n + 20):
    t = time.perf_counter()
    conn.request("GET", "/repos/example-org/example-repo/issues/1", headers=headers)
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"HTTP {r.status}")
    if i >= 20:  # warm-up: the connection, TLS, the server's threads
        times.append(time.perf_counter() - t)
times.sort()
print(json.dumps({"n": n, "p50_us": int(times[n // 2] * 1e6), "p99_us": int(times[n * 99 // 100] * 1e6)}))
