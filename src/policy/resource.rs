//! MCP resource read decisions: connector + URI against a role's `resources` and `deny`.
//!
//! URIs are compared structurally, never as raw strings: the scheme and host compare in any
//! case; the path is split into segments after `.`/`..` are resolved and percent-escapes of
//! printable ASCII are decoded once, so `/data-evil` never matches `/data/*` and
//! `/data/../etc` never does either. Each id has one spelling: forms a server might read
//! differently from us are refused outright: an encoded `/`, `\`, `?` or `#` (`%2F`,
//! `%5C`, `%3F`, `%23`), a fragment (a server's template variable takes it in), a query
//! with a raw or encoded `/`, `?`, `\` or `%25`, or a character outside
//! letters, digits and `-._~=&+,;:@!$'()*` (escapes of letters, digits and `-._~` in a
//! query are decoded, so it has one spelling too), an
//! encoded dot segment (`%2E%2E`), an escape of an escape (`%252F`, which a server that
//! decodes twice reads as `/`), an encoded NUL, control or non-ASCII byte, a malformed
//! escape, a segment (or host label, or port) that reads as a number but is not in
//! canonical decimal form (`05`, `+5`, `5.0`, `5e0`, `0x5`, `1_000`, ` 5`, `inf`: a server
//! reading ids with `Number()` or `strtol` takes each for `5`), an all-numeric host that
//! is not a dotted quad, an empty segment (`//` inside the path), `..` above the root, a
//! raw backslash, userinfo in the authority, anything that is not printable ASCII, and
//! URIs over [`MAX_URI_BYTES`].
//!
//! What the gateway forwards is [`Uri`]'s canonical form ([`canonical_uri`]), never the
//! spelling the agent sent: the upstream reads the resource that was checked.
//!
//! Allow patterns: exact URI (query and trailing `/` must agree), a prefix ending
//! in `/*` (strictly below it, any query), `<scheme>:*`, or `*`. Deny patterns take the same
//! forms but match in any case and ignore the query and trailing `/`; a deny
//! prefix also covers the prefix itself. A deny segment that is a number also covers every
//! segment a lenient reader takes for that number (`5abc`, `5.txt`: its leading digits, as
//! JavaScript's `parseInt` and C's `atoi` read them), and every number that rounds to the
//! same 64-bit float (`9007199254740993` for `9007199254740992`, as `Number()` reads them).
//! `deny[connector]` also holds tool patterns (no `:`), which are left to
//! [`crate::policy::tool`]; an entry that is neither kind, or a resource deny pattern that
//! does not parse, denies every resource of the connector.

use super::tool::is_tool_name;
use super::Decision;
use crate::names::is_scheme;
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
    EncodedEscape,
    EncodedControl,
    NonCanonicalNumber,
    NumericHost,
    EmptySegment,
    EscapesRoot,
    Fragment,
    QueryStructure,
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
            UriError::EncodedSeparator => "encoded slash, backslash, question mark or hash",
            UriError::EncodedDotSegment => "encoded dot segment",
            UriError::EncodedEscape => "an escape of an escape (%25 and two hex digits)",
            UriError::EncodedControl => "encoded control or non-ASCII byte",
            UriError::NonCanonicalNumber => {
                "a number not in canonical decimal form (no sign, leading zero, fraction, exponent, digit separator, space or radix prefix)"
            }
            UriError::NumericHost => "an all-numeric host that is not a dotted quad",
            UriError::EmptySegment => "empty path segment",
            UriError::EscapesRoot => "'..' above the root",
            UriError::Fragment => "fragment",
            UriError::QueryStructure => {
                "query with '/', '?', '%25' or a character outside letters, digits and -._~=&+,;:@!$'()*"
            }
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
    /// Decoded once (a `%25` is a `%` here), dot segments resolved.
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
    // A fragment names a part of a resource to a browser; an MCP server gets the whole
    // string and reads it its own way (a template variable takes it in), so none is sent.
    if rest.contains('#') {
        return Err(UriError::Fragment);
    }
    let fragment = None;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(canonical_query(q)?)),
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
            check_authority_numbers(auth)?;
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
                d if reads_as_number(d) && !is_canonical_decimal(d) => {
                    return Err(UriError::NonCanonicalNumber)
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

/// Decode percent-escapes of printable ASCII and the space, once; refuse encoded
/// separators, controls, non-ASCII, and an escape whose decoding is itself an escape.
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
        let byte = hex_pair(b.get(i + 1..i + 3)).ok_or(UriError::BadPercent)?;
        match byte {
            b'/' | b'\\' | b'?' | b'#' => return Err(UriError::EncodedSeparator),
            // `%25` then two hex digits: decoded once it is an escape again.
            b'%' if hex_pair(b.get(i + 3..i + 5)).is_some() => return Err(UriError::EncodedEscape),
            b' '..=b'~' => out.push(char::from(byte)),
            _ => return Err(UriError::EncodedControl),
        }
        i += 3;
    }
    Ok(out)
}

