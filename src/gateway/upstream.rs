//! The gateway's client of an MCP connector's upstream (streamable HTTP, over TLS or, to
//! this host only, plain): one POST per
//! message, the answer as JSON or as an SSE stream read until the response to that message
//! comes. Requests the upstream makes of its client in that stream (sampling, elicitation,
//! roots) are answered here, refused or empty: they never reach the agent or its model.
//! The connector's credential goes in one header, to this upstream only.
//!
//! A stream cut before its answer is resumed where the upstream offers it (event ids on
//! its events): a GET with `Last-Event-ID`, the session and the same credential, after the
//! upstream's `retry` hint (at most [`MAX_RETRY_WAIT`]), at most [`MAX_RESUMES`] times in a
//! row without an event in between. A cut stream without ids fails the call, saying so.
//!
//! What an upstream can make the gateway keep is bounded: [`MAX_ANSWER_BYTES`] of an
//! answer, [`strict_json::MAX_ANSWER_VALUES`] values in it, [`MAX_SERVER_REQUESTS`]
//! requests of its own while answering one, each method name kept for the journal cut to
//! [`MAX_METHOD_BYTES`]; past a bound the exchange fails with an error saying which.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::strict_json;

/// Largest answer read from an upstream, JSON or a whole SSE stream.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;
/// How long one exchange with the upstream may take.
pub const TIMEOUT: Duration = Duration::from_secs(300);
/// Most requests an upstream may make of its client (each answered, and named in the
/// journal) while answering one request.
pub const MAX_SERVER_REQUESTS: usize = 16;
/// Longest method name of an upstream's request that the journal names as sent.
pub const MAX_METHOD_BYTES: usize = 64;
/// Most resumptions of a cut answer stream in a row that bring no new event.
pub const MAX_RESUMES: u32 = 3;
/// Longest wait before resuming a cut stream, whatever the upstream's `retry` says.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);
/// The wait before resuming when the upstream gave no `retry` hint.
const DEFAULT_RETRY_WAIT: Duration = Duration::from_millis(500);

/// How the journal names an upstream's request: its method, or its length when long.
pub fn shown_method(m: Option<&str>) -> String {
    match m {
        Some(m) if m.len() <= MAX_METHOD_BYTES => m.to_string(),
        Some(m) => format!("(a method name of {} bytes)", m.len()),
        None => "(no method name)".to_string(),
    }
}

/// An `http://` or `https://host[:port]/path` URL, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// TLS (`https://`), else plain http (to this host only, see [`HttpUrl::is_loopback`]).
    pub https: bool,
    pub authority: String,
    pub path: String,
}

/// Whether `u` carries a user or password (`scheme://user[:pw]@host`): a config error, named
/// without the value (it is likely a secret).
pub fn has_userinfo(u: &str) -> bool {
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .unwrap_or(u);
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    authority.contains('@')
}

/// Parse an http or https URL: a host name or IPv4 address (or `[v6]`), an optional port,
/// a path; no user info, query or fragment.
pub fn parse_http_url(u: &str) -> Option<HttpUrl> {
    let (https, rest) = match u.strip_prefix("https://") {
        Some(r) => (true, r),
        None => (false, u.strip_prefix("http://")?),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host_ok = |h: &str| {
        !h.is_empty()
            && (h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
                || (h.starts_with('[')
                    && h.ends_with(']')
                    && h[1..h.len() - 1].parse::<std::net::Ipv6Addr>().is_ok()))
    };
    let ok_authority = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            (host_ok(h) && p.parse::<u16>().is_ok_and(|p| p > 0)) || host_ok(authority)
        }
        _ => host_ok(authority),
    };
    let path_ok = path
        .bytes()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'\\'));
    (ok_authority && path_ok).then(|| HttpUrl {
        https,
        authority: authority.to_string(),
        path: path.to_string(),
    })
}

impl HttpUrl {
    /// The host, without port or IPv6 brackets.
    pub fn host(&self) -> &str {
        let host = match self.authority.rsplit_once(':') {
            Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
            _ => self.authority.as_str(),
        };
        host.trim_start_matches('[').trim_end_matches(']')
    }

