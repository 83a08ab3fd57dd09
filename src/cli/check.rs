//! `airlockctl check ROLE bash|tool|resource|write ...`: one decision, as the gateway would
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
