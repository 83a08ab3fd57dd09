//! Frozen role revisions (seed 003: a template is frozen when it is copied). Approving a
//! hire or a change copies the role's folder (role file, brief, goals, workflow) into
//! `<state_dir>/revisions/<sha256>/<role>/`, named by the sha256 of its contents, and the
//! instance runs that copy from then on, never `roles/` as it is now. A template edited
//! later changes nothing until a `change` decision moves the instance to it.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::model::hex;

/// Most bytes of a role folder that is frozen (a role, its brief and goals are small).
const MAX_BYTES: u64 = 4 << 20;
/// Most files in it.
const MAX_FILES: usize = 256;

pub fn root(state: &Path) -> PathBuf {
    state.join("revisions")
}

/// The folder holding revision `sha` of `role` (the layer to load it from is its parent).
pub fn folder(state: &Path, sha: &str, role: &str) -> PathBuf {
    root(state).join(sha).join(role)
}

/// The files of a role folder, relative path and bytes, sorted: regular files only (a
/// link is read through, as the role loader does), bounded in number and size.
pub fn read_folder(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut total = 0u64;
    walk(dir, "", &mut out, &mut total)?;
    out.sort();
    Ok(out)
}

fn walk(
    dir: &Path,
    rel: &str,
    out: &mut Vec<(String, Vec<u8>)>,
    total: &mut u64,
) -> Result<(), String> {
    let say = |e: std::io::Error| format!("{}: {e}", dir.display());
    for e in fs::read_dir(dir).map_err(say)? {
        let e = e.map_err(say)?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = e.path();
        let rel = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let meta = fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.is_dir() {
            walk(&path, &rel, out, total)?;
        } else if meta.is_file() {
            *total += meta.len();
            if *total > MAX_BYTES || out.len() >= MAX_FILES {
                return Err(format!(
                    "{}: a role folder holds at most {MAX_FILES} files and {MAX_BYTES} bytes",
                    dir.display()
                ));
            }
            out.push((
                rel,
                fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?,
            ));
        }
    }
    Ok(())
}

/// sha256 over the files: each as its path, a NUL, its length, a NUL and its bytes.
pub fn sha_of(files: &[(String, Vec<u8>)]) -> String {
    let mut h = Sha256::new();
    for (p, b) in files {
        h.update(p.as_bytes());
        h.update([0]);
        h.update(b.len().to_string().as_bytes());
        h.update([0]);
        h.update(b);
    }
    hex(&h.finalize())
}

/// Write `files` as revision `sha` of `role` (once: an existing revision is the same
/// contents by its name). Returns the folder.
pub fn store(
    state: &Path,
    role: &str,
    files: &[(String, Vec<u8>)],
) -> Result<(String, PathBuf), String> {
    let sha = sha_of(files);
    let dest = folder(state, &sha, role);
    if dest.join("role.yaml").is_file() {
        return Ok((sha, dest));
    }
    let top = root(state).join(&sha);
    let tmp = root(state).join(format!(".{sha}.tmp"));
    let _ = fs::remove_dir_all(&tmp);
    for (rel, bytes) in files {
        if rel.split('/').any(|s| s == ".." || s.is_empty()) {
            return Err(format!(
                "{role}: a file name in the role folder is not allowed"
            ));
        }
        let p = tmp.join(role).join(rel);
        let parent = p.parent().unwrap_or(&tmp);
        crate::store::private_file::write(parent, &p, bytes)?;
    }
    fs::rename(&tmp, &top).map_err(|e| format!("{}: {e}", top.display()))?;
    if let Ok(d) = fs::File::open(root(state)) {
        let _ = d.sync_all();
    }
    Ok((sha, dest))
}

/// Freeze the role folder `dir` (named `role`): its revision's sha256 and folder.
pub fn freeze(state: &Path, role: &str, dir: &Path) -> Result<(String, PathBuf), String> {
    store(state, role, &read_folder(dir)?)
}

/// A line-by-line difference of two revisions' files (`-` old, `+` new), for `role diff`
/// and `decision show`. Small files: a plain longest-common-subsequence diff.
pub fn diff(old: &[(String, Vec<u8>)], new: &[(String, Vec<u8>)]) -> String {
    let mut out = String::new();
    let mut names: Vec<&String> = old.iter().chain(new).map(|(p, _)| p).collect();
    names.sort();
    names.dedup();
    let text = |set: &[(String, Vec<u8>)], n: &str| {
        set.iter()
            .find(|(p, _)| p == n)
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
    };
    for n in names {
        let (a, b) = (text(old, n), text(new, n));
        if a == b {
            continue;
        }
        out.push_str(&format!("--- {n}\n+++ {n}\n"));
        let a: Vec<&str> = a
            .as_deref()
            .map(|t| t.lines().collect())
            .unwrap_or_default();
        let b: Vec<&str> = b
            .as_deref()
            .map(|t| t.lines().collect())
            .unwrap_or_default();
        out.push_str(&lines_diff(&a, &b));
    }
    out
}

fn lines_diff(a: &[&str], b: &[&str]) -> String {
    let (n, m) = (a.len(), b.len());
    let mut l = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if a[i] == b[j] {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < n && (j == m || l[i + 1][j] >= l[i][j + 1]) {
            out.push_str(&format!("-{}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+{}\n", b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_is_named_by_its_contents_and_diffs_by_line() {
        let a = vec![("role.yaml".to_string(), b"x: 1\ny: 2\n".to_vec())];
        let b = vec![("role.yaml".to_string(), b"x: 1\ny: 3\n".to_vec())];
        assert_ne!(sha_of(&a), sha_of(&b));
        assert_eq!(sha_of(&a), sha_of(&a.clone()));
        assert_eq!(diff(&a, &b), "--- role.yaml\n+++ role.yaml\n-y: 2\n+y: 3\n");
        let dir = tempfile::tempdir().unwrap();
        let (sha, f) = store(dir.path(), "r", &a).unwrap();
        assert_eq!(sha, sha_of(&a));
        assert_eq!(read_folder(&f).unwrap(), a);
    }
}
