//! MCP resource read decisions: connector + URI against a role's `resources` and `deny`.
//!
//! URIs are compared structurally, never as raw strings: the scheme and host compare in any
//! case; the path is split into segments after `.`/`..` are resolved and percent-escapes of
//! printable ASCII are decoded, so `/data-evil` never matches `/data/*` and `/data/../etc`
//! never does either. Forms a server might read differently from us are refused outright:
//! an encoded `/` or `\` (`%2F`, `%5C`), an encoded dot segment (`%2E%2E`), an encoded NUL,
//! control or non-ASCII byte, a malformed escape, an empty segment (`//` inside the path),
//! `..` above the root, a raw backslash, userinfo in the authority, anything that is not
//! printable ASCII, and URIs over [`MAX_URI_BYTES`].
//!
//! Allow patterns: exact URI (query, fragment and trailing `/` must agree), a prefix ending
//! in `/*` (strictly below it, any query), `<scheme>:*`, or `*`. Deny patterns take the same
//! forms but match in any case and ignore the query, fragment and trailing `/`; a deny
//! prefix also covers the prefix itself. `deny[connector]` also holds tool patterns (no
//! `:`), which are left to [`crate::policy::tool`]; an entry that is neither kind, or a
//! resource deny pattern that does not parse, denies every resource of the connector.

use super::tool::is_tool_name;
use super::Decision;
use crate::role::names::is_scheme;
use crate::role::Role;
use std::collections::HashMap;
use std::fmt;

/// Longest URI accepted, in bytes.
pub const MAX_URI_BYTES: usize = 2048;

/// Why a URI is refused. Never carries the URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriError {
    Empty,
    TooLong,
    NotPrintableAscii,
    Backslash,
    NotAUri,
    Userinfo,
    BadAuthority,
    BadPercent,
    EncodedSeparator,
    EncodedDotSegment,
    EncodedControl,
    EmptySegment,
    EscapesRoot,
}

impl UriError {
    pub fn what(self) -> &'static str {
        match self {
            UriError::Empty => "empty URI",
            UriError::TooLong => "URI too long",
            UriError::NotPrintableAscii => "not printable ASCII",
            UriError::Backslash => "backslash",
            UriError::NotAUri => "no scheme",
            UriError::Userinfo => "userinfo in authority",
            UriError::BadAuthority => "malformed authority",
            UriError::BadPercent => "malformed percent-escape",
            UriError::EncodedSeparator => "encoded slash or backslash",
            UriError::EncodedDotSegment => "encoded dot segment",
            UriError::EncodedControl => "encoded control or non-ASCII byte",
            UriError::EmptySegment => "empty path segment",
            UriError::EscapesRoot => "'..' above the root",
        }
    }
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())
    }
}

/// A URI taken apart and normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    /// Lowercase.
    pub scheme: String,
    /// Lowercase; `None` when the URI has no `//` authority.
    pub authority: Option<String>,
    /// The path starts with `/`.
    pub absolute: bool,
    /// Decoded, dot segments resolved.
    pub segments: Vec<String>,
    pub trailing_slash: bool,
    pub query: Option<String>,
    pub fragment: Option<String>,
}

/// Parse and normalise a URI, or say why it is refused.
pub fn parse_uri(uri: &str) -> Result<Uri, UriError> {
    if uri.is_empty() {
        return Err(UriError::Empty);
    }
    if uri.len() > MAX_URI_BYTES {
        return Err(UriError::TooLong);
    }
    if !uri.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(UriError::NotPrintableAscii);
    }
    if uri.contains('\\') {
        return Err(UriError::Backslash);
    }
    let (scheme, rest) = uri.split_once(':').ok_or(UriError::NotAUri)?;
    if !is_scheme(scheme) {
        return Err(UriError::NotAUri);
    }
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f.to_string())),
        None => (rest, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q.to_string())),
        None => (rest, None),
    };
    let (authority, path) = match rest.strip_prefix("//") {
        Some(after) => {
            let end = after.find('/').unwrap_or(after.len());
            let auth = &after[..end];
            if auth.contains('@') {
                return Err(UriError::Userinfo);
            }
            if auth.contains('%') {
                return Err(UriError::BadAuthority);
            }
            (Some(auth.to_ascii_lowercase()), &after[end..])
        }
        None => (None, rest),
    };
    let (absolute, path) = match path.strip_prefix('/') {
        Some(p) => (true, p),
        None => (false, path),
    };
    let mut segments: Vec<String> = Vec::new();
    let mut trailing_slash = false;
    if !path.is_empty() {
        let raw: Vec<&str> = path.split('/').collect();
        let last = raw.len() - 1;
        for (i, seg) in raw.iter().enumerate() {
            trailing_slash = false;
            if seg.is_empty() {
                if i == last {
                    trailing_slash = true;
                    continue;
                }
                return Err(UriError::EmptySegment);
            }
            let decoded = decode_segment(seg)?;
            match decoded.as_str() {
                "." | ".." if seg.contains('%') => return Err(UriError::EncodedDotSegment),
                "." => trailing_slash = i == last,
                ".." => {
                    if segments.pop().is_none() {
                        return Err(UriError::EscapesRoot);
                    }
                    trailing_slash = i == last;
                }
                _ => segments.push(decoded),
            }
        }
    }
    Ok(Uri {
        scheme: scheme.to_ascii_lowercase(),
        authority,
        absolute,
        segments,
        trailing_slash,
        query,
        fragment,
    })
}

