"""Times GitHub GraphQL mutations over one kept-alive connection: `addComment` on one
issue N times (its node id resolved once: cached), then on N issues each named for the
first time (uncached: the gateway looks each up), and prints {"cached_p50_us",
"cached_p99_us", "uncached_p50_us", "uncached_p99_us", "n"} as JSON.

usage: bench_graphql.py direct HOST:PORT TOKEN N IDS_JSON  (straight to the stand-in)
       bench_graphql.py jail N IDS_JSON                    (https://api.github.com through
                                                           the run's HTTPS_PROXY, GH_TOKEN)
IDS_JSON: a JSON list of at least N issue node ids, none named before.
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
    token, n, ids = sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])
else:
    proxy = os.environ["HTTPS_PROXY"].removeprefix("http://").rstrip("/")
    phost, pport = proxy.rsplit(":", 1)
    conn = http.client.HTTPSConnection(phost, int(pport), context=ssl.create_default_context())
    conn.set_tunnel("api.github.com", 443)
    token, n, ids = os.environ["GH_TOKEN"], int(sys.argv[2]), json.loads(sys.argv[3])
headers = {"Authorization": f"token {token}", "User-Agent": "bench",
           "Content-Type": "application/json"}
COMMENT = ("mutation CommentCreate($input:AddCommentInput!)"
           "{addComment(input: $input){commentEdge{node{url}}}}")


def post(body):
    t = time.perf_counter()
    conn.request("POST", "/graphql", body=json.dumps(body), headers=headers)
    r = conn.getresponse()
    data = json.loads(r.read())
    if r.status != 200 or data.get("errors"):
        sys.exit(f"HTTP {r.status}: {data}")
    return time.perf_counter() - t, data


_, first = post({"query": '{ repository(owner: "example-org", name: "example-repo") '
                          '{ issue(number: 1) { id } } }'})
issue = first["data"]["repository"]["issue"]["id"]


def pct(times):
    times.sort()
    return int(times[len(times) // 2] * 1e6), int(times[len(times) * 99 // 100] * 1e6)


cached = []
for i in range(n + 20):
    t, _ = post({"query": COMMENT, "variables": {"input": {"subjectId": issue, "body": "b"}}})
    if i >= 20:  # warm-up: the connection, TLS, the lookup of the issue's id
        cached.append(t)
uncached = [post({"query": COMMENT, "variables": {"input": {"subjectId": s, "body": "b"}}})[0]
            for s in ids[:n]]
c50, c99 = pct(cached)
u50, u99 = pct(uncached)
print(json.dumps({"n": n, "cached_p50_us": c50, "cached_p99_us": c99,
                  "uncached_p50_us": u50, "uncached_p99_us": u99}))
