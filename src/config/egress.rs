//! airlockd's `egress` key: how runs' proxied connections are resolved and which ports
//! they may use.
//!
//! ```yaml
//! egress:
//!   nameservers: ["127.0.0.1:5353", "9.9.9.9"]   # default: /etc/resolv.conf's, port 53
//!   ports: [443]                                 # CONNECT ports (default 443)
//!   http_ports: [80]                             # plain HTTP ports (default 80)
//!   destinations:                                # named lists the host grants to roles
//!     crates: {hosts: [index.crates.example, static.crates.example]}
//!     npm: {hosts: [registry.npm.example], methods: [GET, HEAD]}
//!     corp: {hosts: [npm.corp.example], credential: corp-token, header: Authorization}
//!   grants: {code: [crates, npm]}                 # role name or class -> lists
//! ```
//!
//! See [`crate::policy::egress::destinations`] for what a destination means.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml::Value;

use crate::diag::{index, key, shows_key, Problem};

/// `egress.ports` when the config names none: TLS tunnels.
pub const DEFAULT_CONNECT_PORTS: &[u16] = &[443];
/// `egress.http_ports` when the config names none: plain HTTP.
pub const DEFAULT_HTTP_PORTS: &[u16] = &[80];

/// One `egress.destinations.<name>` entry, as the config holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Destination {
    /// Lower-case host names or `*.suffix` (one label).
    pub hosts: Vec<String>,
    /// `None`: `egress.ports`.
    pub ports: Option<Vec<u16>>,
    /// Upper-case HTTP methods; empty: any.
    pub methods: Vec<String>,
    /// Path globs (`*` any run of characters, `/` included); empty: any.
    pub paths: Vec<String>,
    /// A `credentials` name whose secret is added to each request.
    pub credential: Option<String>,
    /// The header carrying it (`Authorization`: `Bearer <secret>`; another: as is).
    pub header: Option<String>,
    /// A CA for this destination's TLS instead of the system store: airlockd's for a
    /// terminated destination's upstream, the run's bundle for a tunnel.
    pub ca_file: Option<PathBuf>,
    /// The host's word that this destination's answer bodies cannot be scanned for the
    /// credential (its headers still are): they go on as they come.
    pub passthrough_body: bool,
}

impl Destination {
    /// Whether airlockd terminates TLS for it (to check requests or add a credential).
    pub fn terminated(&self) -> bool {
        !self.methods.is_empty() || !self.paths.is_empty() || self.credential.is_some()
    }
}

/// `egress.destinations` and `egress.grants`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DestinationsConf {
    pub destinations: BTreeMap<String, Destination>,
    /// Role name or class -> destination names, in the config's order.
    pub grants: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressConf {
    /// `None`: the host's /etc/resolv.conf, read at each launch.
    pub nameservers: Option<Vec<SocketAddr>>,
    pub ports: Vec<u16>,
    pub http_ports: Vec<u16>,
    /// `destinations` and `grants`.
    pub lists: DestinationsConf,
}

impl Default for EgressConf {
    fn default() -> Self {
        EgressConf {
            nameservers: None,
            ports: DEFAULT_CONNECT_PORTS.to_vec(),
            http_ports: DEFAULT_HTTP_PORTS.to_vec(),
            lists: DestinationsConf::default(),
        }
    }
}

