//! The agent's whole environment, built from the spec. Nothing is inherited from the
//! launcher or the daemon: an inherited variable may carry a token.

use std::ffi::CString;

use super::{RunSpec, SandboxError};

/// The trusted PATH inside the jail: only the read-only system directories.
pub const JAIL_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `NAME=value` pairs in a stable order: the fixed variables, then the spec's extras.
pub fn build(spec: &RunSpec) -> Vec<(String, String)> {
    let home = spec.jail_home().to_string_lossy().into_owned();
    let mut env = vec![
        ("PATH".to_string(), JAIL_PATH.to_string()),
        ("HOME".to_string(), home),
        ("USER".to_string(), spec.instance.clone()),
        ("LOGNAME".to_string(), spec.instance.clone()),
        (
            "AIRLOCK_WORKSPACE".to_string(),
            spec.workspace.to_string_lossy().into_owned(),
        ),
        ("AIRLOCK_RUN".to_string(), spec.run_id.clone()),
        ("AIRLOCK_ROLE".to_string(), spec.role.clone()),
        ("AIRLOCK_INSTANCE".to_string(), spec.instance.clone()),
        ("TMPDIR".to_string(), "/tmp".to_string()),
        // The run's private /tmp: nothing of the host's runtime directory is shared.
        ("XDG_RUNTIME_DIR".to_string(), "/tmp".to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ];
    if spec.gateway {
        env.push(("AIRLOCK_GATEWAY".to_string(), gateway_url()));
        env.extend(proxy_env());
    }
    env.extend(spec.env.iter().cloned());
    env
}

/// `AIRLOCK_GATEWAY`: the base URL of the run's gateway, inside its network namespace.
pub fn gateway_url() -> String {
    format!("http://127.0.0.1:{}", super::runner::GATEWAY_PORT)
}

/// The gateway is the run's only way out, as its HTTP proxy (both spellings, since
/// tools disagree on which they read); the gateway's own endpoints are not proxied.
/// ALL_PROXY is never set: SOCKS is not served.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = gateway_url();
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        env.push((name.to_string(), url.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_string(), "127.0.0.1,localhost".to_string()));
    }
    env
}

/// Where to look for a program: as given when it has a slash, else on [`JAIL_PATH`].
pub fn program_candidates(prog: &str) -> Vec<CString> {
    let paths: Vec<std::path::PathBuf> = if prog.contains('/') {
        vec![std::path::PathBuf::from(prog)]
    } else {
        JAIL_PATH
            .split(':')
            .map(|d| std::path::Path::new(d).join(prog))
            .collect()
    };
    paths
        .into_iter()
        .filter_map(|p| CString::new(p.as_os_str().as_encoded_bytes()).ok())
        .collect()
}

/// The same, as C strings for execve.
pub fn to_cstrings(env: &[(String, String)]) -> Result<Vec<CString>, SandboxError> {
    env.iter()
        .map(|(k, v)| {
            CString::new(format!("{k}={v}")).map_err(|_| SandboxError::Invalid {
                step: "environment",
                why: "a variable contains a NUL byte".to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_variables_first_then_extras() {
        let spec = RunSpec {
            env: vec![("EXTRA".into(), "1".into())],
            workspace: "/srv/ws".into(),
            ..crate::sandbox::spec::tests::sample()
        };
        let env = build(&spec);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HOME"), Some("/home/tess"));
        assert_eq!(get("PATH"), Some(JAIL_PATH));
        assert_eq!(get("AIRLOCK_WORKSPACE"), Some("/srv/ws"));
        assert_eq!(get("EXTRA"), Some("1"));
        assert_eq!(env.len(), 12);
        assert_eq!(get("XDG_RUNTIME_DIR"), Some("/tmp"));
        assert_eq!(get("HTTPS_PROXY"), None, "no gateway, no proxy");
    }

    #[test]
    fn a_run_with_a_gateway_has_it_as_its_proxy() {
        let spec = RunSpec {
            gateway: true,
            ..crate::sandbox::spec::tests::sample()
        };
        let env = build(&spec);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            assert_eq!(get(k), Some("http://127.0.0.1:4180"), "{k}");
        }
        assert_eq!(get("NO_PROXY"), Some("127.0.0.1,localhost"));
        assert_eq!(get("no_proxy"), Some("127.0.0.1,localhost"));
        assert_eq!(get("ALL_PROXY"), None);
        assert_eq!(get("all_proxy"), None);
    }
}
