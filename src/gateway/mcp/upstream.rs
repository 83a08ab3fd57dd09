//! The gateway's client of an MCP connector's upstream (streamable HTTP, over TLS or, to
//! this host only, plain): one POST per
//! message, the answer as JSON or as an SSE stream read until the response to that message
//! comes. Requests the upstream makes of its client in that stream (sampling, elicitation,
//! roots) are answered here, refused or empty: they never reach the agent or its model.
//! The connector's credential goes in one header, to this upstream only.
//!
//! A stream cut before its answer is resumed where the upstream offers it (event ids on
//! its events): a GET with `Last-Event-ID`, the session and the same credential, after the
//! upstream's `retry` hint (at least [`MIN_RETRY_WAIT`], at most [`MAX_RETRY_WAIT`]), at
//! most [`MAX_RESUMES`] times in a row without a new event id; a stream that brings ids but
//! no message is resumed ever more slowly (the wait doubles from the fourth time on), so
//! an upstream cannot make the gateway poll it, credential and all, in a tight loop. A
//! cut stream without a usable id fails the call, saying so.
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

use crate::gateway::strict_json;

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
/// Shortest wait before resuming a cut stream, whatever the upstream's `retry` says.
pub const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);
/// Longest event id sent back in `Last-Event-ID`.
pub const MAX_EVENT_ID_BYTES: usize = 1024;
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

pub use crate::urls::{has_userinfo, parse_http_url, HttpUrl};

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
    /// Withholding the connector's credential from the answer left no valid JSON.
    #[error("the connector's upstream answered with its credential; the answer was withheld")]
    Echoed,
    #[error("the connector has too many requests in flight")]
    Busy,
    #[error("the connector's upstream ended its answer stream before the answer and offered no event id to resume it by")]
    Cut,
    #[error("the connector's upstream cut its answer stream and refused to resume it (HTTP {0})")]
    ResumeRefused(u16),
    #[error("the connector's upstream cut its answer stream 3 times in a row without a new event; the gateway gave up")]
    CutTooOften,
    #[error("the connector's upstream cut its answer stream, and its last event id cannot be sent back to resume it (longer than 1024 bytes, or not a valid header value)")]
    BadEventId,
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
    /// The requests the upstream made of its client meanwhile, and Airlock's answer to
    /// each ([`asked`]).
    pub asked: Vec<&'static str>,
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

/// The URI every request to the endpoint `url` goes to: its origin and path.
fn endpoint_uri(url: &HttpUrl) -> Option<hyper::Uri> {
    format!("{}{}", url.origin(), url.path).parse().ok()
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
    /// The endpoint's URI, parsed once (a clone shares its bytes); `None` when the URL does
    /// not parse as one, and then every request fails as malformed, as it did when each
    /// request parsed it.
    uri: Option<hyper::Uri>,
    auth: Option<(HeaderName, HeaderValue)>,
    /// An OAuth connector's shared access token (then `auth` is `None`).
    oauth: Option<std::sync::Arc<crate::gateway::mcp::oauth::TokenSource>>,
}

