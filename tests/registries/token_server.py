# A registry's token service, as the distribution token protocol has it: GET
# /token?service=S&scope=repository:NAME:ACTIONS with Basic credentials answers
# {"token": JWT} (ES256, the signing certificate in the header's x5c) that the real
# docker-registry checks against its rootcertbundle. Over TLS on 127.0.0.1:argv[1] (cert
# argv[2], key argv[3]); argv[4] is "user:password"; argv[5] the issuer, argv[6] the
# service; the signing certificate is written to argv[7] before "listening" is printed.
# Each request is appended to argv[8] as one JSON line (what it was sent, for the test).
import base64, http.server, json, ssl, sys, time, urllib.parse, uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID
import datetime

port, cert, key, userpass, issuer, service, signer_out, log = sys.argv[1:9]

sk = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "airlock test token signer")])
now = datetime.datetime.now(datetime.timezone.utc)
signer = (
    x509.CertificateBuilder()
    .subject_name(name)
    .issuer_name(name)
    .public_key(sk.public_key())
    .serial_number(x509.random_serial_number())
    .not_valid_before(now - datetime.timedelta(days=1))
    .not_valid_after(now + datetime.timedelta(days=2))
    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    .sign(sk, hashes.SHA256())
)
with open(signer_out, "wb") as f:
    f.write(signer.public_bytes(serialization.Encoding.PEM))
x5c = base64.b64encode(signer.public_bytes(serialization.Encoding.DER)).decode()


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def jwt(claims):
    head = {"typ": "JWT", "alg": "ES256", "x5c": [x5c]}
    msg = b64(json.dumps(head).encode()) + "." + b64(json.dumps(claims).encode())
    r, s = decode_dss_signature(sk.sign(msg.encode(), ec.ECDSA(hashes.SHA256())))
    return msg + "." + b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, code, body, extra=()):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        auth = self.headers.get("Authorization", "")
        given = ""
        if auth.startswith("Basic "):
            given = base64.b64decode(auth[6:]).decode(errors="replace")
        with open(log, "a") as f:
            f.write(json.dumps({"path": u.path, "query": q, "auth": auth.split(" ")[0]}) + "\n")
        if u.path != "/token":
            return self.answer(404, {"errors": [{"code": "NOT_FOUND"}]})
        if given != userpass:
            return self.answer(401, {"errors": [{"code": "UNAUTHORIZED"}]},
                               [("WWW-Authenticate", 'Basic realm="token"')])
        access = []
        for scope in q.get("scope", []):
            for one in scope.split(" "):
                parts = one.split(":")
                if len(parts) >= 3:
                    access.append({"type": parts[0], "name": ":".join(parts[1:-1]),
                                   "actions": parts[-1].split(",")})
        t = int(time.time())
        token = jwt({"iss": issuer, "sub": userpass.split(":")[0], "aud": q.get("service", [""])[0],
                     "exp": t + 300, "nbf": t - 10, "iat": t, "jti": str(uuid.uuid4()),
                     "access": access})
        self.answer(200, {"token": token, "access_token": token, "expires_in": 300})


srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("listening", flush=True)
srv.serve_forever()
