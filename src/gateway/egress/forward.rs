//! Plain HTTP through the proxy: an absolute-form request (`GET http://host/path`) is
//! checked like a tunnel, then sent to the checked address in origin form, on a fresh
//! connection, with hop-by-hop and `Proxy-*` headers removed both ways (so no upgrade
//! passes and no proxy credential leaks onward). The response streams back as it comes,
//! counted; the record is journaled when it ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;

use super::{open, target, Egress, Journaled, Opened, IDLE};
use crate::gateway::http::Body;
use crate::gateway::withhold::{Secrets, Withheld, WithheldRecord};
use crate::policy::egress::Via;

/// Time for the destination's response head.
pub(crate) const RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) async fn forward(
    eg: &Arc<Egress>,
    mut j: Journaled,
    req: Request<Incoming>,
) -> Response<Body> {
    let authority = req.uri().authority().map(|a| a.as_str().to_string());
    let Some(t) = authority
        .as_deref()
        .and_then(|a| target::parse_authority(a, Some(80)))
    else {
        return j.refuse(
            StatusCode::BAD_REQUEST,
            "egress: target",
            "an http:// URL needs a host name or an IP address",
        );
    };
    let Opened { stream, slot, .. } = match open(eg, &mut j, &t, Via::Http).await {
        Ok(o) => o,
        Err(resp) => return resp,
    };
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let Ok(uri) = path.parse::<Uri>() else {
        return j.refuse(
            StatusCode::BAD_REQUEST,
            "egress: target",
            "the URL's path is not valid",
        );
    };
    let mut headers = crate::gateway::headers::end_to_end(&parts.headers);
    // The Host is the one checked, whatever the run's header said.
    let host = match (&t.host, t.port) {
        (target::Host::Ip(std::net::IpAddr::V6(v6)), 80) => format!("[{v6}]"),
        (target::Host::Ip(std::net::IpAddr::V6(v6)), p) => format!("[{v6}]:{p}"),
        (h, 80) => h.text(),
        (h, p) => format!("{}:{p}", h.text()),
    };
    let Ok(host) = HeaderValue::from_str(&host) else {
        return j.refuse(
            StatusCode::BAD_REQUEST,
            "egress: target",
            "the host is not a valid Host header",
        );
    };
    headers.insert(HOST, host);
    let mut out = Request::new(Counted {
        inner: body,
        n: j.up.clone(),
        idle: None,
        _journaled: None,
    });
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = headers;
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(x) => x,
        Err(_) => {
            return j.refuse(
                StatusCode::BAD_GATEWAY,
                "egress: unreachable",
                "the connection failed",
            )
        }
    };
    // The connection lives as long as the response body is read (or the run lasts).
    eg.scope.spawn(async move {
        let _ = conn.await;
        drop(slot);
    });
    let sent = tokio::time::timeout(RESPONSE_TIMEOUT, sender.send_request(out)).await;
    answered(j, sent, None)
}

/// What a checked destination's answer passes through: the credential it was sent,
/// withheld wherever the answer echoes it.
pub(crate) struct Checked<'a> {
    pub secrets: &'a Secrets,
    /// `passthrough_body`: the body goes on unscanned; the headers are still scanned.
    pub passthrough_body: bool,
}

