//! A run's egress plan, from its role and the host's config: what the proxy on its
//! gateway may reach ([`crate::policy::egress`]), where names are resolved, and how the
//! host's own addresses are read.

use crate::config::Config;
use crate::gateway::egress::resolve::resolv_conf_servers;
use crate::gateway::egress::EgressPlan;
use crate::policy::egress::{web_grant, EgressGrants};
use crate::role::Role;

/// Where the host's resolver configuration is, when `egress.nameservers` is not set.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// `provider_hosts`: `host:port` of each provider the run may use directly (lower case,
/// IPv6 bracketed), from `providers.<name>.url`.
pub fn plan(cfg: &Config, role: &Role, provider_hosts: Vec<String>) -> EgressPlan {
    let nameservers = match &cfg.egress.nameservers {
        Some(list) => list.clone(),
        // Read at each launch: the host's resolver may change. None readable: names do
        // not resolve (every lookup refused with a message that says why).
        None => std::fs::read_to_string(RESOLV_CONF)
            .map(|t| resolv_conf_servers(&t))
            .unwrap_or_default(),
    };
    EgressPlan {
        grants: EgressGrants {
            provider_hosts,
            web: web_grant(role),
            connect_ports: cfg.egress.ports.clone(),
            http_ports: cfg.egress.http_ports.clone(),
        },
        nameservers,
        host_addrs: crate::supervisor::host_addrs::host_addrs,
    }
}
