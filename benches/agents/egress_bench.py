# The egress benchmark's programs (benches/egress.sh), one file:
#   serve ADDR CERT KEY          a TLS server on ADDR:443 answering each request at once
#   dns PORT NAME ADDR           a DNS stub on 127.0.0.1:PORT: NAME -> ADDR (A), else empty
#   client proxy|direct N TARGET [SNI]
#       N timed connections, each: open (CONNECT through $HTTPS_PROXY and its 200, or a
#       plain TCP connect), TLS handshake, a GET, its first response byte. Prints p50/p90/
#       p99 of the time to open and of the time to the first byte, in microseconds.
import json, os, socket, ssl, sys, threading, time, urllib.parse


def serve(addr, cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 443))
    s.listen(128)

    def one(c):
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = ctx.wrap_socket(c, server_side=True)
            t.recv(4096)
            t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            t.close()
        except Exception:
            c.close()

    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def dns(port, name, addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", int(port)))
    a = bytes(int(x) for x in addr.split("."))
    print("ready", flush=True)
    while True:
        q, frm = s.recvfrom(1500)
        at, labels = 12, []
        while q[at]:
            labels.append(q[at + 1 : at + 1 + q[at]].decode().lower())
            at += 1 + q[at]
        qtype = int.from_bytes(q[at + 1 : at + 3], "big")
        r = bytearray(q[: at + 5])
        r[2], r[3] = 0x81, 0x80
        r[8:12] = b"\0\0\0\0"
        if ".".join(labels) == name and qtype == 1:
            r[6:8] = b"\0\1"
            r += b"\xc0\x0c\0\1\0\1\0\0\0\x1e\0\4" + a
        else:
            r[6:8] = b"\0\0"
        s.sendto(bytes(r), frm)


def client(mode, n, target, sni=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    host, port = target.rsplit(":", 1)
    proxy = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY", "http://127.0.0.1:4180"))
    opens, firsts = [], []
    for i in range(int(n) + 20):
        t0 = time.perf_counter_ns()
        if mode == "proxy":
            s = socket.create_connection((proxy.hostname, proxy.port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            assert head.startswith(b"HTTP/1.1 200"), head
        else:
            s = socket.create_connection((host, int(port)))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t1 = time.perf_counter_ns()
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert t.recv(1)
        t2 = time.perf_counter_ns()
        t.close()
        if i >= 20:  # warm-up
            opens.append((t1 - t0) / 1000)
            firsts.append((t2 - t0) / 1000)

    def q(v, p):
        v = sorted(v)
        return round(v[min(len(v) - 1, int(p * len(v)))], 1)

    out = {"n": len(opens)}
    for name, v in (("open", opens), ("first_byte", firsts)):
        for p in (0.5, 0.9, 0.99):
            out[f"{name}_p{int(p * 100)}_us"] = q(v, p)
    print(json.dumps(out))


{"serve": serve, "dns": dns, "client": client}[sys.argv[1]](*sys.argv[2:])
