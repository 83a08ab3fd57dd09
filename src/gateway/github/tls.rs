//! The run's own CA, for the GitHub hosts only: the gateway terminates TLS for
//! `api.github.com` and `github.com` (a CONNECT to either from the run's HTTPS_PROXY
//! clients), with a leaf signed by a CA made for this run. The CA is name-constrained to
//! `github.com`, its key is dropped once the leaf is signed (nothing else is ever signed
//! with it), and only this run's jail trusts it (its CA bundle: the system's plus this).

pub use crate::gateway::run_tls::RunTls;

/// The API host and the git host clients in the jail use.
pub const API_HOST: &str = "api.github.com";
pub const GIT_HOST: &str = "github.com";

pub fn make(run: &str) -> Result<RunTls, String> {
    crate::gateway::run_tls::make(
        &format!("Airlock run {run} GitHub CA"),
        &[GIT_HOST.to_string()],
        &[API_HOST.to_string(), GIT_HOST.to_string()],
    )
    .map_err(|e| format!("the run's GitHub CA: {e}"))
}

/// Where the host's CA bundle is (Debian's), for the run's bundle: the system's CAs and
/// the run's own, so the run's other TLS clients still verify as before.
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
