//! Which headers a gateway route passes on: never those that belong to one hop (RFC 9110
//! §7.6.1), those a `Connection` header names, or any `Proxy-*`; each route drops its own
//! extras on top (the client's credentials, where it replaces them).

use hyper::header::{HeaderMap, CONNECTION};

/// Headers that belong to one hop (RFC 9110 §7.6.1), and what a proxy must not pass on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// `headers` without hop-by-hop ones, those named by Connection, and any `Proxy-*`.
pub fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        let n = k.as_str();
        if HOP_BY_HOP.contains(&n) || n.starts_with("proxy-") || named.iter().any(|c| c == n) {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

/// Headers (and a query parameter, `_method`) by which some servers let a request say it
/// is of another method than its own: the method checked must be the one performed.
pub const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Whether `headers` name another method than the request's own.
pub fn names_another_method(headers: &HeaderMap) -> bool {
    METHOD_OVERRIDES.iter().any(|h| headers.contains_key(*h))
}

/// Whether a query names another method than the request's own (`_method=...`).
pub fn query_names_another_method(query: Option<&str>) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .map(|p| p.split_once('=').map_or(p, |(k, _)| k))
        .any(|k| k.eq_ignore_ascii_case("_method") || k.eq_ignore_ascii_case("%5fmethod"))
}

/// Whether a message's body is encoded (`Content-Encoding` other than `identity`): a body
/// the gateway reads must be read as it goes on.
pub fn encoded(headers: &HeaderMap) -> bool {
    headers
        .get_all(hyper::header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

/// [`end_to_end`] less the route's own `drop` (lower-case names).
pub fn forwarded(headers: &HeaderMap, drop: &[&str]) -> HeaderMap {
    let mut out = end_to_end(headers);
    for h in drop {
        out.remove(*h);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::{HeaderName, HeaderValue};

    #[test]
    fn overrides_and_encodings_are_seen_in_any_spelling() {
        let mut h = HeaderMap::new();
        assert!(!names_another_method(&h) && !encoded(&h));
        h.insert("content-encoding", HeaderValue::from_static("Identity"));
        assert!(!encoded(&h));
        h.append("content-encoding", HeaderValue::from_static("gzip"));
        assert!(encoded(&h));
        h.insert(
            HeaderName::from_bytes(b"X-HTTP-Method-Override").unwrap(),
            HeaderValue::from_static("GET"),
        );
        assert!(names_another_method(&h));
        assert!(query_names_another_method(Some("a=1&_method=DELETE")));
        assert!(query_names_another_method(Some("_METHOD")));
        assert!(!query_names_another_method(Some("a_method=1")));
        assert!(!query_names_another_method(None));
    }

    #[test]
    fn hop_by_hop_and_proxy_headers_are_dropped() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic eDp5"),
            ("proxy-connection", "keep-alive"),
            ("x-secret-hop", "1"),
            ("upgrade", "websocket"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("accept", "text/html"),
            ("user-agent", "curl/8"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let out = end_to_end(&h);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["accept", "user-agent"]);
        let out = forwarded(&h, &["user-agent"]);
        assert_eq!(
            out.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["accept"]
        );
    }
}
