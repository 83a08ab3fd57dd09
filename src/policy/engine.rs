//! One role's decisions, compiled once: its bash prefixes under the host's argument guards,
//! its MCP tools and resources, and, checked first on every call, the host's rails. The
//! rails also refuse grants when a role file loads; checking them per call closes what a
//! broad grant (`github_*`, `git log`) could still reach.

use super::bash::{lex, BashPolicy};
use super::rails::{glob_match, Rails, ToolRail};
use super::resource::ResourcePolicy;
use super::tool::ToolPolicy;
use super::{Decision, Policies};
use crate::role::Role;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct RolePolicy {
    bash: BashPolicy,
    tool: ToolPolicy,
    resource: ResourcePolicy,
    /// The host's, shared by every role's policy (compiled once per policy load).
    rails: Arc<CompiledRails>,
    /// The protected authorities the role's class does not hold, with their tool globs
    /// (`policies/classes.yaml`), for the per-call check: a broad grant (`*`) passes the
    /// load-time check, so a tool name it reaches is checked on every call as well.
    unheld: Vec<Unheld>,
}

/// A protected authority a role's class does not hold.
#[derive(Debug, Clone)]
struct Unheld {
    name: String,
    holder: String,
    globs: Vec<String>,
}

/// The host's rails with their tool globs compiled.
#[derive(Debug)]
pub struct CompiledRails {
    rails: Rails,
    tools: ToolRailSet,
}

impl CompiledRails {
    pub fn compile(rails: &Rails) -> CompiledRails {
        CompiledRails {
            rails: rails.clone(),
            tools: ToolRailSet::compile(rails),
        }
    }
}

/// Every tool rail's globs as one case-insensitive regex set: one pass over the tool name
/// per call instead of one glob match per forbidden pattern.
#[derive(Debug, Clone)]
struct ToolRailSet {
    /// `None` when the set cannot be built; then each glob is matched in turn.
    set: Option<regex::RegexSet>,
    /// For each pattern of `set`, the index of its rail in `Rails::tools`.
    rail_of: Vec<usize>,
}

impl ToolRailSet {
    fn compile(rails: &Rails) -> ToolRailSet {
        let mut patterns = Vec::new();
        let mut rail_of = Vec::new();
        for (i, rail) in rails.tools.iter().enumerate() {
            for glob in &rail.globs {
                patterns.push(glob_regex(glob));
                rail_of.push(i);
            }
        }
        let set = regex::RegexSetBuilder::new(&patterns)
            .case_insensitive(true)
            .build()
            .ok();
        ToolRailSet { set, rail_of }
    }

    fn find<'r>(&self, rails: &'r Rails, tool: &str) -> Option<&'r ToolRail> {
        match &self.set {
            Some(set) => set
                .matches(tool)
                .iter()
                .next()
                .and_then(|p| self.rail_of.get(p))
                .and_then(|&i| rails.tools.get(i)),
            None => rails.forbidden_tool(tool),
        }
    }
}

/// The authorities of `policies/classes.yaml` that the role's canonical class (its name,
/// which is its folder's) does not hold.
fn unheld(role: &Role, policies: &Policies) -> Vec<Unheld> {
    let held = policies.classes.authority_of(&role.role);
    policies
        .classes
        .authorities
        .values()
        .filter(|a| !a.tools.is_empty() && !held.contains(&a.name))
        .map(|a| Unheld {
            name: a.name.clone(),
            holder: policies
                .classes
                .holder_of(&a.name)
                .unwrap_or("no class")
                .to_string(),
            globs: a.tools.clone(),
        })
        .collect()
}

/// A rail glob (`*` any run, `?` one character) as an anchored regular expression.
fn glob_regex(glob: &str) -> String {
    let mut re = String::from("^");
    for c in glob.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c => re.push_str(&regex::escape(c.encode_utf8(&mut [0u8; 4]))),
        }
    }
    re.push('$');
    re
}

impl RolePolicy {
    pub fn compile(role: &Role, policies: &Policies) -> RolePolicy {
        RolePolicy {
            bash: BashPolicy::compile(role.bash_prefixes(), &policies.bash_guards),
            tool: ToolPolicy::compile(role),
            resource: ResourcePolicy::compile(role),
            rails: policies.compiled_rails(),
            unheld: unheld(role, policies),
        }
    }

    /// The rail or protected authority a call of `tool` would cross, as its refusal.
    fn forbidden_tool(&self, connector: &str, tool: &str) -> Option<Decision> {
        let rail = match crate::policy::classes::is_decision_tool(connector, tool) {
            true => None,
            false => self.rails.tools.find(&self.rails.rails, tool),
        };
        if let Some(rail) = rail {
            return Some(Decision::deny(
                format!("rail: {}", rail.rule),
                rail.reason.clone(),
            ));
        }
        self.unheld
            .iter()
            .find(|a| a.globs.iter().any(|g| glob_match(g, tool)))
            .map(|a| {
                Decision::deny(
                    format!("authority: {}", a.name),
                    format!(
                        "this tool exercises protected authority `{}`, held only by class {}",
                        a.name, a.holder
                    ),
                )
            })
    }

    /// An agent's bash command string, as it sent it.
    pub fn bash(&self, command: &str) -> Decision {
        self.bash_command(command).0
    }

