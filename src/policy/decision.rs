//! The outcome of one policy check. Every decision names the rule that made it, so an
//! operator can see why a call was allowed or refused.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub allow: bool,
    /// The rule that decided, e.g. `run.bash[2] "git log"` or `rail: no-shell-operators`.
    pub rule: String,
    /// Why, in words an operator can act on. Never echoes a secret-shaped value.
    pub reason: String,
}

impl Decision {
    pub fn allow(rule: impl Into<String>, reason: impl Into<String>) -> Self {
        Decision {
            allow: true,
            rule: rule.into(),
            reason: reason.into(),
        }
    }

    pub fn deny(rule: impl Into<String>, reason: impl Into<String>) -> Self {
        Decision {
            allow: false,
            rule: rule.into(),
            reason: reason.into(),
        }
    }
}
