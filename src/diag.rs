//! Problems found in operator-supplied files. A problem names the file and the key path and
//! says what is allowed; it never carries the offending value, which may be a pasted secret.

use std::fmt;
use std::path::{Path, PathBuf};

/// One thing wrong with one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub file: PathBuf,
    /// Dotted key path inside the file (`run.bash[2]`), or `(file)` for the whole file.
    pub path: String,
    /// What is wrong and what is allowed. Never contains the offending value.
    pub message: String,
}

impl Problem {
    pub fn new(file: &Path, path: impl Into<String>, message: impl Into<String>) -> Self {
        let path = path.into();
        Problem {
            file: file.to_path_buf(),
            path: if path.is_empty() {
                "(file)".to_string()
            } else {
                path
            },
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.path,
            self.message
        )
    }
}

/// Join a parent key path and a child key: `writes` + `repos` = `writes.repos`.
pub fn key(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

/// Join a parent key path and a list index: `run.bash` + 2 = `run.bash[2]`.
pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// Longest key repeated in a problem path; longer keys are named by position.
pub const MAX_SHOWN_KEY: usize = 64;

/// Whether an operator-written key may be repeated in a problem path: a plain identifier
/// (an ASCII letter or `_`, then letters, digits, `_` or `-`, at most [`MAX_SHOWN_KEY`]
/// bytes) that is not shaped like a credential (the secret shapes the rails scan for).
/// Anything else is named by its position, so a pasted secret is never echoed.
pub fn shows_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    key.len() <= MAX_SHOWN_KEY
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && crate::secret_shapes::find_secret(key).is_none()
}

/// Parse YAML text. The serde_yaml message is dropped (it can quote values); only the
/// location is kept.
pub fn parse_yaml(file: &Path, text: &str) -> Result<serde_yaml::Value, Vec<Problem>> {
    serde_yaml::from_str::<serde_yaml::Value>(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
            .unwrap_or_default();
        vec![Problem::new(
            file,
            "",
            format!("is not a single valid YAML document without duplicate keys{at}"),
        )]
    })
}

#[cfg(test)]
mod tests {
    use super::shows_key;

    #[test]
    fn shown_keys_are_identifiers_not_secrets() {
        for k in ["colour", "max_minutes", "Max-Minutes", "_x", "a1"] {
            assert!(shows_key(k), "{k}");
        }
        let long = "a".repeat(65);
        for k in [
            "",
            "1abc",
            "-x",
            "a b",
            "x/y",
            "a.b",
            "é",
            long.as_str(),
            "ghp_zzSECRETKEYMARKER0123456789abcdefghij",
            "sk-ant-zzSECRETKEYMARKER0123456789",
            "AKIAABCDEFGHIJKLMNOP",
        ] {
            assert!(!shows_key(k), "{k}");
        }
    }
}
