//! The `metrics` key of airlockd's config: where Prometheus scrapes airlockd.
//!
//! ```yaml
//! metrics: {listen: 127.0.0.1:9477}                 # loopback TCP only
//! metrics: {listen: /run/airlock/metrics.sock, mode: "0660", group: prometheus}
//! ```
//!
//! The metrics carry no secret, but they tell how busy each role is: a TCP listener must be
//! on loopback (no address that other hosts reach), and a unix socket is reachable by its
//! owner and the group the config names, never by others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::config::{group_ref, GroupRef, GROUP_PROBLEM};
use crate::diag::{key, Problem};

const KEYS: &[&str] = &["listen", "mode", "group"];

/// The mode of a metrics socket when the config names none.
pub const DEFAULT_SOCKET_MODE: u32 = 0o660;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsListen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConf {
    pub listen: MetricsListen,
    /// A unix socket's mode and group.
    pub mode: u32,
    pub group: Option<GroupRef>,
}

/// What `metrics.listen` must be.
const LISTEN_PROBLEM: &str =
    "must be a loopback address and port (127.0.0.1:9477, [::1]:9477) or an absolute unix socket path";

/// Parse `metrics` (null or absent: not served), adding what is wrong to `problems`.
pub fn parse(file: &Path, v: &Value, problems: &mut Vec<Problem>) -> Option<MetricsConf> {
    let mut problem = |path: &str, msg: &str| problems.push(Problem::new(file, path, msg));
    if v.is_null() {
        return None;
    }
    let Some(m) = v.as_mapping() else {
        problem(
            "metrics",
            "must be a mapping with listen (and mode, group for a socket)",
        );
        return None;
    };
    let mut ok = true;
    for k in m.keys() {
        match k.as_str() {
            Some(k) if KEYS.contains(&k) => {}
            Some(k) if crate::secret_shapes::is_plain_key(k) => {
                ok = false;
                problem(
                    &key("metrics", k),
                    &format!("unknown key; allowed: {}", KEYS.join(", ")),
                )
            }
            _ => {
                ok = false;
                problem(
                    &key("metrics", "<unknown key>"),
                    &format!("unknown key; allowed: {}", KEYS.join(", ")),
                )
            }
        }
    }
    let get = |k: &str| m.get(Value::from(k));
    let listen = match get("listen").and_then(Value::as_str) {
        None => {
            problem("metrics.listen", LISTEN_PROBLEM);
            None
        }
        Some(s) => match listen(s) {
            Some(l) => Some(l),
            None => {
                problem("metrics.listen", LISTEN_PROBLEM);
                None
            }
        },
    };
    let unix = matches!(listen, Some(MetricsListen::Unix(_)));
    let mut mode = DEFAULT_SOCKET_MODE;
    if let Some(v) = get("mode") {
        match socket_mode(v) {
            _ if !unix => {
                ok = false;
                problem(
                    "metrics.mode",
                    "only for a unix socket path in metrics.listen",
                )
            }
            Some(n) => mode = n,
            None => {
                ok = false;
                problem(
                    "metrics.mode",
                    "must be an octal mode string such as \"0660\" giving others no access",
                )
            }
        }
    }
    let mut group = None;
    if let Some(v) = get("group") {
        if !unix {
            ok = false;
            problem(
                "metrics.group",
                "only for a unix socket path in metrics.listen",
            );
        } else {
            group = group_ref(v);
            if group.is_none() {
                ok = false;
                problem("metrics.group", GROUP_PROBLEM);
            }
        }
    }
    match listen {
        Some(listen) if ok => Some(MetricsConf {
            listen,
            mode,
            group,
        }),
        _ => None,
    }
}

/// `127.0.0.1:9477`, `[::1]:9477` (loopback, a port given), or an absolute path.
pub fn listen(s: &str) -> Option<MetricsListen> {
    if s.starts_with('/') {
        let ok = s.len() < 100 && !s.contains('\0') && !s.ends_with('/');
        return ok.then(|| MetricsListen::Unix(PathBuf::from(s)));
    }
    let a: SocketAddr = s.parse().ok()?;
    (a.ip().is_loopback() && a.port() != 0).then_some(MetricsListen::Tcp(a))
}

/// A socket mode: an octal string (YAML reads a bare `0660` as decimal), owner and group
/// bits only.
fn socket_mode(v: &Value) -> Option<u32> {
    let s = v.as_str()?;
    let n = u32::from_str_radix(s.strip_prefix("0o").unwrap_or(s), 8).ok()?;
    (n <= 0o770 && n & 0o007 == 0).then_some(n)
}

/// `tracing`: OpenTelemetry traces over OTLP/HTTP, to `otlp` (a collector's base URL;
/// spans go to `<otlp>/v1/traces`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingConf {
    pub otlp: String,
}

