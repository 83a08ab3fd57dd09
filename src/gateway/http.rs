//! The gateway's HTTP/1.1 layer: routing by path, body and header limits, the Origin check
//! (a page in a browser inside the run must not drive the gateway), and the MCP transport's
//! methods (POST a message, GET a stream: not offered, DELETE a session).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::mcp::jsonrpc::{Headers, Reply};
use super::{egress, mcp};
use super::{full, GwBody, RunGateway};

/// Largest message body accepted.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// Connections one run's gateway serves at once. More wait in the listener's backlog: a
/// run cannot spend airlockd's descriptors or memory (each connection may hold a body of
/// [`MAX_BODY_BYTES`]) by opening connections.
pub const MAX_CONNECTIONS: usize = 16;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// Accept and serve connections until `stop` fires (or its sender is dropped).
pub async fn serve(
    listener: tokio::net::TcpListener,
    gw: Arc<RunGateway>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    // At the run's end, the upstream sessions are ended too (bounded: the run is over).
    // Boxed, made only then: inline, that future (3 kB) sized this task, which waits on
    // `accept` for the whole life of every run.
    let end = |gw: Arc<RunGateway>| {
        Box::pin(async move {
            let all = async {
                for c in gw.connectors.values() {
                    c.end_all().await;
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), all).await;
        })
    };
    loop {
        let slot = tokio::select! {
            _ = &mut stop => return end(gw).await,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            _ = &mut stop => return end(gw).await,
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                // Out of fds or similar: wait a moment rather than spin.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let gw2 = gw.clone();
        gw.scope.spawn(async move {
            let gw = gw2;
            let service = hyper::service::service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(handle(&gw, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .max_buf_size(64 << 10)
                .serve_connection(TokioIo::new(stream), service)
                // CONNECT tunnels (egress) take the connection over.
                .with_upgrades()
                .await;
            drop(slot);
        });
    }
}

/// A response body: whole, or streamed (a forwarded response, the provider route).
pub type Body = GwBody;

pub fn empty() -> Body {
    full(Bytes::new())
}

pub fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(full(Bytes::from(text.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn reply(r: Reply) -> Response<Body> {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = match r.body {
        Some(b) => {
            let mut resp = Response::new(full(Bytes::from(b.to_string())));
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp
        }
        None => Response::new(full(Bytes::new())),
    };
    *resp.status_mut() = status;
    if let Some(s) = r.session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        resp.headers_mut().insert(SESSION_HEADER, s);
    }
    resp
}

/// Only the run's own gateway origin (or none, as non-browser clients send).
fn origin_ok(req: &Request<Incoming>) -> bool {
    match req.headers().get(ORIGIN).map(|v| v.to_str()) {
        None => true,
        Some(Ok(o)) => {
            let own = crate::sandbox::env::gateway_url();
            o == own || o == own.replace("127.0.0.1", "localhost")
        }
        Some(Err(_)) => false,
    }
}

fn header<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn handle(gw: &RunGateway, req: Request<Incoming>) -> Response<Body> {
    // A CONNECT to a GitHub host is answered by the GitHub route, not tunnelled.
    if let Some(gh) = &gw.github {
        if let Some(host) = super::github::intercepts(&req) {
            return super::github::intercept(gh.clone(), host, req);
        }
    }
    // Proxy requests first: a browser's Origin there is the page's, not the gateway's.
    if egress::is_proxy_request(&req) {
        return egress::handle(&gw.egress, &gw.log, req).await;
    }
    if !origin_ok(&req) {
        return plain(StatusCode::FORBIDDEN, "Origin: not the run's gateway\n");
    }
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix(super::provider::ROUTE) {
        let (name, rest) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        return match &gw.provider {
            Some(p) if p.plan.name == name => {
                super::provider::handle(p, &gw.plan.leases, gw.log.clone(), rest, req).await
            }
            _ => plain(
                StatusCode::NOT_FOUND,
                "no such provider on the run's gateway (its role's run.provider, configured in airlockd's providers)\n",
            ),
        };
    }
    let Some(server) = path.strip_prefix("/mcp/") else {
        return plain(
            StatusCode::NOT_FOUND,
            "no such endpoint on the run's gateway\n",
        );
    };
    if server == crate::policy::agent_config::BASH_SERVER {
        return endpoint(gw, None, req).await;
    }
    if let Some(c) = gw.connectors.get(server) {
        // A connector whose credential is leased works only while the lease does (a fire
        // revokes it at once). One without a credential has no lease.
        use crate::credentials::leases::{LeaseKind, TokenRefusal};
        let now = crate::clock::now_ms();
        if let Err(why @ (TokenRefusal::Revoked | TokenRefusal::Expired)) =
            gw.plan.leases.usable(LeaseKind::Connector, server, now)
        {
            return reply(Reply::refused(
                403,
                -32603,
                &format!("this connector's credential lease is over: {why}"),
            ));
        }
        return endpoint(gw, Some(c), req).await;
    }
    if gw.plan.connectors.iter().any(|c| c == server) {
        return reply(Reply::refused(
            503,
            -32603,
            "this host configures no upstream for this connector (airlockd's mcp_connectors)",
        ));
    }
    plain(
        StatusCode::NOT_FOUND,
        "no such MCP server on the run's gateway\n",
    )
}

/// One MCP endpoint: Airlock's own server (`None`) or a connector's.
async fn endpoint(
    gw: &RunGateway,
    connector: Option<&mcp::proxy::Connector>,
    req: Request<Incoming>,
) -> Response<Body> {
    match *req.method() {
        Method::POST => {
            let session = header(&req, SESSION_HEADER).map(str::to_string);
            let version = header(&req, VERSION_HEADER).map(str::to_string);
            let method = header(&req, "mcp-method").map(str::to_string);
            let name = header(&req, "mcp-name").map(str::to_string);
            let json = header(&req, CONTENT_TYPE.as_str()).is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|t| t.trim() == "application/json")
            });
            if !json {
                return plain(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "Content-Type: application/json\n",
                );
            }
            let body = match Limited::new(req.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return plain(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "the message is larger than 4 MiB\n",
                    )
                }
            };
            let h = Headers {
                session: session.as_deref(),
                version: version.as_deref(),
                method: method.as_deref(),
                name: name.as_deref(),
            };
            reply(match connector {
                None => mcp::server::post(gw, h, &body).await,
                Some(c) => mcp::proxy::post(gw, c, h, &body).await,
            })
        }
        Method::DELETE => {
            let Some(s) = header(&req, SESSION_HEADER) else {
                return plain(StatusCode::BAD_REQUEST, "Mcp-Session-Id: required\n");
            };
            let ended = match connector {
                None => gw.sessions.close(s),
                Some(c) => c.end(s).await,
            };
            if ended {
                plain(StatusCode::OK, "")
            } else {
                plain(StatusCode::NOT_FOUND, "no such session\n")
            }
        }
        _ => {
            // No server-initiated stream: Airlock's server sends nothing unasked.
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST, DELETE"));
            r
        }
    }
}
