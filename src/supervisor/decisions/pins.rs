//! Which frozen revision each instance runs: `<state_dir>/revisions/pins.json`, instance →
//! `{role, sha256, rev}`, root's alone, written whole. `rev` counts the instance's
//! revisions from 1; an instance hired before revisions existed is pinned to its template
//! as it is at its first start after the upgrade (the migration).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub role: String,
    pub sha256: String,
    pub rev: u32,
    /// `template NAME` or `inline`: where the revision came from.
    #[serde(default)]
    pub source: String,
}

fn file(state: &Path) -> PathBuf {
    super::revisions::root(state).join("pins.json")
}

pub fn all(state: &Path) -> Result<BTreeMap<String, Pin>, String> {
    let p = file(state);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|_| format!("{}: not a pin file; keep it as evidence", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("{}: {e}", p.display())),
    }
}

pub fn get(state: &Path, instance: &str) -> Result<Option<Pin>, String> {
    Ok(all(state)?.remove(instance))
}

/// Pin `instance` to revision `sha256` of `role`; returns its revision number (one more
/// than its last, or the same when it already runs that revision). The caller holds the
/// decisions lock.
pub fn set(
    state: &Path,
    instance: &str,
    role: &str,
    sha256: &str,
    source: &str,
) -> Result<u32, String> {
    let mut pins = all(state)?;
    let rev = match pins.get(instance) {
        Some(p) if p.sha256 == sha256 && p.role == role => return Ok(p.rev),
        Some(p) => p.rev + 1,
        None => 1,
    };
    pins.insert(
        instance.to_string(),
        Pin {
            role: role.to_string(),
            sha256: sha256.to_string(),
            rev,
            source: source.to_string(),
        },
    );
    let bytes = serde_json::to_vec_pretty(&pins).map_err(|e| e.to_string())?;
    crate::store::private_file::write(&super::revisions::root(state), &file(state), &bytes)?;
    Ok(rev)
}

/// Pin `instance` to exactly `pin` (as the fleet store has it). The caller holds the
/// decisions lock.
pub fn put(state: &Path, instance: &str, pin: &Pin) -> Result<(), String> {
    let mut pins = all(state)?;
    if pins.get(instance) == Some(pin) {
        return Ok(());
    }
    pins.insert(instance.to_string(), pin.clone());
    let bytes = serde_json::to_vec_pretty(&pins).map_err(|e| e.to_string())?;
    crate::store::private_file::write(&super::revisions::root(state), &file(state), &bytes)
}

/// `role_sha256`, `rev` and `template_changed` of `instance` against its template as it is
/// in `template_dir` now (for `instances`).
pub fn revision_of(
    state: &Path,
    instance: &str,
    template_dir: impl FnOnce(&str) -> Option<PathBuf>,
) -> (Option<String>, Option<u32>, bool) {
    match get(state, instance).ok().flatten() {
        Some(p) => {
            let changed = template_dir(&p.role)
                .and_then(|dir| super::revisions::read_folder(&dir).ok())
                .is_some_and(|now| super::revisions::sha_of(&now) != p.sha256);
            (Some(p.sha256), Some(p.rev), changed)
        }
        None => (None, None, false),
    }
}
