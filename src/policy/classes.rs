//! Role classes and protected authority.
//!
//! A role's class is its folder name after canonicalization. Exactly three legacy names are
//! canonicalized (`implementer`, `reviewer`, `operator-interaction`); no other alias is ever
//! inferred. Protected authority is data (`policies/classes.yaml`) keyed only by canonical
//! class: a role's text, its name, an instance name or a display alias never grants any.

use super::rails::{bash_overlaps, tool_reaches};
use super::store::Obj;
use crate::diag::{self, Problem};
use crate::role::Role;
use crate::secret_shapes::is_plain_key;
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The only legacy class names, and the canonical class each one means.
pub const LEGACY_ALIASES: [(&str, &str); 3] = [
    ("implementer", "code"),
    ("reviewer", "review"),
    ("operator-interaction", "interaction"),
];

/// The canonical class for a requested class or role name. Names that are not one of the
/// three legacy aliases are returned unchanged.
pub fn canonicalize(name: &str) -> &str {
    LEGACY_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, canonical)| *canonical)
        .unwrap_or(name)
}

/// True for the three legacy alias names, which can never name a role folder.
pub fn is_legacy_alias(name: &str) -> bool {
    LEGACY_ALIASES.iter().any(|(alias, _)| *alias == name)
}

/// `^[a-z][a-z0-9-]*$`, the schema's role-name rule, also used for class names.
pub fn is_class_name(s: &str) -> bool {
    crate::names::is_role_name(s)
}

/// The pull-request write that lands a change. Only the class holding the authority that
/// claims it may be granted it.
pub const MERGE_ACTION: &str = "merge";
/// The class that alone may land changes (seed 001); checked when classes.yaml loads.
pub const MERGE_GATE: &str = "merge-gate";

use crate::role::model::PULL_REQUEST_ACTIONS as PR_ACTIONS;

/// One protected power and the role grants that would exercise it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub name: String,
    pub description: String,
    /// `writes.pull_requests` actions that exercise this power.
    pub pull_requests: Vec<String>,
    /// Bash prefixes that exercise this power.
    pub bash: Vec<String>,
    /// MCP tool-name globs that exercise this power.
    pub tools: Vec<String>,
}

/// `policies/classes.yaml`: protected powers and the canonical class that holds each one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassTable {
    pub authorities: BTreeMap<String, Authority>,
    /// Canonical class -> the authorities it holds. Classes not listed hold none.
    pub classes: BTreeMap<String, Vec<String>>,
}

impl ClassTable {
    pub fn parse(file: &Path, doc: &Value) -> Result<ClassTable, Vec<Problem>> {
        let mut problems = Vec::new();
        let Some(top) = Obj::new(
            file,
            "",
            doc,
            &["schema", "authorities", "classes"],
            &mut problems,
        ) else {
            return Err(problems);
        };
        top.schema_one(&mut problems);
        let mut authorities = BTreeMap::new();
        if let Some(v) = top.required("authorities", &mut problems) {
            if let Some(map) = super::store::as_map(file, "authorities", v, &mut problems) {
                for (k, v) in map {
                    let Some(name) = k.as_str().filter(|s| is_class_name(s)) else {
                        problems.push(Problem::new(
                            file,
                            "authorities",
                            "authority names must match ^[a-z][a-z0-9-]*$",
                        ));
                        continue;
                    };
                    let path = diag::key("authorities", name);
                    if let Some(a) = parse_authority(file, &path, name, v, &mut problems) {
                        authorities.insert(name.to_string(), a);
                    }
                }
            }
        }
        let mut classes: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if let Some(v) = top.required("classes", &mut problems) {
            if let Some(map) = super::store::as_map(file, "classes", v, &mut problems) {
                for (k, v) in map {
                    let Some(class) = k.as_str().filter(|s| is_class_name(s)) else {
                        problems.push(Problem::new(
                            file,
                            "classes",
                            "class names must match ^[a-z][a-z0-9-]*$",
                        ));
                        continue;
                    };
                    let path = diag::key("classes", class);
                    if is_legacy_alias(class) {
                        problems.push(Problem::new(
                            file,
                            &path,
                            format!(
                                "is a legacy alias; use the canonical class `{}`",
                                canonicalize(class)
                            ),
                        ));
                        continue;
                    }
                    let held = super::store::string_list(file, &path, v, &mut problems);
                    for (i, a) in held.iter().enumerate() {
                        if !authorities.contains_key(a) {
                            problems.push(Problem::new(
                                file,
                                diag::index(&path, i),
                                "names an authority not declared under `authorities`",
                            ));
                        }
                    }
                    classes.insert(class.to_string(), held);
                }
            }
        }
        // Each protected power belongs to exactly one class.
        for name in authorities.keys() {
            let holders: Vec<&String> = classes
                .iter()
                .filter(|(_, held)| held.contains(name))
                .map(|(c, _)| c)
                .collect();
            if holders.len() != 1 {
                problems.push(Problem::new(
                    file,
                    diag::key("authorities", name),
                    format!(
                        "must be held by exactly one class under `classes` (held by {})",
                        holders.len()
                    ),
                ));
            }
        }
        // Landing a change is merge-gate's alone, whatever the file says.
        let merge_holders: Vec<&str> = authorities
            .values()
            .filter(|a| a.pull_requests.iter().any(|p| p == MERGE_ACTION))
            .flat_map(|a| {
                classes
                    .iter()
                    .filter(|(_, held)| held.contains(&a.name))
                    .map(|(c, _)| c.as_str())
            })
            .collect();
        if merge_holders != [MERGE_GATE] {
            problems.push(Problem::new(
                file,
                "classes",
                "the pull-request `merge` action must be claimed by an authority held by class \
                 merge-gate and by no other class",
            ));
        }
        if problems.is_empty() {
            Ok(ClassTable {
                authorities,
                classes,
            })
        } else {
            Err(problems)
        }
    }