/// A query in its one spelling: letters, digits and `-._~=&+,;:@!$'()*` as they are,
/// escapes of letters, digits and `-._~` decoded, other escapes of printable ASCII kept
/// (uppercase hex). Refused: a raw or encoded `/`, `?`, `\\` or `#` (a template variable
/// takes the query in, and a server that decodes it reads those as path or query
/// structure), any `%25` (an escape once decoded), controls and non-ASCII bytes.
fn canonical_query(q: &str) -> Result<String, UriError> {
    let b = q.as_bytes();
    let mut out = String::with_capacity(q.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c != b'%' {
            if !(c.is_ascii_alphanumeric() || b"-._~=&+,;:@!$'()*".contains(&c)) {
                return Err(UriError::QueryStructure);
            }
            out.push(char::from(c));
            i += 1;
            continue;
        }
        let byte = hex_pair(b.get(i + 1..i + 3)).ok_or(UriError::BadPercent)?;
        match byte {
            b'/' | b'\\' | b'?' | b'#' => return Err(UriError::EncodedSeparator),
            b'%' => return Err(UriError::QueryStructure),
            c if c.is_ascii_alphanumeric() || b"-._~".contains(&c) => out.push(char::from(c)),
            b' '..=b'~' => out.push_str(&format!("%{byte:02X}")),
            _ => return Err(UriError::EncodedControl),
        }
        i += 3;
    }
    Ok(out)
}

fn hex_pair(b: Option<&[u8]>) -> Option<u8> {
    let b = b?;
    let hi = char::from(*b.first()?).to_digit(16)?;
    let lo = char::from(*b.get(1)?).to_digit(16)?;
    u8::try_from(hi * 16 + lo).ok()
}

/// Whether a decoded segment is what some common reader takes for a number: JavaScript's
/// `Number()`, Python's `int()`/`float()`, Go's `strconv` with base 0, Java's
/// `parseDouble`, Rust's `parse`. Surrounding spaces, a sign, digit separators, a
/// fraction, an exponent, a radix prefix, a float suffix, `inf` and `nan` all count.
pub fn reads_as_number(s: &str) -> bool {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let t = t.strip_prefix(['+', '-']).unwrap_or(t);
    let lower = t.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return true;
    }
    let b = lower.as_bytes();
    if b.len() > 2 && b[0] == b'0' && matches!(b[1], b'x' | b'o' | b'b') {
        return b[2..].iter().any(u8::is_ascii_hexdigit)
            && b[2..]
                .iter()
                .all(|c| c.is_ascii_hexdigit() || matches!(c, b'_' | b'.' | b'p' | b'+' | b'-'));
    }
    let b = b
        .strip_suffix(b"f")
        .or_else(|| b.strip_suffix(b"d"))
        .unwrap_or(b);
    // digits [. digits] [e [sign] digits], `_` between digits, at least one mantissa digit.
    let digits = |b: &[u8], mut i: usize| -> (usize, usize) {
        let mut n = 0;
        while i < b.len() && (b[i].is_ascii_digit() || (b[i] == b'_' && n > 0)) {
            n += usize::from(b[i] != b'_');
            i += 1;
        }
        (i, n)
    };
    let (mut i, whole) = digits(b, 0);
    let mut frac = 0;
    if b.get(i) == Some(&b'.') {
        (i, frac) = digits(b, i + 1);
    }
    if whole + frac == 0 {
        return false;
    }
    if b.get(i) == Some(&b'e') {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let (j, exp) = digits(b, i);
        if exp == 0 {
            return false;
        }
        i = j;
    }
    i == b.len()
}