/// Decode percent-escapes of printable ASCII; keep `%25` (so nothing decodes twice);
/// refuse encoded separators, controls and non-ASCII.
fn decode_segment(seg: &str) -> Result<String, UriError> {
    let b = seg.as_bytes();
    let mut out = String::with_capacity(seg.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(char::from(b[i]));
            i += 1;
            continue;
        }
        let hi = b.get(i + 1).and_then(|c| char::from(*c).to_digit(16));
        let lo = b.get(i + 2).and_then(|c| char::from(*c).to_digit(16));
        let (Some(hi), Some(lo)) = (hi, lo) else {
            return Err(UriError::BadPercent);
        };
        let byte = (hi * 16 + lo) as u8;
        match byte {
            b'/' | b'\\' => return Err(UriError::EncodedSeparator),
            b'%' => out.push_str("%25"),
            0x21..=0x7E => out.push(char::from(byte)),
            b' ' => out.push_str("%20"),
            _ => return Err(UriError::EncodedControl),
        }
        i += 3;
    }
    Ok(out)
}

#[derive(Debug, Clone)]
enum ResPattern {
    All,
    Scheme(String),
    /// Segments of the base, matched in case (allow) and lowercased (deny).
    Prefix(Uri, Vec<String>),
    Exact(Uri, Vec<String>),
}

impl ResPattern {
    fn parse(p: &str) -> Option<ResPattern> {
        if p == "*" {
            return Some(ResPattern::All);
        }
        if let Some(s) = p.strip_suffix(":*") {
            return is_scheme(s).then(|| ResPattern::Scheme(s.to_ascii_lowercase()));
        }
        let (base, prefix) = match p.strip_suffix('*') {
            Some(b) if b.ends_with('/') => (b, true),
            Some(_) => return None,
            None => (p, false),
        };
        if base.contains('*') {
            return None;
        }
        let u = parse_uri(base).ok()?;
        let lower = lowered(&u.segments);
        if prefix {
            if u.query.is_some() || u.fragment.is_some() {
                return None;
            }
            Some(ResPattern::Prefix(u, lower))
        } else {
            Some(ResPattern::Exact(u, lower))
        }
    }

    fn allows(&self, u: &Uri) -> bool {
        match self {
            ResPattern::All => true,
            ResPattern::Scheme(s) => &u.scheme == s,
            ResPattern::Prefix(p, _) => {
                same_root(p, u)
                    && u.segments.len() > p.segments.len()
                    && u.segments.starts_with(&p.segments)
            }
            ResPattern::Exact(p, _) => p == u,
        }
    }

    /// Deny: any case, no query, fragment or trailing `/`; a prefix covers itself.
    fn denies(&self, u: &Uri, lower: &[String]) -> bool {
        match self {
            ResPattern::All => true,
            ResPattern::Scheme(s) => &u.scheme == s,
            ResPattern::Prefix(p, pl) => same_root(p, u) && lower.starts_with(pl),
            ResPattern::Exact(p, pl) => same_root(p, u) && lower == pl.as_slice(),
        }
    }
}

fn same_root(p: &Uri, u: &Uri) -> bool {
    p.scheme == u.scheme && p.authority == u.authority && p.absolute == u.absolute
}

fn lowered(segments: &[String]) -> Vec<String> {
    segments.iter().map(|s| s.to_ascii_lowercase()).collect()
}

#[derive(Debug, Clone, Default)]
struct ConnectorResources {
    allow: Vec<(usize, ResPattern)>,
    deny: Vec<(usize, ResPattern)>,
    deny_all: Option<usize>,
}

/// A role's resource policy, compiled once.
#[derive(Debug, Clone, Default)]
pub struct ResourcePolicy {
    connectors: HashMap<String, ConnectorResources>,
}