impl HttpUpstream {
    /// `auth`: the header carrying the connector's credential, if it has one. `tls`: how an
    /// `https` upstream is verified (required for one; its connections keep alive in the
    /// pool, so a run's calls share them).
    pub fn new(
        url: HttpUrl,
        auth: Option<(HeaderName, HeaderValue)>,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
        oauth: Option<std::sync::Arc<crate::gateway::mcp::oauth::TokenSource>>,
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
            uri: endpoint_uri(&url),
            auth,
            oauth,
        })
    }

    /// An OAuth connector's secrets: the tokens this upstream was sent lately and the
    /// client's secret (none for a static credential).
    pub fn live_secrets(&self) -> Vec<String> {
        self.oauth
            .as_ref()
            .map(|s| s.withheld())
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
        // No Host header: the client says it from the URI (HTTP/1.1 `Host`, HTTP/2
        // `:authority`, which a `host` header must not duplicate).
        let mut b = Request::builder().uri(self.uri.clone()?);
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
        answered(resp.status().as_u16(), UpstreamError::ResumeRefused)?;
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
        answered(status, UpstreamError::Status)?;
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
        // Whether the last byte read was a CR (its LF may come in the next frame).
        let mut cr = false;
        let mut resume = Resumption::default();
        loop {
            while let Some((event, used)) = next_event(&buf[start..], searched) {
                start += used;
                searched = 0;
                resume.saw(&event);
                let Some(data) = event.data else { continue };
                let v =
                    strict_json::parse_answer(data.as_bytes()).map_err(UpstreamError::of_answer)?;
                if v.get("method").is_some() && v.get("id").is_some() {
                    // The upstream asks its client something: Airlock answers.
                    if ex.asked.len() >= MAX_SERVER_REQUESTS {
                        return Err(UpstreamError::TooManyRequests);
                    }
                    let method = asked(v["method"].as_str());
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
                        push_lf(&mut buf, &data, &mut cr);
                    }
                }
                Some(Err(_)) | None => {
                    // Cut before the answer: resume after the last event, or give up.
                    let (last, wait) = resume.next()?;
                    tokio::time::sleep(wait).await;
                    let s = ex.session.clone();
                    body = self
                        .resume(&last, s.as_deref().or(session), version)
                        .await?;
                    // A torn event is sent again after `last`.
                    buf.clear();
                    (searched, cr) = (0, false);
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

/// A 2xx status, else the error: a redirect is never followed (it could carry the
/// credential elsewhere), any other status is `refused`'s.
fn answered(status: u16, refused: fn(u16) -> UpstreamError) -> Result<(), UpstreamError> {
    match status {
        200..=299 => Ok(()),
        300..=399 => Err(UpstreamError::Redirected(status)),
        _ => Err(refused(status)),
    }
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
    Stdio(crate::gateway::mcp::stdio_upstream::StdioUpstream),
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

/// A request an upstream made of its client and what Airlock answered, as the journal
/// names it: one of a few fixed texts, never the method as the upstream spelled it (a
/// name the upstream chose could carry anything, even the credential it was sent).
pub fn asked(method: Option<&str>) -> &'static str {
    match method {
        Some("sampling/createMessage") => "sampling/createMessage: refused",
        Some("elicitation/create") => "elicitation/create: refused",
        Some("roots/list") => "roots/list: answered with no roots",
        Some("ping") => "ping: answered",
        _ => "another method: refused",
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

/// Where a cut answer stream resumes from, and how soon.
#[derive(Debug)]
struct Resumption {
    last_id: Option<String>,
    /// The upstream's `retry` hint, within [`MIN_RETRY_WAIT`, `MAX_RETRY_WAIT`].
    hint: Duration,
    /// Resumptions in a row that brought no new event id.
    fruitless: u32,
    /// Resumptions since the stream last brought a message.
    quiet: u32,
}

impl Default for Resumption {
    fn default() -> Self {
        Resumption {
            last_id: None,
            hint: DEFAULT_RETRY_WAIT,
            fruitless: 0,
            quiet: 0,
        }
    }
}

impl Resumption {
    /// Take in one event read.
    fn saw(&mut self, ev: &SseEvent) {
        if let Some(ms) = ev.retry {
            self.hint = Duration::from_millis(ms).clamp(MIN_RETRY_WAIT, MAX_RETRY_WAIT);
        }
        match &ev.id {
            // An empty id takes the resumption point away (the SSE standard).
            Some(id) if id.is_empty() => self.last_id = None,
            Some(id) if self.last_id.as_ref() != Some(id) => {
                self.last_id = Some(id.clone());
                self.fruitless = 0;
            }
            _ => {}
        }
        if ev.data.is_some() {
            self.quiet = 0;
        }
    }

    /// The stream was cut: the id to resume after and how long to wait first, or why the
    /// call fails.
    fn next(&mut self) -> Result<(String, Duration), UpstreamError> {
        let last = self.last_id.clone().ok_or(UpstreamError::Cut)?;
        if last.len() > MAX_EVENT_ID_BYTES || HeaderValue::from_str(&last).is_err() {
            return Err(UpstreamError::BadEventId);
        }
        if self.fruitless >= MAX_RESUMES {
            return Err(UpstreamError::CutTooOften);
        }
        self.fruitless += 1;
        self.quiet += 1;
        let backoff = 1u32 << self.quiet.saturating_sub(3).min(6);
        Ok((last, (self.hint * backoff).min(MAX_RETRY_WAIT)))
    }
}

/// Append `data` to `buf` with SSE's line ends (CRLF, LF, a lone CR) all made LF. `cr`:
/// whether the last byte appended was a CR (a frame may end between CR and LF).
fn push_lf(buf: &mut Vec<u8>, data: &[u8], cr: &mut bool) {
    if !*cr && !data.contains(&b'\r') {
        buf.extend_from_slice(data);
        return;
    }
    for &b in data {
        match b {
            b'\r' => {
                buf.push(b'\n');
                *cr = true;
            }
            b'\n' if *cr => *cr = false,
            _ => {
                buf.push(b);
                *cr = false;
            }
        }
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

/// The next complete SSE event in `buf`, its line ends made LF ([`push_lf`]) (an empty
/// event when it is not UTF-8) and how many bytes it used. `searched`: bytes at the start
/// of `buf` already known to hold no event's end.
fn next_event(buf: &[u8], searched: usize) -> Option<(SseEvent, usize)> {
    // Back up over a separator that may have been cut at the end of the last search.
    let from = searched.saturating_sub(1);
    let end = from + buf.get(from..)?.windows(2).position(|w| w == b"\n\n")?;
    let used = end + 2;
    let Ok(block) = std::str::from_utf8(&buf[..end]) else {
        return Some((SseEvent::default(), used));
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
    Some((ev, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_uri_is_the_urls_origin_and_path() {
        let u = parse_http_url("http://127.0.0.1:3001/mcp/v1").unwrap();
        let uri = endpoint_uri(&u).unwrap();
        assert_eq!(uri.to_string(), "http://127.0.0.1:3001/mcp/v1");
        assert_eq!(uri.authority().map(|a| a.as_str()), Some("127.0.0.1:3001"));
        let tls = parse_http_url("https://mcp.example:8443/").unwrap();
        assert_eq!(
            endpoint_uri(&tls).unwrap().to_string(),
            "https://mcp.example:8443/"
        );
        // A path no URI can carry: no URI, so every request fails as malformed.
        let bad = HttpUrl {
            https: false,
            authority: "127.0.0.1:1".into(),
            path: "/a b".into(),
        };
        assert!(endpoint_uri(&bad).is_none());
    }

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
        assert_eq!(next_event(b"data: 2\n\n", 8).unwrap().1, 9);
    }

    #[test]
    fn sse_line_ends_are_crlf_lf_or_a_lone_cr_even_across_frames() {
        let (mut buf, mut cr) = (Vec::new(), false);
        for frame in [
            &b"data: 1\r"[..],
            b"\n\r",
            b"\nid: a\rdata: 2\r\r",
            b"data: 3\n\n",
        ] {
            push_lf(&mut buf, frame, &mut cr);
        }
        assert_eq!(buf, b"data: 1\n\nid: a\ndata: 2\n\ndata: 3\n\n");
        let (first, used) = next_event(&buf, 0).unwrap();
        assert_eq!(first.data.as_deref(), Some("1"));
        let (second, _) = next_event(&buf[used..], 0).unwrap();
        assert_eq!(
            (second.id.as_deref(), second.data.as_deref()),
            (Some("a"), Some("2"))
        );
    }

    fn event(id: Option<&str>, retry: Option<u64>, data: bool) -> SseEvent {
        SseEvent {
            id: id.map(str::to_string),
            retry,
            data: data.then(|| "{}".to_string()),
        }
    }

    #[test]
    fn a_cut_stream_resumes_after_its_last_id_within_bounds() {
        let mut r = Resumption::default();
        assert!(matches!(r.next(), Err(UpstreamError::Cut)), "no id yet");
        r.saw(&event(Some("7"), Some(0), false));
        // retry: 0 is raised to the floor.
        assert_eq!(r.next().unwrap(), ("7".to_string(), MIN_RETRY_WAIT));
        // The same id again and again: three tries in a row, then the call fails.
        r.next().unwrap();
        r.next().unwrap();
        assert!(matches!(r.next(), Err(UpstreamError::CutTooOften)));
        // An empty id takes the point away.
        r.saw(&event(Some(""), None, false));
        assert!(matches!(r.next(), Err(UpstreamError::Cut)));
        for bad in [
            "a\rInjected: yes",
            "a\u{1}b",
            &"x".repeat(MAX_EVENT_ID_BYTES + 1),
        ] {
            let mut r = Resumption::default();
            r.saw(&event(Some(bad), None, false));
            assert!(
                matches!(r.next(), Err(UpstreamError::BadEventId)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn new_ids_without_messages_are_resumed_ever_more_slowly() {
        let mut r = Resumption::default();
        let mut waits = Vec::new();
        for i in 0..12 {
            r.saw(&event(Some(&i.to_string()), Some(0), false));
            waits.push(r.next().unwrap().1.as_millis());
        }
        assert_eq!(
            waits,
            [100, 100, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );
        // A message brings the pace back.
        r.saw(&event(Some("m"), None, true));
        assert_eq!(r.next().unwrap().1, MIN_RETRY_WAIT);
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

    #[test]
    fn what_an_upstream_asked_is_named_by_airlock_never_as_it_spelled_it() {
        // What the journal says agrees with what was answered.
        for m in [
            "sampling/createMessage",
            "elicitation/create",
            "roots/list",
            "ping",
        ] {
            let a = answer_server_request(&json!({"jsonrpc":"2.0","id":1,"method":m}));
            let said = asked(Some(m));
            assert!(said.starts_with(m), "{said}");
            assert_eq!(a.get("error").is_some(), said.ends_with("refused"), "{m}");
        }
        for m in [Some("Bearer tok-1234567890"), Some(""), None] {
            assert_eq!(asked(m), "another method: refused");
        }
    }
}
