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
(default_branch), POST and GET /repos/O/R/pulls (pull requests, kept in DIR/pulls.json),
GET /repos/O/R/actions/workflows/FILE/runs (a workflow's runs, from DIR/actions.json),
GET /repos/O/R/airlock-echo (a hostile answer: the Authorization it was sent, in a header
and in its body), and any other /repos/... request, answered 200/201 with what it was (a
write's body logged as it arrived, with its Content-Encoding).

/mcp is GitHub's MCP server as far as the tests and the demo use it (streamable HTTP, JSON
answers, an installation token as the bearer): create_branch, push_files (a real commit in
the bare repository), create_pull_request, get_file_contents, list_pull_requests, and a few
tools that only answer (get_issue, add_issue_comment, create_issue, fork_repository). Each
tools/call is logged to DIR/mcp_calls.jsonl with its name, arguments and Authorization;
while DIR/hold_mcp exists, a tools/call is held after it arrived (DIR/mcp_arrived says
so), at most 30 s.
"""

import base64
import json
import urllib.parse
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standin_graphql  # noqa: E402

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


def git_bare(repo, *args, stdin=None, env=None):
    bare = os.path.join(DIR, "repos", repo + ".git")
    r = subprocess.run(["git", "-c", "safe.directory=*", "-C", bare, *args], input=stdin,
                       capture_output=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise ValueError("git %s: %s" % (args[0], r.stderr.decode(errors="replace").strip()))
    return r.stdout.decode().strip()


def open_pull(repo, a):
    """A pull request from branch head into base, both existing, kept in DIR/pulls.json."""
    for b in (a["head"], a["base"]):
        git_bare(repo, "rev-parse", "--verify", "refs/heads/" + b)
    path = os.path.join(DIR, "pulls.json")
    with LOCK:
        pulls = json.load(open(path)) if os.path.exists(path) else []
        pr = {"number": len(pulls) + 1, "repo": repo, "title": a["title"], "head": a["head"],
              "base": a["base"], "body": a.get("body", ""), "state": "open",
              "html_url": "https://github.com/%s/pull/%d" % (repo, len(pulls) + 1)}
        pulls.append(pr)
        with open(path + ".tmp", "w") as f:
            json.dump(pulls, f, indent=1)
        os.rename(path + ".tmp", path)
    return pr


def pulls_of(repo):
    path = os.path.join(DIR, "pulls.json")
    with LOCK:
        pulls = json.load(open(path)) if os.path.exists(path) else []
    return [p for p in pulls if p["repo"] == repo]


def push_files(repo, a):
    """One commit of the files onto an existing branch, made with git's plumbing."""
    ref = "refs/heads/" + a["branch"]
    parent = git_bare(repo, "rev-parse", "--verify", ref)
    with tempfile.TemporaryDirectory() as d:
        env = {"GIT_INDEX_FILE": os.path.join(d, "index"), "GIT_AUTHOR_NAME": "airlock-app[bot]",
               "GIT_AUTHOR_EMAIL": "bot@example.invalid", "GIT_COMMITTER_NAME": "GitHub",
               "GIT_COMMITTER_EMAIL": "noreply@github.com"}
        git_bare(repo, "read-tree", parent, env=env)
        for f in a["files"]:
            blob = git_bare(repo, "hash-object", "-w", "--stdin", stdin=f["content"].encode())
            git_bare(repo, "update-index", "--add", "--cacheinfo", "100644,%s,%s" % (blob, f["path"]),
                     env=env)
        tree = git_bare(repo, "write-tree", env=env)
        commit = git_bare(repo, "commit-tree", tree, "-p", parent, "-m", a["message"], env=env)
    git_bare(repo, "update-ref", ref, commit, parent)
    return {"ref": ref, "object": {"sha": commit}}


def head_of(repo, branch):
    """The sha of a branch in a bare repository here, or None."""
    try:
        return git_bare(repo, "rev-parse", "--verify", "refs/heads/" + branch)
    except (ValueError, OSError):
        return None


GRAPHQL = standin_graphql.State(DIR, head_of)


def mcp_tool(repo, name, a):
    """What one of GitHub's MCP tools does here: its answer as text."""
    if name == "create_branch":
        sha = git_bare(repo, "rev-parse", "--verify", "refs/heads/" + a.get("from_branch", "main"))
        git_bare(repo, "update-ref", "refs/heads/" + a["branch"], sha, "0" * 40)
        return {"ref": "refs/heads/" + a["branch"], "object": {"sha": sha}}
    if name == "push_files":
        return push_files(repo, a)
    if name == "create_pull_request":
        return open_pull(repo, a)
    if name == "list_pull_requests":
        return pulls_of(repo)
    if name == "get_file_contents":
        return git_bare(repo, "show", "%s:%s" % (a.get("ref", "main"), a["path"]))
    return "done " + name


MCP_TOOLS = {
    "create_branch": ["owner", "repo", "branch"],
    "push_files": ["owner", "repo", "branch", "files", "message"],
    "create_pull_request": ["owner", "repo", "title", "head", "base"],
    "list_pull_requests": ["owner", "repo"],
    "get_file_contents": ["owner", "repo", "path"],
    "get_issue": ["owner", "repo", "issue_number"],
    "add_issue_comment": ["owner", "repo", "issue_number", "body"],
    "create_issue": ["owner", "repo", "title"],
    "fork_repository": ["owner", "repo"],
    "update_issue": ["owner", "repo", "issue_number"],
}


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
        if self.path.startswith("http://"):
            # Proxy form (a client sent here as its HTTP proxy, e.g. `gh` with
            # GH_HOST=github.localhost, to read what it sends): the path alone.
            self.path = "/" + self.path.split("/", 3)[3] if self.path.count("/") >= 3 else "/"
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
        if path == "/mcp":
            return self.mcp(t, body)
        if path == "/graphql" and self.command == "POST":
            out, seen = standin_graphql.execute(GRAPHQL, t.get("repositories", []), body)
            status = 400 if "message" in out else 200
            self.log(status, "token", {"graphql": seen, "body": body.decode(errors="replace")[:2000]})
            return self.reply(status, out)
        parts = path.strip("/").split("/")
        if parts[0] == "repos" and len(parts) >= 3:
            repo = parts[1] + "/" + parts[2]
            if repo.split("/")[1] not in t.get("repositories", []):
                self.log(404, "token", {"why": "not in the token's repositories"})
                return self.reply(404, {"message": "Not Found"})
            if len(parts) == 3 and self.command == "GET":
                self.log(200, "token")
                r = GRAPHQL.repos.get(repo)
                return self.reply(200, {"full_name": repo, "default_branch": "main",
                                        "node_id": r["id"] if r else None})
            if parts[3:] == ["pulls"] and self.command == "POST":
                try:
                    pr = open_pull(repo, json.loads(body or b"{}"))
                except (ValueError, KeyError) as e:
                    self.log(422, "token")
                    return self.reply(422, {"message": "Validation Failed: %s" % e})
                a = json.loads(body or b"{}")
                # A test's own setup may open one as a human (what a person does on GitHub).
                author = standin_graphql.BOT
                if a.get("standin_author"):
                    author = GRAPHQL.user(a["standin_author"])
                with standin_graphql.LOCK:
                    g = GRAPHQL.add_pull(GRAPHQL.repo(repo), {
                        "title": pr["title"], "body": pr["body"], "headRefName": pr["head"],
                        "baseRefName": pr["base"]}, author)
                    # A person's pull request from a fork since deleted: GitHub answers its
                    # head's repo as null.
                    if a.get("standin_fork_deleted"):
                        g["headRepoDeleted"] = True
                    GRAPHQL.save()
                pr = {**pr, "number": g["number"], "node_id": g["id"],
                      "html_url": "https://github.com/%s/pull/%d" % (repo, g["number"])}
                self.log(201, "token", {"pull": pr["number"]})
                return self.reply(201, pr)
            if parts[3:] == ["pulls"] and self.command == "GET":
                self.log(200, "token")
                return self.reply(200, pulls_of(repo))
        if parts[0] == "repos" and len(parts) == 7 and parts[3:5] == ["actions", "workflows"] \
                and parts[6] == "runs" and self.command == "GET":
            # A workflow's runs, newest first, from DIR/actions.json ({"O/R/FILE": [runs]}):
            # what GitHub's Actions did meanwhile; a workflow it does not name is a 404.
            extra = os.path.join(DIR, "actions.json")
            runs = json.load(open(extra)) if os.path.exists(extra) else {}
            key = "%s/%s/%s" % (parts[1], parts[2], parts[5])
            if key not in runs:
                self.log(404, "token")
                return self.reply(404, {"message": "Not Found"})
            self.log(200, "token")
            return self.reply(200, {"total_count": len(runs[key]), "workflow_runs": runs[key]})
        if parts[0] == "repos" and len(parts) == 5 and parts[3] == "issues" and parts[4].isdigit() \
                and self.command in ("GET", "PATCH"):
            return self.issue(parts[1] + "/" + parts[2], int(parts[4]), body)
        if parts[0] == "repos" and len(parts) in (5, 6) and parts[3] == "pulls" \
                and self.command == "GET" and parts[4].isdigit():
            return self.pull_or_reviews(parts[1] + "/" + parts[2], int(parts[4]), len(parts) == 6)
        if path.endswith("/airlock-echo"):
            self.log(200, "token", {"echo": True})
            data = json.dumps({"you_sent": auth}).encode()
            self.send_response(200)
            self.send_header("X-Echo", auth)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        status = 200 if self.command in ("GET", "HEAD") else 201
        self.log(status, "token", {"body": body.decode(errors="replace")[:200],
                                   "content_encoding": self.headers.get("Content-Encoding")})
        return self.reply(status, {"ok": True, "method": self.command, "path": path})

    def issue(self, repo, number, body):
        """GET or PATCH /repos/O/R/issues/N, as GitHub answers it: every pull request is an
        issue too (its issue carries `pull_request`), and a PATCH edits either's title,
        body and state."""
        with standin_graphql.LOCK:
            r = GRAPHQL.repos.get(repo)
            i = next((i for i in (r["items"] if r else []) if i["number"] == number), None)
            if i is None:
                self.log(404, "token")
                return self.reply(404, {"message": "Not Found"})
            if self.command == "PATCH":
                a = json.loads(body or b"{}")
                for k in ("title", "body"):
                    if a.get(k) is not None:
                        i[k] = a[k]
                if a.get("state") in ("open", "closed"):
                    i["state"] = a["state"].upper()
                GRAPHQL.save()
            out = {"number": number, "node_id": i["id"], "title": i["title"],
                   "state": i["state"].lower()}
            if i["__typename"] == "PullRequest":
                out["pull_request"] = {"url": "https://api.github.com/repos/%s/pulls/%d" % (repo, number)}
        self.log(200, "token", {"body": body.decode(errors="replace")[:200]})
        return self.reply(200, out)

    def pull_or_reviews(self, repo, number, reviews):
        """GET /repos/O/R/pulls/N (head sha, author) or .../reviews: the pull requests of
        the GraphQL state; reviews made through it, then those a test put in
        DIR/reviews.json ({"O/R#N": [{"login", "type", "state", "commit_id"}]}: what people
        did on GitHub meanwhile). With DIR/slow_reviews, a slow GitHub: the reviews come
        after the seconds it holds."""
        held = os.path.join(DIR, "slow_reviews")
        if reviews and os.path.exists(held):
            time.sleep(float(open(held).read() or "0"))
        with standin_graphql.LOCK:
            r = GRAPHQL.repos.get(repo)
            p = next((i for i in (r["items"] if r else []) if i["number"] == number
                      and i["__typename"] == "PullRequest"), None)
            if p is None:
                self.log(404, "token")
                return self.reply(404, {"message": "Not Found"})
            head = head_of(repo, p["headRefName"]) or "0" * 40
            if not reviews:
                self.log(200, "token")
                a = p["author"]
                return self.reply(200, {"number": number, "state": p["state"].lower(),
                                        "merged": p["state"] == "MERGED", "node_id": p["id"],
                                        "head": {"ref": p["headRefName"], "sha": head,
                                                 "repo": None if p.get("headRepoDeleted")
                                                 else {"full_name": repo}},
                                        "user": {"login": a["login"], "type": a["__typename"]}})
            out = []
            for rid in p.get("reviews", []):
                rv = GRAPHQL.nodes[rid]
                out.append({"user": {"login": rv["author"]["login"],
                                     "type": rv["author"]["__typename"]},
                            "state": rv["state"], "commit_id": rv["oid"]})
        extra = os.path.join(DIR, "reviews.json")
        if os.path.exists(extra):
            out += json.load(open(extra)).get("%s#%d" % (repo, number), [])
        # Paged as GitHub pages them: per_page (30 unless asked, at most 100), page from 1.
        q = urllib.parse.parse_qs(self.path.split("?", 1)[1] if "?" in self.path else "")
        per = min(int(q.get("per_page", ["30"])[0]), 100)
        page = int(q.get("page", ["1"])[0])
        self.log(200, "token")
        return self.reply(200, out[(page - 1) * per:page * per])

    def mcp(self, t, body):
        """GitHub's MCP server (streamable HTTP, JSON answers), for token `t`."""
        if self.command == "DELETE":
            self.log(200, "token", {"mcp": "end"})
            return self.reply(200)
        msg = json.loads(body or b"{}")
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            self.log(202, "token", {"mcp": method})
            return self.reply(202)
        ok = lambda result: {"jsonrpc": "2.0", "id": mid, "result": result}
        self.log(200, "token", {"mcp": method})
        if method == "initialize":
            self.send_response(200)
            data = json.dumps(ok({
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "standin-github-mcp", "version": "1"}})).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Mcp-Session-Id", "s-" + secrets.token_hex(8))
            self.end_headers()
            return self.wfile.write(data)
        if method == "tools/list":
            return self.reply(200, ok({"tools": [
                {"name": n, "description": "GitHub: " + n.replace("_", " "),
                 "inputSchema": {"type": "object", "required": req,
                                 "properties": {k: {} for k in req}}}
                for n, req in MCP_TOOLS.items()]}))
        if method != "tools/call":
            return self.reply(200, {"jsonrpc": "2.0", "id": mid,
                                    "error": {"code": -32601, "message": "no such method"}})
        p = msg.get("params") or {}
        name, a = p.get("name"), p.get("arguments") or {}
        with LOCK:
            with open(os.path.join(DIR, "mcp_calls.jsonl"), "a") as f:
                f.write(json.dumps({"name": name, "arguments": a,
                                    "auth": self.headers.get("Authorization", "")}) + "\n")
        held = os.path.join(DIR, "hold_mcp")
        if os.path.exists(held):
            # A tools/call in flight, for the chaos tests: held after it arrived.
            open(os.path.join(DIR, "mcp_arrived"), "w").close()
            end = time.time() + 30
            while os.path.exists(held) and time.time() < end:
                time.sleep(0.05)
        repo = "%s/%s" % (a.get("owner"), a.get("repo"))
        try:
            if name not in MCP_TOOLS:
                raise ValueError("unknown tool " + str(name))
            if a.get("repo") not in t.get("repositories", []):
                raise ValueError("Not Found: the token does not reach " + repo)
            out = mcp_tool(repo, name, a)
            text, err = out if isinstance(out, str) else json.dumps(out), False
        except (ValueError, KeyError, TypeError) as e:
            text, err = "failed: %s" % e, True
        return self.reply(200, ok({"content": [{"type": "text", "text": text}], "isError": err}))

    def git(self, path, body):
        """git smart HTTP through the real git http-backend (CGI). While DIR/hold_push
        exists, a push (receive-pack POST) is held after it arrived (DIR/push_arrived says
        so), at most 30 s: a push in flight, for the chaos tests."""
        if path.endswith("/git-receive-pack") and self.command == "POST":
            held = os.path.join(DIR, "hold_push")
            if os.path.exists(held):
                open(os.path.join(DIR, "push_arrived"), "w").close()
                end = time.time() + 30
                while os.path.exists(held) and time.time() < end:
                    time.sleep(0.05)
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
