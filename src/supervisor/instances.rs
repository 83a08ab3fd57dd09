//! Hired instances and their Unix identities. Each instance has a stable uid (explicit in
//! the config, or allocated once from `uid_range` and recorded in `<state_dir>/instances.json`)
//! with a group of the same number, and a persistent home `<state_dir>/homes/<name>`
//! (owned by the instance, mode 0700). A uid or gid that any existing account or group
//! uses is refused: the agent must never share an identity with anything else on the host.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{chown, Gid, Group, Uid, User};
use serde::{Deserialize, Serialize};

use crate::config::Config;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub name: String,
    pub role: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InstanceError {
    #[error("instance is not hired: no `instances.{0}` in the config")]
    Unknown(String),
    #[error("instances.{0}.uid: belongs to an existing account or group; pick a uid no account or group uses")]
    UidTaken(String),
    #[error("instances.{0}.uid: another instance already uses this uid")]
    UidShared(String),
    #[error("instances.{0}: no free uid left in uid_range")]
    RangeFull(String),
    #[error("{0}")]
    State(String),
}

/// The uids recorded for allocated instances.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Registry {
    uids: BTreeMap<String, u32>,
}

fn state_err(what: &str, path: &Path, e: impl std::fmt::Display) -> InstanceError {
    InstanceError::State(format!("{}: {what}: {e}", path.display()))
}

/// Whether any account or group on the host (NSS: files, LDAP, systemd...) has this id.
pub fn id_in_use(id: u32) -> bool {
    !matches!(User::from_uid(Uid::from_raw(id)), Ok(None))
        || !matches!(Group::from_gid(Gid::from_raw(id)), Ok(None))
}

/// Create a root-owned directory with `mode` if missing, and fix its mode if present.
fn ensure_root_dir(p: &Path, mode: u32) -> Result<(), InstanceError> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {
            if m.uid() != 0 {
                return Err(state_err("must be owned by root", p, "it is not"));
            }
        }
        Ok(_) => return Err(state_err("must be a directory", p, "it is not")),
        Err(_) => fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(p)
            .map_err(|e| state_err("cannot create", p, e))?,
    }
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| state_err("chmod", p, e))
}

/// Prepare the state dir layout: `<state>` 0711, `homes/` and `runs/` 0700, all root.
pub fn ensure_state_dir(state: &Path) -> Result<(), InstanceError> {
    ensure_root_dir(state, 0o711)?;
    ensure_root_dir(&state.join("homes"), 0o700)?;
    ensure_root_dir(&state.join("runs"), 0o700)
}

fn load_registry(path: &Path) -> Result<Registry, InstanceError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|_| state_err("not a valid instance registry", path, "refusing to guess")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Registry::default()),
        Err(e) => Err(state_err("cannot read", path, e)),
    }
}

/// tmp file + fsync + rename + fsync of the directory: the registry is never half-written.
fn save_registry(path: &Path, reg: &Registry) -> Result<(), InstanceError> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(reg).map_err(|e| state_err("encode", path, e))?;
    let mut f = fs::File::create(&tmp).map_err(|e| state_err("write", &tmp, e))?;
    f.write_all(&text)
        .map_err(|e| state_err("write", &tmp, e))?;
    f.sync_all().map_err(|e| state_err("fsync", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| state_err("rename", path, e))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Take an exclusive lock on the registry for the duration of an allocation.
fn lock(state: &Path) -> Result<fs::File, InstanceError> {
    let p = state.join("instances.lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(|e| state_err("cannot open", &p, e))?;
    // SAFETY: flock on an fd we own; the lock is released when `f` is closed.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) } != 0 {
        return Err(state_err(
            "cannot lock",
            &p,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(f)
}

/// Resolve a hired instance to its identity, allocating and recording a uid on first use,
/// and make sure its home exists with the right owner and mode.
pub fn resolve(cfg: &Config, name: &str) -> Result<Instance, InstanceError> {
    let conf = cfg
        .instances
        .get(name)
        .ok_or_else(|| InstanceError::Unknown(name.to_string()))?;
    let state = &cfg.state_dir;
    ensure_state_dir(state)?;
    let _guard = lock(state)?;
    let reg_path = state.join("instances.json");
    let mut reg = load_registry(&reg_path)?;

    // Every uid another instance holds, explicit or recorded.
    let others: Vec<u32> = cfg
        .instances
        .iter()
        .filter(|(n, _)| n.as_str() != name)
        .filter_map(|(n, c)| c.uid.or_else(|| reg.uids.get(n).copied()))
        .collect();

    let uid = match conf.uid.or_else(|| reg.uids.get(name).copied()) {
        Some(uid) => uid,
        None => {
            let uid = (cfg.uid_range.first..=cfg.uid_range.last)
                .find(|u| !others.contains(u) && !id_in_use(*u))
                .ok_or_else(|| InstanceError::RangeFull(name.to_string()))?;
            reg.uids.insert(name.to_string(), uid);
            save_registry(&reg_path, &reg)?;
            uid
        }
    };
    if uid < 1000 || id_in_use(uid) {
        return Err(InstanceError::UidTaken(name.to_string()));
    }
    if others.contains(&uid) {
        return Err(InstanceError::UidShared(name.to_string()));
    }
    let home = state.join("homes").join(name);
    ensure_home(&home, uid, uid)?;
    Ok(Instance {
        name: name.to_string(),
        role: conf.role.clone(),
        uid,
        gid: uid,
        home,
    })
}

/// The home: a real directory (not a symlink), owned by the instance, mode 0700.
fn ensure_home(home: &Path, uid: u32, gid: u32) -> Result<(), InstanceError> {
    match fs::symlink_metadata(home) {
        Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {
            if m.uid() != uid {
                return Err(state_err(
                    "home is owned by another uid",
                    home,
                    "refusing to hand it to this instance",
                ));
            }
        }
        Ok(_) => return Err(state_err("home must be a directory", home, "it is not")),
        Err(_) => {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(home)
                .map_err(|e| state_err("cannot create home", home, e))?;
            chown(home, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(|e| state_err("cannot chown home", home, e))?;
        }
    }
    fs::set_permissions(home, fs::Permissions::from_mode(0o700))
        .map_err(|e| state_err("chmod home", home, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_accounts_are_in_use() {
        assert!(id_in_use(0));
        // An id in the default range is normally free.
        assert!(!id_in_use(1_880_000_000));
    }
}
