//! Where airlockd puts its runs' cgroups. Under systemd (`Delegate=yes`) airlockd owns its
//! service cgroup, but cgroup v2 lets a cgroup either hold processes or hand controllers to
//! children, not both. So airlockd moves itself into a `supervisor` leaf of its cgroup,
//! which frees the service cgroup to delegate `pids` and `memory` to `airlock/`, the parent
//! of every run's cgroup (`airlock/<run>`; the jail helper moves itself there). In the root
//! cgroup (a test or a container) there is no such rule and the plain layout is used.

use std::path::PathBuf;

use crate::sandbox::limits;

/// Settle airlockd in its cgroup and return the parent of run cgroups, or `None` when no
/// writable cgroup v2 is there (runs then rely on their pid namespace and the uid backstop).
/// Call once at startup, before any run starts.
pub fn settle() -> Option<PathBuf> {
    let settled = limits::settle("supervisor");
    if settled.shared {
        eprintln!("airlockd: its cgroup holds processes that are not airlockd's, so no cgroup controller can be handed to its runs (start it from airlockd.service, which has Delegate=yes)");
    }
    settled.parent
}
