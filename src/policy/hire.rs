//! What a hire tells the operator: each credential the instance's runs will use, and its
//! scope (seed 003: a hire lists every credential line). A role that needs a credential
//! this host does not configure is refused, naming it, so a hired instance never fails at
//! its first run for want of a key. Pure: the role and the config in, lines out.

use crate::config::Config;
use crate::policy::agent_config::provider_name;
use crate::role::{Kind, McpConnector, Role};

/// The credential lines of `role` on this host, or every credential it needs that the host
/// does not configure (each naming the config key to add).
pub fn credential_lines(role: &Role, cfg: &Config) -> Result<Vec<String>, Vec<String>> {
    let mut lines = Vec::new();
    let mut missing = Vec::new();
    let run = role.run.as_ref();
    if let Some(run) = run.filter(|_| role.kind != Kind::Workflow) {
        let name = provider_name(run.provider);
        match cfg.providers.get(name) {
            Some(p) => lines.push(format!(
                "provider {name}: {}, sent only to {}; the run holds a run token for model {} within budget.spend_usd {}",
                match &p.credential {
                    Some(c) => format!("key credentials.{c}"),
                    None => "no key".to_string(),
                },
                p.url,
                run.model,
                role.budget.spend_usd.unwrap_or(0.0)
            )),
            None => missing.push(format!(
                "providers.{name}: the role's run.provider, with its url and credential"
            )),
        }
    }
    for (name, c) in run.map(|r| &r.mcp).into_iter().flatten() {
        if let McpConnector::Direct { url, header } = c {
            let cred = direct_credential(&role.role, name);
            if cfg.credentials.contains_key(&cred) {
                lines.push(format!(
                    "connector {name}: credentials.{cred}, sent by the run's gateway only to {url} in {}, for the tools tools.{name} grants",
                    header.as_deref().unwrap_or("Authorization")
                ));
            } else {
                missing.push(format!(
                    "credentials.{cred}: the bearer of the role's direct connector run.mcp.{name}"
                ));
            }
            continue;
        }
        match cfg.mcp_connectors.get(name) {
            Some(crate::config::ConnectorConf { oauth: Some(o), .. }) => {
                let client = o.client_id.as_deref().map_or(
                    "registered at login".to_string(),
                    |id| format!("client {id}"),
                );
                let grant = match o.grant {
                    crate::config::OAuthGrant::ClientCredentials => "client_credentials",
                    crate::config::OAuthGrant::AuthorizationCode => {
                        "authorization_code: authorized once with `airlockctl connector login`"
                    }
                };
                lines.push(format!(
                    "connector {name}: OAuth 2.1, {client} ({grant}{}), its access tokens used by the run's gateway only, for the tools tools.{name} grants",
                    o.client_secret.as_deref().map(|s| format!(", secret credentials.{s}")).unwrap_or_default()
                ));
            }
            Some(conf) => lines.push(match &conf.credential {
                Some(cred) => format!(
                    "connector {name}: credentials.{cred}, used by the run's gateway only, for the tools tools.{name} grants"
                ),
                None => format!("connector {name}: no credential"),
            }),
            None => missing.push(format!(
                "mcp_connectors.{name}: the role's run.mcp.{name} goes through Airlock"
            )),
        }
    }
    if role.identity.as_ref().and_then(|i| i.key_store.as_deref()) == Some("airlock") {
        match &cfg.github {
            Some(g) => lines.push(format!(
                "github: an installation token per run from App {} (key credentials.{}), for {}; permissions: {}",
                g.app_id,
                g.private_key,
                repos(role),
                github_permissions(role).join(", ")
            )),
            None => missing.push(
                "github: the role's identity.key_store is airlock, so this host's GitHub App (app_id, private_key)".to_string(),
            ),
        }
    }
    if missing.is_empty() {
        Ok(lines)
    } else {
        Err(missing)
    }
}

/// The service a credential line is for: its text before the first `: ` (`provider claude`,
/// `connector docs`, `github`).
fn service_of(line: &str) -> &str {
    line.split_once(": ").map_or(line, |(s, _)| s)
}

