//! The `warm` and `warm_max` keys of airlockd's config: how many jails airlockd keeps
//! built ahead for each role's launches, and how many at most on the host.
//!
//! ```yaml
//! warm: {code: 4, review: 1}
//! warm_max: 8
//! ```
//!
//! A role not named gets no jail of its own waiting; every launch may still find the one
//! shared jail airlockd keeps ready for any role (it counts against `warm_max`, so
//! `warm_max: 0` turns building ahead off altogether).

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value;

use crate::diag::{key, Problem};

/// The host-wide bound when `warm_max` is not given.
pub const DEFAULT_WARM_MAX: usize = 8;
/// The largest `warm_max` taken: each warm jail is a waiting helper with a pid
/// namespace, a network namespace and the run's cgroups.
pub const MOST_WARM_MAX: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmConf {
    /// Role name (as written: the pool takes a legacy alias as its class) -> jails kept
    /// built for its launches.
    pub roles: BTreeMap<String, usize>,
    /// Jails kept built on the host at most, the shared one included.
    pub max: usize,
}

impl Default for WarmConf {
    fn default() -> Self {
        WarmConf {
            roles: BTreeMap::new(),
            max: DEFAULT_WARM_MAX,
        }
    }
}

impl WarmConf {
    /// Whether the shared jail (for a launch of any role) is kept: it is the last place
    /// in the bound, after every role's own.
    pub fn shared(&self) -> bool {
        self.roles.values().sum::<usize>() < self.max
    }
}

/// `warm` (a mapping of role to count, or absent) and `warm_max` (an integer, or absent).
/// Counts are checked against the bound here; role names against the catalog when the set
/// is loaded (see [`unknown_roles`]).
pub fn parse(
    file: &Path,
    warm: Option<&Value>,
    max: Option<&Value>,
    problems: &mut Vec<Problem>,
) -> WarmConf {
    let mut conf = WarmConf::default();
    match max {
        None => {}
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) if n <= MOST_WARM_MAX => conf.max = n,
            _ => problems.push(Problem::new(
                file,
                "warm_max",
                format!("must be an integer from 0 to {MOST_WARM_MAX}"),
            )),
        },
    }
    let Some(v) = warm.filter(|v| !v.is_null()) else {
        return conf;
    };
    let Some(m) = v.as_mapping() else {
        problems.push(Problem::new(
            file,
            "warm",
            "must be a mapping of role name to a count of jails, like {code: 2}",
        ));
        return conf;
    };
    for (k, val) in m {
        let Some(role) = k.as_str().filter(|s| crate::names::is_role_name(s)) else {
            problems.push(Problem::new(
                file,
                key("warm", "<invalid name>"),
                "keys are role names (lower-case letters, digits, '-')",
            ));
            continue;
        };
        let at = key("warm", role);
        match val.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) if (1..=MOST_WARM_MAX).contains(&n) => {
                conf.roles.insert(role.to_string(), n);
            }
            _ => problems.push(Problem::new(
                file,
                at.as_str(),
                format!("must be an integer from 1 to {MOST_WARM_MAX}"),
            )),
        }
    }
    let total: usize = conf.roles.values().sum();
    if total > conf.max {
        problems.push(Problem::new(
            file,
            "warm",
            format!(
                "asks for {total} jails built ahead, more than warm_max ({}); raise warm_max or lower the counts",
                conf.max
            ),
        ));
    }
    conf
}

/// The roles `warm` names that `known` (the catalog) does not have, as problems.
pub fn unknown_roles(file: &Path, conf: &WarmConf, known: &dyn Fn(&str) -> bool) -> Vec<String> {
    conf.roles
        .keys()
        .filter(|r| !known(r))
        .map(|r| {
            Problem::new(
                file,
                key("warm", r),
                "no role of this name is in the catalog (missing, or it failed validation)",
            )
            .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (WarmConf, Vec<String>) {
        let doc: Value = serde_yaml::from_str(text).unwrap();
        let get = |k: &str| doc.get(k);
        let mut problems = Vec::new();
        let c = parse(
            Path::new("/etc/airlock/airlock.yaml"),
            get("warm"),
            get("warm_max"),
            &mut problems,
        );
        (c, problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn absent_keeps_only_the_shared_jail() {
        let (c, p) = parsed("{}");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c, WarmConf::default());
        assert!(c.shared());
        let (c, p) = parsed("warm_max: 0");
        assert!(p.is_empty(), "{p:?}");
        assert!(!c.shared(), "warm_max 0 builds nothing ahead");
    }

    #[test]
    fn counts_by_class_within_the_bound() {
        let (c, p) = parsed("warm: {code: 3, review: 1}\nwarm_max: 5");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c.roles.get("code"), Some(&3));
        assert_eq!(c.roles.get("review"), Some(&1));
        assert!(c.shared(), "one place is left for the shared jail");
        let (c, p) = parsed("warm: {code: 4}\nwarm_max: 4");
        assert!(p.is_empty(), "{p:?}");
        assert!(!c.shared(), "the roles' jails fill the bound");
    }

    #[test]
    fn bad_values_are_named_by_key_path_without_echoing_them() {
        for (text, at) in [
            ("warm: {code: 0}", "warm.code"),
            ("warm: {code: -2}", "warm.code"),
            ("warm: {code: s3cretvalue}", "warm.code"),
            ("warm: {Bad-Role: 1}", "warm.<invalid name>"),
            ("warm: [code]", "warm"),
            ("warm_max: 100000", "warm_max"),
            ("warm_max: s3cretvalue", "warm_max"),
            ("warm: {code: 6}\nwarm_max: 5", "warm"),
        ] {
            let (_, p) = parsed(text);
            assert_eq!(p.len(), 1, "{text}: {p:?}");
            assert!(p[0].contains(&format!("{at}:")), "{text}: {p:?}");
            assert!(!p[0].contains("s3cret"), "{text}: {p:?}");
        }
    }

    #[test]
    fn a_role_missing_from_the_catalog_is_named() {
        let (c, _) = parsed("warm: {code: 1, ghost: 1}");
        let p = unknown_roles(Path::new("/etc/a.yaml"), &c, &|r| r == "code");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("warm.ghost"), "{p:?}");
    }
}
