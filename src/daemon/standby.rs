//! One jail helper started ahead of the next launch: it builds the part of the jail that is
//! the same for every run (namespaces, system directories, /etc, /dev, /proc) and then
//! waits for a spec. A launch takes it, so only the run's own part of the jail is left
//! between its record and its agent's start.
//!
//! A standby holds no cgroup, no ledger record and no credential; one older than
//! [`MAX_AGE`] is dropped (its view of the host /etc is as old as it is, and its pid 1
//! holds a copy of the host's mounts), and dropping it kills its helper. A new one is
//! started when a run ends, so bursts of launches find one ready. The run it gets is
//! supervised by a task of airlockd's runtime ([`runs::supervise_run`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::runs::{self, Go};
use super::Daemon;
use crate::sandbox::helper::Ahead;
use crate::supervisor::launch::{self, LaunchError};
use crate::supervisor::process::{self, Spawned};

/// A standby older than this is replaced instead of used.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// A helper waiting for its run.
struct Ready {
    helper: Spawned,
    /// The run id and cgroup parent it was started for: the run must use them.
    slot: Ahead,
    born: Instant,
}

#[derive(Default)]
pub struct Standby {
    slot: Mutex<Option<Ready>>,
}

impl Standby {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Ready>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A helper for one launch: the standby when it is fresh and alive, else a new one.
    /// Blocking (a stale helper is reaped, a new one spawned).
    pub fn take(d: &Arc<Daemon>) -> Taken {
        let mut ready = d.standby.slot().take();
        let fresh = ready
            .as_mut()
            .is_some_and(|r| r.born.elapsed() < MAX_AGE && r.helper.alive());
        match ready {
            Some(r) if fresh => Taken {
                slot: r.slot,
                helper: Ok(r.helper),
            },
            stale => {
                // One that died while waiting (killed by hand, say) is replaced too.
                if let Some(r) = stale {
                    r.helper.abandon();
                }
                let slot = launch::new_slot(d.cgroup_parent.clone());
                let helper = process::spawn_helper(Some(&slot), None);
                Taken { slot, helper }
            }
        }
    }

    /// A helper of its own for a `--tty` launch: `stdio` becomes the jail's socket the
    /// pty's master comes back on (a standby has none). Blocking (a spawn).
    pub fn take_with_stdio(d: &Arc<Daemon>, stdio: &std::os::fd::OwnedFd) -> Taken {
        let slot = launch::new_slot(d.cgroup_parent.clone());
        let helper = process::spawn_helper(Some(&slot), Some(stdio));
        Taken { slot, helper }
    }

    /// Start a standby if there is none and the daemon is not draining. Best effort: when
    /// it cannot start, the next launch starts its own helper. Blocking (a spawn).
    pub fn refill(d: &Arc<Daemon>) {
        let mut slot = d.standby.slot();
        if slot.is_none() && !d.is_draining() {
            let ahead = launch::new_slot(d.cgroup_parent.clone());
            *slot = process::spawn_helper(Some(&ahead), None)
                .ok()
                .map(|helper| Ready {
                    helper,
                    slot: ahead,
                    born: Instant::now(),
                });
        }
    }

    /// Drop the standby and wait until its helper is gone and the cgroups it made for its
    /// run are removed (the daemon is draining, and exits right after). Blocking.
    pub fn clear(&self) {
        let ready = self.slot().take();
        if let Some(r) = ready {
            r.helper.abandon();
        }
    }

    /// Drop a standby older than [`MAX_AGE`], not replacing it (the next run's end starts
    /// a new one). Until it gets its run, a standby's pid 1 holds a copy of the host's
    /// mounts, so a file system unmounted on the host stays busy there: bounded this way
    /// to [`MAX_AGE`] after the last run. Blocking.
    pub fn expire(&self) {
        let stale = {
            let mut slot = self.slot();
            match slot.as_ref() {
                Some(r) if r.born.elapsed() >= MAX_AGE => slot.take(),
                _ => None,
            }
        };
        if let Some(r) = stale {
            r.helper.abandon();
        }
    }
}

/// A helper taken by a launch: it either gets the launch's run or is abandoned.
pub struct Taken {
    /// The run id and cgroup parent the run must use (its helper was started for them).
    pub slot: Ahead,
    helper: Result<Spawned, LaunchError>,
}

impl Taken {
    /// Hand the helper its run, supervised from here on by a task of airlockd's runtime.
    /// False: no runtime to supervise it on (the helper is gone, and the run with it).
    pub fn start(self, d: &Arc<Daemon>, go: Go) -> bool {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(runs::supervise_run(d.clone(), go, self.helper));
                true
            }
            Err(_) => {
                self.abandon();
                false
            }
        }
    }

    /// The launch was refused: end the helper and wait until it is gone and the cgroups it
    /// made for the run are removed, so a refused launch leaves nothing behind even when
    /// airlockd exits right after. Blocking.
    pub fn abandon(self) {
        if let Ok(sp) = self.helper {
            sp.abandon();
        }
    }
}
