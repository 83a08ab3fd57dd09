//! A run's GitHub route, prepared at launch: for a role whose `identity.key_store` is
//! `airlock`, installation tokens minted from airlockd's App (narrowed to `writes.repos`
//! plus `run.clone` and to the permissions the role's writes imply), the run's own CA for
//! the GitHub hosts, and what the jail is given: the run token in `GH_TOKEN` and
//! `GITHUB_TOKEN`, git's header for `https://github.com/`, and a CA bundle that trusts
//! the run's CA (the system's CAs and this one).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::credentials::github_app::{self, AppClient, AppKey, Minted};
use crate::gateway::github::{tls, GithubPlan};
use crate::policy::github::GithubPolicy;
use crate::policy::hire::github_permissions;
use crate::policy::Policies;
use crate::role::Role;
use crate::urls::ProviderUrl;

/// Whether Airlock holds the role's GitHub identity.
pub fn wanted(role: &Role) -> bool {
    role.identity.as_ref().and_then(|i| i.key_store.as_deref()) == Some("airlock")
}

/// What was minted for a run before its leases exist.
pub struct Minting {
    pub plan: GithubPlan,
    pub minted: Vec<Minted>,
    /// The run's CA for the GitHub hosts, for its bundle.
    pub ca_pem: String,
    pub grants: String,
}

/// Mint the run's tokens and make its CA. Refused (naming the config key) when the host
/// has no App, its key cannot be read, or GitHub mints no token.
pub fn mint(
    cfg: &Config,
    role: &Role,
    policies: &Policies,
    run: &str,
    scratch: PathBuf,
) -> Result<Minting, String> {
    let at = cfg.file.display();
    let g = cfg.github.as_ref().ok_or_else(|| {
        format!("{at}: github: the role's identity.key_store is airlock, so this host's GitHub App (app_id, private_key) is needed")
    })?;
    let src = cfg
        .credentials
        .get(&g.private_key)
        .ok_or_else(|| format!("{at}: github.private_key: no such entry in credentials"))?;
    let pem =
        crate::credentials::read_pem(&g.private_key, src).map_err(|e| format!("{at}: {e}"))?;
    let key = AppKey::from_pem(pem.expose())
        .map_err(|e| format!("{at}: credentials.{}: {e}", g.private_key))?;
    let url =
        |k: &str, u: &str| ProviderUrl::parse(u).map_err(|e| format!("{at}: github.{k}: {e}"));
    let (api, git) = (url("api_url", &g.api_url)?, url("git_url", &g.git_url)?);
    let client_tls =
        crate::gateway::provider::tls_config(None).map_err(|e| format!("{at}: github: {e}"))?;
    let mut repos: Vec<String> = role.writes.repos.clone();
    repos.extend(role.clone_repos().1.iter().cloned());
    // A repository both written and cloned is named once.
    repos.sort();
    repos.dedup();
    let perms = github_permissions(role);
    let scopes = github_app::scopes(&repos, &perms);
    if scopes.is_empty() {
        return Err(format!(
            "{}: writes.repos and run.clone name no repository, so no GitHub token can be scoped",
            role.role
        ));
    }
    let client = AppClient {
        api: api.clone(),
        tls: client_tls.clone(),
    };
    let minted = github_app::mint_all(
        &client,
        &key,
        g.app_id,
        &g.installations,
        &scopes,
        crate::supervisor::ledger::now_ms(),
    )
    .map_err(|e| format!("{at}: github: {e}"))?;
    let run_tls = tls::make(run)?;
    let tokens = minted
        .iter()
        .map(|m| (m.owner.to_ascii_lowercase(), m.token.clone()))
        .collect();
    let mut owners: BTreeMap<&str, ()> = BTreeMap::new();
    for s in &scopes {
        owners.insert(&s.owner, ());
    }
    let grants = format!(
        "github: installation tokens of App {} for {}; {}",
        g.app_id,
        repos.join(", "),
        perms.join(", ")
    );
    Ok(Minting {
        plan: GithubPlan {
            policy: Arc::new(GithubPolicy::compile(role, policies)),
            api,
            git,
            client_tls,
            tokens,
            server_tls: run_tls.server,
            writes: Arc::default(),
            created: Arc::default(),
            openers: Some(Arc::new(super::openers::LedgerOpeners {
                ledger: cfg.state_dir.join(super::ledger::FILE_NAME),
                roles: cfg.roles.clone(),
                policies: policies.clone(),
            })),
            scratch,
        },
        minted,
        ca_pem: run_tls.ca_pem,
        grants,
    })
}

