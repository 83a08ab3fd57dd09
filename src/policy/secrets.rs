//! Rail: secrets never in role text. Every string of a role document (keys and values), its
//! brief and its goals is scanned for credential shapes. A hit is reported by file and key
//! path (or line), with the kind of credential; the matched text is never repeated.
//!
//! The shapes are [`crate::secret_shapes`]: code, not data, so a policy file cannot switch
//! the scan off.

use crate::diag::{self, Problem};
use crate::secret_shapes::{find_secret, is_plain_key};
use serde_yaml::Value;
use std::path::Path;

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
    is_plain_key(s)
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
