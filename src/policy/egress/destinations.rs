//! Named egress destinations (airlockd's `egress.destinations`) and the host's grants of
//! them to roles (`egress.grants.<role-or-class>: [names]`). A role file never names a
//! destination: what a run gets is decided here from its role name and its class. A
//! destination without `methods`, `paths` or a `credential` is a plain tunnel (the SNI
//! check of every tunnel applies); one with any of them is terminated, and each request
//! on it is checked by [`decide_request`]. Pure.

use crate::policy::Decision;

pub use crate::config::egress::{Destination, DestinationsConf};

/// A destination one run gets, and where the grant came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub name: String,
    /// `egress.grants.code[1]`.
    pub from: String,
    pub hosts: Vec<String>,
    pub ports: Vec<u16>,
    pub methods: Vec<String>,
    pub paths: Vec<String>,
    /// Whether a credential is added (its name; the secret is the gateway's alone).
    pub credential: Option<String>,
    pub terminated: bool,
    /// `passthrough_body`: answer bodies go on unscanned for the credential.
    pub passthrough_body: bool,
}

impl Granted {
    /// The rule that allows a connection or a request to it.
    pub fn rule(&self) -> String {
        format!("egress.destinations.{}", self.name)
    }

    pub fn matches_host(&self, host: &str) -> bool {
        self.hosts.iter().any(|p| host_matches(p, host))
    }
}

/// One line for an operator: `npm: registry.npm.example on 443; GET, HEAD; checked, with
/// credential corp-token (egress.grants.code[1] npm)`.
pub fn describe(g: &Granted) -> String {
    let ports: Vec<String> = g.ports.iter().map(u16::to_string).collect();
    let mut s = format!("{}: {} on {}", g.name, g.hosts.join(", "), ports.join(", "));
    if g.terminated {
        if !g.methods.is_empty() {
            s.push_str(&format!("; methods {}", g.methods.join(", ")));
        }
        if !g.paths.is_empty() {
            s.push_str(&format!("; paths {}", g.paths.join(", ")));
        }
        match &g.credential {
            Some(c) => s.push_str(&format!(
                "; each request checked, credential {c} added by airlockd{}",
                if g.passthrough_body {
                    " (withheld from answers' headers; bodies pass unscanned)"
                } else {
                    " and withheld from its answers"
                }
            )),
            None => s.push_str("; each request checked"),
        }
    } else {
        s.push_str("; tunnel");
    }
    s.push_str(&format!(" ({} {})", g.from, g.name));
    s
}

/// Does `host` (lower case) match a destination host: the same name, or for `*.suffix` a
/// name of exactly one more label than the suffix.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .and_then(|rest| rest.strip_suffix('.'))
            .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// The destinations granted to a role named `role` of class `class` (both looked up in
/// `egress.grants`; the role's name first), each once, with the grant that gave it.
/// `default_ports`: `egress.ports`. A name without an entry is skipped (the config
/// loader refuses such a grant).
pub fn granted(
    conf: &DestinationsConf,
    role: &str,
    class: &str,
    default_ports: &[u16],
) -> Vec<Granted> {
    let mut out: Vec<Granted> = Vec::new();
    let keys: &[&str] = if role == class {
        &[role]
    } else {
        &[role, class]
    };
    for k in keys {
        let Some(names) = conf.grants.get(*k) else {
            continue;
        };
        for (i, name) in names.iter().enumerate() {
            if out.iter().any(|g| &g.name == name) {
                continue;
            }
            let Some(d) = conf.destinations.get(name) else {
                continue;
            };
            out.push(Granted {
                name: name.clone(),
                from: format!("egress.grants.{k}[{i}]"),
                hosts: d.hosts.clone(),
                ports: d.ports.clone().unwrap_or_else(|| default_ports.to_vec()),
                methods: d.methods.clone(),
                paths: d.paths.clone(),
                credential: d.credential.clone(),
                terminated: d.terminated(),
                passthrough_body: d.passthrough_body,
            });
        }
    }
    out
}

