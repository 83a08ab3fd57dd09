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
            spec.jail_workspace().to_string_lossy().into_owned(),
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

/// The command side's environment: with an image, its `Env` first, then every variable
/// Airlock sets itself (which replaces the image's of the same name) except `PATH` and
/// `LANG`, which the image's win (its programs live where its PATH says).
pub fn build_command_side(spec: &RunSpec) -> Vec<(String, String)> {
    let ours = build(spec);
    let Some(image) = &spec.image else {
        return ours;
    };
    let theirs: Vec<(String, String)> = image
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let image_wins = |k: &str| matches!(k, "PATH" | "LANG") && theirs.iter().any(|(n, _)| n == k);
    let mut env: Vec<(String, String)> = theirs
        .iter()
        .filter(|(k, _)| image_wins(k) || !ours.iter().any(|(n, _)| n == k))
        .cloned()
        .collect();
    env.extend(ours.into_iter().filter(|(k, _)| !image_wins(k)));
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
    program_candidates_on(prog, JAIL_PATH)
}

/// Where to look for a program on `path` (an image's PATH): only its folders in the
/// read-only system folders (/usr, /bin, /sbin, /opt) count, never one a run can write.
pub fn program_candidates_on(prog: &str, path: &str) -> Vec<CString> {
    let trusted = |d: &&str| {
        let p = std::path::Path::new(d);
        p.is_absolute()
            && !p.components().any(|c| {
                matches!(
                    c,
                    std::path::Component::ParentDir | std::path::Component::CurDir
                )
            })
            && ["/usr", "/bin", "/sbin", "/opt"]
                .iter()
                .any(|t| p.starts_with(t))
    };
    let paths: Vec<std::path::PathBuf> = if prog.contains('/') {
        vec![std::path::PathBuf::from(prog)]
    } else {
        path.split(':')
            .filter(trusted)
            .map(|d| std::path::Path::new(d).join(prog))
            .collect()
    };
    paths
        .into_iter()
        .filter_map(|p| CString::new(p.as_os_str().as_encoded_bytes()).ok())
        .collect()
}

/// The run's environment `envp` with one command's own variables: `vars` replace those of
/// the same name, `git_config` entries follow the run's `GIT_CONFIG_KEY_n`/`VALUE_n` and
/// `GIT_CONFIG_COUNT` counts them all. A variable with a NUL byte is left out.
pub fn with_command_env(
    envp: &[CString],
    vars: &[(String, String)],
    git_config: &[(String, String)],
) -> Vec<CString> {
    if vars.is_empty() && git_config.is_empty() {
        return envp.to_vec();
    }
    let name = |c: &CString| -> Vec<u8> {
        let b = c.as_bytes();
        b[..b.iter().position(|x| *x == b'=').unwrap_or(b.len())].to_vec()
    };
    let count: usize = envp
        .iter()
        .find_map(|c| c.as_bytes().strip_prefix(b"GIT_CONFIG_COUNT="))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0);
    let mut set: Vec<(String, String)> = vars.to_vec();
    for (i, (k, v)) in git_config.iter().enumerate() {
        set.push((format!("GIT_CONFIG_KEY_{}", count + i), k.clone()));
        set.push((format!("GIT_CONFIG_VALUE_{}", count + i), v.clone()));
    }
    if !git_config.is_empty() {
        set.push((
            "GIT_CONFIG_COUNT".into(),
            (count + git_config.len()).to_string(),
        ));
    }
    let mut out: Vec<CString> = envp
        .iter()
        .filter(|c| !set.iter().any(|(k, _)| name(c) == k.as_bytes()))
        .cloned()
        .collect();
    out.extend(
        set.iter()
            .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok()),
    );
    out
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
    fn a_commands_git_config_follows_the_runs_own() {
        let envp: Vec<CString> = [
            "PATH=/bin",
            "GIT_CONFIG_COUNT=1",
            "GIT_CONFIG_KEY_0=http.extraheader",
            "GIT_CONFIG_VALUE_0=x",
            "GIT_PAGER=less",
        ]
        .iter()
        .map(|s| CString::new(*s).unwrap())
        .collect();
        let out = with_command_env(
            &envp,
            &[("GIT_PAGER".into(), "cat".into())],
            &[
                ("core.pager".into(), "cat".into()),
                ("diff.external".into(), String::new()),
            ],
        );
        let text: Vec<&str> = out.iter().map(|c| c.to_str().unwrap()).collect();
        for want in [
            "PATH=/bin",
            "GIT_CONFIG_KEY_0=http.extraheader",
            "GIT_CONFIG_VALUE_0=x",
            "GIT_PAGER=cat",
            "GIT_CONFIG_KEY_1=core.pager",
            "GIT_CONFIG_VALUE_2=",
            "GIT_CONFIG_COUNT=3",
        ] {
            assert!(text.contains(&want), "{want} in {text:?}");
        }
        assert_eq!(
            text.iter()
                .filter(|t| t.starts_with("GIT_CONFIG_COUNT="))
                .count(),
            1
        );
        assert!(!text.contains(&"GIT_PAGER=less"));
        assert_eq!(with_command_env(&envp, &[], &[]), envp);
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
