//! A run's egress plan, from its role and the host's config: what the proxy on its
//! gateway may reach ([`crate::policy::egress`]), where names are resolved, how the
//! host's own addresses are read, and for each terminated destination the host grants
//! the role its TLS on both sides and its credential (read now, held by airlockd).

use crate::config::Config;
use crate::gateway::egress::resolve::resolv_conf_servers;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::gateway::egress::{EgressPlan, Terminated};
use crate::gateway::run_tls::{self, constraint_of};
use crate::policy::egress::destinations::{granted, Granted};
use crate::policy::egress::{web_grant, EgressGrants};
use crate::role::Role;

/// Where the host's resolver configuration is, when `egress.nameservers` is not set.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The `host:port` a provider's URL (`https://host[:port]/path`, `http://...`) names, as
/// [`EgressGrants::provider_hosts`] holds it (lower case, IPv6 bracketed, default port by
/// scheme); `None` for anything else.
pub fn provider_host(url: &str) -> Option<String> {
    let (rest, port) = if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let t = crate::authority::parse_authority(authority, Some(port))?;
    Some(match t.host {
        crate::authority::Host::Ip(std::net::IpAddr::V6(v6)) => {
            format!("[{v6}]:{}", t.port)
        }
        h => format!("{}:{}", h.text(), t.port),
    })
}

/// The class of a role loaded from `dir` (`roles/<class>`): its folder name, canonical.
pub fn class_of(dir: &std::path::Path) -> String {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    crate::policy::classes::canonicalize(name).to_string()
}

/// What the host grants a role of `class` (`egress.grants` by role name, then class).
pub fn grants_of(cfg: &Config, role: &Role, class: &str) -> Vec<Granted> {
    granted(&cfg.egress.lists, &role.role, class, &cfg.egress.ports)
}

/// A run's egress plan, and the CA certificates (PEM) its jail must trust for it: each
/// terminated destination's run CA, each tunnelled destination's `ca_file`.
/// `provider_hosts`: `host:port` of each provider the run may use directly (see
/// [`provider_host`]), from `providers.<name>.url`. Refused (naming the key) when a
/// credential or a CA file cannot be read.
pub fn plan(
    cfg: &Config,
    role: &Role,
    class: &str,
    run: &str,
    provider_hosts: Vec<String>,
) -> Result<(EgressPlan, Vec<String>), String> {
    let nameservers = match &cfg.egress.nameservers {
        Some(list) => list.clone(),
        // Read at each launch: the host's resolver may change. None readable: names do
        // not resolve (every lookup refused with a message that says why).
        None => std::fs::read_to_string(RESOLV_CONF)
            .map(|t| resolv_conf_servers(&t))
            .unwrap_or_default(),
    };
    let destinations = grants_of(cfg, role, class);
    let mut terminated = BTreeMap::new();
    let mut cas = Vec::new();
    for g in &destinations {
        let Some(d) = cfg.egress.lists.destinations.get(&g.name) else {
            continue;
        };
        let at = format!("{}: egress.destinations.{}", cfg.file.display(), g.name);
        if !g.terminated {
            if let Some(f) = &d.ca_file {
                cas.push(read_ca(f).map_err(|e| format!("{at}.ca_file: {e}"))?);
            }
            continue;
        }
        let client_tls = crate::gateway::provider::tls_config(d.ca_file.as_deref())
            .map_err(|e| format!("{at}.ca_file: {e}"))?;
        let constraints: Vec<String> = g.hosts.iter().map(|h| constraint_of(h)).collect();
        let tls = run_tls::make(
            &format!("Airlock run {run} egress {} CA", g.name),
            &constraints,
            &g.hosts,
        )
        .map_err(|e| format!("{at}: the run's CA: {e}"))?;
        let auth = match &d.credential {
            None => None,
            Some(name) => {
                let src = cfg
                    .credentials
                    .get(name)
                    .ok_or_else(|| format!("{at}.credential: no such entry in credentials"))?;
                let secret = crate::credentials::read(name, src)
                    .map_err(|e| format!("{}: {e}", cfg.file.display()))?;
                let header = d.header.clone().unwrap_or_else(|| "Authorization".into());
                Some((header, secret))
            }
        };
        cas.push(tls.ca_pem);
        let secrets = crate::gateway::withhold::Secrets::new(auth.iter().map(|(_, s)| s.expose()));
        terminated.insert(
            g.name.clone(),
            Arc::new(Terminated {
                server_tls: tls.server,
                client_tls,
                auth,
                secrets,
                passthrough_body: d.passthrough_body,
            }),
        );
    }
    let plan = EgressPlan {
        grants: EgressGrants {
            provider_hosts,
            web: web_grant(role),
            connect_ports: cfg.egress.ports.clone(),
            http_ports: cfg.egress.http_ports.clone(),
            destinations,
        },
        nameservers,
        host_addrs: crate::supervisor::host_addrs::host_addrs,
        terminated,
    };
    Ok((plan, cas))
}

/// A PEM file of CA certificates, for the run's bundle: at least one certificate, nothing
/// but certificates.
fn read_ca(path: &std::path::Path) -> Result<String, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let n = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .try_fold(0usize, |n, c| c.map(|_| n + 1))
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))?;
    if n == 0 {
        return Err(format!("{}: holds no certificate", path.display()));
    }
    std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))
}

#[cfg(test)]
mod tests {
    use super::provider_host;

    #[test]
    fn provider_hosts_from_urls() {
        let cases = [
            ("https://api.anthropic.com", Some("api.anthropic.com:443")),
            ("https://API.openai.com/v1", Some("api.openai.com:443")),
            ("https://llm.example:8443/v1?x=1", Some("llm.example:8443")),
            ("http://llm.example/v1", Some("llm.example:80")),
            ("https://[2606:4700::1]/v1", Some("[2606:4700::1]:443")),
            ("https://user:pw@api.example.com", None),
            ("ftp://api.example.com", None),
            ("api.example.com", None),
        ];
        for (url, want) in cases {
            assert_eq!(provider_host(url).as_deref(), want, "{url}");
        }
    }
}
