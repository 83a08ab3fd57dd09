//! Egress decisions: where a run may go through its gateway's proxy. A destination is
//! allowed when it is one of the run's provider hosts (`host:port`, as the host's config
//! names them), a host of a destination the host grants the role ([`destinations`]), or when the role grants the public web (`run.tools` has WebFetch or
//! WebSearch) and the port is one the host allows for that kind of request (CONNECT: 443
//! unless `egress.ports` says otherwise; plain HTTP: 80 unless `egress.http_ports`).
//! Nothing else. Every address a name resolves to is then judged by [`addr`]. Pure.

pub mod addr;
pub mod destinations;
pub mod path;

use std::net::IpAddr;

use super::Decision;
use crate::role::Role;

/// How the run asked to go somewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `CONNECT host:port`: a tunnel, TLS only.
    Connect,
    /// An absolute-form plain HTTP request (`GET http://host/path`).
    Http,
}

pub use crate::config::egress::{DEFAULT_CONNECT_PORTS, DEFAULT_HTTP_PORTS};

/// What one run may reach, resolved once before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressGrants {
    /// `host:port` of the run's model provider(s), lower case (the host's config
    /// `providers.<name>.url`). Empty unless the launch fills it.
    pub provider_hosts: Vec<String>,
    /// The rule granting the public web, e.g. `run.tools[0] WebFetch`, when the role has one.
    pub web: Option<String>,
    /// Ports a CONNECT may go to (`egress.ports`).
    pub connect_ports: Vec<u16>,
    /// Ports a plain HTTP request may go to (`egress.http_ports`).
    pub http_ports: Vec<u16>,
    /// The destinations the host grants the role (`egress.grants`), in grant order.
    pub destinations: Vec<destinations::Granted>,
}

impl Default for EgressGrants {
    fn default() -> Self {
        EgressGrants {
            provider_hosts: Vec::new(),
            web: None,
            connect_ports: DEFAULT_CONNECT_PORTS.to_vec(),
            http_ports: DEFAULT_HTTP_PORTS.to_vec(),
            destinations: Vec::new(),
        }
    }
}

/// The rule that grants `role` the public web: its first WebFetch or WebSearch in
/// `run.tools`.
pub fn web_grant(role: &Role) -> Option<String> {
    let run = role.run.as_ref()?;
    run.tools
        .iter()
        .enumerate()
        .find(|(_, t)| matches!(t.as_str(), "WebFetch" | "WebSearch"))
        .map(|(i, t)| format!("run.tools[{i}] {t}"))
}

/// May the run go to `host` (a lower-case name or an IP literal) on `port`?
pub fn decide(g: &EgressGrants, host: &str, port: u16, via: Via) -> Decision {
    route(g, host, port, via).0
}

/// [`decide`], and the granted destination that allowed it, if one did (a terminated
/// one's requests are then checked one by one).
pub fn route<'a>(
    g: &'a EgressGrants,
    host: &str,
    port: u16,
    via: Via,
) -> (Decision, Option<&'a destinations::Granted>) {
    let authority = match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    if g.provider_hosts.contains(&authority) {
        return (
            Decision::allow(
                format!("provider {authority}"),
                "the run's model provider (providers.<name>.url)",
            ),
            None,
        );
    }
    // A granted destination: its own ports for a tunnel; plain HTTP only to a plain one
    // (a terminated one's rules and credential need TLS) on `egress.http_ports`. Refused
    // here, the public web may still allow it below.
    let mut refused = None;
    if let Some(d) = g.destinations.iter().find(|d| d.matches_host(host)) {
        let (ok, why) = match via {
            Via::Connect if d.ports.contains(&port) => (true, String::new()),
            Via::Connect => (
                false,
                format!("this destination may be reached on port {} only", ports_text(&d.ports)),
            ),
            Via::Http if d.terminated => (
                false,
                "this destination's requests are checked, so it is reached over https (CONNECT) only".into(),
            ),
            Via::Http if g.http_ports.contains(&port) => (true, String::new()),
            Via::Http => (
                false,
                format!("a plain HTTP request may go to port {} only (egress.http_ports)", ports_text(&g.http_ports)),
            ),
        };
        if ok {
            return (
                Decision::allow(d.rule(), format!("granted by {}", d.from)),
                Some(d),
            );
        }
        refused = Some(Decision::deny(d.rule(), why));
    }
    let (ports, key, what) = match via {
        Via::Connect => (&g.connect_ports, "egress.ports", "a CONNECT"),
        Via::Http => (&g.http_ports, "egress.http_ports", "a plain HTTP request"),
    };
    let Some(web) = &g.web else {
        let d = refused.unwrap_or_else(|| Decision::deny(
            "egress: no grant",
            "the role grants no public web (run.tools: WebFetch or WebSearch) and no egress.destinations entry for this host, and this is not its provider's host",
        ));
        return (d, None);
    };
    if !ports.contains(&port) {
        let d = refused.unwrap_or_else(|| {
            Decision::deny(
                key,
                format!("{what} may go to port {} only", ports_text(ports)),
            )
        });
        return (d, None);
    }
    (
        Decision::allow(web.clone(), "the role grants the public web"),
        None,
    )
}

fn ports_text(ports: &[u16]) -> String {
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    list.join(", ")
}

