//! The files a role folder holds: `role.yaml` itself, and the brief and goals it names.
//! Each must be a regular file inside the role's folder after symlinks are resolved, so a
//! role cannot point Airlock at text elsewhere on the host.

use crate::diag::Problem;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest brief or goals file read, in bytes.
pub const MAX_TEXT_BYTES: u64 = 1024 * 1024;

/// Read a regular file of at most `limit` bytes as UTF-8. The error says what is wrong, never
/// what the file holds.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    let f = File::open(path).map_err(|e| format!("cannot be opened ({})", e.kind()))?;
    read_open(f, limit)
}

/// [`read_bounded`] of a file already open.
pub fn read_open(f: File, limit: u64) -> Result<String, String> {
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot be inspected ({})", e.kind()))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let mut buf = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot be read ({})", e.kind()))?;
    if buf.len() as u64 > limit {
        return Err(format!("is larger than the {limit} bytes allowed"));
    }
    String::from_utf8(buf).map_err(|_| "is not UTF-8 text".into())
}

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