    /// `https://authority` or `http://authority`.
    pub fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }

    /// The whole URL again (origin and path).
    pub fn url(&self) -> String {
        format!("{}{}", self.origin(), self.path)
    }

    /// Whether the host is this machine's loopback (127.0.0.0/8, ::1, localhost): plain
    /// http carries a connector's credential in clear, so it goes nowhere else.
    pub fn is_loopback(&self) -> bool {
        let host = self.host();
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the connector's upstream could not be reached")]
    Unreachable,
    #[error("the connector's upstream did not answer in time")]
    Timeout,
    #[error("the connector's upstream answered HTTP {0}")]
    Status(u16),
    /// A redirect could carry the credential elsewhere: never followed.
    #[error("the connector's upstream answered a redirect (HTTP {0}); the gateway follows none")]
    Redirected(u16),
    /// The connector's OAuth client could not get a token, or a fresh one was refused.
    #[error("{0}")]
    Authorization(String),
    #[error("the connector's upstream's TLS certificate was refused (not valid for its host name, or not from a CA this host trusts: the system store or the connector's ca_file)")]
    Untrusted,
    #[error("the connector's upstream sent an answer that is not valid MCP")]
    Malformed,
    #[error("the connector's upstream sent more than 16 MiB")]
    TooLarge,
    #[error("the connector's upstream sent an answer of more than 262144 JSON values")]
    TooManyValues,
    #[error(
        "the connector's upstream made more than 16 requests of its client while answering one"
    )]
    TooManyRequests,
    #[error("the connector has too many requests in flight")]
    Busy,
    #[error("the connector's upstream ended its answer stream before the answer and offered no event id to resume it by")]
    Cut,
    #[error("the connector's upstream cut its answer stream and refused to resume it (HTTP {0})")]
    ResumeRefused(u16),
    #[error("the connector's upstream cut its answer stream 3 times in a row without sending an event; the gateway gave up")]
    CutTooOften,
}

impl UpstreamError {
    /// The error for an answer that did not parse.
    pub fn of_answer(e: strict_json::StrictError) -> UpstreamError {
        match e {
            strict_json::StrictError::TooMany => UpstreamError::TooManyValues,
            _ => UpstreamError::Malformed,
        }
    }
}

/// What came back for one POST.
#[derive(Debug, Default)]
pub struct Exchange {
    pub status: u16,
    /// `Mcp-Session-Id` the upstream set.
    pub session: Option<String>,
    /// The response to the message, when it was a request.
    pub response: Option<Value>,
    /// Methods of the requests the upstream made of its client meanwhile (answered here).
    pub asked: Vec<String>,
}

/// The connection pool to one upstream: plain (loopback) or TLS only, so an https URL is
/// never reached in clear.
enum Conn {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl Conn {
    async fn request(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, UpstreamError> {
        let r = match self {
            Conn::Plain(c) => c.request(req).await,
            Conn::Tls(c) => c.request(req).await,
        };
        r.map_err(|e| {
            if tls_refused(&e) {
                UpstreamError::Untrusted
            } else {
                UpstreamError::Unreachable
            }
        })
    }
}

/// Whether a failed request failed on the upstream's certificate (rustls said so).
fn tls_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(rustls::Error::InvalidCertificate(_)) = err.downcast_ref::<rustls::Error>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if tls_refused(inner) {
                    return true;
                }
            }
        }
        cur = err.source();
    }
    false
}

pub struct HttpUpstream {
    conn: Conn,
    url: HttpUrl,
    auth: Option<(HeaderName, HeaderValue)>,
    /// An OAuth connector's shared access token (then `auth` is `None`).
    oauth: Option<std::sync::Arc<super::oauth::TokenSource>>,
}

