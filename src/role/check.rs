//! Typed accessors over a YAML value that record a problem instead of failing: each says
//! what was expected and what is allowed, and none ever quotes the value it looked at.

use crate::diag::{self, Problem};
use serde_yaml::Value;
use std::path::Path;

/// Collects every problem found in one file.
pub struct Ctx<'f> {
    file: &'f Path,
    pub problems: Vec<Problem>,
}

/// What kind of value was found, for "must be a string, found a list".
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a fractional number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// The path segment naming a key: the key itself when `show` (it passed its pattern), else
/// its position, so a pasted secret used as a key is never echoed.
pub fn key_seg(parent: &str, key: &str, n: usize, show: bool) -> String {
    if show {
        diag::key(parent, key)
    } else {
        diag::key(parent, &format!("<key #{n}>"))
    }
}

/// One entry of a mapping whose keys are all strings: position from 1, key, value.
pub type Entry<'v> = (usize, &'v str, &'v Value);

impl<'f> Ctx<'f> {
    pub fn new(file: &'f Path) -> Self {
        Ctx {
            file,
            problems: Vec::new(),
        }
    }

    pub fn add(&mut self, path: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(self.file, path, message));
    }

    fn wrong_type(&mut self, path: &str, want: &str, v: &Value) {
        self.add(path, format!("must be {want}, found {}", kind(v)));
    }

    /// A mapping with string keys. Non-string keys are reported and skipped.
    pub fn mapping<'v>(&mut self, v: &'v Value, path: &str) -> Option<Vec<Entry<'v>>> {
        let Value::Mapping(m) = v else {
            self.wrong_type(path, "a mapping", v);
            return None;
        };
        let mut out = Vec::with_capacity(m.len());
        for (i, (k, val)) in m.iter().enumerate() {
            match k {
                Value::String(s) => out.push((i + 1, s.as_str(), val)),
                other => self.add(
                    &key_seg(path, "", i + 1, false),
                    format!("is a key that is {}; keys must be strings", kind(other)),
                ),
            }
        }
        Some(out)
    }

    /// A mapping with a fixed set of properties (`additionalProperties: false`) and required
    /// ones. An unknown key is named when it is a plain identifier not shaped like a secret
    /// ([`diag::shows_key`]), else by position; the allowed keys are listed.
    pub fn object<'v>(
        &mut self,
        v: &'v Value,
        path: &str,
        allowed: &[&str],
        required: &[&str],
    ) -> Option<Vec<(&'v str, &'v Value)>> {
        let entries = self.mapping(v, path)?;
        let mut known = Vec::with_capacity(entries.len());
        for (n, k, val) in entries {
            if allowed.contains(&k) {
                known.push((k, val));
            } else {
                let where_ = if path.is_empty() {
                    "at the top level".to_string()
                } else {
                    format!("in `{path}`")
                };
                self.add(
                    &key_seg(path, k, n, diag::shows_key(k)),
                    format!(
                        "is not a known key {where_}; allowed keys are: {}",
                        allowed.join(", ")
                    ),
                );
            }
        }
        for r in required {
            if !known.iter().any(|(k, _)| k == r) {
                self.add(&diag::key(path, r), "is required but missing");
            }
        }
        Some(known)
    }

    pub fn string<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v str> {
        match v {
            Value::String(s) => Some(s.as_str()),
            _ => {
                self.wrong_type(path, "a string", v);
                None
            }
        }
    }

    /// A string that must pass `ok`; `allowed` says what passes.
    pub fn string_matching<'v>(
        &mut self,
        v: &'v Value,
        path: &str,
        ok: impl Fn(&str) -> bool,
        allowed: &str,
    ) -> Option<&'v str> {
        let s = self.string(v, path)?;
        if ok(s) {
            Some(s)
        } else {
            self.add(path, format!("is not allowed; it must be {allowed}"));
            None
        }
    }

    /// A string from a fixed list (`enum`).
    pub fn one_of<'v>(&mut self, v: &'v Value, path: &str, allowed: &[&str]) -> Option<&'v str> {
        let s = self.string(v, path)?;
        if allowed.contains(&s) {
            Some(s)
        } else {
            self.add(
                path,
                format!("is not one of the allowed values: {}", allowed.join(", ")),
            );
            None
        }
    }

    pub fn boolean(&mut self, v: &Value, path: &str) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => {
                self.wrong_type(path, "a boolean (true or false)", v);
                None
            }
        }
    }

    /// An integer (never a fraction, never a quoted number) within the bounds given.
    pub fn integer(
        &mut self,
        v: &Value,
        path: &str,
        min: Option<i128>,
        max: Option<i128>,
    ) -> Option<i128> {
        let range = match (min, max) {
            (Some(a), Some(b)) => format!("an integer from {a} to {b}"),
            (Some(a), None) => format!("an integer of at least {a}"),
            (None, Some(b)) => format!("an integer of at most {b}"),
            (None, None) => "an integer".to_string(),
        };
        let n = match v {
            Value::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
            _ => None,
        };
        let Some(n) = n else {
            self.wrong_type(path, &range, v);
            return None;
        };
        if min.is_some_and(|a| n < a) || max.is_some_and(|b| n > b) {
            self.add(path, format!("is out of range; it must be {range}"));
            return None;
        }
        Some(n)
    }

    /// A finite number (integer or fraction), at least `min` when given.
    pub fn number(&mut self, v: &Value, path: &str, min: Option<f64>) -> Option<f64> {
        let want = match min {
            Some(a) => format!("a number of at least {a}"),
            None => "a number".to_string(),
        };
        let n = match v {
            Value::Number(n) => n.as_f64(),
            _ => None,
        };
        let Some(n) = n else {
            self.wrong_type(path, &want, v);
            return None;
        };
        if !n.is_finite() {
            self.add(path, format!("is not a finite number; it must be {want}"));
            return None;
        }
        if min.is_some_and(|a| n < a) {
            self.add(path, format!("is out of range; it must be {want}"));
            return None;
        }
        Some(n)
    }

    pub fn list<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v [Value]> {
        match v {
            Value::Sequence(s) => Some(s.as_slice()),
            _ => {
                self.wrong_type(path, "a list", v);
                None
            }
        }
    }

    /// A list of strings, each checked by `item`.
    pub fn list_of<'v>(
        &mut self,
        v: &'v Value,
        path: &str,
        mut item: impl FnMut(&mut Self, &'v Value, &str),
    ) {
        if let Some(items) = self.list(v, path) {
            for (i, it) in items.iter().enumerate() {
                item(self, it, &diag::index(path, i));
            }
        }
    }

    /// A list of strings from a fixed set, optionally with no repeats (`uniqueItems`).
    pub fn enum_list(&mut self, v: &Value, path: &str, allowed: &[&str], unique: bool) {
        let mut seen: Vec<&str> = Vec::new();
        self.list_of(v, path, |c, it, p| {
            if let Some(s) = c.one_of(it, p, allowed) {
                if unique && seen.contains(&s) {
                    c.add(p, "repeats an earlier entry; each may be listed once");
                }
                seen.push(s);
            }
        });
    }

    /// A list of plain strings.
    pub fn string_list(&mut self, v: &Value, path: &str) {
        self.list_of(v, path, |c, it, p| {
            c.string(it, p);
        });
    }
}
