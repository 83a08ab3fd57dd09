//! airlockd's `egress` key: how runs' proxied connections are resolved and which ports
//! they may use.
//!
//! ```yaml
//! egress:
//!   nameservers: ["127.0.0.1:5353", "9.9.9.9"]   # default: /etc/resolv.conf's, port 53
//!   ports: [443]                                 # CONNECT ports (default 443)
//!   http_ports: [80]                             # plain HTTP ports (default 80)
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde_yaml::Value;

use crate::diag::{index, key, Problem};
use crate::policy::egress::{DEFAULT_CONNECT_PORTS, DEFAULT_HTTP_PORTS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressConf {
    /// `None`: the host's /etc/resolv.conf, read at each launch.
    pub nameservers: Option<Vec<SocketAddr>>,
    pub ports: Vec<u16>,
    pub http_ports: Vec<u16>,
}

impl Default for EgressConf {
    fn default() -> Self {
        EgressConf {
            nameservers: None,
            ports: DEFAULT_CONNECT_PORTS.to_vec(),
            http_ports: DEFAULT_HTTP_PORTS.to_vec(),
        }
    }
}

const KEYS: &[&str] = &["nameservers", "ports", "http_ports"];
const MAX_LIST: usize = 16;

/// Parse `egress` (at the top of `file`), adding what is wrong to `problems`.
pub fn parse(file: &Path, v: &Value, problems: &mut Vec<Problem>) -> EgressConf {
    let mut out = EgressConf::default();
    let mut problem = |path: &str, msg: &str| problems.push(Problem::new(file, path, msg));
    let Some(m) = v.as_mapping() else {
        problem(
            "egress",
            "must be a mapping with nameservers, ports, http_ports",
        );
        return out;
    };
    for k in m.keys() {
        match k.as_str() {
            Some(k) if KEYS.contains(&k) => {}
            Some(k) if crate::policy::store::is_plain_key(k) => problem(
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
        let ports: Option<Vec<u16>> = v.as_sequence().and_then(|items| {
            items
                .iter()
                .map(|p| {
                    p.as_u64()
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|&n| n != 0)
                })
                .collect()
        });
        match ports {
            Some(p) if p.len() <= MAX_LIST => *slot = p,
            _ => problem(
                &at,
                "must be a list of at most 16 TCP ports (1-65535); [] allows none",
            ),
        }
    }
    out
}

fn nameserver(s: &str) -> Option<SocketAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    s.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> (EgressConf, Vec<String>) {
        let v: Value = serde_yaml::from_str(text).unwrap();
        let mut p = Vec::new();
        let c = parse(Path::new("/etc/airlock/airlock.yaml"), &v, &mut p);
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
            p[0].contains("egress.port: unknown key; allowed: nameservers, ports, http_ports"),
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
}
