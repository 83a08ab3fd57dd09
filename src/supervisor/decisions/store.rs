//! Decisions kept under the state directory: `<state_dir>/decisions/<id>.json`, one file per
//! decision, root's alone (0600 in a 0700 folder), each written whole (temporary file,
//! fsync, rename). The ledger holds the trail of every change; these files are the current
//! state, read by `airlockctl decisions` even when airlockd is not running.

use std::fs;
use std::path::{Path, PathBuf};

use super::model::Decision;

pub fn dir(state: &Path) -> PathBuf {
    state.join("decisions")
}

fn file(state: &Path, id: &str) -> PathBuf {
    dir(state).join(format!("{id}.json"))
}

/// Whether `id` has the shape of a decision id (`d-` and digits): anything else is never
/// turned into a path.
pub fn valid_id(id: &str) -> bool {
    id.strip_prefix("d-")
        .is_some_and(|n| !n.is_empty() && n.len() <= 12 && n.bytes().all(|b| b.is_ascii_digit()))
}

pub fn save(state: &Path, d: &Decision) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(d).map_err(|e| e.to_string())?;
    crate::store::private_file::write(&dir(state), &file(state, &d.id), &bytes)
}

pub fn load(state: &Path, id: &str) -> Result<Option<Decision>, String> {
    if !valid_id(id) {
        return Err(
            "a decision id is `d-` and a number (`airlockctl decisions` lists them)".into(),
        );
    }
    let p = file(state, id);
    match fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|_| format!("{}: not a decision; keep it as evidence", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

/// Every decision, oldest first.
pub fn all(state: &Path) -> Result<Vec<Decision>, String> {
    let d = dir(state);
    let entries = match fs::read_dir(&d) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", d.display())),
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".json").filter(|i| valid_id(i)) {
            if let Some(x) = load(state, id)? {
                out.push(x);
            }
        }
    }
    out.sort_by_key(|x| number(&x.id));
    Ok(out)
}

fn number(id: &str) -> u64 {
    id.trim_start_matches("d-").parse().unwrap_or(0)
}

/// The next free id (the caller holds the daemon's decision lock).
pub fn next_id(state: &Path) -> Result<String, String> {
    let n = all(state)?.iter().map(|d| number(&d.id)).max().unwrap_or(0);
    Ok(format!("d-{}", n + 1))
}