const KEYS: &[&str] = &[
    "nameservers",
    "ports",
    "http_ports",
    "destinations",
    "grants",
];
const DEST_KEYS: &[&str] = &[
    "hosts",
    "ports",
    "methods",
    "paths",
    "credential",
    "header",
    "ca_file",
    "passthrough_body",
];
const MAX_LIST: usize = 16;
/// Most destinations, hosts in one, and paths in one.
const MAX_DESTINATIONS: usize = 64;
const MAX_HOSTS: usize = 64;
const MAX_PATHS: usize = 64;
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Parse `egress` (at the top of `file`), adding what is wrong to `problems`.
/// `has_credential`: whether a `credentials` entry of that name exists.
pub fn parse(
    file: &Path,
    v: &Value,
    has_credential: &dyn Fn(&str) -> bool,
    problems: &mut Vec<Problem>,
) -> EgressConf {
    let mut out = EgressConf::default();
    let mut problem = |path: &str, msg: &str| problems.push(Problem::new(file, path, msg));
    let Some(m) = v.as_mapping() else {
        problem(
            "egress",
            "must be a mapping with nameservers, ports, http_ports, destinations, grants",
        );
        return out;
    };
    for k in m.keys() {
        match k.as_str() {
            Some(k) if KEYS.contains(&k) => {}
            Some(k) if crate::secret_shapes::is_plain_key(k) => problem(
                &key("egress", k),
                &format!("unknown key; allowed: {}", KEYS.join(", ")),
            ),
            _ => problem(
                &key("egress", "<unknown key>"),
                &format!("unknown key; allowed: {}", KEYS.join(", ")),
            ),
        }
    }
    let get = |k: &str| m.get(Value::from(k));
    if let Some(v) = get("nameservers") {
        let at = key("egress", "nameservers");
        match v.as_sequence() {
            Some(items) if !items.is_empty() && items.len() <= MAX_LIST => {
                let mut list = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_str().and_then(nameserver) {
                        Some(a) => list.push(a),
                        None => problem(
                            &index(&at, i),
                            "must be an IP address, optionally with a port: 9.9.9.9, 127.0.0.1:5353, [2620:fe::fe]:53",
                        ),
                    }
                }
                out.nameservers = Some(list);
            }
            _ => problem(&at, "must be a list of 1 to 16 nameserver addresses"),
        }
    }
    for (name, slot) in [
        ("ports", &mut out.ports),
        ("http_ports", &mut out.http_ports),
    ] {
        let Some(v) = get(name) else { continue };
        let at = key("egress", name);
        let ports = port_list(v);
        match ports {
            Some(p) if p.len() <= MAX_LIST => *slot = p,
            _ => problem(
                &at,
                "must be a list of at most 16 TCP ports (1-65535); [] allows none",
            ),
        }
    }
    if let Some(v) = get("destinations") {
        out.lists.destinations = destinations(v, has_credential, &mut problem);
    }
    if let Some(v) = get("grants") {
        // Names of every entry, valid or not: a grant of a broken entry is that entry's
        // problem, said once.
        let known: Vec<String> = get("destinations")
            .and_then(Value::as_mapping)
            .map(|m| {
                m.keys()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        out.lists.grants = grants(v, &known, &mut problem);
    }
    out
}

/// A map key as a problem path shows it: itself when plain, else by position.
fn shown(parent: &str, k: &Value, i: usize) -> String {
    match k.as_str() {
        Some(k) if shows_key(k) => key(parent, k),
        _ => key(parent, &format!("<key {i}>")),
    }
}

fn destinations(
    v: &Value,
    has_credential: &dyn Fn(&str) -> bool,
    problem: &mut dyn FnMut(&str, &str),
) -> std::collections::BTreeMap<String, Destination> {
    let mut out = std::collections::BTreeMap::new();
    let at = key("egress", "destinations");
    let Some(m) = v.as_mapping() else {
        problem(&at, "must be a mapping of names to {hosts, ports?, methods?, paths?, credential?, header?, ca_file?, passthrough_body?}");
        return out;
    };
    if m.len() > MAX_DESTINATIONS {
        problem(&at, "at most 64 destinations");
        return out;
    }
    for (i, (k, v)) in m.iter().enumerate() {
        let here = shown(&at, k, i);
        let name = match k.as_str() {
            Some(n) if shows_key(n) => n.to_string(),
            _ => {
                problem(
                    &here,
                    "a destination's name must be a plain name (letters, digits, _ and -)",
                );
                continue;
            }
        };
        if let Some(d) = destination(&here, v, has_credential, problem) {
            out.insert(name, d);
        }
    }
    out
}

fn destination(
    at: &str,
    v: &Value,
    has_credential: &dyn Fn(&str) -> bool,
    problem: &mut dyn FnMut(&str, &str),
) -> Option<Destination> {
    let Some(m) = v.as_mapping() else {
        problem(at, "must be a mapping with hosts and optionally ports, methods, paths, credential, header, ca_file, passthrough_body");
        return None;
    };
    let mut ok = true;
    for (i, k) in m.keys().enumerate() {
        if !k.as_str().is_some_and(|k| DEST_KEYS.contains(&k)) {
            problem(
                &shown(at, k, i),
                &format!("unknown key; allowed: {}", DEST_KEYS.join(", ")),
            );
            ok = false;
        }
    }
    let get = |k: &str| m.get(Value::from(k));
    let mut d = Destination::default();
    let strings = |k: &str,
                   max: usize,
                   problem: &mut dyn FnMut(&str, &str),
                   what: &str|
     -> Option<Vec<(usize, String)>> {
        let v = get(k)?;
        let at = key(at, k);
        match v.as_sequence() {
            Some(items) if !items.is_empty() && items.len() <= max => {
                let mut list = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(s) => list.push((i, s.to_string())),
                        None => problem(&index(&at, i), what),
                    }
                }
                Some(list)
            }
            _ => {
                problem(&at, &format!("must be a list of 1 to {max}: {what}"));
                None
            }
        }
    };
    const HOST: &str = "must be a host name (index.crates.example) or *.suffix covering one label (*.crates.example); never a bare * or an IP address";
    match strings("hosts", MAX_HOSTS, problem, HOST) {
        Some(list) => {
            for (i, h) in list {
                match host_pattern(&h) {
                    Some(h) => d.hosts.push(h),
                    None => {
                        problem(&index(&key(at, "hosts"), i), HOST);
                        ok = false;
                    }
                }
            }
        }
        None => {
            if get("hosts").is_none() {
                problem(&key(at, "hosts"), "required: the destination's host names");
            }
            ok = false;
        }
    }
    if let Some(v) = get("ports") {
        let ports = port_list(v);
        match ports {
            Some(p) if !p.is_empty() && p.len() <= MAX_LIST => d.ports = Some(p),
            _ => {
                problem(
                    &key(at, "ports"),
                    "must be a list of 1 to 16 TCP ports (1-65535)",
                );
                ok = false;
            }
        }
    }
    const METHOD: &str = "must be an HTTP method: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
    if let Some(list) = strings("methods", METHODS.len(), problem, METHOD) {
        for (i, m) in list {
            if METHODS.contains(&m.as_str()) {
                d.methods.push(m);
            } else {
                problem(&index(&key(at, "methods"), i), METHOD);
                ok = false;
            }
        }
    } else if get("methods").is_some() {
        ok = false;
    }
    const PATH: &str = "must be a path glob starting with / (* matches any run of characters), at most 256 printable ASCII characters";
    if let Some(list) = strings("paths", MAX_PATHS, problem, PATH) {
        for (i, p) in list {
            let good = p.starts_with('/')
                && p.len() <= 256
                && p.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#');
            if good {
                d.paths.push(p);
            } else {
                problem(&index(&key(at, "paths"), i), PATH);
                ok = false;
            }
        }
    } else if get("paths").is_some() {
        ok = false;
    }
    match get("credential") {
        None => {}
        Some(Value::String(c)) if has_credential(c) => d.credential = Some(c.clone()),
        Some(_) => {
            problem(&key(at, "credential"), "must name an entry of credentials");
            ok = false;
        }
    }
    match get("header") {
        None => {}
        Some(Value::String(h)) if d.credential.is_some() && header_name(h) => {
            d.header = Some(h.clone())
        }
        Some(Value::String(h)) if header_name(h) => {
            problem(
                &key(at, "header"),
                "names the header of a credential: set credential too",
            );
            ok = false;
        }
        Some(_) => {
            problem(
                &key(at, "header"),
                "must be an HTTP header name (letters, digits and -)",
            );
            ok = false;
        }
    }
    match get("ca_file") {
        None => {}
        Some(Value::String(p)) if p.starts_with('/') && !p.contains('\0') => {
            d.ca_file = Some(p.into())
        }
        Some(_) => {
            problem(
                &key(at, "ca_file"),
                "must be the absolute path of a PEM file of CA certificates",
            );
            ok = false;
        }
    }
    match get("passthrough_body") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) if d.credential.is_some() => d.passthrough_body = true,
        Some(Value::Bool(true)) => {
            problem(
                &key(at, "passthrough_body"),
                "only for a destination with a credential (nothing else is withheld from its answers)",
            );
            ok = false;
        }
        Some(_) => {
            problem(&key(at, "passthrough_body"), "must be true or false");
            ok = false;
        }
    }
    ok.then_some(d)
}

