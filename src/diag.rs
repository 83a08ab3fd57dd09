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
