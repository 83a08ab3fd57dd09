//! Where airlockd puts its runs' cgroups. Under systemd (`Delegate=yes`) airlockd owns its
//! service cgroup, but cgroup v2 lets a cgroup either hold processes or hand controllers to
//! children, not both. So airlockd moves itself into a `supervisor` leaf of its cgroup,
//! which frees the service cgroup to delegate `pids` and `memory` to `airlock/`, the parent
//! of every run's cgroup (`airlock/<run>`; the jail helper moves itself there). In the root
//! cgroup (a test or a container) there is no such rule and the plain layout is used.

use std::fs;
use std::path::PathBuf;

use crate::sandbox::limits;

/// Settle airlockd in its cgroup and return the parent of run cgroups, or `None` when no
/// writable cgroup v2 is there (runs then rely on their pid namespace and the uid backstop).
/// Call once at startup, before any run starts.
pub fn settle() -> Option<PathBuf> {
    let (mount, rel) = limits::own_cgroup_v2()?;
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        return limits::prepare_parent();
    }
    let mut base = mount.join(rel);
    // Restarted after a crash inside our own leaf (not under systemd, which starts us in
    // the service cgroup): the base is the leaf's parent.
    if base.file_name().is_some_and(|n| n == "supervisor") {
        if let Some(p) = base.parent() {
            base = p.to_path_buf();
        }
    }
    let leaf = base.join("supervisor");
    if !leaf.is_dir() && fs::create_dir(&leaf).is_err() {
        return limits::prepare_parent();
    }
    if fs::write(leaf.join("cgroup.procs"), std::process::id().to_string()).is_err() {
        return limits::prepare_parent();
    }
    limits::prepare_parent_in(&base)
}
