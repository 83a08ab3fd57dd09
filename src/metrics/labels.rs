//! The label rules: every label value comes from the host's config or the role file, or
//! is one of a few fixed words, never from the agent (a tool name, a model, an action it
//! made up would make a series per request and could carry anything). Pure functions.

/// A tool the role does not grant, counted under this name.
pub const NOT_GRANTED: &str = "(not granted)";
/// A connector the run does not have.
pub const UNKNOWN_CONNECTOR: &str = "(unknown)";
/// A model other than the run's own (`run.model`), or an action the gateway has no name for.
pub const OTHER: &str = "(other)";

/// Airlock's own MCP server, and the only tool it serves.
pub const AIRLOCK_CONNECTOR: &str = crate::policy::agent_config::BASH_SERVER;
pub const BASH_TOOL: &str = crate::gateway::bash_tool::NAME;

/// The `connector` label: a connector of the run (`run.mcp` through Airlock), or Airlock's
/// own server; anything else is [`UNKNOWN_CONNECTOR`].
pub fn connector<'a>(run_connectors: &[String], name: &'a str) -> &'a str {
    if name == AIRLOCK_CONNECTOR || run_connectors.iter().any(|c| c == name) {
        name
    } else {
        UNKNOWN_CONNECTOR
    }
}

/// The `tool` label: the tool's name when the role grants it (`granted`, the policy's
/// name check), [`NOT_GRANTED`] otherwise. On Airlock's own server only `bash` exists.
pub fn tool<'a>(connector_label: &str, name: &'a str, granted: bool) -> &'a str {
    if connector_label == UNKNOWN_CONNECTOR {
        return NOT_GRANTED;
    }
    if connector_label == AIRLOCK_CONNECTOR {
        return if name == BASH_TOOL { name } else { NOT_GRANTED };
    }
    if granted {
        name
    } else {
        NOT_GRANTED
    }
}

/// The `model` label: the run's model (`run.model`, from the role) or [`OTHER`].
pub fn model<'a>(run_model: &'a str, asked: Option<&str>) -> &'a str {
    match asked {
        Some(m) if m == run_model => run_model,
        _ => OTHER,
    }
}

/// The `action` label of a GitHub request: the gateway's own classification
/// (`issues.comment`, `push`, `unknown`...), kept only while it looks like one.
pub fn github_action(action: &str) -> &str {
    let ok = !action.is_empty()
        && action.len() <= 48
        && action
            .bytes()
            .all(|c| c.is_ascii_lowercase() || matches!(c, b'_' | b'.'));
    if ok {
        action
    } else {
        OTHER
    }
}

/// The `decision` label.
pub fn decision(allow: bool) -> &'static str {
    if allow {
        "allow"
    } else {
        "deny"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_the_role_does_not_grant_is_not_a_label() {
        let run = vec!["docs".to_string()];
        let c = connector(&run, "docs");
        assert_eq!(c, "docs");
        assert_eq!(tool(c, "search", true), "search");
        assert_eq!(tool(c, "delete_everything", false), NOT_GRANTED);
        // An agent-made connector name never becomes a label, nor its tool.
        let c = connector(&run, "ghost-AKIA1234");
        assert_eq!(c, UNKNOWN_CONNECTOR);
        assert_eq!(tool(c, "anything", true), NOT_GRANTED);
        // Airlock's own server serves bash alone.
        let c = connector(&run, "airlock");
        assert_eq!(tool(c, "bash", false), "bash");
        assert_eq!(tool(c, "rm -rf /", false), NOT_GRANTED);
    }

    #[test]
    fn only_the_runs_model_and_named_actions_are_labels() {
        assert_eq!(model("claude-x", Some("claude-x")), "claude-x");
        assert_eq!(model("claude-x", Some("my secret prompt")), OTHER);
        assert_eq!(model("claude-x", None), OTHER);
        assert_eq!(github_action("issues.comment"), "issues.comment");
        assert_eq!(github_action("push"), "push");
        assert_eq!(github_action("Issues Comment"), OTHER);
        assert_eq!(github_action(&"a".repeat(49)), OTHER);
        assert_eq!(github_action(""), OTHER);
        assert_eq!(decision(true), "allow");
        assert_eq!(decision(false), "deny");
    }
}
