# Against a fresh verdaccio at argv[1]:443 answering for the host argv[2]: add a user, publish
# tinypkg 1.0.0 with its token, and see what an anonymous read gets. Prints JSON:
# {"token": ..., "anonymous_status": ...}.
import base64, hashlib, http.client, io, json, ssl, sys, tarfile

addr, host = sys.argv[1:3]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE


def call(method, path, body=None, token=None):
    c = http.client.HTTPSConnection(addr, 443, context=ctx, timeout=30)
    h = {"Host": host, "Content-Type": "application/json", "Accept": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + token
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    return r.status, data


status, data = call("PUT", "/-/user/org.couchdb.user:tester",
                    {"name": "tester", "password": "tester-password-1", "type": "user", "roles": []})
assert status == 201, (status, data)
token = json.loads(data)["token"]

pkg = {"name": "tinypkg", "version": "1.0.0", "main": "index.js"}
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as t:
    for fn, text in [("package/package.json", json.dumps(pkg)), ("package/index.js", "module.exports = 7;\n")]:
        b = text.encode()
        info = tarfile.TarInfo(fn)
        info.size, info.mode = len(b), 0o644
        t.addfile(info, io.BytesIO(b))
tgz = buf.getvalue()
integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
doc = {
    "_id": "tinypkg", "name": "tinypkg", "dist-tags": {"latest": "1.0.0"},
    "versions": {"1.0.0": dict(pkg, _id="tinypkg@1.0.0", dist={
        "tarball": f"https://{host}/tinypkg/-/tinypkg-1.0.0.tgz",
        "shasum": hashlib.sha1(tgz).hexdigest(), "integrity": integrity})},
    "_attachments": {"tinypkg-1.0.0.tgz": {
        "content_type": "application/octet-stream",
        "data": base64.b64encode(tgz).decode(), "length": len(tgz)}},
}
status, data = call("PUT", "/tinypkg", doc, token)
assert status in (200, 201), (status, data)
anon, _ = call("GET", "/tinypkg")
print(json.dumps({"token": token, "anonymous_status": anon}))
