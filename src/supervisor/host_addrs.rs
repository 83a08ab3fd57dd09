//! The host's own addresses, for the egress checks: a run must not reach the host through
//! one of its public addresses (a service bound to 0.0.0.0 answers there too). Read from
//! the interfaces for every connection, since they change (DHCP, VPNs, containers).

use std::net::IpAddr;

/// Every address configured on any interface of airlockd's network namespace.
pub fn host_addrs() -> std::io::Result<Vec<IpAddr>> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)?;
    let mut out = Vec::new();
    for a in addrs {
        let Some(sa) = a.address else { continue };
        if let Some(v4) = sa.as_sockaddr_in() {
            out.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            out.push(IpAddr::V6(v6.ip()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn includes_loopback() {
        let a = super::host_addrs().expect("getifaddrs works");
        assert!(a.contains(&"127.0.0.1".parse().unwrap()), "{a:?}");
    }
}