fn header_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A host name (lower-cased) or `*.suffix` whose suffix is a name of two labels or more.
fn host_pattern(s: &str) -> Option<String> {
    let (wild, name) = match s.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let t = crate::authority::parse_authority(name, Some(443))?;
    let crate::authority::Host::Name(n) = t.host else {
        return None;
    };
    // The authority parser takes `name:port`; a destination host has no port.
    if name.contains(':') || name.ends_with('.') || (wild && !n.contains('.')) {
        return None;
    }
    Some(if wild { format!("*.{n}") } else { n })
}

fn grants(
    v: &Value,
    known: &[String],
    problem: &mut dyn FnMut(&str, &str),
) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    let at = key("egress", "grants");
    let Some(m) = v.as_mapping() else {
        problem(
            &at,
            "must be a mapping of role names or classes to lists of egress.destinations names",
        );
        return out;
    };
    for (i, (k, v)) in m.iter().enumerate() {
        let here = shown(&at, k, i);
        let Some(who) = k
            .as_str()
            .filter(|k| crate::names::is_role_name(k) && shows_key(k))
        else {
            problem(
                &here,
                "must be a role name or a class (lower case letters, digits and -)",
            );
            continue;
        };
        let Some(items) = v.as_sequence().filter(|s| s.len() <= MAX_DESTINATIONS) else {
            problem(&here, "must be a list of egress.destinations names");
            continue;
        };
        let mut names = Vec::new();
        for (j, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(n) if known.iter().any(|k| k == n) => names.push(n.to_string()),
                _ => problem(&index(&here, j), "names no entry of egress.destinations"),
            }
        }
        out.insert(who.to_string(), names);
    }
    out
}

