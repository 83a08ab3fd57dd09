"""An OTLP/HTTP trace receiver for tests/metrics.rs: decodes each POST /v1/traces body with
OpenTelemetry's own protobuf classes (the opentelemetry-proto package, installed by
scripts/install-deps.sh under /usr/local/lib/airlock-test/otel-py) and appends every span,
as one JSON line, to OUT.

    python3 otlp_receiver.py PORT OUT

Prints "listening" once it accepts requests.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, "/usr/local/lib/airlock-test/otel-py")
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402

PORT, OUT = int(sys.argv[1]), sys.argv[2]


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(400)
            self.end_headers()
            return
        req = trace_service_pb2.ExportTraceServiceRequest()
        req.ParseFromString(body)
        lines = []
        for rs in req.resource_spans:
            resource = {a.key: value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append(json.dumps({
                        "name": s.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "kind": s.kind,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": {a.key: value(a.value) for a in s.attributes},
                        "service": resource.get("service.name"),
                        "scope": ss.scope.name,
                    }))
        with open(OUT, "a") as f:
            for l in lines:
                f.write(l + "\n")
        out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print("listening", flush=True)
server.serve_forever()