/// The run's environment for GitHub: its token for gh and other clients, and git's
/// credentials for the git host (a header, so no helper program is needed). The CA
/// variables are [`super::run_ca`]'s.
pub fn env(token: &str) -> Vec<(String, String)> {
    let basic = github_app::b64std(format!("x-access-token:{token}").as_bytes());
    let env = vec![
        ("GH_TOKEN".to_string(), token.to_string()),
        ("GITHUB_TOKEN".to_string(), token.to_string()),
        ("GH_PROMPT_DISABLED".to_string(), "1".to_string()),
        ("GH_NO_UPDATE_NOTIFIER".to_string(), "1".to_string()),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
        ("GIT_CONFIG_COUNT".to_string(), "1".to_string()),
        (
            "GIT_CONFIG_KEY_0".to_string(),
            format!("http.https://{}/.extraheader", tls::GIT_HOST),
        ),
        (
            "GIT_CONFIG_VALUE_0".to_string(),
            format!("Authorization: Basic {basic}"),
        ),
    ];
    env
}

/// Clone each `run.clone` repository into `dir/repos/<name>` (a directory airlockd makes
/// under the run's root-only directory, which no one else can reach; the caller then
/// places it in a fresh workspace): from `git_url` with the run's installation token (a
/// read, within the token's scope), `origin` then pointed at
/// `https://github.com/OWNER/NAME.git`, which the run reaches through its gateway, and the
/// tree handed to the instance. Whether anything was cloned. The token goes to git in its
/// environment only. A workspace given with `--workspace` keeps what it holds. `key`: where
/// the list came from (`run.clone`, or `writes.repos` as its default), for errors.
pub fn clone_into(
    plan: &GithubPlan,
    (key, repos): (&str, &[String]),
    workspace: &std::path::Path,
    owner_ids: (u32, u32),
) -> Result<bool, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if repos.is_empty() {
        return Ok(false);
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(workspace)
        .map_err(|e| format!("{key}: {}: {}", workspace.display(), e.kind()))?;
    let base = &plan.git;
    let scheme = if base.https { "https" } else { "http" };
    for (i, repo) in repos.iter().enumerate() {
        let Some((owner, name)) = repo.split_once('/') else {
            return Err(format!("{key}[{i}]: not OWNER/REPO"));
        };
        let token = plan
            .tokens
            .iter()
            .find(|(o, _)| *o == owner.to_ascii_lowercase())
            .map(|(_, t)| t)
            .ok_or_else(|| format!("{key}[{i}]: no installation token for its owner"))?;
        let basic = github_app::b64std(format!("x-access-token:{}", token.expose()).as_bytes());
        let url = format!("{scheme}://{}{}/{repo}.git", base.authority, base.base_path);
        let public = format!("https://{}/{repo}.git", tls::GIT_HOST);
        let dest = workspace.join("repos").join(name);
        let git = |args: &[&std::ffi::OsStr], auth: bool| -> Result<(), String> {
            let mut c = std::process::Command::new("/usr/bin/git");
            c.args(args)
                .current_dir(workspace)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                // No home: no user configuration applies to this clone.
                .env("HOME", "/nonexistent")
                .env("GIT_TERMINAL_PROMPT", "0")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
            if auth {
                c.env("GIT_CONFIG_COUNT", "1")
                    .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                    .env(
                        "GIT_CONFIG_VALUE_0",
                        format!("Authorization: Basic {basic}"),
                    );
            }
            match c.output() {
                Ok(o) if o.status.success() => Ok(()),
                // git's last line says why (it never prints the header it was given).
                Ok(o) => Err(format!(
                    "{key}[{i}]: git of {repo} failed: {}",
                    crate::gateway::clip(
                        String::from_utf8_lossy(&o.stderr)
                            .lines()
                            .last()
                            .unwrap_or(""),
                        200
                    )
                )),
                Err(e) => Err(format!("{key}[{i}]: git: {}", e.kind())),
            }
        };
        let os = |s: &str| std::ffi::OsString::from(s);
        git(
            &[
                &os("clone"),
                &os("-q"),
                &os("--"),
                &os(&url),
                dest.as_os_str(),
            ],
            true,
        )?;
        git(
            &[
                &os("-C"),
                dest.as_os_str(),
                &os("remote"),
                &os("set-url"),
                &os("origin"),
                &os(&public),
            ],
            false,
        )?;
    }
    // Never through a link, at any depth (see `tree`).
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(workspace.join("repos"))
        .and_then(|d| {
            use std::os::fd::AsFd;
            crate::tree::chown_tree(d.as_fd(), owner_ids.0, owner_ids.1)
        })
        .map_err(|e| {
            format!(
                "{key}: the clones could not be given to the instance: {}",
                e.kind()
            )
        })?;
    Ok(true)
}