const OTLP_PROBLEM: &str =
    "must be an http:// URL of an OTLP/HTTP collector (scheme, host, port, no credentials, no query), e.g. http://127.0.0.1:4318";

/// Parse `tracing` (null or absent: no traces).
pub fn parse_tracing(file: &Path, v: &Value, problems: &mut Vec<Problem>) -> Option<TracingConf> {
    let mut problem = |path: &str, msg: &str| problems.push(Problem::new(file, path, msg));
    if v.is_null() {
        return None;
    }
    let Some(m) = v.as_mapping() else {
        problem("tracing", "must be a mapping with otlp");
        return None;
    };
    let mut ok = true;
    for k in m.keys() {
        if k.as_str() != Some("otlp") {
            ok = false;
            let at = match k.as_str() {
                Some(k) if crate::secret_shapes::is_plain_key(k) => key("tracing", k),
                _ => key("tracing", "<unknown key>"),
            };
            problem(&at, "unknown key; allowed: otlp");
        }
    }
    let url = m
        .get(Value::from("otlp"))
        .and_then(Value::as_str)
        .and_then(otlp_url);
    if url.is_none() {
        problem("tracing.otlp", OTLP_PROBLEM);
    }
    url.filter(|_| ok).map(|otlp| TracingConf { otlp })
}

/// `http://HOST:PORT[/path]`, the trailing `/` dropped; credentials, queries and fragments
/// refused (nothing secret belongs in it).
fn otlp_url(s: &str) -> Option<String> {
    let rest = s.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    let ok = !authority.is_empty()
        && authority.chars().all(plain)
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_'))
        && s.len() <= 256;
    ok.then(|| s.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(t: &str) -> (Option<MetricsConf>, Vec<String>) {
        let v: Value = serde_yaml::from_str(t).unwrap();
        let mut p = Vec::new();
        let c = parse(Path::new("airlock.yaml"), &v, &mut p);
        (c, p.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn only_loopback_or_a_socket() {
        let (c, p) = parse_text("{listen: 127.0.0.1:9477}");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(
            c.unwrap().listen,
            MetricsListen::Tcp("127.0.0.1:9477".parse().unwrap())
        );
        assert!(parse_text("{listen: '[::1]:9477'}").1.is_empty());
        for bad in [
            "{listen: 0.0.0.0:9999}",
            "{listen: 192.0.2.1:9999}",
            "{listen: '[::]:9999'}",
            "{listen: 127.0.0.1:0}",
            "{listen: localhost:9999}",
            "{listen: metrics.sock}",
            "{}",
        ] {
            let (c, p) = parse_text(bad);
            assert!(c.is_none(), "{bad}");
            assert!(
                p.iter().any(|p| p.contains("metrics.listen")),
                "{bad}: {p:?}"
            );
            // The refused value is not echoed.
            assert!(!p.iter().any(|p| p.contains("9999")), "{p:?}");
        }
    }

    #[test]
    fn a_socket_takes_mode_and_group_and_tcp_does_not() {
        let (c, p) = parse_text("{listen: /run/airlock/metrics.sock, mode: '0640', group: prom}");
        assert!(p.is_empty(), "{p:?}");
        let c = c.unwrap();
        assert_eq!(c.mode, 0o640);
        assert_eq!(c.group, Some(GroupRef::Name("prom".into())));
        let (c, p) = parse_text("{listen: /run/m.sock, mode: '0666'}");
        assert!(c.is_none() && p.iter().any(|p| p.contains("metrics.mode")));
        let (c, p) = parse_text("{listen: 127.0.0.1:9477, group: prom}");
        assert!(c.is_none() && p.iter().any(|p| p.contains("metrics.group")));
        let (c, p) = parse_text("{listen: 127.0.0.1:9477, token: x}");
        assert!(c.is_none() && p.iter().any(|p| p.contains("metrics.token")));
        assert_eq!(parse_text("null"), (None, vec![]));
    }

    #[test]
    fn otlp_is_a_plain_http_url() {
        let t = |y: &str| {
            let v: Value = serde_yaml::from_str(y).unwrap();
            let mut p = Vec::new();
            (parse_tracing(Path::new("a.yaml"), &v, &mut p), p.len())
        };
        assert_eq!(
            t("{otlp: 'http://127.0.0.1:4318/'}"),
            (
                Some(TracingConf {
                    otlp: "http://127.0.0.1:4318".into()
                }),
                0
            )
        );
        for bad in [
            "{otlp: 'http://user:pw@collector.example:4318'}",
            "{otlp: 'http://collector.example:4318/?token=x'}",
            "{otlp: 'ftp://collector.example'}",
            "{otlp: 'http://'}",
            "{endpoint: 'http://127.0.0.1:4318'}",
        ] {
            assert_eq!(t(bad).0, None, "{bad}");
            assert!(t(bad).1 > 0, "{bad}");
        }
    }
}
