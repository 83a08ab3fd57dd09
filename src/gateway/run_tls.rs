//! A CA made for one run and one purpose (the GitHub hosts, one egress destination): it is
//! name-constrained to the hosts it serves, signs one leaf for them, and its key is dropped
//! once that is done (nothing else is ever signed with it). Only that run's jail trusts it.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose,
    NameConstraints,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// What the gateway serves, and the CA certificate (PEM) the run trusts.
pub struct RunTls {
    pub server: Arc<rustls::ServerConfig>,
    pub ca_pem: String,
}

impl std::fmt::Debug for RunTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunTls")
    }
}

/// A CA called `name`, permitted only `constraints` (DNS subtrees: a name and the names
/// under it), and a leaf for `leaf_names` (host names, or `*.suffix`) signed by it.
pub fn make(name: &str, constraints: &[String], leaf_names: &[String]) -> Result<RunTls, String> {
    fn e(what: &'static str) -> impl Fn(rcgen::Error) -> String {
        move |err| format!("{what}: {err}")
    }
    let ca_key = KeyPair::generate().map_err(e("key"))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e("params"))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, name);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.name_constraints = Some(NameConstraints {
        permitted_subtrees: constraints
            .iter()
            .map(|c| GeneralSubtree::DnsName(c.clone()))
            .collect(),
        excluded_subtrees: Vec::new(),
    });
    let ca_cert = ca.self_signed(&ca_key).map_err(e("self-sign"))?;
    let leaf_key = KeyPair::generate().map_err(e("leaf key"))?;
    let leaf = CertificateParams::new(leaf_names.to_vec())
        .map_err(e("leaf params"))?
        .signed_by(&leaf_key, &ca_cert, &ca_key)
        .map_err(e("sign"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS: {err}"))?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .map_err(|err| format!("TLS: {err}"))?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(RunTls {
        server: Arc::new(server),
        ca_pem: ca_cert.pem(),
    })
}

/// The DNS subtree a destination host pattern needs: the name, or for `*.suffix` the
/// suffix (its one-label names are under it).
pub fn constraint_of(host: &str) -> String {
    host.strip_prefix("*.").unwrap_or(host).to_string()
}