/// The host part of a `Host` header (`name`, `name:port`), lower case, when its port (if
/// any) is `port`.
fn host_header_host(value: &str, port: u16) -> Option<String> {
    let v = value.trim().trim_end_matches('.');
    let (h, p) = match v.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (v, None),
    };
    if let Some(p) = p {
        if p.parse::<u16>().ok() != Some(port) {
            return None;
        }
    }
    Some(h.trim_end_matches('.').to_ascii_lowercase())
}

/// One request on a terminated destination, as [`decide_request`] judges it.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub method: &'a str,
    /// Without the query.
    pub path: &'a str,
    pub host_header: Option<&'a str>,
    /// Whether the request names another method than its own (`X-HTTP-Method-Override`
    /// and the like, [`crate::gateway::headers::METHOD_OVERRIDES`], or `_method` in the
    /// query): the method checked must be the one a server performs.
    pub names_another_method: bool,
}

/// May one request on a terminated destination go on? `host`: the CONNECT host (already
/// matched to `d`), `port` its port.
pub fn decide_request(d: &Granted, host: &str, port: u16, asked: &Asked<'_>) -> Decision {
    let Asked {
        method,
        path,
        host_header,
        names_another_method,
    } = *asked;
    let rule = d.rule();
    match host_header.and_then(|h| host_header_host(h, port)) {
        Some(h) if h == host => {}
        _ => {
            return Decision::deny(
                format!("{rule}.hosts"),
                "the request's Host header must name the host the tunnel was opened to",
            )
        }
    }
    if names_another_method {
        return Decision::deny(
            format!("{rule}.methods"),
            "a request that names another method than its own (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, _method) is refused",
        );
    }
    if !d.methods.is_empty() && !d.methods.iter().any(|m| m == method) {
        return Decision::deny(
            format!("{rule}.methods"),
            format!("this destination takes {} only", d.methods.join(", ")),
        );
    }
    if !d.paths.is_empty() {
        // Each form a server could decode the path to must be one the paths allow.
        let stages = match super::path::judged(path) {
            Ok(s) => s,
            Err(why) => return Decision::deny(format!("{rule}.paths"), why.reason()),
        };
        let allowed = |p: &[u8]| {
            d.paths
                .iter()
                .any(|g| crate::policy::rails::wildcard(g.as_bytes(), p, false, false))
        };
        if !stages.iter().all(|p| allowed(p)) {
            return Decision::deny(
                format!("{rule}.paths"),
                "the path (as sent, or percent-decoded) matches none of this destination's paths",
            );
        }
    }
    Decision::allow(rule, format!("granted by {}", d.from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn conf() -> DestinationsConf {
        let mut destinations = BTreeMap::new();
        destinations.insert(
            "crates".into(),
            Destination {
                hosts: vec!["index.crates.example".into(), "*.crates.example".into()],
                ..Destination::default()
            },
        );
        destinations.insert(
            "npm".into(),
            Destination {
                hosts: vec!["registry.npm.example".into()],
                methods: vec!["GET".into(), "HEAD".into()],
                paths: vec!["/pkg/*".into(), "/-/ping".into()],
                ports: Some(vec![443, 8443]),
                ..Destination::default()
            },
        );
        let mut grants = BTreeMap::new();
        grants.insert("code".into(), vec!["crates".into(), "npm".into()]);
        grants.insert("my-coder".into(), vec!["npm".into()]);
        DestinationsConf {
            destinations,
            grants,
        }
    }

    #[test]
    fn hosts_and_one_label_wildcards() {
        assert!(host_matches("a.example", "a.example"));
        assert!(!host_matches("a.example", "b.a.example"));
        assert!(host_matches("*.crates.example", "static.crates.example"));
        assert!(!host_matches("*.crates.example", "crates.example"));
        assert!(!host_matches("*.crates.example", "a.b.crates.example"));
        assert!(!host_matches("*.crates.example", "evilcrates.example"));
        assert!(!host_matches("*.crates.example", ".crates.example"));
    }

    #[test]
    fn grants_by_role_name_then_class() {
        let c = conf();
        let g = granted(&c, "code", "code", &[443]);
        let names: Vec<(&str, &str)> = g
            .iter()
            .map(|g| (g.name.as_str(), g.from.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("crates", "egress.grants.code[0]"),
                ("npm", "egress.grants.code[1]")
            ]
        );
        assert!(!g[0].terminated && g[1].terminated);
        assert_eq!(
            describe(&g[1]),
            "npm: registry.npm.example on 443, 8443; methods GET, HEAD; paths /pkg/*, /-/ping; each request checked (egress.grants.code[1] npm)"
        );
        assert_eq!(
            describe(&g[0]),
            "crates: index.crates.example, *.crates.example on 443; tunnel (egress.grants.code[0] crates)"
        );
        assert_eq!(g[0].ports, [443]);
        assert_eq!(g[1].ports, [443, 8443]);
        // A role named my-coder of class code: its own grant first, the class's after.
        let g = granted(&c, "my-coder", "code", &[443]);
        let names: Vec<(&str, &str)> = g
            .iter()
            .map(|g| (g.name.as_str(), g.from.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("npm", "egress.grants.my-coder[0]"),
                ("crates", "egress.grants.code[0]")
            ]
        );
        assert!(granted(&c, "review", "review", &[443]).is_empty());
        let mut corp = g[0].clone();
        corp.credential = Some("corp-token".into());
        corp.terminated = true;
        assert!(describe(&corp)
            .contains("credential corp-token added by airlockd and withheld from its answers ("));
        corp.passthrough_body = true;
        assert!(describe(&corp).contains(
            "added by airlockd (withheld from answers' headers; bodies pass unscanned) ("
        ));
    }

    #[test]
    fn requests() {
        let g = granted(&conf(), "code", "code", &[443]);
        let npm = &g[1];
        let h = "registry.npm.example";
        let d = |m: &str, p: &str, host: Option<&str>| {
            let a = Asked {
                method: m,
                path: p,
                host_header: host,
                names_another_method: false,
            };
            decide_request(npm, h, 443, &a)
        };
        let ok = d("GET", "/pkg/left-pad", Some(h));
        assert_eq!(
            (ok.allow, ok.rule.as_str(), ok.reason.as_str()),
            (
                true,
                "egress.destinations.npm",
                "granted by egress.grants.code[1]"
            )
        );
        assert!(d("HEAD", "/-/ping", Some("Registry.NPM.example:443")).allow);
        let cases: &[(&str, &str, Option<&str>, &str)] = &[
            (
                "PUT",
                "/pkg/left-pad",
                Some(h),
                "egress.destinations.npm.methods",
            ),
            ("GET", "/admin", Some(h), "egress.destinations.npm.paths"),
            (
                "GET",
                "/pkg/../admin",
                Some(h),
                "egress.destinations.npm.paths",
            ),
            (
                "GET",
                "/pkg/%2e%2e/admin",
                Some(h),
                "egress.destinations.npm.paths",
            ),
            (
                "GET",
                "/pkg/%252e%252e/admin",
                Some(h),
                "egress.destinations.npm.paths",
            ),
            (
                "GET",
                "/pkg/..%252fadmin",
                Some(h),
                "egress.destinations.npm.paths",
            ),
            // Decoded it is under /pkg/; as sent (a server that decodes less) it is not.
            ("GET", "/%70kg/x", Some(h), "egress.destinations.npm.paths"),
            (
                "GET",
                "/pkg/x",
                Some("other.example"),
                "egress.destinations.npm.hosts",
            ),
            (
                "GET",
                "/pkg/x",
                Some("registry.npm.example:8443"),
                "egress.destinations.npm.hosts",
            ),
            ("GET", "/pkg/x", None, "egress.destinations.npm.hosts"),
        ];
        let over = Asked {
            method: "GET",
            path: "/pkg/x",
            host_header: Some(h),
            names_another_method: true,
        };
        let r = decide_request(npm, h, 443, &over);
        assert_eq!(
            (r.allow, r.rule.as_str()),
            (false, "egress.destinations.npm.methods")
        );
        for (m, p, host, rule) in cases {
            let r = d(m, p, *host);
            assert_eq!(
                (r.allow, r.rule.as_str()),
                (false, *rule),
                "{m} {p} {host:?}"
            );
        }
    }
}
