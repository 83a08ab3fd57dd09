# A static file server over TLS on argv[1]:443 (cert argv[2], key argv[3]) serving argv[4],
# HTTP/1.1 with keep-alive, as a sparse registry's CDN would. Prints "ready".
import http.server, ssl, sys

pub, cert, key, root = sys.argv[1:5]


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer((pub, 443), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
