//! One role's decisions, compiled once: its bash prefixes under the host's argument guards,
//! its MCP tools and resources, and, checked first on every call, the host's rails. The
//! rails also refuse grants when a role file loads; checking them per call closes what a
//! broad grant (`github_*`, `git log`) could still reach.

use super::bash::{lex, BashPolicy};
use super::rails::Rails;
use super::resource::ResourcePolicy;
use super::tool::ToolPolicy;
use super::{Decision, Policies};
use crate::role::Role;

#[derive(Debug, Clone)]
pub struct RolePolicy {
    bash: BashPolicy,
    tool: ToolPolicy,
    resource: ResourcePolicy,
    rails: Rails,
}

impl RolePolicy {
    pub fn compile(role: &Role, policies: &Policies) -> RolePolicy {
        RolePolicy {
            bash: BashPolicy::compile(role.bash_prefixes(), &policies.bash_guards),
            tool: ToolPolicy::compile(role),
            resource: ResourcePolicy::compile(role),
            rails: policies.rails.clone(),
        }
    }

    /// An agent's bash command string, as it sent it.
    pub fn bash(&self, command: &str) -> Decision {
        let decision = self.bash.decide(command);
        if !decision.allow {
            return decision;
        }
        // The engine allowed it, so it lexes; compare the dequoted words with the rails.
        match lex(command) {
            Ok(argv) => match self.rails.forbidden_command(&argv.join(" ")) {
                Some(rail) => Decision::deny(format!("rail: {}", rail.rule), rail.reason.clone()),
                None => decision,
            },
            Err(e) => Decision::deny(format!("lexer: {}", e.construct()), e.hint().to_string()),
        }
    }

    /// An MCP tool call through the gateway.
    pub fn tool(&self, connector: &str, tool: &str, args: &serde_json::Value) -> Decision {
        match self.rails.forbidden_tool(tool) {
            Some(rail) => Decision::deny(format!("rail: {}", rail.rule), rail.reason.clone()),
            None => self.tool.decide(connector, tool, args),
        }
    }

    /// An MCP resource read through the gateway.
    pub fn resource(&self, connector: &str, uri: &str) -> Decision {
        self.resource.decide(connector, uri)
    }
}
