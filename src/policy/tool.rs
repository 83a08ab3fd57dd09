//! MCP tool call decisions: connector + tool name + JSON arguments against a role's
//! `tools`, `deny` and `args`. A deny pattern beats any allow; a tool outside the list, an
//! unknown connector, a malformed tool name or arguments that break a rule are refused.
//!
//! `deny[connector]` holds tool patterns and resource patterns together; entries with a
//! `:` are resource patterns and are left to [`crate::policy::resource`]. An entry that is
//! neither a tool pattern nor a resource pattern denies every tool of that connector.

use super::pattern;
use super::Decision;
use crate::role::{ArgRule, Role, Scalar};
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

/// MCP tool names: the same rule the role validator applies (`[A-Za-z0-9_.-]{1,128}`).
pub use crate::names::is_tool_name;

#[derive(Debug, Clone)]
enum NamePattern {
    Exact(String),
    Prefix(String),
}

impl NamePattern {
    /// `name` or `prefix*`; `*` alone is every tool.
    fn parse(p: &str) -> Option<NamePattern> {
        match p.strip_suffix('*') {
            Some(stem) if stem.is_empty() || is_tool_name(stem) => {
                Some(NamePattern::Prefix(stem.to_string()))
            }
            Some(_) => None,
            None if is_tool_name(p) => Some(NamePattern::Exact(p.to_string())),
            None => None,
        }
    }

    /// The pattern as the role wrote it.
    fn text(&self) -> String {
        match self {
            NamePattern::Exact(e) => e.clone(),
            NamePattern::Prefix(p) => format!("{p}*"),
        }
    }

    fn matches(&self, tool: &str) -> bool {
        match self {
            NamePattern::Exact(e) => e == tool,
            NamePattern::Prefix(p) => tool.starts_with(p.as_str()),
        }
    }
}

#[derive(Debug, Clone)]
struct CompiledArg {
    param: String,
    rule: ArgRule,
    /// `Some(None)`: the role's pattern is refused or does not compile; the tool always
    /// denies.
    pattern: Option<Option<regex::Regex>>,
}

#[derive(Debug, Clone, Default)]
struct ConnectorTools {
    allow: Vec<(usize, NamePattern)>,
    deny: Vec<(usize, NamePattern)>,
    /// Index of a deny entry that is no valid pattern of any kind: deny everything.
    deny_all: Option<usize>,
    args: HashMap<String, Vec<CompiledArg>>,
}

/// A role's tool policy, compiled once (patterns parsed, regexes built).
#[derive(Debug, Clone, Default)]
pub struct ToolPolicy {
    connectors: HashMap<String, ConnectorTools>,
}

impl ToolPolicy {
    pub fn compile(role: &Role) -> ToolPolicy {
        let mut connectors = HashMap::new();
        for (name, patterns) in &role.tools {
            let mut c = ConnectorTools::default();
            // An allow pattern that does not parse allows nothing.
            for (i, p) in patterns.iter().enumerate() {
                if let Some(np) = NamePattern::parse(p) {
                    c.allow.push((i, np));
                }
            }
            for (i, p) in role.deny.get(name).into_iter().flatten().enumerate() {
                if let Some(np) = NamePattern::parse(p) {
                    c.deny.push((i, np));
                } else if !p.contains(':') && c.deny_all.is_none() {
                    c.deny_all = Some(i);
                }
            }
            if let Some(tools) = role.args.get(name) {
                c.args = compile_args(tools);
            }
            connectors.insert(name.clone(), c);
        }
        ToolPolicy { connectors }
    }

    /// Whether the role lists `tool` of `connector` at all (its name against `tools` and
    /// `deny`; no argument rules): what a filtered tools/list shows.
    pub fn listed(&self, connector: &str, tool: &str) -> Decision {
        match self.name_check(connector, tool) {
            Ok((c, allow_index)) => Decision::allow(
                format!("tools.{connector}[{allow_index}]"),
                if c.args.contains_key(tool) {
                    "the role lists this tool; its calls must pass its argument rules"
                } else {
                    "the role lists this tool"
                },
            ),
            Err(d) => d,
        }
    }

