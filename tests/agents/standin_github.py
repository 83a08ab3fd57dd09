#!/usr/bin/env python3
"""A stand-in GitHub on loopback, for the GitHub route's tests and benchmark.

usage: standin_github.py DIR

DIR holds app.pub.pem (the App's public key: every App JWT is verified with it, RS256 by
`openssl dgst`), repos/ (bare repositories OWNER/REPO.git, served over git smart HTTP by
the real `git http-backend` under /git/), and gets port (the port listened on) and
requests.jsonl (every request: method, path, which credential, status). A file
DIR/fail_delete makes DELETE /installation/token answer 500 (a revocation that fails).

The REST endpoints used: GET /repos/O/R/installation and POST
/app/installations/ID/access_tokens (App JWT), DELETE /installation/token, GET /repos/O/R
(default_branch), and any other /repos/... request, answered 200/201 with what it was.
"""

import base64
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIR = sys.argv[1]
APP_ID = "4242"
INSTALLATION = 77
LOCK = threading.Lock()
TOKENS = {}  # token -> {"revoked": bool, "repositories": [...], "permissions": {...}}


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def verify_jwt(auth):
    """The App JWT: RS256 over header.claims, issued by APP_ID, not expired."""
    if not auth.startswith("Bearer "):
        return "no bearer JWT"
    parts = auth[7:].split(".")
    if len(parts) != 3:
        return "not a JWT"
    header = json.loads(b64url_decode(parts[0]))
    claims = json.loads(b64url_decode(parts[1]))
    if header.get("alg") != "RS256":
        return "alg is not RS256"
    now = time.time()
    if claims.get("iss") != APP_ID or not claims["iat"] <= now < claims["exp"]:
        return "bad claims"
    if claims["exp"] - claims["iat"] > 600:
        return "a JWT may live ten minutes at most"
    with tempfile.NamedTemporaryFile() as sig, tempfile.NamedTemporaryFile() as data:
        sig.write(b64url_decode(parts[2]))
        sig.flush()
        data.write((parts[0] + "." + parts[1]).encode())
        data.flush()
        r = subprocess.run(
            ["openssl", "dgst", "-sha256", "-verify", os.path.join(DIR, "app.pub.pem"),
             "-signature", sig.name, data.name],
            capture_output=True,
        )
    return None if r.returncode == 0 else "bad signature"


def token_of(auth):
    if auth.startswith("token ") or auth.startswith("Bearer "):
        return auth.split(" ", 1)[1]
    if auth.startswith("Basic "):
        user_pass = base64.b64decode(auth[6:]).decode()
        return user_pass.split(":", 1)[1]
    return None


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # One reply is two writes (headers, body): without this, Nagle and the client's delayed
    # ACK add 40 ms to each.
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def log(self, status, cred, extra=None):
        rec = {"method": self.command, "path": self.path, "cred": cred, "status": status}
        rec["auth"] = self.headers.get("Authorization", "")
        if extra:
            rec.update(extra)
        with LOCK:
            with open(os.path.join(DIR, "requests.jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")

    def reply(self, status, body=None, ctype="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def handle_any(self):
        auth = self.headers.get("Authorization", "")
        body = self.body()
        path = self.path.split("?", 1)[0]
        if path.startswith("/app/") or path.endswith("/installation"):
            why = verify_jwt(auth)
            if why:
                self.log(401, "jwt", {"why": why})
                return self.reply(401, {"message": why})
            if path.endswith("/installation") and self.command == "GET":
                self.log(200, "jwt")
                return self.reply(200, {"id": INSTALLATION})
            if path == f"/app/installations/{INSTALLATION}/access_tokens" and self.command == "POST":
                req = json.loads(body or b"{}")
                # Long and of no fixed shape: the gateway must treat tokens as opaque.
                token = "ghs_standin_" + secrets.token_urlsafe(60)
                with LOCK:
                    TOKENS[token] = {"revoked": False, **req}
                exp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
                self.log(201, "jwt", {"request": req, "token": token})
                return self.reply(201, {"token": token, "expires_at": exp, **req})
            self.log(404, "jwt")
            return self.reply(404, {"message": "Not Found"})
        token = token_of(auth)
        with LOCK:
            t = TOKENS.get(token)
        if t is None or t["revoked"]:
            self.log(401, "bad-token")
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/installation/token" and self.command == "DELETE":
            if os.path.exists(os.path.join(DIR, "fail_delete")):
                self.log(500, "token", {"deleted": False})
                return self.reply(500, {"message": "try again"})
            with LOCK:
                t["revoked"] = True
            self.log(204, "token", {"deleted": True})
            return self.reply(204)
        if path.startswith("/git/"):
            return self.git(path[4:], body)
        parts = path.strip("/").split("/")
        if parts[0] == "repos" and len(parts) >= 3:
            repo = parts[1] + "/" + parts[2]
            if repo.split("/")[1] not in t.get("repositories", []):
                self.log(404, "token", {"why": "not in the token's repositories"})
                return self.reply(404, {"message": "Not Found"})
            if len(parts) == 3 and self.command == "GET":
                self.log(200, "token")
                return self.reply(200, {"full_name": repo, "default_branch": "main"})
        status = 200 if self.command in ("GET", "HEAD") else 201
        self.log(status, "token", {"body": body.decode(errors="replace")[:200]})
        return self.reply(status, {"ok": True, "method": self.command, "path": path})

    def git(self, path, body):
        """git smart HTTP through the real git http-backend (CGI)."""
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": os.path.join(DIR, "repos"),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "http.receivepack",
            "GIT_CONFIG_VALUE_0": "true",
            "GIT_CONFIG_KEY_1": "safe.directory",
            "GIT_CONFIG_VALUE_1": "*",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        r = subprocess.run(["/usr/lib/git-core/git-http-backend"], input=body, env=env,
                           capture_output=True)
        head, _, out = r.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode(errors="replace").split("\r\n"):
            if ":" not in line:
                continue
            k, v = line.split(":", 1)
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            else:
                headers.append((k, v.strip()))
        self.log(status, "token", {"git": True})
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(os.path.join(DIR, "port.tmp"), "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(os.path.join(DIR, "port.tmp"), os.path.join(DIR, "port"))
srv.serve_forever()