impl ResourcePolicy {
    pub fn compile(role: &Role) -> ResourcePolicy {
        let mut connectors = HashMap::new();
        for (name, patterns) in &role.resources {
            let mut c = ConnectorResources::default();
            for (i, p) in patterns.iter().enumerate() {
                if let Some(rp) = ResPattern::parse(p) {
                    c.allow.push((i, rp));
                }
            }
            for (i, p) in role.deny.get(name).into_iter().flatten().enumerate() {
                if p == "*" || p.contains(':') {
                    match ResPattern::parse(p) {
                        Some(rp) => c.deny.push((i, rp)),
                        None => {
                            c.deny_all.get_or_insert(i);
                        }
                    }
                } else if !is_tool_pattern(p) {
                    c.deny_all.get_or_insert(i);
                }
            }
            connectors.insert(name.clone(), c);
        }
        ResourcePolicy { connectors }
    }

    pub fn decide(&self, connector: &str, uri: &str) -> Decision {
        let u = match parse_uri(uri) {
            Ok(u) => u,
            Err(e) => {
                return Decision::deny(
                    format!("uri: {}", e.what()),
                    format!(
                        "the URI is refused ({}); send a plain, printable ASCII URI",
                        e.what()
                    ),
                )
            }
        };
        let Some(c) = self.connectors.get(connector) else {
            return Decision::deny(
                "default: unknown connector",
                "the role lists no resources for this connector",
            );
        };
        if let Some(i) = c.deny_all {
            return Decision::deny(
                format!("deny.{connector}[{i}]"),
                "this deny entry is not a valid pattern, so every resource of the connector is refused",
            );
        }
        if !c.deny.is_empty() {
            let lower = lowered(&u.segments);
            if let Some((i, _)) = c.deny.iter().find(|(_, p)| p.denies(&u, &lower)) {
                return Decision::deny(
                    format!("deny.{connector}[{i}]"),
                    "the role denies this resource",
                );
            }
        }
        match c.allow.iter().find(|(_, p)| p.allows(&u)) {
            Some((i, _)) => Decision::allow(
                format!("resources.{connector}[{i}]"),
                "the role lists this resource",
            ),
            None => Decision::deny(
                "default: resource not listed",
                format!("no resources.{connector} pattern lists this URI"),
            ),
        }
    }
}

fn is_tool_pattern(p: &str) -> bool {
    match p.strip_suffix('*') {
        Some(stem) => stem.is_empty() || is_tool_name(stem),
        None => is_tool_name(p),
    }
}

/// One-off decision; compile a [`ResourcePolicy`] when deciding more than once.
pub fn decide(role: &Role, connector: &str, uri: &str) -> Decision {
    ResourcePolicy::compile(role).decide(connector, uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalises() {
        let u = parse_uri("FILE://Host.Example/data/./a/../b%41/").unwrap();
        assert_eq!(u.scheme, "file");
        assert_eq!(u.authority.as_deref(), Some("host.example"));
        assert_eq!(u.segments, ["data", "bA"]);
        assert!(u.trailing_slash);
        let u = parse_uri("urn:isbn:123?x#y").unwrap();
        assert_eq!(u.authority, None);
        assert_eq!(u.segments, ["isbn:123"]);
        assert_eq!(u.query.as_deref(), Some("x"));
        assert_eq!(u.fragment.as_deref(), Some("y"));
        assert_eq!(
            parse_uri("file:///a/%2e%2e/x"),
            Err(UriError::EncodedDotSegment)
        );
        assert_eq!(parse_uri("file:///a%2Fb"), Err(UriError::EncodedSeparator));
        assert_eq!(parse_uri("file:///a%5cb"), Err(UriError::EncodedSeparator));
        assert_eq!(parse_uri("file:///a%00"), Err(UriError::EncodedControl));
        assert_eq!(parse_uri("file:///a%C3%A9"), Err(UriError::EncodedControl));
        assert_eq!(parse_uri("file:///a%zz"), Err(UriError::BadPercent));
        assert_eq!(parse_uri("file:///a%4"), Err(UriError::BadPercent));
        assert_eq!(parse_uri("file:///../etc"), Err(UriError::EscapesRoot));
        assert_eq!(parse_uri("file:///a//b"), Err(UriError::EmptySegment));
        assert_eq!(parse_uri("file:///a\\b"), Err(UriError::Backslash));
        assert_eq!(parse_uri("file:///a b"), Err(UriError::NotPrintableAscii));
        assert_eq!(parse_uri("/data/x"), Err(UriError::NotAUri));
        assert_eq!(parse_uri("http://u:p@h/x"), Err(UriError::Userinfo));
        assert_eq!(parse_uri("file:///a%25b").unwrap().segments, ["a%25b"]);
    }
}