    /// The role's `tools` pattern that lists `tool` of `connector` (`get_*`, or the exact
    /// name), when the name checks pass: what stands for the tool where a name the agent
    /// chose must not (a metric label, a span name).
    pub fn grant(&self, connector: &str, tool: &str) -> Option<String> {
        let (c, i) = self.name_check(connector, tool).ok()?;
        c.allow.iter().find(|(j, _)| *j == i).map(|(_, p)| p.text())
    }

    /// The name checks of a call: the connector's tools and the index of the allowing
    /// pattern, or the refusal.
    fn name_check(
        &self,
        connector: &str,
        tool: &str,
    ) -> Result<(&ConnectorTools, usize), Decision> {
        if !is_tool_name(tool) {
            return Err(Decision::deny(
                "tool: invalid name",
                "tool names are 1 to 128 characters from A-Z a-z 0-9 _ . -",
            ));
        }
        let Some(c) = self.connectors.get(connector) else {
            return Err(Decision::deny(
                "default: unknown connector",
                "the role lists no tools for this connector",
            ));
        };
        if let Some(i) = c.deny_all {
            return Err(Decision::deny(
                format!("deny.{connector}[{i}]"),
                "this deny entry is not a valid pattern, so every tool of the connector is refused",
            ));
        }
        if let Some((i, _)) = c.deny.iter().find(|(_, p)| p.matches(tool)) {
            return Err(Decision::deny(
                format!("deny.{connector}[{i}]"),
                "the role denies this tool",
            ));
        }
        let Some((allow_index, _)) = c.allow.iter().find(|(_, p)| p.matches(tool)) else {
            return Err(Decision::deny(
                "default: tool not listed",
                format!("no tools.{connector} pattern lists this tool"),
            ));
        };
        Ok((c, *allow_index))
    }

    pub fn decide(&self, connector: &str, tool: &str, args: &Value) -> Decision {
        let (c, allow_index) = match self.name_check(connector, tool) {
            Ok(x) => x,
            Err(d) => return d,
        };
        let empty = Map::new();
        let obj = match args {
            Value::Object(m) => m,
            Value::Null => &empty,
            _ => {
                return Decision::deny(
                    "args: not an object",
                    "tool arguments must be a JSON object",
                )
            }
        };
        if let Some(path) = folded_twins(args, String::from("arguments")) {
            return Decision::deny(
                "args: keys that differ only in case",
                format!("{path}: two keys that differ only in case (or in Unicode case folding); a server that matches keys without case would read one of them, unchecked"),
            );
        }
        let rules = c.args.get(tool).map(Vec::as_slice).unwrap_or(&[]);
        for r in rules {
            if let Err((check, why)) = check_arg(r, obj.get(&r.param)) {
                return Decision::deny(
                    format!("args.{connector}.{tool}.{}: {check}", r.param),
                    why,
                );
            }
        }
        Decision::allow(
            format!("tools.{connector}[{allow_index}]"),
            if rules.is_empty() {
                "the role lists this tool".to_string()
            } else {
                format!(
                    "the role lists this tool and its {} argument rule(s) pass",
                    rules.len()
                )
            },
        )
    }
}

/// The path of the first object in `v` holding two keys that are one key to a server
/// matching keys case-insensitively as Go's encoding/json does (simple Unicode case
/// folding, [`super::fold`]: `ſ` is `s`, the Kelvin sign `k`, `ẞ` is `ß`): the argument
/// checked and the argument read could differ.
pub(crate) fn folded_twins(v: &Value, at: String) -> Option<String> {
    let fold = super::fold::fold;
    match v {
        Value::Object(m) => {
            let mut seen = std::collections::HashSet::new();
            if m.keys().any(|k| !seen.insert(fold(k))) {
                return Some(at);
            }
            m.iter().find_map(|(k, x)| {
                folded_twins(
                    x,
                    format!("{at}.{}", k.chars().take(40).collect::<String>()),
                )
            })
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| folded_twins(x, format!("{at}[{i}]"))),
        _ => None,
    }
}

/// One-off decision; compile a [`ToolPolicy`] when deciding more than once.
pub fn decide(role: &Role, connector: &str, tool: &str, args: &Value) -> Decision {
    ToolPolicy::compile(role).decide(connector, tool, args)
}