fn nameserver(s: &str) -> Option<SocketAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    s.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

/// A YAML list of TCP ports (1-65535), or `None` when it is not one.
fn port_list(v: &Value) -> Option<Vec<u16>> {
    v.as_sequence()?
        .iter()
        .map(|p| {
            p.as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .filter(|&n| n != 0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> (EgressConf, Vec<String>) {
        let v: Value = serde_yaml::from_str(text).unwrap();
        let mut p = Vec::new();
        let c = parse(
            Path::new("/etc/airlock/airlock.yaml"),
            &v,
            &|c: &str| c == "corp-npm-token",
            &mut p,
        );
        (c, p.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn good() {
        let (c, p) = run("{nameservers: ['127.0.0.1:5353', '9.9.9.9', '[::1]:53'], ports: [443, 8443], http_ports: []}");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(
            c.nameservers,
            Some(vec![
                "127.0.0.1:5353".parse().unwrap(),
                "9.9.9.9:53".parse().unwrap(),
                "[::1]:53".parse().unwrap()
            ])
        );
        assert_eq!(c.ports, vec![443, 8443]);
        assert!(c.http_ports.is_empty());
        assert_eq!(run("{}").0, EgressConf::default());
    }

    #[test]
    fn bad_names_file_and_key_never_the_value() {
        let (_, p) = run("{nameservers: ['dns.example:53', 'sk-ant-api03-abcdefghijklmnop']}");
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with(
                "/etc/airlock/airlock.yaml: egress.nameservers[0]: must be an IP address"
            ),
            "{p:?}"
        );
        assert!(
            p.iter()
                .all(|m| !m.contains("dns.example") && !m.contains("sk-ant")),
            "{p:?}"
        );
        let (_, p) = run("{ports: [443, 70000]}");
        assert!(p[0].contains("egress.ports: must be a list"), "{p:?}");
        let (_, p) = run("{port: [443]}");
        assert!(
            p[0].contains("egress.port: unknown key; allowed: nameservers, ports, http_ports, destinations, grants"),
            "{p:?}"
        );
        let (_, p) = run("{nameservers: []}");
        assert!(
            p[0].contains("egress.nameservers: must be a list of 1 to 16"),
            "{p:?}"
        );
        let (_, p) = run("[1]");
        assert!(p[0].contains("egress: must be a mapping"), "{p:?}");
    }

    #[test]
    fn destinations_and_grants() {
        let (c, p) = run(r#"
destinations:
  crates: {hosts: [index.crates.example, '*.crates.example']}
  npm: {hosts: [Registry.NPM.example], methods: [GET, HEAD], ports: [443, 8443]}
  corp-npm: {hosts: [npm.corp.example], credential: corp-npm-token, header: Authorization, ca_file: /etc/airlock/corp-ca.pem, paths: ['/-/*', '/@corp/*'], passthrough_body: true}
grants:
  code: [crates, npm, corp-npm]
  test-engineer: [crates]
"#);
        assert!(p.is_empty(), "{p:?}");
        let l = &c.lists;
        assert_eq!(
            l.destinations["crates"].hosts,
            ["index.crates.example", "*.crates.example"]
        );
        assert!(!l.destinations["crates"].terminated());
        assert_eq!(l.destinations["npm"].hosts, ["registry.npm.example"]);
        assert_eq!(l.destinations["npm"].ports, Some(vec![443, 8443]));
        assert!(l.destinations["npm"].terminated());
        let corp = &l.destinations["corp-npm"];
        assert_eq!(corp.credential.as_deref(), Some("corp-npm-token"));
        assert_eq!(corp.header.as_deref(), Some("Authorization"));
        assert_eq!(corp.paths, ["/-/*", "/@corp/*"]);
        assert!(corp.passthrough_body && !l.destinations["npm"].passthrough_body);
        assert_eq!(l.grants["code"], ["crates", "npm", "corp-npm"]);
        assert_eq!(l.grants["test-engineer"], ["crates"]);
    }

    #[test]
    fn bad_destinations_name_the_key_never_the_value() {
        let cases: &[(&str, &str)] = &[
            ("{destinations: {a: {hosts: []}}}", "egress.destinations.a.hosts: must be a list of 1 to 64"),
            ("{destinations: {a: {ports: [443]}}}", "egress.destinations.a.hosts: required"),
            ("{destinations: {a: {hosts: ['*']}}}", "egress.destinations.a.hosts[0]: must be a host name"),
            ("{destinations: {a: {hosts: [ok.example, '*.*.sk-ant-api03-abcdefghijk.example']}}}", "egress.destinations.a.hosts[1]: must be a host name"),
            ("{destinations: {a: {hosts: ['*.example']}}}", "egress.destinations.a.hosts[0]: must be a host name"),
            ("{destinations: {a: {hosts: ['x*.crates.example']}}}", "egress.destinations.a.hosts[0]: must be a host name"),
            ("{destinations: {a: {hosts: ['10.0.0.1']}}}", "egress.destinations.a.hosts[0]: must be a host name"),
            ("{destinations: {a: {hosts: ['a.example:443']}}}", "egress.destinations.a.hosts[0]: must be a host name"),
            ("{destinations: {a: {hosts: [a.example], credential: sk-ant-api03-abcdefghijk}}}", "egress.destinations.a.credential: must name an entry of credentials"),
            ("{destinations: {a: {hosts: [a.example], header: X-Token}}}", "egress.destinations.a.header: names the header of a credential"),
            ("{destinations: {a: {hosts: [a.example], methods: [get]}}}", "egress.destinations.a.methods[0]: must be an HTTP method"),
            ("{destinations: {a: {hosts: [a.example], paths: [pkg]}}}", "egress.destinations.a.paths[0]: must be a path glob"),
            ("{destinations: {a: {hosts: [a.example], ca_file: rel.pem}}}", "egress.destinations.a.ca_file: must be the absolute path"),
            ("{destinations: {a: {hosts: [a.example], passthrough_body: true}}}", "egress.destinations.a.passthrough_body: only for a destination with a credential"),
            ("{destinations: {a: {hosts: [a.example], credential: corp-npm-token, passthrough_body: sk-ant-api03-abcdefghijk}}}", "egress.destinations.a.passthrough_body: must be true or false"),
            ("{destinations: {a: {hosts: [a.example], host: x}}}", "egress.destinations.a.host: unknown key; allowed: hosts,"),
            ("{destinations: {a: {hosts: [a.example]}}, grants: {code: [a, sk-ant-api03-abcdefghijk]}}", "egress.grants.code[1]: names no entry of egress.destinations"),
            ("{grants: {Code: [a]}}", "egress.grants.Code: must be a role name or a class"),
            ("{destinations: {'sk-ant-api03-abcdefghijk': {hosts: [a.example]}}}", "egress.destinations.<key 0>: a destination's name"),
        ];
        for (text, want) in cases {
            let (_, p) = run(text);
            assert_eq!(p.len(), 1, "{text}: {p:?}");
            assert!(
                p[0].starts_with(&format!("/etc/airlock/airlock.yaml: {want}")),
                "{text}: {p:?}"
            );
            assert!(!p[0].contains("sk-ant"), "{p:?}");
        }
        // A grant of a broken entry is said once, at the entry.
        let (_, p) = run("{destinations: {a: {hosts: []}}, grants: {code: [a]}}");
        assert_eq!(p.len(), 1, "{p:?}");
    }
}