impl HttpUpstream {
    /// `auth`: the header carrying the connector's credential, if it has one. `tls`: how an
    /// `https` upstream is verified (required for one; its connections keep alive in the
    /// pool, so a run's calls share them).
    pub fn new(
        url: HttpUrl,
        auth: Option<(HeaderName, HeaderValue)>,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
        oauth: Option<std::sync::Arc<super::oauth::TokenSource>>,
    ) -> std::io::Result<HttpUpstream> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        let conn = if url.https {
            let tls = tls.ok_or_else(|| {
                std::io::Error::other("an https upstream needs its TLS configuration")
            })?;
            http.enforce_http(false);
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config((*tls).clone())
                .https_only()
                .enable_http1()
                // Offered by ALPN: a server that takes HTTP/2 gets one multiplexed
                // connection for the run's calls.
                .enable_http2()
                .wrap_connector(http);
            Conn::Tls(Client::builder(TokioExecutor::new()).build(https))
        } else {
            Conn::Plain(Client::builder(TokioExecutor::new()).build(http))
        };
        Ok(HttpUpstream {
            conn,
            url,
            auth,
            oauth,
        })
    }

    /// The OAuth tokens this upstream was sent lately (none for a static credential).
    pub fn live_tokens(&self) -> Vec<String> {
        self.oauth
            .as_ref()
            .map(|s| s.recent_tokens())
            .unwrap_or_default()
    }

    /// POST one message; the response's head, its body unread.
    async fn send(
        &self,
        msg: &Value,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, UpstreamError> {
        let body = Bytes::from(serde_json::to_vec(msg).map_err(|_| UpstreamError::Malformed)?);
        self.ask(Ask::Post(&body), session, version).await
    }

    /// One request to the endpoint with the connector's credential (an OAuth token
    /// refreshed and the request sent once more when the upstream refuses it); the
    /// response's head, its body unread.
    async fn ask(
        &self,
        ask: Ask<'_>,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, UpstreamError> {
        let Some(src) = &self.oauth else {
            let req = self
                .request(ask, session, version, None)
                .ok_or(UpstreamError::Malformed)?;
            return self.conn.request(req).await;
        };
        let fail = |e: String| UpstreamError::Authorization(src.failed(&e));
        let token = src.current().await.map_err(fail)?;
        let req = self
            .request(ask, session, version, token.as_ref())
            .ok_or(UpstreamError::Malformed)?;
        let resp = self.conn.request(req).await?;
        if resp.status() != hyper::StatusCode::UNAUTHORIZED {
            return Ok(resp);
        }
        // Refused: discover (first contact) or replace the token, and try once more.
        let challenge = resp
            .headers()
            .get(hyper::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let _ = http_body_util::Limited::new(resp.into_body(), 64 << 10)
            .collect()
            .await;
        let fresh = src
            .after_refusal(challenge.as_deref(), token.as_ref())
            .await
            .map_err(fail)?;
        let req = self
            .request(ask, session, version, Some(&fresh))
            .ok_or(UpstreamError::Malformed)?;
        let resp = self.conn.request(req).await?;
        if resp.status() == hyper::StatusCode::UNAUTHORIZED {
            return Err(fail(
                "the upstream refused a fresh access token (the grant may be revoked: check the client at its authorization server)".into(),
            ));
        }
        Ok(resp)
    }

    /// A request to the endpoint: the session and revision headers when given, the
    /// credential's header always.
    fn request(
        &self,
        ask: Ask<'_>,
        session: Option<&str>,
        version: Option<&str>,
        token: Option<&HeaderValue>,
    ) -> Option<Request<Full<Bytes>>> {
        let uri = format!("{}{}", self.url.origin(), self.url.path);
        // No Host header: the client says it from the URI (HTTP/1.1 `Host`, HTTP/2
        // `:authority`, which a `host` header must not duplicate).
        let mut b = Request::builder().uri(uri);
        let body = match ask {
            Ask::Post(body) => {
                b = b
                    .method(Method::POST)
                    .header(CONTENT_TYPE, "application/json")
                    .header(ACCEPT, "application/json, text/event-stream");
                body.clone()
            }
            Ask::Resume(last) => {
                b = b
                    .method(Method::GET)
                    .header(ACCEPT, "text/event-stream")
                    .header("last-event-id", last);
                Bytes::new()
            }
            Ask::End => {
                b = b.method(Method::DELETE);
                Bytes::new()
            }
        };
        if let Some(s) = session {
            b = b.header("mcp-session-id", s);
        }
        if let Some(v) = version {
            b = b.header("mcp-protocol-version", v);
        }
        if let Some((k, v)) = &self.auth {
            b = b.header(k, v);
        }
        if let Some(t) = token {
            b = b.header(hyper::header::AUTHORIZATION, t);
        }
        b.body(Full::new(body)).ok()
    }

    /// GET the rest of a cut answer stream, from after event `last`: its body.
    async fn resume(
        &self,
        last: &str,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<hyper::body::Incoming, UpstreamError> {
        let resp = self.ask(Ask::Resume(last), session, version).await?;
        let status = resp.status().as_u16();
        if (300..400).contains(&status) {
            return Err(UpstreamError::Redirected(status));
        }
        if !(200..300).contains(&status) {
            return Err(UpstreamError::ResumeRefused(status));
        }
        if !is_sse(&resp) {
            return Err(UpstreamError::Malformed);
        }
        Ok(resp.into_body())
    }

    /// Send one message (a request when `id` is given, else a notification or response)
    /// and read the answer, answering the upstream's own requests in the stream.
    pub async fn post(
        &self,
        msg: &Value,
        id: Option<&Value>,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<Exchange, UpstreamError> {
        tokio::time::timeout(TIMEOUT, self.exchange(msg, id, session, version))
            .await
            .map_err(|_| UpstreamError::Timeout)?
    }

    async fn exchange(
        &self,
        msg: &Value,
        id: Option<&Value>,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<Exchange, UpstreamError> {
        let resp = self.send(msg, session, version).await?;
        let status = resp.status().as_u16();
        let mut ex = Exchange {
            status,
            session: resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            ..Exchange::default()
        };
        let sse = is_sse(&resp);
        if (300..400).contains(&status) {
            return Err(UpstreamError::Redirected(status));
        }
        if !(200..300).contains(&status) {
            return Err(UpstreamError::Status(status));
        }
        let Some(want) = id else {
            return Ok(ex);
        };
        let mut body = resp.into_body();
        if !sse {
            let bytes = http_body_util::Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|_| UpstreamError::TooLarge)?
                .to_bytes();
            let v = strict_json::parse_answer(&bytes).map_err(UpstreamError::of_answer)?;
            if v.get("id") != Some(want) {
                return Err(UpstreamError::Malformed);
            }
            ex.response = Some(v);
            return Ok(ex);
        }
        // An SSE stream: events until the response to our request. Events are read from
        // `start` on and the buffer compacted once per frame; `searched` is how far an
        // incomplete event was already searched for its end.
        let mut buf: Vec<u8> = Vec::new();
        let (mut start, mut searched) = (0usize, 0usize);
        let mut total = 0usize;
        // Where to resume a cut stream from, how long to wait first, and how many
        // resumptions in a row brought nothing new.
        let mut last_id: Option<String> = None;
        let mut wait = DEFAULT_RETRY_WAIT;
        let mut fruitless = 0u32;
        loop {
            while let Some((event, used)) = next_event(&buf[start..], searched) {
                start += used;
                searched = 0;
                if let Some(ms) = event.retry {
                    wait = Duration::from_millis(ms).min(MAX_RETRY_WAIT);
                }
                if event.id.is_some() && event.id != last_id {
                    last_id = event.id;
                    fruitless = 0;
                }
                let Some(data) = event.data else { continue };
                let v =
                    strict_json::parse_answer(data.as_bytes()).map_err(UpstreamError::of_answer)?;
                if v.get("method").is_some() && v.get("id").is_some() {
                    // The upstream asks its client something: Airlock answers.
                    if ex.asked.len() >= MAX_SERVER_REQUESTS {
                        return Err(UpstreamError::TooManyRequests);
                    }
                    let method = shown_method(v["method"].as_str());
                    let answer = answer_server_request(&v);
                    let new_session = ex.session.clone();
                    let s = new_session.as_deref().or(session);
                    let _ = self.exchange_notify(&answer, s, version).await;
                    ex.asked.push(method);
                } else if v.get("id") == Some(want) && v.get("method").is_none() {
                    ex.response = Some(v);
                    return Ok(ex);
                }
                // Notifications (progress, logging, list changes) go no further.
            }
            buf.drain(..start);
            start = 0;
            searched = buf.len();
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        total += data.len();
                        if total > MAX_ANSWER_BYTES {
                            return Err(UpstreamError::TooLarge);
                        }
                        buf.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => {
                    // Cut before the answer: resume after the last event, or give up.
                    let Some(last) = &last_id else {
                        return Err(UpstreamError::Cut);
                    };
                    if fruitless >= MAX_RESUMES {
                        return Err(UpstreamError::CutTooOften);
                    }
                    fruitless += 1;
                    tokio::time::sleep(wait).await;
                    let s = ex.session.clone();
                    body = self.resume(last, s.as_deref().or(session), version).await?;
                    // A torn event is sent again after `last`.
                    buf.clear();
                    searched = 0;
                }
            }
        }
    }

    /// End an upstream session (HTTP DELETE); its answer is only a status.
    pub async fn delete(&self, session: &str) {
        let token = match &self.oauth {
            Some(s) => s.current().await.ok().flatten(),
            None => None,
        };
        if let Some(req) = self.request(Ask::End, Some(session), None, token.as_ref()) {
            let _ = tokio::time::timeout(Duration::from_secs(2), self.conn.request(req)).await;
        }
    }

    /// Send a response or notification; its answer is only a status.
    async fn exchange_notify(
        &self,
        msg: &Value,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<(), UpstreamError> {
        let resp = self.send(msg, session, version).await?;
        // Drain (bounded) so the connection can be reused.
        let _ = http_body_util::Limited::new(resp.into_body(), 64 << 10)
            .collect()
            .await;
        Ok(())
    }
}

/// What one request to the endpoint carries.
#[derive(Clone, Copy)]
enum Ask<'a> {
    /// POST a message.
    Post(&'a Bytes),
    /// GET the rest of a cut answer stream, after this event id.
    Resume(&'a str),
    /// DELETE the session.
    End,
}

/// Whether a response is an SSE stream.
fn is_sse(resp: &hyper::Response<hyper::body::Incoming>) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"))
}

/// A connector's upstream: over HTTP, or a stdio server in its own jail.
pub enum Upstream {
    /// Boxed: its HTTP client is several times the size of a stdio upstream.
    Http(Box<HttpUpstream>),
    Stdio(super::stdio_upstream::StdioUpstream),
}

impl Upstream {
    /// Send one message (a request when `id` is given) and read its answer; see
    /// [`HttpUpstream::post`].
    pub async fn post(
        &self,
        msg: &Value,
        id: Option<&Value>,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<Exchange, UpstreamError> {
        match self {
            Upstream::Http(h) => h.post(msg, id, session, version).await,
            Upstream::Stdio(s) => s.post(msg, id).await,
        }
    }
}

/// Airlock's answer to a request an upstream makes of its client: an empty list of roots
/// (the upstream may touch nothing of the run's), a refusal for everything else (sampling
/// would reach the agent's model, elicitation its user).
pub fn answer_server_request(req: &Value) -> Value {
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    match req.get("method").and_then(Value::as_str) {
        Some("roots/list") => json!({"jsonrpc": "2.0", "id": id, "result": {"roots": []}}),
        Some("ping") => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        _ => json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32601,
            "message": "Airlock answers no sampling, elicitation or other requests from a connector"
        }}),
    }
}

/// What of one SSE event the gateway uses.
#[derive(Debug, Default, PartialEq, Eq)]
struct SseEvent {
    /// Its `id`: where a cut stream resumes from.
    id: Option<String>,
    /// Its `retry` hint, in milliseconds.
    retry: Option<u64>,
    /// Its data; None for an event without any (a comment, a priming event).
    data: Option<String>,
}

/// The next complete SSE event in `buf` (an empty one when it is not UTF-8) and how many
/// bytes it used. `searched`: bytes at the start of `buf` already known to hold no
/// event's end.
fn next_event(buf: &[u8], searched: usize) -> Option<(SseEvent, usize)> {
    // Back up over a separator that may have been cut at the end of the last search.
    let from = searched.saturating_sub(3);
    let (end, sep) = (from..buf.len()).find_map(|i| {
        if buf[i..].starts_with(b"\n\n") {
            Some((i, 2))
        } else if buf[i..].starts_with(b"\r\n\r\n") {
            Some((i, 4))
        } else {
            None
        }
    })?;
    let Ok(block) = std::str::from_utf8(&buf[..end]) else {
        return Some((SseEvent::default(), end + sep));
    };
    let mut ev = SseEvent::default();
    let mut data: Option<String> = None;
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => match &mut data {
                Some(s) => {
                    s.push('\n');
                    s.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            // (An id with NUL in it is ignored, as the SSE standard says.)
            "id" if !value.contains('\0') => ev.id = Some(value.to_string()),
            "retry" => {
                if let Ok(ms) = value.parse() {
                    ev.retry = Some(ms);
                }
            }
            _ => {}
        }
    }
    // An event with empty data (2025-11-25's priming event, for resumption) says nothing.
    ev.data = data.filter(|d| !d.is_empty());
    Some((ev, end + sep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_plain_http() {
        let u = parse_http_url("http://127.0.0.1:3001/mcp").unwrap();
        assert_eq!(
            (u.authority.as_str(), u.path.as_str()),
            ("127.0.0.1:3001", "/mcp")
        );
        assert_eq!(parse_http_url("http://mcp.example").unwrap().path, "/");
        assert!(parse_http_url("http://[::1]:80/x").is_some());
        let t = parse_http_url("https://mcp.example/mcp").unwrap();
        assert!(t.https && !parse_http_url("http://a/").unwrap().https);
        assert_eq!(
            (t.host(), t.origin().as_str()),
            ("mcp.example", "https://mcp.example")
        );
        assert!(has_userinfo("https://u:tok@mcp.example/mcp"));
        assert!(!has_userinfo("https://mcp.example/a@b"));
        for bad in [
            "https://user:pw@host/",
            "http://user:pw@host/",
            "http://host:0/",
            "http://host/a?b",
            "http://host/#x",
            "http://ho st/",
            "ftp://host/",
            "http:///x",
        ] {
            assert!(parse_http_url(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn only_loopback_hosts_are_loopback() {
        for (u, want) in [
            ("http://127.0.0.1:3001/mcp", true),
            ("http://127.9.8.7/x", true),
            ("http://localhost:80/", true),
            ("http://[::1]:8080/mcp", true),
            ("http://10.0.0.1/mcp", false),
            ("http://mcp.example/", false),
            ("http://[::2]/", false),
        ] {
            assert_eq!(parse_http_url(u).unwrap().is_loopback(), want, "{u}");
        }
    }

    #[test]
    fn sse_events_are_split_and_joined() {
        let buf = b"id: 1\nretry: 250\ndata: \n\nevent: message\nid:7\ndata: {\"a\":\ndata: 1}\n\n: comment\n\ndata: x";
        let (d, used0) = next_event(buf, 0).unwrap();
        let priming = SseEvent {
            id: Some("1".into()),
            retry: Some(250),
            data: None,
        };
        assert_eq!(d, priming, "a priming event");
        let buf = &buf[used0..];
        let (d, used) = next_event(buf, 0).unwrap();
        assert_eq!(d.data.as_deref(), Some("{\"a\":\n1}"));
        assert_eq!((d.id.as_deref(), d.retry), (Some("7"), None));
        let (d, used2) = next_event(&buf[used..], 0).unwrap();
        assert_eq!(d, SseEvent::default());
        assert!(
            next_event(&buf[used + used2..], 0).is_none(),
            "incomplete event"
        );
        // A separator cut between two reads is still found.
        let cut = b"data: 1\r\n\r\n";
        assert_eq!(next_event(cut, 10).unwrap().1, cut.len());
        assert_eq!(next_event(b"data: 2\n\n", 8).unwrap().1, 9);
    }

    #[test]
    fn an_upstream_never_gets_sampling_or_elicitation_from_airlock() {
        for m in ["sampling/createMessage", "elicitation/create", "other"] {
            let a = answer_server_request(&json!({"jsonrpc":"2.0","id":5,"method":m}));
            assert_eq!(a["id"], 5);
            assert_eq!(a["error"]["code"], -32601, "{m}");
        }
        let a = answer_server_request(&json!({"jsonrpc":"2.0","id":"r","method":"roots/list"}));
        assert_eq!(a["result"]["roots"], json!([]));
    }
}