/// `0`, or a digit 1-9 followed by digits: the one spelling of a non-negative integer.
pub fn is_canonical_decimal(s: &str) -> bool {
    s == "0"
        || (s.starts_with(|c: char| matches!(c, '1'..='9'))
            && s.bytes().all(|b| b.is_ascii_digit()))
}

/// Numbers in an authority have one spelling too: each label of the host and the port in
/// canonical decimal, and a host of numbers only a dotted quad (`10.1`, `167772161` and
/// `0x0a.0.0.1` all reach 10.0.0.1 through `inet_aton`).
fn check_authority_numbers(auth: &str) -> Result<(), UriError> {
    if auth.starts_with('[') {
        return Ok(());
    }
    let (host, port) = match auth.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (auth, None),
    };
    if let Some(p) = port.filter(|p| !p.is_empty()) {
        if reads_as_number(p) && !is_canonical_decimal(p) {
            return Err(UriError::NonCanonicalNumber);
        }
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels
        .iter()
        .any(|l| reads_as_number(l) && !is_canonical_decimal(l))
    {
        return Err(UriError::NonCanonicalNumber);
    }
    if !host.is_empty() && labels.iter().all(|l| is_canonical_decimal(l)) {
        let quad = labels.len() == 4 && labels.iter().all(|l| l.parse::<u8>().is_ok());
        if !quad {
            return Err(UriError::NumericHost);
        }
    }
    Ok(())
}

/// The number a lenient reader takes a segment for: its leading digits after optional
/// spaces and `+` (`0x` then hex digits, as `parseInt` reads them), as an exact decimal
/// string without leading zeros (when it fits 128 bits) and as the nearest 64-bit float.
fn lenient_number(s: &str) -> Option<(Option<String>, f64)> {
    let t = s.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let t = t.strip_prefix('+').unwrap_or(t);
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        let end = hex
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(hex.len());
        if end > 0 {
            let exact = u128::from_str_radix(&hex[..end], 16).ok();
            let float = exact.map_or(f64::INFINITY, |v| v as f64);
            return Some((exact.map(|v| v.to_string()), float));
        }
    }
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if end == 0 {
        return None;
    }
    let digits = t[..end].trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    Some((Some(digits.to_string()), digits.parse::<f64>().ok()?))
}

/// Whether a (lowercased) URI segment is the (lowercased) segment of a deny pattern: the
/// same text, or, for a pattern segment that is a number, a segment any reader could take
/// for that number.
fn deny_segment_matches(pattern: &str, seg: &str) -> bool {
    if pattern == seg {
        return true;
    }
    if !is_canonical_decimal(pattern) {
        return false;
    }
    let (Some((Some(p), pf)), Some((exact, f))) = (lenient_number(pattern), lenient_number(seg))
    else {
        return false;
    };
    exact.as_deref() == Some(p.as_str()) || pf == f
}