/// Check the credentials a chief's hire request names (`credentials`: services, seed 003)
/// against the lines Airlock computed for the role: each must be one of them, by its full
/// service (`connector docs`) or its last word (`docs`). The lines stay Airlock's either
/// way (a service the chief left out is still a line); the error names the entry's index
/// and the services the role's runs use, never the value sent (it may be anything).
pub fn check_requested(requested: &[String], lines: &[String]) -> Result<(), String> {
    let services: Vec<&str> = lines.iter().map(|l| service_of(l)).collect();
    for (i, r) in requested.iter().enumerate() {
        let known = services
            .iter()
            .any(|s| *s == r || s.rsplit(' ').next() == Some(r.as_str()));
        if !known {
            return Err(format!(
                "credentials[{i}]: the role's runs use no such credential; they use: {}",
                if services.is_empty() {
                    "none".to_string()
                } else {
                    services.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// The credentials entry holding the bearer of a role's direct connector (`run.mcp.<name>:
/// {url, header}`): `ROLE_<ROLE>_<CONNECTOR>_TOKEN`, upper case, `-` as `_` (seed 000).
pub fn direct_credential(role: &str, connector: &str) -> String {
    let up = |s: &str| s.to_ascii_uppercase().replace('-', "_");
    format!("ROLE_{}_{}_TOKEN", up(role), up(connector))
}

fn repos(role: &Role) -> String {
    let mut all: Vec<&str> = role.writes.repos.iter().map(String::as_str).collect();
    for r in role.run.iter().flat_map(|r| r.clone.iter().flatten()) {
        if !all.contains(&r.as_str()) {
            all.push(r);
        }
    }
    if all.is_empty() {
        "no repository".into()
    } else {
        all.join(", ")
    }
}

/// The App permissions a role's writes imply (GitHub's permission names).
pub fn github_permissions(role: &Role) -> Vec<String> {
    let w = &role.writes;
    let mut p = vec![if w.repos.is_empty() {
        "contents: read".to_string()
    } else {
        "contents: write".to_string()
    }];
    p.push("metadata: read".into());
    // A merge may land by the ratchet, which reads when the opener's judge last ran: a
    // workflow's runs, or the comments on a report issue.
    let merges = w.pull_requests.iter().any(|a| a == "merge");
    if !w.issues.is_empty() {
        p.push("issues: write".into());
    } else if merges {
        p.push("issues: read".into());
    }
    if !w.pull_requests.is_empty() {
        p.push("pull_requests: write".into());
    }
    if w.workflows {
        p.push("workflows: write".into());
    }
    if w.dispatch {
        p.push("actions: write".into());
    } else if merges || w.reads.iter().any(|r| r == "actions") {
        p.push("actions: read".into());
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn shipped(name: &str) -> Role {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("roles")
            .join(name);
        crate::role::load_role_dir(&dir).unwrap().role
    }

    fn config(text: &str) -> Config {
        crate::config::parse(Path::new("/etc/airlock/airlock.yaml"), text).unwrap()
    }

    #[test]
    fn a_role_needing_what_the_host_lacks_is_refused_naming_each_key() {
        let role = shipped("code");
        let missing = credential_lines(&role, &config("{}\n")).unwrap_err();
        assert!(
            missing.iter().any(|m| m.starts_with("providers.claude:")),
            "{missing:?}"
        );
        assert!(
            missing
                .iter()
                .any(|m| m.starts_with("mcp_connectors.board:")),
            "{missing:?}"
        );
        assert!(
            missing.iter().any(|m| m.starts_with("github:")),
            "{missing:?}"
        );
    }

    #[test]
    fn a_configured_host_lists_each_credential_and_its_scope() {
        let role = shipped("code");
        let cfg = config(
            "credentials:\n  anthropic: /etc/airlock/credentials/anthropic.key\n  gh: /etc/airlock/credentials/gh.pem\n  b: /etc/airlock/credentials/b\n\
providers:\n  claude: {url: https://api.anthropic.com, credential: anthropic}\n\
mcp_connectors:\n  board: {url: http://127.0.0.1:7/mcp, credential: b}\n  github: {url: https://mcp.example/mcp, oauth: {client_id: host-7, client_secret: b, grant: client_credentials, issuer: https://id.example}}\n\
github: {app_id: 42, private_key: gh}\n",
        );
        let lines = credential_lines(&role, &cfg).unwrap();
        let text = lines.join("\n");
        assert!(text.contains("provider claude: key credentials.anthropic, sent only to https://api.anthropic.com"), "{text}");
        assert!(text.contains("connector board: credentials.b"), "{text}");
        assert!(
            text.contains("connector github: OAuth 2.1, client host-7 (client_credentials, secret credentials.b)"),
            "{text}"
        );
        assert!(
            text.contains("github: an installation token per run from App 42 (key credentials.gh)"),
            "{text}"
        );
        assert!(text.contains("pull_requests: write"), "{text}");
    }

    #[test]
    fn a_direct_connector_needs_and_lists_its_role_token() {
        assert_eq!(
            direct_credential("code-review", "linear-app"),
            "ROLE_CODE_REVIEW_LINEAR_APP_TOKEN"
        );
        let mut role = shipped("code");
        let run = role.run.as_mut().unwrap();
        run.mcp.clear();
        run.mcp.insert(
            "tracker".into(),
            McpConnector::Direct {
                url: "https://mcp.example/mcp".into(),
                header: None,
            },
        );
        role.identity = None;
        let base = "providers:\n  claude: {url: https://api.anthropic.com}\n";
        let missing = credential_lines(&role, &config(base)).unwrap_err();
        assert_eq!(
            missing,
            vec!["credentials.ROLE_CODE_TRACKER_TOKEN: the bearer of the role's direct connector run.mcp.tracker".to_string()]
        );
        let cfg = config(&format!(
            "credentials:\n  ROLE_CODE_TRACKER_TOKEN: /etc/airlock/credentials/t\n{base}"
        ));
        let text = credential_lines(&role, &cfg).unwrap().join("\n");
        assert!(
            text.contains("connector tracker: credentials.ROLE_CODE_TRACKER_TOKEN, sent by the run's gateway only to https://mcp.example/mcp in Authorization"),
            "{text}"
        );
    }

    #[test]
    fn a_requested_credential_must_be_one_of_the_roles_lines_and_is_never_echoed() {
        let lines = vec![
            "provider claude: key credentials.k, sent only to https://x".to_string(),
            "connector docs: credentials.t, used by the run's gateway only".to_string(),
            "github: an installation token per run".to_string(),
        ];
        let ok = |r: &[&str]| {
            check_requested(&r.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &lines)
        };
        assert!(ok(&[]).is_ok());
        assert!(ok(&["github", "connector docs", "docs", "claude"]).is_ok());
        let e = ok(&["github", "ghp_SECRET"]).unwrap_err();
        assert!(e.starts_with("credentials[1]:"), "{e}");
        assert!(e.contains("provider claude, connector docs, github"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
        let none = check_requested(&["github".to_string()], &[]).unwrap_err();
        assert!(none.ends_with("they use: none"), "{none}");
    }
}