    /// The protected authorities a role folder or requested class holds: derived from the
    /// canonical class and nothing else.
    pub fn authority_of(&self, class: &str) -> &[String] {
        self.classes
            .get(canonicalize(class))
            .map(|v| v.as_slice())
            .unwrap_or(&[])
    }

    /// The canonical class that holds `authority`, if any.
    pub fn holder_of(&self, authority: &str) -> Option<&str> {
        self.classes
            .iter()
            .find(|(_, held)| held.iter().any(|a| a == authority))
            .map(|(c, _)| c.as_str())
    }

    /// Refuse every grant in `role` that would exercise a protected power its canonical class
    /// does not hold. Problems name the key path and the power, never the granted value.
    pub fn check_powers(&self, class: &str, role: &Role, file: &Path) -> Vec<Problem> {
        let class = canonicalize(class);
        let held = self.authority_of(class);
        let mut problems = Vec::new();
        for a in self.authorities.values() {
            if held.contains(&a.name) {
                continue;
            }
            let holder = self.holder_of(&a.name).unwrap_or("no class");
            let why = |what: &str| {
                format!(
                    "{what} exercises protected authority `{}` ({}), held only by class {holder}; \
                     this role's class is {class}, and a role's name or text cannot grant it",
                    a.name, a.description
                )
            };
            for (i, pr) in role.writes.pull_requests.iter().enumerate() {
                if a.pull_requests.contains(pr) {
                    problems.push(Problem::new(
                        file,
                        diag::index("writes.pull_requests", i),
                        why(&format!("`{pr}`")),
                    ));
                }
            }
            for (i, prefix) in role.bash_prefixes().iter().enumerate() {
                if let Some(f) = a.bash.iter().find(|f| bash_overlaps(prefix, f)) {
                    problems.push(Problem::new(
                        file,
                        diag::index("run.bash", i),
                        why(&format!("this prefix can run `{f}`, which")),
                    ));
                }
            }
            for (conn, patterns) in &role.tools {
                let conn_path = tool_conn_path(conn);
                for (i, p) in patterns.iter().enumerate() {
                    if let Some(g) = a.tools.iter().find(|g| tool_reaches(p, g)) {
                        problems.push(Problem::new(
                            file,
                            diag::index(&conn_path, i),
                            why(&format!("this tool pattern can reach `{g}`, which")),
                        ));
                    }
                }
            }
        }
        problems
    }
}

/// `tools.<connector>` with the connector name only when it is safe to repeat.
pub(crate) fn tool_conn_path(conn: &str) -> String {
    if is_plain_key(conn) {
        diag::key("tools", conn)
    } else {
        "tools.(connector)".to_string()
    }
}

fn parse_authority(
    file: &Path,
    path: &str,
    name: &str,
    v: &Value,
    problems: &mut Vec<Problem>,
) -> Option<Authority> {
    let o = Obj::new(
        file,
        path,
        v,
        &["description", "pull_requests", "bash", "tools"],
        problems,
    )?;
    let description = o.string("description", true, problems).unwrap_or_default();
    let pull_requests = o.strings("pull_requests", problems);
    for (i, p) in pull_requests.iter().enumerate() {
        if !PR_ACTIONS.contains(&p.as_str()) {
            problems.push(Problem::new(
                file,
                diag::index(&o.key("pull_requests"), i),
                format!("must be one of {}", PR_ACTIONS.join(", ")),
            ));
        }
    }
    let bash = o.strings("bash", problems);
    for (i, b) in bash.iter().enumerate() {
        if b.split_whitespace().next().is_none() {
            problems.push(Problem::new(
                file,
                diag::index(&o.key("bash"), i),
                "must be a non-empty command prefix",
            ));
        }
    }
    let tools = o.strings("tools", problems);
    for (i, t) in tools.iter().enumerate() {
        if let Err(why) = super::rails::check_tool_glob(t) {
            problems.push(Problem::new(file, diag::index(&o.key("tools"), i), why));
        }
    }
    Some(Authority {
        name: name.to_string(),
        description,
        pull_requests,
        bash,
        tools,
    })
}

/// Airlock's own decision tools on its `airlock` connector (seed 003): exercised under the
/// `hire` authority, which classes.yaml gives the chief alone. The no-hire-chains rail is
/// about upstream tools and Airlock's control surface for humans; these five are governed
/// by the authority instead (checked at load and at every call).
pub const DECISION_TOOLS: [&str; 5] = [
    "hire_request",
    "fire_request",
    "change_request",
    "withdraw_request",
    "decision_status",
];

/// Whether `tool` of `connector` is one of [`DECISION_TOOLS`] on Airlock's own connector.
pub fn is_decision_tool(connector: &str, tool: &str) -> bool {
    connector == crate::policy::agent_config::BASH_SERVER && DECISION_TOOLS.contains(&tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_three_aliases() {
        assert_eq!(canonicalize("implementer"), "code");
        assert_eq!(canonicalize("reviewer"), "review");
        assert_eq!(canonicalize("operator-interaction"), "interaction");
        for other in [
            "worker",
            "analyst",
            "canary",
            "code",
            "tess",
            "merge-gate",
            "Reviewer",
        ] {
            assert_eq!(canonicalize(other), other);
            assert!(!is_legacy_alias(other));
        }
    }

    #[test]
    fn class_names() {
        assert!(is_class_name("merge-gate"));
        assert!(is_class_name("a1"));
        assert!(!is_class_name("1a"));
        assert!(!is_class_name("Merge"));
        assert!(!is_class_name(""));
        assert!(!is_class_name("a_b"));
    }
}