    /// [`RolePolicy::bash`], with the dequoted argv to run when the command is allowed:
    /// exactly what was decided is what the gateway executes.
    pub fn bash_command(&self, command: &str) -> (Decision, Option<Vec<String>>) {
        let argv = match lex(command) {
            Ok(argv) => argv,
            Err(_) => return (self.bash.decide(command), None),
        };
        let decision = self.bash.decide_argv(&argv);
        if !decision.allow {
            return (decision, None);
        }
        match self.rails.rails.forbidden_argv(&argv) {
            Some(rail) => (
                Decision::deny(format!("rail: {}", rail.rule), rail.reason.clone()),
                None,
            ),
            None => (decision, Some(argv)),
        }
    }

    /// The argv of a command a person allowed after it was refused for want of a prefix
    /// ([`crate::policy::asks`]): the rails still hold, so a rail refuses it here.
    pub fn bash_answered(&self, command: &str) -> Result<Vec<String>, Decision> {
        let argv = lex(command).map_err(|_| self.bash.decide(command))?;
        match self.rails.rails.forbidden_argv(&argv) {
            Some(rail) => Err(Decision::deny(
                format!("rail: {}", rail.rule),
                rail.reason.clone(),
            )),
            None => Ok(argv),
        }
    }

    /// An MCP tool call through the gateway.
    pub fn tool(&self, connector: &str, tool: &str, args: &serde_json::Value) -> Decision {
        match self.forbidden_tool(connector, tool) {
            Some(refused) => refused,
            None => self.tool.decide(connector, tool, args),
        }
    }

    /// Whether a filtered tools/list shows `tool` of `connector`: listed by the role, not
    /// denied, no rail against it. Its calls are still decided by [`RolePolicy::tool`].
    pub fn tool_listed(&self, connector: &str, tool: &str) -> Decision {
        match self.forbidden_tool(connector, tool) {
            Some(refused) => refused,
            None => self.tool.listed(connector, tool),
        }
    }

    /// The grant that lists `tool` of `connector` ([`ToolPolicy::grant`]); none when
    /// [`RolePolicy::tool_listed`] refuses it.
    pub fn tool_grant(&self, connector: &str, tool: &str) -> Option<String> {
        match self.forbidden_tool(connector, tool) {
            Some(_) => None,
            None => self.tool.grant(connector, tool),
        }
    }

    /// An MCP resource read through the gateway.
    pub fn resource(&self, connector: &str, uri: &str) -> Decision {
        self.resource.decide(connector, uri)
    }

    /// [`RolePolicy::resource`], with the URI to forward when it is allowed: the canonical
    /// spelling that was checked, never the one sent.
    pub fn resource_read(&self, connector: &str, uri: &str) -> (Decision, Option<String>) {
        self.resource.read(connector, uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broad grant passes load (it does not plainly reach a protected glob), so every
    /// call is checked too: a tool name that exercises an authority the role's class does
    /// not hold is refused on any connector, and allowed to the class that holds it.
    #[test]
    fn a_broad_grant_reaches_no_protected_authority_of_another_class() {
        let policies =
            Policies::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
                .expect("shipped policies");
        let role = |name: &str| {
            let text = format!(
                "schema: 1\nrole: {name}\nlevel: L1\nbrief: brief.md\nkind: agent\nidentity: {{board_name: 'x:{name}', key_store: airlock}}\nwrites: {{repos: []}}\ntools: {{ops: ['*'], board: [board_read, roster_list]}}\nbudget: {{runs_per_week: 1, minutes_per_run: 1}}\n"
            );
            crate::role::parse_role(std::path::Path::new("role.yaml"), &text)
                .map(|(r, _)| r)
                .unwrap_or_else(|p| panic!("{p:?}"))
        };
        let code = RolePolicy::compile(&role("code"), &policies);
        let args = serde_json::json!({});
        for (conn, tool) in [
            ("ops", "roster_add"),
            ("ops", "assign_role_x"),
            ("board", "roster_list"),
            ("ops", "Issue_Lease"),
        ] {
            let d = code.tool(conn, tool, &args);
            assert!(!d.allow, "{conn}/{tool}");
            assert!(
                d.rule.starts_with("authority: "),
                "{conn}/{tool}: {}",
                d.rule
            );
            assert!(!code.tool_listed(conn, tool).allow, "{conn}/{tool} listed");
            assert_eq!(code.tool_grant(conn, tool), None);
        }
        assert!(code.tool("ops", "read_file", &args).allow);
        let orchestrator = RolePolicy::compile(&role("orchestrator"), &policies);
        assert!(orchestrator.tool("ops", "roster_add", &args).allow);
        assert!(!orchestrator.tool("ops", "merge_pull_request", &args).allow);
    }

    #[test]
    fn the_regex_set_agrees_with_the_glob_matcher() {
        let policies =
            Policies::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
                .expect("shipped policies");
        let set = ToolRailSet::compile(&policies.rails);
        assert!(set.set.is_some());
        for tool in [
            "board_read",
            "github_delete_repo",
            "Airlock_Hire",
            "fire",
            "fire_agent",
            "campfire",
            "get_hired",
            "list.fire.x",
            "purge",
            "bind_credential_x",
            "drop_table_users",
            "x",
        ] {
            let a = set.find(&policies.rails, tool).map(|r| &r.rule);
            let b = policies.rails.forbidden_tool(tool).map(|r| &r.rule);
            assert_eq!(a, b, "{tool}");
        }
    }
}
