//! The `decisions` key of airlockd's config (seed 003): who approves hires, fires and
//! changes, and how long a decision waits.
//!
//! ```yaml
//! decisions: {approvers: airlock-hire, owners: airlock-owner, expire_after: 7d}
//! ```
//!
//! Approvers may approve a decision with no flagged and no credential line; anything else
//! needs an owner. Root is always an owner. Without `approvers`, the admin group approves;
//! without `owners`, root alone owns.

use serde_yaml::Value;
use std::path::Path;

use crate::config::{group_ref, GroupRef, GROUP_PROBLEM};
use crate::diag::{key, Problem};

const KEYS: &[&str] = &["approvers", "owners", "expire_after"];

/// Seven days, in seconds (seed 003).
pub const DEFAULT_EXPIRE_SECONDS: u64 = 7 * 24 * 3600;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionsConf {
    pub approvers: Option<GroupRef>,
    pub owners: Option<GroupRef>,
    pub expire_after_s: u64,
}

impl Default for DecisionsConf {
    fn default() -> Self {
        DecisionsConf {
            approvers: None,
            owners: None,
            expire_after_s: DEFAULT_EXPIRE_SECONDS,
        }
    }
}

/// `30s`, `15m`, `12h`, `7d`, or a number of seconds; at least one second.
pub fn parse_duration(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 's') => (&s[..i], 1),
        (i, 'm') => (&s[..i], 60),
        (i, 'h') => (&s[..i], 3600),
        (i, 'd') => (&s[..i], 86400),
        _ => (s, 1),
    };
    let n: u64 = num.parse().ok()?;
    n.checked_mul(mult).filter(|&v| v > 0)
}

pub fn parse(file: &Path, v: &Value, problems: &mut Vec<Problem>) -> DecisionsConf {
    let mut conf = DecisionsConf::default();
    if v.is_null() {
        return conf;
    }
    let Some(m) = v.as_mapping() else {
        problems.push(Problem::new(
            file,
            "decisions",
            "must be a mapping with approvers, owners and expire_after",
        ));
        return conf;
    };
    for (k, val) in m {
        let Some(k) = k.as_str().filter(|k| KEYS.contains(k)) else {
            problems.push(Problem::new(
                file,
                "decisions",
                "unknown key; allowed: approvers, owners, expire_after",
            ));
            continue;
        };
        let at = key("decisions", k);
        match k {
            "approvers" | "owners" => match group_ref(val) {
                Some(g) if k == "approvers" => conf.approvers = Some(g),
                Some(g) => conf.owners = Some(g),
                None => problems.push(Problem::new(file, &at, GROUP_PROBLEM)),
            },
            _ => {
                let d = match val {
                    Value::Number(n) => n.as_u64().filter(|&n| n > 0),
                    Value::String(s) => parse_duration(s),
                    _ => None,
                };
                match d {
                    Some(d) => conf.expire_after_s = d,
                    None => problems.push(Problem::new(
                        file,
                        &at,
                        "must be a duration: a number of seconds, or one with s, m, h or d (7d)",
                    )),
                }
            }
        }
    }
    conf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_bad_keys() {
        assert_eq!(parse_duration("7d"), Some(7 * 86400));
        assert_eq!(parse_duration("2s"), Some(2));
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("x"), None);
        let mut p = Vec::new();
        let v: Value =
            serde_yaml::from_str("{owners: wheel, expire_after: soon, colour: 1}").unwrap();
        let c = parse(Path::new("/a.yaml"), &v, &mut p);
        assert_eq!(c.owners, Some(GroupRef::Name("wheel".into())));
        let text: Vec<String> = p.iter().map(|x| x.to_string()).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text.iter().all(|t| !t.contains("soon")), "{text:?}");
    }
}