fn compile_args(
    tools: &BTreeMap<String, BTreeMap<String, ArgRule>>,
) -> HashMap<String, Vec<CompiledArg>> {
    tools
        .iter()
        .map(|(tool, params)| {
            let compiled = params
                .iter()
                .map(|(param, rule)| CompiledArg {
                    param: param.clone(),
                    rule: rule.clone(),
                    pattern: rule
                        .pattern
                        .as_deref()
                        .map(|p| pattern::check(p).and_then(|_| pattern::compile(p)).ok()),
                })
                .collect();
            (tool.clone(), compiled)
        })
        .collect()
}

type Refusal = (&'static str, &'static str);

fn check_arg(r: &CompiledArg, value: Option<&Value>) -> Result<(), Refusal> {
    let Some(v) = value else {
        return Err((
            "required",
            "this parameter has a rule, so it must be present",
        ));
    };
    let rule = &r.rule;
    if let Some(choices) = &rule.enum_ {
        if !choices.iter().any(|s| scalar_eq(v, s)) {
            return Err(("enum", "the value is not one of the allowed values"));
        }
    }
    if let Some(s) = &rule.const_ {
        if !scalar_eq(v, s) {
            return Err(("const", "the value is not the one allowed value"));
        }
    }
    if rule.min.is_some() || rule.max.is_some() {
        let Value::Number(n) = v else {
            return Err(("type", "a min or max rule needs a number"));
        };
        if let Some(min) = rule.min {
            if !matches!(num_cmp(n, min), Some(Ordering::Greater | Ordering::Equal)) {
                return Err(("min", "the number is below the minimum"));
            }
        }
        if let Some(max) = rule.max {
            if !matches!(num_cmp(n, max), Some(Ordering::Less | Ordering::Equal)) {
                return Err(("max", "the number is above the maximum"));
            }
        }
    }
    if rule.max_length.is_some() || r.pattern.is_some() {
        let Value::String(s) = v else {
            return Err(("type", "a maxLength or pattern rule needs a string"));
        };
        if let Some(limit) = rule.max_length {
            // Count code points, stopping early so a huge string costs at most `limit` steps.
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            if s.chars().nth(limit).is_some() {
                return Err(("maxLength", "the string is longer than allowed"));
            }
        }
        match &r.pattern {
            None => {}
            Some(None) => {
                return Err((
                    "pattern",
                    "the role's pattern for this parameter is invalid, so the tool is refused",
                ))
            }
            Some(Some(re)) if !re.is_match(s) => {
                return Err(("pattern", "the string does not match the required pattern"));
            }
            Some(Some(_)) => {}
        }
    }
    Ok(())
}

/// JSON equality with a rule scalar; numbers compare numerically and exactly.
fn scalar_eq(v: &Value, s: &Scalar) -> bool {
    match (v, s) {
        (Value::Bool(a), Scalar::Bool(b)) => a == b,
        (Value::String(a), Scalar::String(b)) => a == b,
        (Value::Number(n), Scalar::Number(b)) => num_cmp(n, *b) == Some(Ordering::Equal),
        _ => false,
    }
}

/// Compare a JSON number with a bound without losing integer precision.
fn num_cmp(n: &Number, bound: f64) -> Option<Ordering> {
    if bound.is_nan() {
        return None;
    }
    if let Some(i) = n.as_i64() {
        return Some(cmp_int(i128::from(i), bound));
    }
    if let Some(u) = n.as_u64() {
        return Some(cmp_int(i128::from(u), bound));
    }
    n.as_f64()?.partial_cmp(&bound)
}

