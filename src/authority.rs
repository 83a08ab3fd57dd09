//! Where a proxy request wants to go: the CONNECT authority (`host:port`) or the host of
//! an absolute `http://` URI, as a lower-case name or an IP literal. Pure. Names are
//! ASCII host names (clients send IDNs as punycode); a name that some stack would read as
//! a number (`127.1`, `0x7f.1`, `2130706433`) is refused rather than guessed at.

use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// As the policy and the journal show it: the name, or the address (IPv6 unbracketed).
    pub fn text(&self) -> String {
        match self {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

/// `host:port` or `[v6]:port`; the port is required when `default_port` is `None`.
pub fn parse_authority(s: &str, default_port: Option<u16>) -> Option<Target> {
    if s.is_empty() || s.len() > 300 || s.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return None,
        };
        let ip: std::net::Ipv6Addr = v6.parse().ok()?;
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (h, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        (host(h)?, port)
    };
    let port = match port {
        Some(p) => parse_port(p)?,
        None => default_port?,
    };
    Some(Target { host, port })
}

fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse().ok().filter(|&n| n != 0)
}

/// A host that is not bracketed: an IPv4 literal in dotted-quad form, or a name.
fn host(h: &str) -> Option<Host> {
    if let Ok(v4) = h.parse::<std::net::Ipv4Addr>() {
        return Some(Host::Ip(IpAddr::V4(v4)));
    }
    let h = h.strip_suffix('.').unwrap_or(h);
    if h.is_empty() || h.len() > 253 {
        return None;
    }
    let labels: Vec<&str> = h.split('.').collect();
    for l in &labels {
        let ok = !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-');
        if !ok {
            return None;
        }
    }
    // The WHATWG URL rule: a host whose last label is a number is an IPv4 address to
    // browsers and inet_aton, so it is not a name here either.
    let last = labels.last()?;
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || (last.len() > 1
            && last[..2].eq_ignore_ascii_case("0x")
            && last[2..].bytes().all(|b| b.is_ascii_hexdigit()));
    if numeric {
        return None;
    }
    Some(Host::Name(h.to_ascii_lowercase()))
}

/// Does a TLS server name (as [`super::client_hello`] gives it) match the target?
/// A name must be sent for a name target and match it exactly (case-insensitive); an IP
/// literal target must come with no server name at all.
pub fn server_name_matches(target: &Host, server_name: Option<&str>) -> bool {
    match (target, server_name) {
        (Host::Name(n), Some(s)) => n.eq_ignore_ascii_case(s),
        (Host::Ip(_), None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str, port: u16) -> Option<Target> {
        Some(Target {
            host: Host::Name(n.into()),
            port,
        })
    }

    fn ip(a: &str, port: u16) -> Option<Target> {
        Some(Target {
            host: Host::Ip(a.parse().unwrap()),
            port,
        })
    }

    #[test]
    fn authorities() {
        let cases: &[(&str, Option<u16>, Option<Target>)] = &[
            ("example.com:443", None, name("example.com", 443)),
            ("Example.COM.:443", None, name("example.com", 443)),
            (
                "a_b.example-1.com:8443",
                None,
                name("a_b.example-1.com", 8443),
            ),
            ("example.com", None, None),
            ("example.com", Some(80), name("example.com", 80)),
            ("example.com:", None, None),
            ("example.com:0", None, None),
            ("example.com:65536", None, None),
            ("example.com:+443", None, None),
            ("example.com:443:443", None, None),
            ("1.2.3.4:443", None, ip("1.2.3.4", 443)),
            ("[::1]:443", None, ip("::1", 443)),
            ("[::ffff:10.0.0.1]:443", None, ip("::ffff:10.0.0.1", 443)),
            ("[::1]", Some(80), ip("::1", 80)),
            ("[::1]x:443", None, None),
            ("[fe80::1%eth0]:443", None, None),
            ("::1:443", None, None),
            ("127.1:443", None, None),
            ("2130706433:443", None, None),
            ("0x7f.1:443", None, None),
            ("0177.0.0.1:443", None, None),
            ("a.0x7f000001:443", None, None),
            ("user@example.com:443", None, None),
            ("exa mple.com:443", None, None),
            ("-x.com:443", None, None),
            ("x..com:443", None, None),
            ("é.com:443", None, None),
            ("", None, None),
            (":443", None, None),
            ("x.123abc:443", None, name("x.123abc", 443)),
        ];
        for (s, def, want) in cases {
            assert_eq!(&parse_authority(s, *def), want, "{s}");
        }
    }

    #[test]
    fn server_names() {
        let n = Host::Name("example.com".into());
        let i = Host::Ip("93.184.215.14".parse().unwrap());
        assert!(server_name_matches(&n, Some("example.com")));
        assert!(server_name_matches(&n, Some("EXAMPLE.com")));
        assert!(!server_name_matches(&n, Some("evil.com")));
        assert!(!server_name_matches(&n, Some("www.example.com")));
        assert!(!server_name_matches(&n, None));
        assert!(server_name_matches(&i, None));
        assert!(!server_name_matches(&i, Some("example.com")));
    }
}
