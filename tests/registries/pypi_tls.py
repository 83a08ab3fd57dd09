# The real pypiserver (installed by scripts/install-deps.sh) serving the packages in argv[4]
# over TLS on argv[1]:443 (cert argv[2], key argv[3]). Prints "ready".
import pathlib, socketserver, ssl, sys, wsgiref.simple_server

sys.path.insert(0, "/usr/local/lib/airlock-test/pypiserver")
import pypiserver  # noqa: E402

pub, cert, key, root = sys.argv[1:5]
app = pypiserver.app(roots=[pathlib.Path(root)])


class Server(socketserver.ThreadingMixIn, wsgiref.simple_server.WSGIServer):
    daemon_threads = True


class Quiet(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *a):
        pass


srv = wsgiref.simple_server.make_server(pub, 443, app, server_class=Server, handler_class=Quiet)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