/// May the run's connection go to these addresses (all a name resolved to)? Refused when
/// any one of them is: a name that also points inside is not the public web.
pub fn decide_addresses(addrs: &[IpAddr], own: &[IpAddr]) -> Decision {
    if addrs.is_empty() {
        return Decision::deny("egress: no address", "the name resolved to no address");
    }
    for a in addrs {
        if let Err(r) = addr::check(*a, own) {
            return Decision::deny(
                format!("address: {}", r.class.as_str()),
                format!(
                    "an address of the destination is {r}; a run reaches only the public internet"
                ),
            );
        }
    }
    Decision::allow("address: public", "every address is on the public internet")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(web: bool) -> EgressGrants {
        EgressGrants {
            provider_hosts: vec!["api.anthropic.com:443".into()],
            web: web.then(|| "run.tools[0] WebFetch".to_string()),
            ..EgressGrants::default()
        }
    }

    #[test]
    fn destinations() {
        use Via::*;
        let cases: &[(bool, &str, u16, Via, bool, &str)] = &[
            (
                false,
                "api.anthropic.com",
                443,
                Connect,
                true,
                "provider api.anthropic.com:443",
            ),
            (
                false,
                "api.anthropic.com",
                80,
                Http,
                false,
                "egress: no grant",
            ),
            (
                false,
                "api.anthropic.com",
                8443,
                Connect,
                false,
                "egress: no grant",
            ),
            (
                false,
                "example.com",
                443,
                Connect,
                false,
                "egress: no grant",
            ),
            (
                false,
                "93.184.215.14",
                443,
                Connect,
                false,
                "egress: no grant",
            ),
            (
                true,
                "example.com",
                443,
                Connect,
                true,
                "run.tools[0] WebFetch",
            ),
            (true, "example.com", 80, Http, true, "run.tools[0] WebFetch"),
            (true, "example.com", 80, Connect, false, "egress.ports"),
            (true, "example.com", 22, Connect, false, "egress.ports"),
            (true, "example.com", 443, Http, false, "egress.http_ports"),
            (
                true,
                "2606:4700::1",
                443,
                Connect,
                true,
                "run.tools[0] WebFetch",
            ),
            (
                true,
                "api.anthropic.com",
                443,
                Connect,
                true,
                "provider api.anthropic.com:443",
            ),
        ];
        for (web, host, port, via, allow, rule) in cases {
            let d = decide(&grants(*web), host, *port, *via);
            assert_eq!(
                (d.allow, d.rule.as_str()),
                (*allow, *rule),
                "{host}:{port} {via:?} web={web}"
            );
        }
    }

    #[test]
    fn provider_hosts_given_as_ipv6_match_bracketed() {
        let g = EgressGrants {
            provider_hosts: vec!["[2606:4700::1]:443".into()],
            ..EgressGrants::default()
        };
        assert!(decide(&g, "2606:4700::1", 443, Via::Connect).allow);
    }

    #[test]
    fn configured_ports() {
        let g = EgressGrants {
            connect_ports: vec![443, 8443],
            ..grants(true)
        };
        assert!(decide(&g, "example.com", 8443, Via::Connect).allow);
        let d = decide(&g, "example.com", 22, Via::Connect);
        assert_eq!(d.reason, "a CONNECT may go to port 443, 8443 only");
    }

    #[test]
    fn any_inside_address_refuses_the_name() {
        let public: IpAddr = "93.184.215.14".parse().unwrap();
        let inside: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(decide_addresses(&[public], &[]).allow);
        let d = decide_addresses(&[public, inside], &[]);
        assert_eq!((d.allow, d.rule.as_str()), (false, "address: private"));
        let d = decide_addresses(&[public], &[public]);
        assert_eq!(d.rule, "address: host's own address");
        assert!(!decide_addresses(&[], &[]).allow);
    }

    #[test]
    fn granted_destinations() {
        use destinations::Granted;
        let dest = |name: &str, host: &str, terminated: bool| Granted {
            name: name.into(),
            from: "egress.grants.code[0]".into(),
            hosts: vec![host.into()],
            ports: vec![443],
            methods: Vec::new(),
            paths: Vec::new(),
            credential: None,
            terminated,
            passthrough_body: false,
        };
        let mut g = grants(false);
        g.destinations = vec![
            dest("crates", "*.crates.example", false),
            dest("npm", "registry.npm.example", true),
        ];
        let (d, which) = route(&g, "index.crates.example", 443, Via::Connect);
        assert_eq!(
            (d.allow, d.rule.as_str(), d.reason.as_str()),
            (
                true,
                "egress.destinations.crates",
                "granted by egress.grants.code[0]"
            )
        );
        assert_eq!(which.map(|w| w.name.as_str()), Some("crates"));
        let d = decide(&g, "index.crates.example", 8443, Via::Connect);
        assert_eq!(
            (d.allow, d.rule.as_str()),
            (false, "egress.destinations.crates")
        );
        assert!(d.reason.contains("port 443 only"), "{d:?}");
        assert!(decide(&g, "index.crates.example", 80, Via::Http).allow);
        let d = decide(&g, "index.crates.example", 8080, Via::Http);
        assert_eq!(
            (d.allow, d.rule.as_str()),
            (false, "egress.destinations.crates")
        );
        let d = decide(&g, "registry.npm.example", 80, Via::Http);
        assert_eq!(
            (d.allow, d.rule.as_str()),
            (false, "egress.destinations.npm")
        );
        assert!(d.reason.contains("https (CONNECT) only"), "{d:?}");
        let (d, which) = route(&g, "registry.npm.example", 443, Via::Connect);
        assert!(d.allow && which.is_some_and(|w| w.terminated));
        let d = decide(&g, "other.example", 443, Via::Connect);
        assert_eq!((d.allow, d.rule.as_str()), (false, "egress: no grant"));
        // With the public web too, what a destination refuses the web may allow.
        g.web = Some("run.tools[0] WebFetch".into());
        let d = decide(&g, "registry.npm.example", 80, Via::Http);
        assert_eq!((d.allow, d.rule.as_str()), (true, "run.tools[0] WebFetch"));
        let d = decide(&g, "registry.npm.example", 443, Via::Connect);
        assert_eq!(d.rule, "egress.destinations.npm");
    }
}
