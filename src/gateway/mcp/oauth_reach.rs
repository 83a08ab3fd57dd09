//! Where a connector's OAuth client may reach an authorization server nobody configured:
//! the server a connector's metadata names could be anything, so its requests (metadata,
//! token, registration) go only to https on the public internet. The connector's own
//! origin and the configured `oauth.issuer` are the operator's choice and are reached as
//! they are; any other host is resolved here, every address it has is judged
//! ([`crate::policy::egress::addr::check`]: loopback, private, link-local, CGNAT, cloud
//! metadata and the like are refused), and the connection goes to the address judged,
//! its certificate still verified for the host's name (a second lookup cannot swap it).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::gateway::mcp::upstream::HttpUrl;

/// Whether every address a host has is on the public internet; else why one is not.
pub fn judge(addrs: &[IpAddr]) -> Result<(), String> {
    if addrs.is_empty() {
        return Err("it has no address".into());
    }
    for ip in addrs {
        if let Err(r) = crate::policy::egress::addr::check(*ip, &[]) {
            return Err(format!("it has a {r} address"));
        }
    }
    Ok(())
}

fn port(url: &HttpUrl) -> u16 {
    url.authority
        .rsplit_once(':')
        .filter(|(h, _)| !h.ends_with(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(if url.https { 443 } else { 80 })
}

/// The address to connect to for `url`, all of whose host's addresses are public.
pub async fn public_address(url: &HttpUrl) -> Result<SocketAddr, String> {
    let origin = url.origin();
    let refuse = |why: String| {
        format!(
            "{origin}: {why}; an authorization server on this host or a private network is reached only when oauth.issuer names it, and nothing was sent"
        )
    };
    let port = port(url);
    let addrs: Vec<SocketAddr> = match url.host().parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::lookup_host((url.host(), port)),
        )
        .await
        .map_err(|_| format!("{origin}: its name did not resolve in time"))?
        .map_err(|_| format!("{origin}: its name does not resolve"))?
        .collect(),
    };
    let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
    judge(&ips).map_err(refuse)?;
    // (Plain http is taken only for this host's loopback, judged above.)
    if !url.https {
        return Err(refuse("it is plain http".into()));
    }
    addrs
        .first()
        .copied()
        .ok_or_else(|| refuse("it has no address".into()))
}

/// A client for one request to `url`'s host at an address given in the request's URI,
/// verifying the certificate for the host's name.
pub fn client_to(
    url: &HttpUrl,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<Client<HttpsConnector<HttpConnector>, Full<Bytes>>, String> {
    let name = rustls::pki_types::ServerName::try_from(url.host().to_string())
        .map_err(|_| format!("{}: not a name a certificate can hold", url.origin()))?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((**tls).clone())
        .https_only()
        .with_server_name_resolver(FixedServerNameResolver::new(name))
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(judge(&[ip("93.184.215.14")]), Ok(()));
        for bad in [
            "127.0.0.1",
            "::1",
            "10.1.2.3",
            "192.168.0.9",
            "172.16.0.1",
            "169.254.169.254",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(judge(&[ip(bad)]).is_err(), "{bad}");
            // One private address among public ones is enough.
            assert!(judge(&[ip("93.184.215.14"), ip(bad)]).is_err(), "{bad}");
        }
        assert!(judge(&[]).is_err());
    }

    /// A name is judged by what it resolves to, an address literal as written, whatever
    /// the form (the attack: an authorization server named `localhost`, `[::1]`, or
    /// `127.1`-like literals in a connector's metadata).
    #[tokio::test(flavor = "current_thread")]
    async fn names_and_literals_on_this_host_are_refused_before_anything_is_sent() {
        for u in [
            "https://localhost:8443/token",
            "https://127.0.0.1/token",
            "https://[::1]:9/token",
            "https://[::ffff:7f00:1]/token",
            "https://169.254.169.254/latest",
            "http://localhost:9/token",
        ] {
            let url = crate::gateway::mcp::upstream::parse_http_url(u).unwrap();
            let e = public_address(&url).await.unwrap_err();
            assert!(
                e.contains("only when oauth.issuer names it") || e.contains("does not resolve"),
                "{u}: {e}"
            );
            assert!(
                !e.contains("does not resolve") || !u.contains("localhost"),
                "{u}: {e}"
            );
        }
    }

    #[test]
    fn the_port_is_the_authoritys_or_the_schemes() {
        let u = |s: &str| crate::urls::parse_http_url(s).unwrap();
        assert_eq!(port(&u("https://as.example/t")), 443);
        assert_eq!(port(&u("https://as.example:8443/t")), 8443);
        assert_eq!(port(&u("https://[2001:db8::1]:9443/t")), 9443);
        assert_eq!(port(&u("https://[2001:db8::1]/t")), 443);
    }
}
