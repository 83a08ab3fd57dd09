# The egress tests' agent: runs inside the jail, tries each probe given as JSON in argv[1]
# through the run's gateway proxy (found in its environment), prints one JSON line each.
import gzip, json, os, socket, ssl, sys, urllib.parse, urllib.request, zlib

PROXY = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
ADDR = (PROXY.hostname, PROXY.port)


def tls_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def read_head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d:
            break
        data += d
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return status, head, rest


def connect(p):
    s = socket.create_connection(ADDR, timeout=20)
    target = p["connect"]
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
    status, head, rest = read_head(s)
    out = {"status": status}
    if status != 200:
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(rest) < length:
            d = s.recv(65536)
            if not d:
                break
            rest += d
        out["body"] = rest.decode(errors="replace")
        return out
    if "raw" in p:
        s.sendall(p["raw"].encode())
        try:
            out["raw_reply"] = s.recv(100).hex()
        except OSError as e:
            out["raw_error"] = str(e)
        return out
    try:
        t = tls_context().wrap_socket(s, server_hostname=p.get("sni"))
        host = p.get("sni") or target.split(":")[0]
        t.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host.encode())
        reply = b""
        while True:
            d = t.recv(65536)
            if not d:
                break
            reply += d
        out["tls"] = reply.decode(errors="replace")
    except (OSError, ssl.SSLError) as e:
        out["tls_error"] = str(e)
    return out


def hold(p):
    # Open tunnels and keep them, to find the run's limit; then close them all.
    held, statuses = [], []
    for _ in range(p["hold"]):
        s = socket.create_connection(ADDR, timeout=20)
        s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n" % p["target"].encode())
        statuses.append(read_head(s)[0])
        held.append(s)
    for s in held:
        s.close()
    return {"statuses": statuses}


def mcp_bash(p):
    # Airlock's bash tool, over plain urllib: NO_PROXY must keep this off the proxy (else
    # the gateway would refuse its own loopback address).
    url = os.environ["AIRLOCK_GATEWAY"] + "/mcp/airlock"
    session = None

    def post(msg):
        nonlocal session
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if session:
            h["Mcp-Session-Id"] = session
        req = urllib.request.Request(url, data=json.dumps(msg).encode(), headers=h)
        with urllib.request.urlopen(req, timeout=p.get("timeout", 30) + 30) as r:
            session = r.headers.get("Mcp-Session-Id") or session
            body = r.read()
            return json.loads(body) if body else None

    post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "egress-probe", "version": "1"}}})
    post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    args = {"command": p["mcp_bash"]}
    if "timeout" in p:
        args["timeout_ms"] = p["timeout"] * 1000
    r = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "bash", "arguments": args}})
    out = r["result"].get("structuredContent")
    if out is None:
        return {"refused": r["result"]["content"][0]["text"]}
    return {"stdout": out["stdout"], "stderr": out["stderr"], "exit_code": out["exit_code"]}


def decoded(headers, body):
    # As a client that asked for a coding decodes it.
    enc = (headers.get("Content-Encoding") or "").lower()
    if enc == "gzip":
        return gzip.decompress(body)
    if enc == "deflate":
        return zlib.decompress(body)
    return body


def fetch(p):
    # urllib takes the proxy from the environment, as any tool would.
    req = urllib.request.Request(p["url"], headers=p.get("headers", {}), method=p.get("method"),
                                 data=p["data"].encode() if "data" in p else None)
    try:
        with urllib.request.urlopen(req, timeout=20, context=tls_context()) as r:
            body = decoded(r.headers, r.read())
            return {"status": r.status, "head": str(r.headers),
                    "body": body.decode(errors="replace")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode(errors="replace")}
    except OSError as e:
        return {"error": str(e)}


def https_raw(p):
    # One request's bytes as written, through a tunnel, and every byte of the answer.
    s = socket.create_connection(ADDR, timeout=20)
    host = p["https_raw"]
    s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host.encode(), host.encode()))
    status, _, _ = read_head(s)
    if status != 200:
        return {"status": status}
    t = tls_context().wrap_socket(s, server_hostname=host)
    t.sendall(p["request"].encode())
    reply = b""
    try:
        while True:
            d = t.recv(65536)
            if not d:
                break
            reply += d
    except (OSError, ssl.SSLError) as e:
        return {"raw": reply.decode(errors="replace"), "error": str(e)}
    return {"raw": reply.decode(errors="replace")}


def udp(p):
    # A real DNS query for example.com, A.
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
    try:
        # The jail refuses UDP sockets themselves (EPERM); past that, nothing routes.
        s = socket.socket(socket.AF_INET6 if ":" in p["udp"] else socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.sendto(q, (p["udp"], 53))
        data = s.recv(4096)
        return {"udp_reply": len(data)}
    except OSError as e:
        return {"udp_error": type(e).__name__ + ": " + str(e)}


for i, p in enumerate(json.loads(sys.argv[1])):
    if "mcp_bash" in p:
        r = mcp_bash(p)
    elif "hold" in p:
        r = hold(p)
    elif "connect" in p:
        r = connect(p)
    elif "https_raw" in p:
        r = https_raw(p)
    elif "url" in p:
        r = fetch(p)
    else:
        r = udp(p)
    r["step"] = i
    print(json.dumps(r), flush=True)
