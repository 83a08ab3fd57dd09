//! Rail: secrets never in role text. Every string of a role document (keys and values), its
//! brief and its goals is scanned for credential shapes. A hit is reported by file and key
//! path (or line), with the kind of credential; the matched text is never repeated.
//!
//! The shapes are code, not data: a policy file cannot switch the scan off.

use crate::diag::{self, Problem};
use regex::RegexSet;
use serde_yaml::Value;
use std::path::Path;
use std::sync::OnceLock;

/// Credential shapes, each with the name a problem gives it. Order matters only for naming:
/// the first matching shape names a hit (Anthropic before the generic `sk-` shape).
const SHAPES: &[(&str, &str)] = &[
    ("a GitHub token", r"(?-u:\b)gh[pousr]_[A-Za-z0-9]{30,}"),
    (
        "a GitHub fine-grained token",
        r"(?-u:\b)github_pat_[A-Za-z0-9_]{22,}",
    ),
    ("a GitLab token", r"(?-u:\b)glpat-[A-Za-z0-9_-]{20,}"),
    (
        "an AWS access key id",
        r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?-u:\b)",
    ),
    (
        "an AWS secret access key",
        r"(?i)aws[^\n]{0,20}secret[^\n]{0,20}[:=][ \t\r\n]*['\x22]?[A-Za-z0-9/+=]{40}(?-u:\b)",
    ),
    ("a Google API key", r"(?-u:\b)AIza[0-9A-Za-z_-]{35}"),
    ("a Google OAuth token", r"(?-u:\b)ya29\.[0-9A-Za-z_-]{20,}"),
    ("a Slack token", r"(?-u:\b)xox[abprse]-[A-Za-z0-9-]{10,}"),
    (
        "a Slack webhook",
        r"hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+",
    ),
    ("an Anthropic API key", r"(?-u:\b)sk-ant-[A-Za-z0-9_-]{20,}"),
    (
        "an OpenAI API key",
        r"(?-u:\b)sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    ),
    (
        "a Stripe key",
        r"(?-u:\b)(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    ),
    ("an npm token", r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)"),
    ("a PyPI token", r"(?-u:\b)pypi-AgE[A-Za-z0-9_-]{50,}"),
    ("a Hugging Face token", r"(?-u:\b)hf_[A-Za-z0-9]{30,}"),
    (
        "a SendGrid key",
        r"(?-u:\b)SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
    ),
    (
        "a private key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
    ),
    (
        "a JSON Web Token",
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+",
    ),
    (
        "a password in a URL",
        r"(?-u:\b)[a-zA-Z][a-zA-Z0-9+.-]*://[^/ \t\r\n:@]+:[^/ \t\r\n:@]{3}[^/ \t\r\n:@]*@",
    ),
    (
        "a bearer token",
        r"(?i)(?-u:\b)bearer[ \t\r\n]+[A-Za-z0-9._~+/-]{20,}=*",
    ),
];

fn set() -> &'static RegexSet {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    SET.get_or_init(|| {
        // The patterns are constants checked by the unit tests; an empty set (which matches
        // nothing) can only happen if a constant is broken, and the tests catch that.
        RegexSet::new(SHAPES.iter().map(|(_, re)| *re)).unwrap_or_else(|_| RegexSet::empty())
    })
}

/// The kind of credential `s` contains, if any. Never returns the match.
pub fn find_secret(s: &str) -> Option<&'static str> {
    // Cheap pre-check: no shape matches fewer bytes (`a://b:ccc@` is the shortest).
    if s.len() < 10 {
        return None;
    }
    set()
        .matches(s)
        .iter()
        .next()
        .and_then(|i| SHAPES.get(i))
        .map(|(name, _)| *name)
}

fn refusal(kind: &str) -> String {
    format!(
        "looks like {kind}; secrets never go in role files, briefs or goals \
         (airlock mints and holds credentials per run); remove it and rotate it"
    )
}

/// Scan every key and value of a role document. `file` names the role file.
pub fn scan_document(file: &Path, doc: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    walk(file, "", doc, &mut problems);
    problems
}

fn walk(file: &Path, path: &str, v: &Value, problems: &mut Vec<Problem>) {
    match v {
        Value::String(s) => {
            if let Some(kind) = find_secret(s) {
                problems.push(Problem::new(file, path, refusal(kind)));
            }
        }
        Value::Sequence(seq) => {
            for (i, item) in seq.iter().enumerate() {
                walk(file, &diag::index(path, i), item, problems);
            }
        }
        Value::Mapping(map) => {
            for (i, (k, item)) in map.iter().enumerate() {
                let child = match k.as_str() {
                    Some(ks) => {
                        if let Some(kind) = find_secret(ks) {
                            problems.push(Problem::new(
                                file,
                                path,
                                format!("a key here {}", refusal(kind)),
                            ));
                            key_placeholder(path, i)
                        } else if safe_key(ks) {
                            diag::key(path, ks)
                        } else {
                            key_placeholder(path, i)
                        }
                    }
                    None => {
                        walk(file, path, k, problems);
                        key_placeholder(path, i)
                    }
                };
                walk(file, &child, item, problems);
            }
        }
        Value::Tagged(t) => walk(file, path, &t.value, problems),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// A key we may repeat in a path: short and plain. Others are named by position.
fn safe_key(s: &str) -> bool {
    super::store::is_plain_key(s)
}

fn key_placeholder(path: &str, i: usize) -> String {
    diag::key(path, &format!("(key #{})", i + 1))
}

/// Scan a brief or goals text line by line. `label` is `brief` or `goals`.
pub fn scan_text(file: &Path, label: &str, text: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(kind) = find_secret(line) {
            problems.push(Problem::new(
                file,
                format!("{label} line {}", n + 1),
                refusal(kind),
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_compiles_alone() {
        for (name, re) in SHAPES {
            assert!(regex::Regex::new(re).is_ok(), "{name}");
        }
        assert_eq!(set().len(), SHAPES.len());
    }

    #[test]
    fn plain_text_is_clean() {
        for s in [
            "git log",
            "Open a PR for each issue labelled good-first-issue.",
            "sk-",
            "the task is ask-ant-colony simulation",
            "https://example.com/path?x=1",
            "ssh://git@github.com/o/r.git",
            "Authorization: Bearer <token>",
            "eyJ only once",
        ] {
            assert_eq!(find_secret(s), None, "{s}");
        }
    }

    #[test]
    fn anthropic_named_before_openai() {
        let k = format!("sk-ant-api03-{}", "a".repeat(40));
        assert_eq!(find_secret(&k), Some("an Anthropic API key"));
    }
}
