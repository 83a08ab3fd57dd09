//! The `asks` key of airlockd's config: which roles' runs may wait for a person when a
//! request is refused only because no grant matches, and how long they wait.
//!
//! ```yaml
//! asks: {roles: [code], wait_seconds: 120}
//! ```
//!
//! Absent: no run asks; every refusal is final at once.

use serde_yaml::Value;
use std::path::Path;

use crate::diag::{key, Problem};

const KEYS: &[&str] = &["roles", "wait_seconds"];

/// How long an ask waits when `wait_seconds` is not given.
pub const DEFAULT_WAIT_SECONDS: u64 = 120;
/// The longest wait accepted: an hour (a waiting call holds the agent's turn).
pub const MAX_WAIT_SECONDS: u64 = 3600;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsksConf {
    /// Role names or classes whose runs may ask.
    pub roles: Vec<String>,
    pub wait_seconds: u64,
}

impl Default for AsksConf {
    fn default() -> Self {
        AsksConf {
            roles: Vec::new(),
            wait_seconds: DEFAULT_WAIT_SECONDS,
        }
    }
}

impl AsksConf {
    /// Whether a run of this role (by name or class) may ask.
    pub fn covers(&self, role: &str, class: &str) -> bool {
        self.roles.iter().any(|r| r == role || r == class)
    }
}

pub fn parse(file: &Path, v: &Value, problems: &mut Vec<Problem>) -> AsksConf {
    let mut conf = AsksConf::default();
    if v.is_null() {
        return conf;
    }
    let Some(m) = v.as_mapping() else {
        problems.push(Problem::new(
            file,
            "asks",
            "must be a mapping with roles and wait_seconds",
        ));
        return conf;
    };
    for (k, val) in m {
        let Some(k) = k.as_str().filter(|k| KEYS.contains(k)) else {
            problems.push(Problem::new(
                file,
                "asks",
                "unknown key; allowed: roles, wait_seconds",
            ));
            continue;
        };
        let at = key("asks", k);
        match k {
            "roles" => match val.as_sequence() {
                Some(seq) => {
                    for (i, r) in seq.iter().enumerate() {
                        match r.as_str().filter(|s| crate::names::is_role_name(s)) {
                            Some(s) => conf.roles.push(s.to_string()),
                            None => problems.push(Problem::new(
                                file,
                                format!("{at}[{i}]"),
                                "must be a role name or class (lower-case letters, digits, '-')",
                            )),
                        }
                    }
                }
                None => problems.push(Problem::new(
                    file,
                    &at,
                    "must be a list of role names or classes",
                )),
            },
            _ => match val.as_u64() {
                Some(n) if (1..=MAX_WAIT_SECONDS).contains(&n) => conf.wait_seconds = n,
                _ => problems.push(Problem::new(
                    file,
                    &at,
                    format!("must be a whole number of seconds from 1 to {MAX_WAIT_SECONDS}"),
                )),
            },
        }
    }
    conf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(yaml: &str) -> (AsksConf, Vec<String>) {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut p = Vec::new();
        let c = parse(Path::new("/etc/airlock.yaml"), &v, &mut p);
        (c, p.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn roles_and_wait_are_read_and_bad_ones_named_by_key_without_the_value() {
        let (c, p) = parsed("{roles: [code], wait_seconds: 2}");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c.wait_seconds, 2);
        assert!(c.covers("code", "implementer"));
        assert!(!c.covers("review", "reviewer"));
        let (_, p) = parsed("{roles: [Sekret_Value], wait_seconds: 0, x: 1}");
        let all = p.join("\n");
        assert!(all.contains("asks.roles[0]"), "{all}");
        assert!(all.contains("asks.wait_seconds"), "{all}");
        assert!(all.contains("unknown key"), "{all}");
        assert!(!all.contains("Sekret_Value"), "{all}");
    }
}
