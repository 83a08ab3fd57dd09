//! A terminated destination: the CONNECT is answered here, TLS is served with the leaf of
//! the run's CA for that destination (its client trusts that CA through the run's bundle),
//! the TLS server name must be the CONNECT host, and each HTTP request on it is checked
//! ([`crate::policy::egress::destinations::decide_request`]: the Host header, method,
//! path), given the destination's credential header (the client's own of that name is
//! dropped), and sent on to the destination over TLS verified with the system store or
//! its `ca_file`, to an address checked like every other ([`super::dial`]). Each request
//! is its own journal record (method, host, path without the query, status, bytes, rule);
//! the credential never is, and an answer that echoes it has it withheld
//! ([`super::forward::answered`], [`super::coding`]).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, ACCEPT_ENCODING, HOST, IF_RANGE, RANGE};
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use super::forward::{Counted, RESPONSE_TIMEOUT};
use super::target::{self, Target};
use super::{dial, Egress, Journaled, Opened, Terminated, HELLO_TIMEOUT};
use crate::gateway::http::Body;
use crate::policy::egress::destinations::{decide_request, Asked, Granted};

/// Longest path kept on a record.
const MAX_PATH_CHARS: usize = 256;
/// Largest request head the client may send on a terminated connection.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// One client connection to a terminated destination.
struct Conn {
    eg: Arc<Egress>,
    term: Arc<Terminated>,
    dest: Granted,
    t: Target,
    /// The connection to the destination, reused while it stays open.
    upstream: tokio::sync::Mutex<Upstream>,
}

/// The destination's side: the connection made at CONNECT (not yet used), or a sender.
enum Upstream {
    Fresh(tokio::net::TcpStream, Option<std::net::SocketAddr>),
    Ready(SendRequest<Counted>, Option<std::net::SocketAddr>),
    None,
}

