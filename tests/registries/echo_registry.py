# A hostile registry over TLS on argv[1]:443 (cert argv[2], key argv[3]): it hands back
# the Authorization it was sent, every way an answer can carry it, and logs each request
# it gets (method, path, headers: one JSON line) to argv[4]. Raw sockets, so the bytes on
# the wire (chunk boundaries, trailers, 1xx, reason phrases) are the test's own. Prints
# "ready".
import base64, gzip, json, socket, ssl, sys, threading, time, zlib

pub, cert, key, log = sys.argv[1:5]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
lock = threading.Lock()


def read_request(c, buf):
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None, b""
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        rest += c.recv(65536)
    with lock, open(log, "a") as f:
        f.write(json.dumps({"method": method, "path": path, "headers": headers}) + "\n")
    return (method, path, headers), rest[n:]


def brotli_stored(data):
    # One uncompressed meta-block (window 16, MLEN up to 65536), then the last, empty one.
    n = len(data) - 1
    bits = (n << 4) | (1 << 20)
    return bytes([bits & 0xFF, (bits >> 8) & 0xFF, (bits >> 16) & 0xFF]) + data + b"\x03"


def chunks(c, data, sizes, trailer=None):
    i, k = 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        c.sendall(b"%x\r\n" % len(data[i : i + n]) + data[i : i + n] + b"\r\n")
        time.sleep(0.005)
        i, k = i + n, k + 1
    c.sendall(b"0\r\n" + (trailer or b"") + b"\r\n")


def answer(c, method, path, h):
    auth = h.get("authorization", "").encode()
    tok = auth.split(b" ", 1)[-1]
    body = None
    extra = b""
    status = b"200 OK"
    p = path.split("?")[0]
    if p == "/echo/header":
        extra = b"X-Echo: " + auth + b"\r\nLocation: https://elsewhere.example/?t=" + tok + b"\r\n"
        extra += b"X-T-" + tok + b": 1\r\nSet-Cookie: s=" + base64.b64encode(b"u:" + tok) + b"\r\n"
        body = b"ok\n"
    elif p == "/echo/body":
        body = json.dumps({"you_sent": auth.decode(), "path": path}).encode()
        r = h.get("range", "")
        if r.startswith("bytes="):
            # A part of the answer, as a server that honours Range sends it.
            a, _, b = r[6:].partition("-")
            a, b = int(a), int(b) if b else len(body) - 1
            part = body[a : b + 1]
            c.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n" % (a, b, len(body), len(part)) + part)
            return
    elif p == "/echo/te-gzip":
        # A transfer coding other than chunked: hyper passes its bytes on as they are.
        z = gzip.compress(b"te " + auth + b"\n")
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
        chunks(c, z, [4, 4])
        return
    elif p == "/echo/chunk-ext":
        # The token in a chunk extension: framing the gateway's client reads and drops.
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.sendall(b"3;t=" + tok + b"\r\next\r\n0;u=" + tok + b"\r\n\r\n")
        return
    elif p == "/echo/stacked":
        z = gzip.compress(gzip.compress(b"stacked " + auth + b"\n"))
        body = z
        extra = b"Content-Encoding: gzip, gzip\r\n"
    elif p == "/echo/zstd":
        body = b"not really zstd " + auth
        extra = b"Content-Encoding: zstd\r\n"
    elif p == "/echo/chunked":
        data = b"start " + auth + b" middle " + tok + b" end\n"
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Trailer-Echo\r\n\r\n")
        chunks(c, data, [1, 2, 3, 5, 7], b"X-Trailer-Echo: " + auth + b"\r\n")
        return
    elif p in ("/echo/gzip", "/echo/deflate", "/echo/br"):
        data = (b"compressed " + auth + b" twice " + tok + b"\n") * 3
        enc, z = {
            "/echo/gzip": (b"gzip", gzip.compress(data)),
            "/echo/deflate": (b"deflate", zlib.compress(data)),
            "/echo/br": (b"br", brotli_stored(data)),
        }[p]
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: " + enc + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunks(c, z, [3, 1, 4, 1, 5, 9])
        return
    elif p in ("/echo/b64", "/echo/b64-gzip"):
        lines = []
        for lead in (b"", b"x", b"xy", b"xyz"):
            lines.append(base64.b64encode(lead + tok))
            lines.append(base64.urlsafe_b64encode(lead + tok))
        lines.append(b"Basic " + base64.b64encode(b"user:" + tok))
        lines.append(json.dumps({"t": tok.decode()}).encode())
        body = b"\n".join(lines) + b"\n"
        if p == "/echo/b64-gzip":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunks(c, gzip.compress(body), [2, 3, 5])
            return
    elif p == "/echo/early":
        c.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: <https://x.example/" + tok + b">\r\nX-Echo: " + auth + b"\r\n\r\n")
        body = b"after the hints\n"
    elif p == "/echo/reason":
        status = b"200 " + auth
        body = b"reason\n"
    else:
        body = b"ok " + path.encode() + b"\n"
    head = b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\n" % len(body) + extra + b"\r\n"
    c.sendall(head + (b"" if method == "HEAD" else body))


def serve(c):
    try:
        t = ctx.wrap_socket(c, server_side=True)
        buf = b""
        while True:
            req, buf = read_request(t, buf)
            if req is None:
                break
            answer(t, *req)
    except Exception:
        pass
    finally:
        c.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((pub, 443))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
