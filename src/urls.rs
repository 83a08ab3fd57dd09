//! URLs from the configuration, checked: a provider's or GitHub's base URL, an MCP
//! connector's or an authorization server's http(s) URL. A leaf: the config parses with
//! these, and the gateway's routes connect by them.

/// A provider's base URL: `https://HOST[:PORT][/PATH]`, or `http://` to this host only (a
/// key must not cross a network in clear).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderUrl {
    pub https: bool,
    /// As written (a bracketed IPv6 literal keeps its brackets).
    pub authority: String,
    pub host: String,
    pub port: u16,
    /// Without a trailing slash; empty for the root.
    pub base_path: String,
}

impl ProviderUrl {
    pub fn parse(u: &str) -> Result<ProviderUrl, &'static str> {
        let uri: hyper::Uri = u
            .parse()
            .map_err(|_| "must be a URL: https://HOST[:PORT][/PATH]")?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("must be an https:// URL (or http:// to this host)"),
        };
        let auth = uri
            .authority()
            .ok_or("must name a host: https://HOST[:PORT][/PATH]")?;
        if auth.as_str().contains('@') {
            return Err("must not carry a user or password: put the key in credentials");
        }
        if uri.query().is_some() || u.contains('#') {
            return Err("must have no query or fragment");
        }
        let host = auth.host().trim_start_matches('[').trim_end_matches(']');
        let port = auth.port_u16().unwrap_or(if https { 443 } else { 80 });
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|a| a.is_loopback());
        if !https && !loopback {
            return Err(
                "plain http goes only to this host (127.0.0.1, ::1, localhost): a provider key must not cross a network in clear",
            );
        }
        Ok(ProviderUrl {
            https,
            authority: auth.as_str().to_string(),
            host: host.to_string(),
            port,
            base_path: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// The base URL with `rest` (a path) and `query` appended.
    pub fn join(&self, rest: &str, query: Option<&str>) -> String {
        let scheme = if self.https { "https" } else { "http" };
        match query {
            Some(q) => format!("{scheme}://{}{}{rest}?{q}", self.authority, self.base_path),
            None => format!("{scheme}://{}{}{rest}", self.authority, self.base_path),
        }
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

/// A URL an OAuth document may name: https, or plain http to this host (a token must not
/// cross a network in clear).
pub fn endpoint_url(u: &str) -> Option<HttpUrl> {
    parse_http_url(u).filter(|p| p.https || p.is_loopback())
}
