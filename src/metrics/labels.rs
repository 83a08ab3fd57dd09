//! The label rules: every label value comes from the host's config or the role file, or
//! is one of a few fixed words, never from the agent (a tool name, a model, an action it
//! made up would make a series per request and could carry anything). Pure functions.

/// A tool the role does not grant, counted under this name.
pub const NOT_GRANTED: &str = "(not granted)";
/// A connector the run does not have.
pub const UNKNOWN_CONNECTOR: &str = "(unknown)";
/// A model other than the run's own (`run.model`), or an action the gateway has no name for.
pub const OTHER: &str = "(other)";

/// Airlock's own MCP server, and its bash tool (beside it: the chief's decision tools).
pub const AIRLOCK_CONNECTOR: &str = crate::policy::agent_config::BASH_SERVER;
pub const BASH_TOOL: &str = crate::policy::agent_config::BASH_TOOL;

/// The `connector` label: a connector of the run (`run.mcp` through Airlock), or Airlock's
/// own server; anything else is [`UNKNOWN_CONNECTOR`].
pub fn connector<'a>(run_connectors: &[String], name: &'a str) -> &'a str {
    if name == AIRLOCK_CONNECTOR || run_connectors.iter().any(|c| c == name) {
        name
    } else {
        UNKNOWN_CONNECTOR
    }
}

/// What a connector's resource calls are counted under: the method itself.
pub const RESOURCE_METHODS: [&str; 3] = [
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The `tool` label (and the tool's span name): the role's grant that lists the tool
/// (`grant`: its `tools` pattern, `get_*`, or the exact name), never the name the agent
/// sent, so a role's file bounds the series however many names an agent makes up;
/// [`NOT_GRANTED`] when nothing grants it. A resource call is its method; on Airlock's
/// own server only `bash` and the decision tools exist.
pub fn tool<'a>(connector_label: &str, name: &'a str, grant: Option<&'a str>) -> &'a str {
    if connector_label == UNKNOWN_CONNECTOR {
        return NOT_GRANTED;
    }
    if connector_label == AIRLOCK_CONNECTOR {
        // Its tools are a fixed set: bash, and the chief's decision tools.
        return std::iter::once(&BASH_TOOL)
            .chain(crate::policy::classes::DECISION_TOOLS.iter())
            .find(|t| **t == name)
            .copied()
            .unwrap_or(NOT_GRANTED);
    }
    if let Some(m) = RESOURCE_METHODS.iter().find(|m| **m == name) {
        return m;
    }
    grant.unwrap_or(NOT_GRANTED)
}

/// The MCP method of a call's span: one of the few a call record can come from, else
/// [`OTHER`].
pub fn method(m: &str) -> &str {
    if m == "tools/call" || RESOURCE_METHODS.contains(&m) {
        m
    } else {
        OTHER
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
        assert_eq!(tool(c, "search", Some("search")), "search");
        // A name under a pattern is counted as the pattern, never as sent.
        assert_eq!(tool(c, "get_AKIA1234", Some("get_*")), "get_*");
        assert_eq!(tool(c, "delete_everything", None), NOT_GRANTED);
        assert_eq!(tool(c, "resources/read", None), "resources/read");
        // An agent-made connector name never becomes a label, nor its tool.
        let c = connector(&run, "ghost-AKIA1234");
        assert_eq!(c, UNKNOWN_CONNECTOR);
        assert_eq!(tool(c, "anything", Some("any*")), NOT_GRANTED);
        // Airlock's own server serves bash and the chief's decision tools alone.
        let c = connector(&run, "airlock");
        assert_eq!(tool(c, "bash", None), "bash");
        assert_eq!(tool(c, "hire_request", None), "hire_request");
        assert_eq!(tool(c, "rm -rf /", None), NOT_GRANTED);
        assert_eq!(method("tools/call"), "tools/call");
        assert_eq!(method("made/up"), OTHER);
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