/// What the destination answered (`sent`: the request's send, timed out at
/// [`RESPONSE_TIMEOUT`]) as the run gets it: its body counted, bounded by [`IDLE`] between
/// frames, and the record journaled when the body goes; or the refusal of a failed exchange.
/// A checked destination's answer has its credential withheld from headers and body (a
/// compressed body decoded to be read, and passed on decoded), and the journal says so.
pub(crate) fn answered(
    mut j: Journaled,
    sent: Result<Result<Response<Incoming>, hyper::Error>, tokio::time::error::Elapsed>,
    checked: Option<Checked<'_>>,
) -> Response<Body> {
    let resp = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => {
            return j.refuse(
                StatusCode::BAD_GATEWAY,
                "egress: unreachable",
                "the destination sent no valid HTTP response",
            )
        }
        Err(_) => {
            return j.refuse(
                StatusCode::GATEWAY_TIMEOUT,
                "egress: unreachable",
                "no response within 30 s",
            )
        }
    };
    let (parts, body) = resp.into_parts();
    // No upgrade was asked for (Upgrade is stripped), so a 101 is a broken destination.
    if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        return j.refuse(
            StatusCode::BAD_GATEWAY,
            "egress: unreachable",
            "the destination switched protocols unasked",
        );
    }
    j.rec.status = parts.status.as_u16();
    let mut headers = crate::gateway::headers::end_to_end(&parts.headers);
    let Some(c) = checked else {
        let mut back = Response::new(counted(body, j).boxed_unsync());
        *back.status_mut() = parts.status;
        *back.headers_mut() = headers;
        return back;
    };
    let in_headers = c.secrets.headers(&mut headers) as u64;
    let record = WithheldRecord {
        route: format!("egress {}", j.rec.host),
        endpoint: format!("{} {}", j.rec.method, j.rec.path),
        in_headers,
        in_body: 0,
    };
    let log = j.log.clone();
    let body: Body = if c.passthrough_body {
        if in_headers > 0 {
            log.withheld(record);
        }
        counted(body, j).boxed_unsync()
    } else {
        // hyper reads only chunked framing: the bytes of any other transfer coding would
        // go on as they came, unread.
        let other_framing = parts
            .headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .any(|t| !t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        let coding = match super::coding::of(&headers) {
            Ok(c) if !other_framing => c,
            _ => {
                return j.refuse(
                    StatusCode::BAD_GATEWAY,
                    "egress: answer",
                    "the destination's answer is in a coding the gateway does not read (it asked for gzip, deflate, br or none; transfer codings other than chunked are not read), so it could not be checked for the credential; it was not passed on",
                )
            }
        };
        // The body is scanned (and decoded): its length changes, so it goes chunked. A
        // HEAD's or a 304's length is the representation's and stays, unless decoded.
        let bodiless = j.rec.method == "HEAD" || parts.status == StatusCode::NOT_MODIFIED;
        if coding.is_some() || !bodiless {
            headers.remove(CONTENT_LENGTH);
        }
        let inner = counted(body, j);
        let inner: Body = match coding {
            Some(k) => {
                headers.remove(CONTENT_ENCODING);
                Body::new(super::coding::Decoded::new(inner, k))
            }
            None => inner.boxed_unsync(),
        };
        Body::new(Withheld::new(inner, c.secrets, record, log))
    };
    let mut back = Response::new(body);
    *back.status_mut() = parts.status;
    *back.headers_mut() = headers;
    back
}

/// The answer's body, counted, bounded by [`IDLE`] between frames, holding the record.
fn counted(body: Incoming, j: Journaled) -> Counted {
    Counted {
        inner: body,
        n: j.down.clone(),
        idle: Some(Box::pin(tokio::time::sleep(IDLE))),
        _journaled: Some(j),
    }
}

/// A body whose data bytes are counted into `n`; with `idle`, it fails when no frame
/// came for [`IDLE`]. The response body holds the connection's record, journaled when
/// the body is dropped.
pub(crate) struct Counted {
    pub(crate) inner: Incoming,
    pub(crate) n: Arc<AtomicU64>,
    pub(crate) idle: Option<Pin<Box<tokio::time::Sleep>>>,
    pub(crate) _journaled: Option<Journaled>,
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    self.n.fetch_add(d.len() as u64, Ordering::Relaxed);
                }
                if let Some(idle) = self.idle.as_mut() {
                    idle.as_mut().reset(tokio::time::Instant::now() + IDLE);
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(std::io::Error::other(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.idle.as_mut().map(|s| s.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the destination sent nothing for too long",
                )))),
                _ => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
