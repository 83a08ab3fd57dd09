//! `airlockctl check ROLE bash|tool|resource|write|egress ...`: one decision, as the gateway would
//! make it, with the rule that made it. Exit 0 allow, 1 deny, 2 error.

use super::explain::not_found;
use super::output;
use super::sources::{self, SourceArgs};
use crate::cli::output::outln;
use crate::config::Config;
use crate::policy::{autonomy, Decision, RolePolicy};
use serde_json::json;

/// What to check.
#[derive(Debug, Clone)]
pub enum Query {
    Bash {
        command: String,
    },
    Tool {
        connector: String,
        tool: String,
        args: Option<String>,
    },
    Resource {
        connector: String,
        uri: String,
    },
    /// May the role change `path` in `repo`, and at which effective level?
    Write {
        repo: String,
        path: String,
    },
    /// May the role's runs CONNECT to `target` (`HOST[:PORT]`, port 443 by default), and
    /// on a checked destination send `METHOD PATH`?
    Egress {
        target: String,
        request: Option<(String, String)>,
    },
}

pub fn run(args: &SourceArgs, config: &Config, name: &str, query: &Query, as_json: bool) -> i32 {
    let loaded = sources::load_one(args, config, name);
    let Some(policies) = &loaded.policies else {
        output::problems(&loaded.problems);
        eprintln!("the policies are invalid, so every check is refused; fix them first (`airlockctl validate`)");
        return output::ERROR;
    };
    let Some(entry) = &loaded.entry else {
        return not_found(name, &loaded.problems);
    };
    let role = &entry.loaded.role;
    let def = policies.permits(role.level);
    let (decision, effective) = match query {
        Query::Bash { command } => (RolePolicy::compile(role, policies).bash(command), None),
        Query::Tool {
            connector,
            tool,
            args,
        } => {
            let value = match args
                .as_deref()
                .map(serde_json::from_str::<serde_json::Value>)
            {
                None => json!({}),
                Some(Ok(v)) => v,
                Some(Err(_)) => {
                    eprintln!("ARGS_JSON is not valid JSON; pass one JSON object, e.g. '{{\"base\": \"main\"}}'");
                    return output::ERROR;
                }
            };
            (
                RolePolicy::compile(role, policies).tool(connector, tool, &value),
                None,
            )
        }
        Query::Resource { connector, uri } => (
            RolePolicy::compile(role, policies).resource(connector, uri),
            None,
        ),
        Query::Egress { target, request } => {
            match egress(config, role, &entry.class, target, request.as_ref()) {
                Ok(d) => (d, None),
                Err(msg) => {
                    eprintln!("{msg}");
                    return output::ERROR;
                }
            }
        }
        Query::Write { repo, path } => {
            let (level, rule) =
                autonomy::effective_level(role.level, policies.autonomy_for(repo), path);
            let eff = policies.permits(level);
            let decision = if !role.writes.repos.iter().any(|r| r == repo) {
                Decision::deny("writes.repos", "the role may not write to this repository")
            } else if eff.pull_requests.iter().any(|a| a == "open") {
                Decision::allow(
                    rule,
                    format!(
                        "may open a pull request at {level}; landing: {}",
                        eff.land.as_str()
                    ),
                )
            } else {
                Decision::deny(
                    rule,
                    format!("{level} does not permit opening pull requests"),
                )
            };
            (decision, Some(level))
        }
    };
    if as_json {
        let code = output::json(&json!({
            "allow": decision.allow,
            "rule": decision.rule,
            "reason": decision.reason,
            "role_level": role.level,
            "effective_level": effective,
            "level_permits": def.summary,
        }));
        if code != output::OK {
            return code;
        }
    } else {
        outln!("{}", if decision.allow { "allow" } else { "deny" });
        outln!("rule   {}", decision.rule);
        outln!("reason {}", decision.reason);
        match effective {
            Some(level) => outln!(
                "level  {level} (role {}, repository path rule above)",
                role.level
            ),
            None => outln!("level  {}: {}", role.level, def.summary),
        }
    }
    if decision.allow {
        output::OK
    } else {
        output::NO
    }
}

/// The egress decision for `target`, as the run's gateway makes it before anything is
/// dialled (the addresses a name resolves to are checked at connect time, too).
fn egress(
    config: &Config,
    role: &crate::role::Role,
    class: &str,
    target: &str,
    request: Option<&(String, String)>,
) -> Result<Decision, String> {
    use crate::authority::parse_authority;
    use crate::policy::egress::{destinations, route, EgressGrants, Via};
    let t = parse_authority(target, Some(443))
        .ok_or("HOST[:PORT]: HOST a DNS name or an IP address ([v6] with a port), PORT 1-65535")?;
    let grants = EgressGrants {
        provider_hosts: Vec::new(),
        web: crate::policy::egress::web_grant(role),
        connect_ports: config.egress.ports.clone(),
        http_ports: config.egress.http_ports.clone(),
        destinations: destinations::granted(
            &config.egress.lists,
            &role.role,
            class,
            &config.egress.ports,
        ),
    };
    let host = t.host.text();
    let (d, dest) = route(&grants, &host, t.port, Via::Connect);
    let Some((method, path)) = request else {
        return Ok(d);
    };
    if !method.bytes().all(|b| b.is_ascii_uppercase()) || method.is_empty() {
        return Err("METHOD: an HTTP method in capitals (GET, HEAD, PUT, ...)".into());
    }
    if !path.starts_with('/') {
        return Err("PATH: the request path, starting with /".into());
    }
    Ok(match dest {
        Some(g) if d.allow && g.terminated => {
            let (p, query) = match path.split('#').next().unwrap_or("/").split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (path.split('#').next().unwrap_or("/"), None),
            };
            let asked = destinations::Asked {
                method,
                path: p,
                host_header: Some(&host),
                names_another_method: crate::gateway::headers::query_names_another_method(query),
            };
            destinations::decide_request(g, &host, t.port, &asked)
        }
        _ if d.allow => Decision::allow(
            d.rule,
            format!(
                "{}; a tunnel: its requests are TLS the gateway does not read",
                d.reason
            ),
        ),
        _ => d,
    })
}
