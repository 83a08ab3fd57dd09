//! The run's own CA, for the GitHub hosts only: the gateway terminates TLS for
//! `api.github.com` and `github.com` (a CONNECT to either from the run's HTTPS_PROXY
//! clients), with a leaf signed by a CA made for this run. The CA is name-constrained to
//! `github.com`, its key is dropped once the leaf is signed (nothing else is ever signed
//! with it), and only this run's jail trusts it (its CA bundle: the system's plus this).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose,
    NameConstraints,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The API host and the git host clients in the jail use.
pub const API_HOST: &str = "api.github.com";
pub const GIT_HOST: &str = "github.com";

/// A run's TLS identity for the GitHub hosts: what the gateway serves, and the CA
/// certificate (PEM) the run trusts.
pub struct RunTls {
    pub server: Arc<rustls::ServerConfig>,
    pub ca_pem: String,
}

impl std::fmt::Debug for RunTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunTls")
    }
}

pub fn make(run: &str) -> Result<RunTls, String> {
    fn e(what: &'static str) -> impl Fn(rcgen::Error) -> String {
        move |err| format!("the run's GitHub CA: {what}: {err}")
    }
    let ca_key = KeyPair::generate().map_err(e("key"))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e("params"))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, format!("Airlock run {run} GitHub CA"));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.name_constraints = Some(NameConstraints {
        permitted_subtrees: vec![GeneralSubtree::DnsName(GIT_HOST.into())],
        excluded_subtrees: Vec::new(),
    });
    let ca_cert = ca.self_signed(&ca_key).map_err(e("self-sign"))?;
    let leaf_key = KeyPair::generate().map_err(e("leaf key"))?;
    let leaf = CertificateParams::new(vec![API_HOST.to_string(), GIT_HOST.to_string()])
        .map_err(e("leaf params"))?
        .signed_by(&leaf_key, &ca_cert, &ca_key)
        .map_err(e("sign"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("the run's GitHub TLS: {err}"))?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .map_err(|err| format!("the run's GitHub TLS: {err}"))?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(RunTls {
        server: Arc::new(server),
        ca_pem: ca_cert.pem(),
    })
}

/// Where the host's CA bundle is (Debian's), for the run's bundle: the system's CAs and
/// the run's own, so the run's other TLS clients still verify as before.
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