/// The canonical spelling of a parsed URI: lowercase scheme and host, dot segments
/// resolved, each segment's characters raw where a path may hold them and escaped
/// (uppercase hex) everywhere else; the query in its canonical spelling; never a fragment.
impl fmt::Display for Uri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.scheme)?;
        if let Some(a) = &self.authority {
            write!(f, "//{a}")?;
        }
        if self.absolute {
            f.write_str("/")?;
        }
        for (i, seg) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            for b in seg.bytes() {
                if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b) {
                    write!(f, "{}", char::from(b))?;
                } else {
                    write!(f, "%{b:02X}")?;
                }
            }
        }
        if self.trailing_slash && !self.segments.is_empty() {
            f.write_str("/")?;
        }
        if let Some(q) = &self.query {
            write!(f, "?{q}")?;
        }
        if let Some(x) = &self.fragment {
            write!(f, "#{x}")?;
        }
        Ok(())
    }
}

/// The canonical spelling of `uri` ([`Uri`]'s `Display`), or why it is refused.
pub fn canonical_uri(uri: &str) -> Result<String, UriError> {
    parse_uri(uri).map(|u| u.to_string())
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
            ResPattern::Prefix(p, pl) => {
                same_root(p, u)
                    && lower.len() >= pl.len()
                    && pl
                        .iter()
                        .zip(lower)
                        .all(|(a, b)| deny_segment_matches(a, b))
            }
            ResPattern::Exact(p, pl) => {
                same_root(p, u)
                    && lower.len() == pl.len()
                    && pl
                        .iter()
                        .zip(lower)
                        .all(|(a, b)| deny_segment_matches(a, b))
            }
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
        self.read(connector, uri).0
    }

    /// [`ResourcePolicy::decide`], with the URI to forward when it is allowed: its
    /// canonical spelling, the one that was checked.
    pub fn read(&self, connector: &str, uri: &str) -> (Decision, Option<String>) {
        match parse_uri(uri) {
            Ok(u) => {
                let d = self.decide_parsed(connector, &u);
                let forward = d.allow.then(|| u.to_string());
                (d, forward)
            }
            Err(e) => (
                Decision::deny(
                    format!("uri: {}", e.what()),
                    format!(
                        "the URI is refused ({}); send a plain, printable ASCII URI with one spelling of each id",
                        e.what()
                    ),
                ),
                None,
            ),
        }
    }

    fn decide_parsed(&self, connector: &str, u: &Uri) -> Decision {
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
            if let Some((i, _)) = c.deny.iter().find(|(_, p)| p.denies(u, &lower)) {
                return Decision::deny(
                    format!("deny.{connector}[{i}]"),
                    "the role denies this resource",
                );
            }
        }
        match c.allow.iter().find(|(_, p)| p.allows(u)) {
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
        let u = parse_uri("urn:isbn:123?x").unwrap();
        assert_eq!(u.authority, None);
        assert_eq!(u.segments, ["isbn:123"]);
        assert_eq!(u.query.as_deref(), Some("x"));
        assert_eq!(u.fragment, None);
        assert_eq!(parse_uri("urn:isbn:123?x#y"), Err(UriError::Fragment));
        assert_eq!(parse_uri("demo://r/t/5#"), Err(UriError::Fragment));
        for bad in [
            "?/../5", "?a/b", "?a?b", "?a%2Fb", "?a%3Fb", "?a%23b", "?a%25", "?a%252F", "?a b",
            "?a\"b", "?a<b",
        ] {
            assert!(parse_uri(&format!("demo://r/t/6{bad}")).is_err(), "{bad}");
        }
        for bad in ["6%3F", "6%23", "6%3fx=5"] {
            assert_eq!(
                parse_uri(&format!("demo://r/t/{bad}")),
                Err(UriError::EncodedSeparator),
                "{bad}"
            );
        }
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
        assert_eq!(parse_uri("file:///a%25b").unwrap().segments, ["a%b"]);
        assert_eq!(parse_uri("file:///a%252F"), Err(UriError::EncodedEscape));
        assert_eq!(parse_uri("file:///a%2541"), Err(UriError::EncodedEscape));
    }

    #[test]
    fn a_number_has_one_spelling() {
        for n in [
            "05",
            "5.0",
            "+5",
            "-5",
            "0x5",
            "0X5",
            "5e0",
            "5E+0",
            "5.",
            ".5",
            "0o5",
            "0b101",
            "1_000",
            "5f",
            "5d",
            "inf",
            "-Infinity",
            "NaN",
            "0x1.8p1",
            "00",
            "5 ",
            " 5",
        ] {
            assert!(reads_as_number(n), "{n:?}");
            assert!(!is_canonical_decimal(n), "{n:?}");
        }
        for word in [
            "5abc",
            "v1",
            "1.2.3",
            "2024-01-01",
            "e5",
            "0x",
            "x5",
            "_1",
            "info",
        ] {
            assert!(!reads_as_number(word), "{word:?}");
        }
        for ok in ["0", "5", "10", "9007199254740993"] {
            assert!(reads_as_number(ok) && is_canonical_decimal(ok), "{ok}");
        }
        let base = "demo://resource/dynamic/text/";
        for bad in [
            "05", "5.0", "+5", "0x5", "5e0", "%205", "5%20", "%2B5", "1_0",
        ] {
            assert_eq!(
                parse_uri(&format!("{base}{bad}")),
                Err(UriError::NonCanonicalNumber),
                "{bad}"
            );
        }
        assert_eq!(parse_uri(&format!("{base}%35")).unwrap().segments[2], "5");
        assert_eq!(parse_uri("http://10.1/x"), Err(UriError::NumericHost));
        assert_eq!(parse_uri("http://167772161/x"), Err(UriError::NumericHost));
        assert_eq!(
            parse_uri("http://0x0a.0.0.1/x"),
            Err(UriError::NonCanonicalNumber)
        );
        assert_eq!(
            parse_uri("http://h.example:080/x"),
            Err(UriError::NonCanonicalNumber)
        );
        assert!(parse_uri("http://10.0.0.1:8080/x").is_ok());
        assert!(parse_uri("http://3com.example/x").is_ok());
    }

    #[test]
    fn the_canonical_spelling_is_what_was_checked() {
        for (sent, canonical) in [
            (
                "repo://example-org/other-repo/../example-repo/SECRET",
                "repo://example-org/example-repo/SECRET",
            ),
            ("DEMO://Resource/./a/%7Eb%3Bc/", "demo://resource/a/~b;c/"),
            ("file:///a%25b/c%20d/e", "file:///a%25b/c%20d/e"),
            ("urn:isbn:123?x=%41", "urn:isbn:123?x=A"),
            ("demo://r/t/6?%78=%31&y=%20%3d", "demo://r/t/6?x=1&y=%20%3D"),
            ("file:///", "file:///"),
            ("demo://host", "demo://host"),
            ("file:///a/b/..", "file:///a/"),
            ("file:///a\"x\"", "file:///a%22x%22"),
        ] {
            let c = canonical_uri(sent).unwrap();
            assert_eq!(c, canonical, "{sent}");
            // Canonical spellings are fixed points, and parse to the same URI.
            assert_eq!(canonical_uri(&c).unwrap(), c, "{sent}");
            assert_eq!(parse_uri(&c).unwrap(), parse_uri(sent).unwrap(), "{sent}");
        }
    }

    #[test]
    fn a_denied_number_is_denied_in_every_reading() {
        let yes = |p: &str, s: &str| deny_segment_matches(p, s);
        assert!(yes("5", "5"));
        assert!(yes("5", "5abc") && yes("5", "5.txt") && yes("5", "005x"));
        assert!(yes("5", "0x5z"));
        assert!(yes("9007199254740992", "9007199254740993"));
        assert!(!yes("5", "6") && !yes("5", "50") && !yes("5", "abc5"));
        assert!(!yes("readme", "readme2"));
    }
}