fn cmp_int(i: i128, bound: f64) -> Ordering {
    // Outside the range of any JSON integer serde_json keeps, the answer is known.
    if bound >= 18_446_744_073_709_551_616.0 {
        return Ordering::Less;
    }
    if bound < -9_223_372_036_854_775_808.0 {
        return Ordering::Greater;
    }
    let floor = bound.floor();
    // In range and integral, so the conversion is exact.
    let b = floor as i128;
    match i.cmp(&b) {
        Ordering::Equal if bound > floor => Ordering::Less,
        o => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_grant_is_the_pattern_that_listed_the_tool_as_the_role_wrote_it() {
        let mut c = ConnectorTools::default();
        for (i, p) in ["echo", "get_*", "*"].iter().enumerate() {
            c.allow.push((i, NamePattern::parse(p).unwrap()));
        }
        c.deny.push((0, NamePattern::parse("get_secret").unwrap()));
        let policy = ToolPolicy {
            connectors: HashMap::from([("docs".to_string(), c)]),
        };
        assert_eq!(policy.grant("docs", "echo").as_deref(), Some("echo"));
        assert_eq!(policy.grant("docs", "get_x1").as_deref(), Some("get_*"));
        assert_eq!(policy.grant("docs", "other").as_deref(), Some("*"));
        assert_eq!(policy.grant("docs", "get_secret"), None);
        assert_eq!(policy.grant("docs", "bad name"), None);
        assert_eq!(policy.grant("ghost", "echo"), None);
    }

    #[test]
    fn numbers_compare_exactly() {
        let big: Number = serde_json::from_str("9007199254740993").unwrap();
        assert_eq!(
            num_cmp(&big, 9_007_199_254_740_992.0),
            Some(Ordering::Greater)
        );
        let n: Number = 5.into();
        assert_eq!(num_cmp(&n, 5.0), Some(Ordering::Equal));
        assert_eq!(num_cmp(&n, 5.5), Some(Ordering::Less));
        assert_eq!(num_cmp(&n, 4.5), Some(Ordering::Greater));
        assert_eq!(num_cmp(&n, f64::INFINITY), Some(Ordering::Less));
        assert_eq!(num_cmp(&n, f64::NEG_INFINITY), Some(Ordering::Greater));
        let neg: Number = (-3).into();
        assert_eq!(num_cmp(&neg, -2.5), Some(Ordering::Less));
        assert_eq!(num_cmp(&neg, -3.5), Some(Ordering::Greater));
        let f: Number = Number::from_f64(2.5).unwrap();
        assert_eq!(num_cmp(&f, 2.5), Some(Ordering::Equal));
        let u: Number = u64::MAX.into();
        assert_eq!(num_cmp(&u, 1e19), Some(Ordering::Greater));
        assert!(scalar_eq(&json!(3), &Scalar::Number(3.0)));
        assert!(scalar_eq(&json!(3.0), &Scalar::Number(3.0)));
        assert!(!scalar_eq(&json!("3"), &Scalar::Number(3.0)));
        assert!(!scalar_eq(&json!(true), &Scalar::String("true".into())));
    }

    #[test]
    fn keys_one_key_to_a_case_blind_server_are_found() {
        let t = |v: Value| folded_twins(&v, "arguments".into());
        assert_eq!(t(json!({"base": "main", "head": "x"})), None);
        assert_eq!(
            t(json!({"base": "main", "Base": "release"})),
            Some("arguments".into())
        );
        // U+017F LATIN SMALL LETTER LONG S folds to s; U+212A KELVIN SIGN to k.
        assert_eq!(
            t(json!({"base": "main", "ba\u{17f}e": "x"})),
            Some("arguments".into())
        );
        assert_eq!(
            t(json!({"kind": 1, "\u{212a}ind": 2})),
            Some("arguments".into())
        );
        // Go folds ß and ẞ together (simple folding), and never ß with ss (full folding).
        assert_eq!(
            t(json!({"stra\u{df}e": 1, "STRA\u{1e9e}E": 2})),
            Some("arguments".into())
        );
        assert_eq!(t(json!({"stra\u{df}e": 1, "strasse": 2})), None);
        assert_eq!(
            t(json!({"\u{3b8}": 1, "\u{3d1}": 2})),
            Some("arguments".into())
        );
        assert_eq!(
            t(json!({"files": [{"path": "a"}, {"path": "b", "PATH": "c"}]})),
            Some("arguments.files[1]".into())
        );
        assert_eq!(t(json!({"files": [{"path": "a"}, {"path": "b"}]})), None);
    }

    #[test]
    fn name_patterns() {
        assert!(NamePattern::parse("board_*").is_some_and(|p| p.matches("board_read")));
        assert!(NamePattern::parse("*").is_some_and(|p| p.matches("x")));
        assert!(NamePattern::parse("a*b").is_none());
        assert!(NamePattern::parse("a b").is_none());
        assert!(NamePattern::parse("").is_none());
        assert!(NamePattern::parse("get").is_some_and(|p| !p.matches("get_all")));
    }
}
