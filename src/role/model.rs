//! The typed form of `roles/<role>/role.yaml` (schema version 1). A `Role` is only ever built
//! from a document that `validate` accepted, so its fields already satisfy every schema rule.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Autonomy level. Ordered: `L1` is the strictest, `L4` the most autonomous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    L1,
    L2,
    L3,
    L4,
}

impl Level {
    pub const ALL: [Level; 4] = [Level::L1, Level::L2, Level::L3, Level::L4];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::L1 => "L1",
            Level::L2 => "L2",
            Level::L3 => "L3",
            Level::L4 => "L4",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The stricter (lower) of two levels.
    pub fn stricter(self, other: Level) -> Level {
        self.min(other)
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every `writes.issues` action the schema knows.
pub const ISSUE_ACTIONS: [&str; 7] = [
    "create",
    "label",
    "edit_body",
    "comment",
    "close",
    "reopen",
    "assign",
];

/// Every `writes.pull_requests` action the schema knows.
pub const PULL_REQUEST_ACTIONS: [&str; 5] = ["open", "merge", "review", "label", "comment"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Agent,
    Workflow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Digest {
    Friday,
    Monthly,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    #[default]
    Claude,
    Codex,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    pub schema: u32,
    pub role: String,
    pub level: Level,
    pub brief: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goals: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<Judge>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    pub writes: Writes,
    /// Connector name -> MCP tool patterns (`name` or `prefix*`).
    pub tools: BTreeMap<String, Vec<String>>,
    /// Connector name -> resource patterns.
    #[serde(default)]
    pub resources: BTreeMap<String, Vec<String>>,
    /// Connector name -> tool and resource patterns that are never allowed.
    #[serde(default)]
    pub deny: BTreeMap<String, Vec<String>>,
    /// Connector -> tool -> parameter -> rule.
    #[serde(default)]
    pub args: BTreeMap<String, BTreeMap<String, BTreeMap<String, ArgRule>>>,
    pub budget: Budget,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
    #[serde(default)]
    pub floors: Vec<String>,
    #[serde(default)]
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<Run>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Scopes>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Judge {
    pub metric: String,
    pub source: String,
    pub pass: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<JudgeChecks>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JudgeChecks {
    One(JudgeCheck),
    Many(Vec<JudgeCheck>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeCheck {
    pub repo: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_label: Option<String>,
    pub max_age_days: u8,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_login: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_name: Option<String>,
    /// `github` (the default), `airlock`, `ssm:/<prefix>` or `local:~/<path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_store: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Writes {
    #[serde(default)]
    pub repos: Vec<String>,
    #[serde(default)]
    pub issues: Vec<String>,
    #[serde(default)]
    pub pull_requests: Vec<String>,
    #[serde(default)]
    pub board: Vec<String>,
    #[serde(default)]
    pub workflows: bool,
    #[serde(default)]
    pub reads: Vec<String>,
    #[serde(default)]
    pub dispatch: bool,
}

/// A scalar allowed in `enum` and `const` argument rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Number(f64),
    String(String),
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgRule {
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub enum_: Option<Vec<Scalar>>,
    #[serde(default, rename = "const", skip_serializing_if = "Option::is_none")]
    pub const_: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, rename = "maxLength", skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// Anchored: the whole value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_per_week: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minutes_per_run: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_writes_per_run: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    pub model: String,
    #[serde(default)]
    pub provider: Provider,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone: Option<Vec<String>>,
    /// Bash command prefixes, e.g. `git log`.
    #[serde(default)]
    pub bash: Vec<String>,
    /// Built-in agent tools beyond file and bash access: WebFetch, WebSearch, Agent.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub mcp: BTreeMap<String, McpConnector>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpConnector {
    Gateway {
        via: String,
    },
    Direct {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        header: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scopes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capcom: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub houston: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<Vec<String>>,
}

impl Role {
    /// Seconds a run may last, from `budget.minutes_per_run`; `None` means the role sets none.
    pub fn max_run_seconds(&self) -> Option<u64> {
        self.budget.minutes_per_run.map(|m| m.saturating_mul(60))
    }

    pub fn bash_prefixes(&self) -> &[String] {
        self.run.as_ref().map(|r| r.bash.as_slice()).unwrap_or(&[])
    }

    /// The repositories checked out for a run, and the key they come from: `run.clone` as
    /// written (an empty list: none), or `writes.repos` when the role names no `run.clone`
    /// (seed 000's default).
    pub fn clone_repos(&self) -> (&'static str, &[String]) {
        match self.run.as_ref().and_then(|r| r.clone.as_ref()) {
            Some(c) => ("run.clone", c),
            None => ("writes.repos", &self.writes.repos),
        }
    }
}