/// Answer the upgraded CONNECT: TLS with the run's leaf, then HTTP, request by request.
pub(crate) async fn serve(
    eg: Arc<Egress>,
    mut j: Journaled,
    t: Target,
    opened: Opened,
    upgrade: OnUpgrade,
    name: String,
) {
    let Opened { stream, slot, .. } = opened;
    let term = eg.plan.terminated.get(&name).cloned();
    let dest = eg
        .plan
        .grants
        .destinations
        .iter()
        .find(|g| g.name == name)
        .cloned();
    let (Some(term), Some(dest)) = (term, dest) else {
        j.closed("egress: tls", "the destination's TLS was not prepared");
        return;
    };
    let Ok(upgraded) = upgrade.await else {
        let rule = j.rec.rule.clone();
        j.closed(&rule, "the client went away before the tunnel opened");
        return;
    };
    // The server name is checked on the ClientHello, before anything is answered.
    let accept = async {
        let start = tokio_rustls::LazyConfigAcceptor::new(
            rustls::server::Acceptor::default(),
            TokioIo::new(upgraded),
        )
        .await
        .map_err(|_| "not a TLS ClientHello")?;
        let sni = start.client_hello().server_name().map(str::to_string);
        if !target::server_name_matches(&t.host, sni.as_deref()) {
            return Err("the TLS server name is not the CONNECT host");
        }
        start
            .into_stream(term.server_tls.clone())
            .await
            .map_err(|_| "no TLS handshake with the run's certificate for this destination")
    };
    let tls = match tokio::time::timeout(HELLO_TIMEOUT, accept).await {
        Ok(Ok(s)) => s,
        Ok(Err(why)) => {
            let rule = match why {
                "the TLS server name is not the CONNECT host" => "egress: tls server name",
                _ => "egress: tls",
            };
            j.closed(rule, why);
            return;
        }
        Err(_) => {
            j.closed("egress: tls", "no ClientHello within 10 s");
            return;
        }
    };
    // From here each request is a record of its own.
    j.handed_over = true;
    let addr = j.rec.addr;
    let log = j.log.clone();
    drop(j);
    let conn = Arc::new(Conn {
        eg,
        term,
        dest,
        t,
        upstream: tokio::sync::Mutex::new(Upstream::Fresh(stream, addr)),
    });
    let service = hyper::service::service_fn(move |req| {
        let conn = conn.clone();
        let log = log.clone();
        async move {
            let j = Journaled::new(req.method().as_str(), log);
            Ok::<_, std::convert::Infallible>(request(&conn, j, req).await)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(TokioIo::new(tls), service)
        .await;
    drop(slot);
}

/// One request: checked, sent on with the credential, its response streamed back and
/// counted; the record is journaled when the response body ends (or at once if refused).
async fn request(c: &Conn, mut j: Journaled, req: Request<Incoming>) -> Response<Body> {
    j.target(&c.t);
    let host = c.t.host.text();
    let path = req.uri().path().to_string();
    j.rec.path = crate::gateway::clip(&path, MAX_PATH_CHARS);
    // Origin form carries the host in Host; an absolute form in its authority.
    let named = match req.uri().authority() {
        Some(a) => Some(a.as_str().to_string()),
        None => req
            .headers()
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    };
    let asked = Asked {
        method: req.method().as_str(),
        path: &path,
        host_header: named.as_deref(),
        names_another_method: crate::gateway::headers::names_another_method(req.headers())
            || crate::gateway::headers::query_names_another_method(req.uri().query()),
    };
    let d = decide_request(&c.dest, &host, c.t.port, &asked);
    j.decided(&d);
    if !d.allow {
        return j.refuse(StatusCode::FORBIDDEN, &d.rule, &d.reason);
    }
    let (parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let Ok(uri) = pq.parse::<Uri>() else {
        return j.refuse(
            StatusCode::BAD_REQUEST,
            "egress: target",
            "the request's path is not valid",
        );
    };
    let mut headers = crate::gateway::headers::end_to_end(&parts.headers);
    let host_value = match c.t.port {
        443 => host.clone(),
        p => format!("{host}:{p}"),
    };
    let Ok(hv) = HeaderValue::from_str(&host_value) else {
        return j.refuse(
            StatusCode::BAD_REQUEST,
            "egress: target",
            "the host is not a valid Host header",
        );
    };
    headers.insert(HOST, hv);
    if let Some((name, secret)) = &c.term.auth {
        let Ok((hn, value)) = crate::gateway::auth_header(name, secret) else {
            return j.refuse(
                StatusCode::BAD_GATEWAY,
                &c.dest.rule(),
                "the destination's credential is not a valid header value",
            );
        };
        // The run's own value of that header never goes on: the host's does.
        headers.remove(&hn);
        headers.insert(hn, value);
        if !c.term.passthrough_body {
            // Only codings the gateway can decode, so the answer can be scanned.
            headers.insert(ACCEPT_ENCODING, super::coding::accepted(&headers));
            // A part of an answer could hold part of the credential, too short to know:
            // two ranges would hand it over in halves. The whole answer comes instead (a
            // server may always ignore Range).
            headers.remove(RANGE);
            headers.remove(IF_RANGE);
        }
    }
    let mut out = Request::new(Counted {
        inner: body,
        n: j.up.clone(),
        idle: None,
        _journaled: None,
    });
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = headers;
    let mut up = c.upstream.lock().await;
    if let Err(resp) = ready(c, &mut j, &mut up).await {
        return resp;
    }
    let Upstream::Ready(sender, _) = &mut *up else {
        return j.refuse(
            StatusCode::BAD_GATEWAY,
            "egress: unreachable",
            "the connection failed",
        );
    };
    let sent = tokio::time::timeout(RESPONSE_TIMEOUT, sender.send_request(out)).await;
    drop(up);
    // With a credential added, the answer must not hand it back.
    let checked = c.term.auth.as_ref().map(|_| super::forward::Checked {
        secrets: &c.term.secrets,
        passthrough_body: c.term.passthrough_body,
    });
    super::forward::answered(j, sent, checked)
}

/// Make `up` a sender ready for the next request: the one held if it still is, else a new
/// connection (dialled and checked again, TLS verified with the destination's roots).
async fn ready(c: &Conn, j: &mut Journaled, up: &mut Upstream) -> Result<(), Response<Body>> {
    if let Upstream::Ready(s, addr) = up {
        if s.ready().await.is_ok() {
            j.rec.addr = *addr;
            return Ok(());
        }
    }
    let (stream, addr) = match std::mem::replace(up, Upstream::None) {
        Upstream::Fresh(s, a) => (s, a),
        _ => {
            let s = dial(&c.eg, j, &c.t).await?;
            let a = j.rec.addr;
            (s, a)
        }
    };
    j.rec.addr = addr;
    let name = match &c.t.host {
        target::Host::Name(n) => rustls::pki_types::ServerName::try_from(n.clone()).ok(),
        target::Host::Ip(ip) => Some(rustls::pki_types::ServerName::from(*ip)),
    };
    let Some(name) = name else {
        return Err(j.refuse(
            StatusCode::BAD_GATEWAY,
            "egress: tls",
            "the host is not a TLS server name",
        ));
    };
    let connector = tokio_rustls::TlsConnector::from(c.term.client_tls.clone());
    let tls = match tokio::time::timeout(HELLO_TIMEOUT, connector.connect(name, stream)).await {
        Ok(Ok(s)) => s,
        _ => {
            return Err(j.refuse(
                StatusCode::BAD_GATEWAY,
                "egress: tls",
                "the destination's TLS could not be verified (the system store, or the destination's ca_file)",
            ))
        }
    };
    let (s, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tls)).await {
        Ok(x) => x,
        Err(_) => {
            return Err(j.refuse(
                StatusCode::BAD_GATEWAY,
                "egress: unreachable",
                "the connection failed",
            ))
        }
    };
    c.eg.scope.spawn(async move {
        let _ = conn.await;
    });
    *up = Upstream::Ready(s, addr);
    Ok(())
}
