//! The gateway grants of a role: `tools`, `resources`, `deny` and `args`, each keyed by
//! connector. These feed the policy engine directly, so every name and pattern is checked
//! here and anything outside the allowed shapes is refused.

use super::check::{key_seg, Ctx};
use crate::diag;
use crate::names;
use crate::pattern;
use serde_yaml::Value;

const CONNECTOR_RULE: &str =
    "is not a valid connector name; use 1 to 40 lowercase letters, digits and `-`, starting with a letter or digit";
const TOOL_PATTERN_RULE: &str =
    "a tool name of MCP tool-name characters (A-Z a-z 0-9 _ . -), at most 128, optionally ending in one `*`; `*` alone grants every tool";
const RESOURCE_PATTERN_RULE: &str =
    "printable ASCII without spaces: an exact URI, a prefix ending in `/*`, `<scheme>:*`, or `*` (a `*` anywhere else is not allowed)";

/// The connector mapping shared by all four sections: each key checked, each value handed on
/// with its display path.
fn by_connector<'v>(c: &mut Ctx, v: &'v Value, path: &str) -> Vec<(String, &'v Value)> {
    let Some(entries) = c.mapping(v, path) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(entries.len());
    for (n, k, val) in entries {
        let ok = names::is_connector(k);
        let p = key_seg(path, k, n, ok);
        if !ok {
            c.add(&p, CONNECTOR_RULE);
        }
        out.push((p, val));
    }
    out
}

/// `tools`: connector -> list of tool patterns.
pub fn tools(c: &mut Ctx, v: &Value) {
    for (p, list) in by_connector(c, v, "tools") {
        c.list_of(list, &p, |c, it, ip| {
            c.string_matching(it, ip, names::is_tool_pattern, TOOL_PATTERN_RULE);
        });
    }
}

/// `resources` (resource patterns) and `deny` (tool or resource patterns).
pub fn patterns(c: &mut Ctx, v: &Value, section: &str, tools_too: bool) {
    for (p, list) in by_connector(c, v, section) {
        c.list_of(list, &p, |c, it, ip| {
            let Some(s) = c.string(it, ip) else {
                return;
            };
            let ok = names::is_resource_pattern(s) || (tools_too && names::is_tool_pattern(s));
            if !ok {
                let what = if tools_too {
                    format!("is not allowed; it must be a tool pattern ({TOOL_PATTERN_RULE}) or a resource pattern ({RESOURCE_PATTERN_RULE})")
                } else {
                    format!("is not allowed; it must be {RESOURCE_PATTERN_RULE}")
                };
                c.add(ip, what);
            }
        });
    }
}

/// Every tool pattern granted under `tools`, with its path; for the board-tool rules.
pub fn tool_patterns(tools: Option<&Value>) -> impl Iterator<Item = (String, &str)> {
    let conns = match tools {
        Some(Value::Mapping(m)) => Some(m),
        _ => None,
    };
    conns
        .into_iter()
        .flat_map(|m| m.iter().enumerate())
        .filter_map(|(n, (k, v))| match (k, v) {
            (Value::String(k), Value::Sequence(items)) => Some((n + 1, k, items)),
            _ => None,
        })
        .flat_map(|(n, k, items)| {
            let conn = key_seg("tools", k, n, names::is_connector(k));
            items
                .iter()
                .enumerate()
                .filter_map(move |(i, it)| match it {
                    Value::String(s) => Some((diag::index(&conn, i), s.as_str())),
                    _ => None,
                })
        })
}

/// `args`: connector -> tool -> parameter -> rule.
pub fn args(c: &mut Ctx, v: &Value) {
    for (cp, tools) in by_connector(c, v, "args") {
        let Some(tools) = c.mapping(tools, &cp) else {
            continue;
        };
        for (n, tool, params) in tools {
            let ok = names::is_tool_name(tool) && tool != "__proto__";
            let tp = key_seg(&cp, tool, n, ok);
            if !ok {
                c.add(
                    &tp,
                    "is not a valid tool name; use 1 to 128 MCP tool-name characters (A-Z a-z 0-9 _ . -), and never `__proto__`",
                );
            }
            let Some(params) = c.mapping(params, &tp) else {
                continue;
            };
            for (m, param, rule) in params {
                let shown = names::is_tool_name(param) && param != "__proto__";
                let pp = key_seg(&tp, param, m, shown);
                if param == "__proto__" {
                    c.add(&pp, "is not allowed as a parameter name (`__proto__`)");
                }
                arg_rule(c, rule, &pp);
            }
        }
    }
}

/// One parameter rule: only `enum`, `const`, `min`, `max`, `maxLength`, `pattern`.
fn arg_rule(c: &mut Ctx, v: &Value, path: &str) {
    let Some(entries) = c.object(
        v,
        path,
        &["enum", "const", "min", "max", "maxLength", "pattern"],
        &[],
    ) else {
        return;
    };
    let (mut min, mut max) = (None, None);
    for (k, val) in entries {
        let p = diag::key(path, k);
        match k {
            "enum" => {
                if let Some(items) = c.list(val, &p) {
                    if items.is_empty() {
                        c.add(&p, "is empty; list at least one allowed value");
                    }
                    for (i, it) in items.iter().enumerate() {
                        scalar(c, it, &diag::index(&p, i));
                    }
                }
            }
            "const" => scalar(c, val, &p),
            "min" => min = c.number(val, &p, None),
            "max" => max = c.number(val, &p, None),
            "maxLength" => {
                c.integer(val, &p, Some(0), None);
            }
            "pattern" => {
                if let Some(s) = c.string(val, &p) {
                    if let Err(why) = pattern::check(s) {
                        c.add(
                            &p,
                            format!(
                                "is not an allowed pattern: it {why}; a pattern is a short anchored regular expression with no backreference, lookaround or quantified group"
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    if let (Some(a), Some(b)) = (min, max) {
        if a > b {
            c.add(
                path,
                "has `min` greater than `max`; `min` must be at most `max`",
            );
        }
    }
}

/// A value of `enum` or `const`: a string, a finite number or a boolean.
fn scalar(c: &mut Ctx, v: &Value, path: &str) {
    match v {
        Value::String(_) | Value::Bool(_) => {}
        Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => {}
        Value::Number(_) => c.add(
            path,
            "is not a finite number; use a string, a finite number or a boolean",
        ),
        _ => c.add(path, "must be a string, a number or a boolean"),
    }
}
