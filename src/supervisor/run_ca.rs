//! The CA certificates a run trusts beyond the system's: the run's own CAs (the GitHub
//! route's, each terminated egress destination's) and an operator's `ca_file` for a
//! tunnelled destination. One bundle (the system's CAs and these) goes in the jail, named
//! by the variables the usual clients read, so curl, git, Python, cargo, pip and npm
//! verify those hosts unchanged. Nothing extra: no file, no variable.

use std::path::PathBuf;

use crate::gateway::github::tls::SYSTEM_BUNDLE;
use crate::sandbox::spec::JailFile;

/// The run's CA bundle inside the jail: the system's CAs and the run's extra ones.
pub const CA_BUNDLE: &str = "/etc/airlock/ca-bundle.pem";
/// The extra CAs alone (Node adds them to its own store).
pub const RUN_CAS: &str = "/etc/airlock/run-ca.pem";

/// Variables that name a whole bundle (they replace the system store): curl, git,
/// OpenSSL-based clients, Python requests, cargo, npm, pip.
pub const BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "REQUESTS_CA_BUNDLE",
    "CARGO_HTTP_CAINFO",
    "NPM_CONFIG_CAFILE",
    "PIP_CERT",
];

/// The jail's files and environment for `extra` (PEM texts). Empty when there is none.
pub fn files_and_env(extra: &[String]) -> (Vec<JailFile>, Vec<(String, String)>) {
    if extra.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let system = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap_or_default();
    let mut cas = String::new();
    for pem in extra {
        cas.push_str(pem.trim_end());
        cas.push('\n');
    }
    let files = vec![
        JailFile {
            path: PathBuf::from(CA_BUNDLE),
            contents: format!("{}\n{cas}", system.trim_end()),
            mode: 0o644,
        },
        JailFile {
            path: PathBuf::from(RUN_CAS),
            contents: cas,
            mode: 0o644,
        },
    ];
    let mut env: Vec<(String, String)> = BUNDLE_VARS
        .iter()
        .map(|v| (v.to_string(), CA_BUNDLE.to_string()))
        .collect();
    env.push(("NODE_EXTRA_CA_CERTS".to_string(), RUN_CAS.to_string()));
    (files, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_extra_nothing_given() {
        let (f, e) = files_and_env(&[]);
        assert!(f.is_empty() && e.is_empty());
        let (f, e) = files_and_env(&[
            "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n".into(),
            "B".into(),
        ]);
        assert_eq!(f.len(), 2);
        assert!(
            f[0].contents.ends_with("-----END CERTIFICATE-----\nB\n"),
            "{}",
            f[0].contents
        );
        assert_eq!(
            f[1].contents,
            "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\nB\n"
        );
        let get = |k: &str| e.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CARGO_HTTP_CAINFO"), Some(CA_BUNDLE));
        assert_eq!(get("PIP_CERT"), Some(CA_BUNDLE));
        assert_eq!(get("NPM_CONFIG_CAFILE"), Some(CA_BUNDLE));
        assert_eq!(get("NODE_EXTRA_CA_CERTS"), Some(RUN_CAS));
    }
}
