//! The files a role folder holds: `role.yaml` itself, and the brief and goals it names.
//! Each must be a regular file inside the role's folder after symlinks are resolved, so a
//! role cannot point Airlock at text elsewhere on the host.

use crate::diag::Problem;
pub use crate::trust::read_bounded;
use std::path::{Path, PathBuf};

/// Largest brief or goals file read, in bytes.
pub const MAX_TEXT_BYTES: u64 = 1024 * 1024;

/// Resolve `rel` (already checked to be relative, without `..`) inside `dir` and confirm that
/// after every symlink it is still a regular file inside `dir`.
pub fn inside(dir: &Path, rel: &str) -> Result<PathBuf, String> {
    let root = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve the role's folder ({})", e.kind()))?;
    let target = root.join(rel);
    let real = target.canonicalize().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            "names a file that does not exist; it must be a file in the role's folder".to_string()
        }
        k => format!("names a file that cannot be resolved ({k})"),
    })?;
    if !real.starts_with(&root) || real == root {
        return Err(
            "leads outside the role's folder (through a symlink); it must be a file inside the folder"
                .into(),
        );
    }
    Ok(real)
}

/// Read the brief or goals file `rel` of the role in `dir`; problems name `key` in `file`.
pub fn read_text(dir: &Path, file: &Path, key: &str, rel: &str) -> Result<String, Problem> {
    let real = inside(dir, rel).map_err(|m| Problem::new(file, key, m))?;
    read_bounded(&real, MAX_TEXT_BYTES)
        .map_err(|m| Problem::new(file, key, format!("names a file that {m}")))
}
