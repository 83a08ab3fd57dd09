//! What a person may be asked about while a run waits (issue 47's asks): a request refused
//! *only* because none of the role's grants matches it. Everything else stays final: rails,
//! `deny` entries, argument guards, protected authorities, budgets, GitHub writes and merges
//! (they are no grant the role lacks, they are rules), and anything a fired instance asks.

/// What a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AskKind {
    /// A `bash` tool command no `run.bash` prefix allows.
    Bash,
    /// An MCP tool no `tools.<connector>` pattern lists.
    Tool,
    /// An egress host no destination list grants.
    Egress,
}

impl AskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AskKind::Bash => "bash",
            AskKind::Tool => "tool",
            AskKind::Egress => "egress",
        }
    }
}

/// The rule of each kind's "no grant matches" refusal; no other rule is askable.
pub const NO_GRANT_RULES: [(AskKind, &str); 3] = [
    (AskKind::Bash, "default: no prefix matches"),
    (AskKind::Tool, "default: tool not listed"),
    (AskKind::Egress, "egress: no grant"),
];

/// Whether a refusal by `rule` may wait for a person: the host lets the role ask, the
/// instance is not fired, and the refusal is its kind's "no grant matches" and nothing else.
pub fn askable(kind: AskKind, rule: &str, role_may_ask: bool, fired: bool) -> bool {
    role_may_ask && !fired && NO_GRANT_RULES.iter().any(|(k, r)| *k == kind && *r == rule)
}

/// The rule a `--for-run` answer grants: the exact request, for this run only.
pub fn for_run_rule(kind: AskKind, what: &str) -> String {
    format!("ask: {} {what}", kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_grant_is_askable() {
        assert!(askable(
            AskKind::Bash,
            "default: no prefix matches",
            true,
            false
        ));
        assert!(askable(
            AskKind::Tool,
            "default: tool not listed",
            true,
            false
        ));
        assert!(askable(AskKind::Egress, "egress: no grant", true, false));
        // Not for a role the host does not name, nor for a fired instance.
        assert!(!askable(
            AskKind::Bash,
            "default: no prefix matches",
            false,
            false
        ));
        assert!(!askable(
            AskKind::Bash,
            "default: no prefix matches",
            true,
            true
        ));
        // Rails, deny entries, guards, authorities, budgets, GitHub: never.
        for rule in [
            "rail: no-shell-operators",
            "deny.github[0]",
            "guard: git -c",
            "guard: wrapper env",
            "authority: hire",
            "budget: writes",
            "github: merge",
            "lexer: shell syntax",
            "default: unknown connector",
        ] {
            for kind in [AskKind::Bash, AskKind::Tool, AskKind::Egress] {
                assert!(!askable(kind, rule, true, false), "{rule}");
            }
        }
        // A rule of another kind is not askable under this one.
        assert!(!askable(
            AskKind::Bash,
            "default: tool not listed",
            true,
            false
        ));
    }
}
