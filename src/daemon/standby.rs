//! One run supervisor started ahead of the next launch: its thread has spawned a jail
//! helper, which builds the part of the jail that is the same for every run (namespaces,
//! system directories, /etc, /dev, /proc) and then waits for a spec. A launch takes it, so
//! only the run's own part of the jail is left between its record and its agent's start.
//!
//! The helper's parent-death signal follows the thread that spawned it, so that thread is
//! the one that supervises the run. A standby holds no cgroup, no ledger record and no
//! credential; one older than [`MAX_AGE`] is dropped (its view of the host /etc is as old
//! as it is, and its pid 1 holds a copy of the host's mounts), and dropping it kills its
//! helper. A new one is started when a run ends, so bursts of launches find one ready.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::runs::{self, Go};
use super::Daemon;
use crate::sandbox::helper::Ahead;
use crate::supervisor::{launch, process};

/// A standby older than this is replaced instead of used.
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// A supervisor thread waiting for its run.
struct Runner {
    go: SyncSender<Go>,
    /// The run id and cgroup parent its helper was started for: the run must use them.
    slot: Ahead,
    born: Instant,
    thread: std::thread::JoinHandle<()>,
}

#[derive(Default)]
pub struct Standby {
    slot: Mutex<Option<Runner>>,
}

impl Standby {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Runner>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A runner for one launch: the standby when it is fresh, else a new one.
    pub fn take(d: &Arc<Daemon>) -> std::io::Result<Taken> {
        let ready = d.standby.slot().take();
        let r = match ready {
            Some(r) if r.born.elapsed() < MAX_AGE => r,
            // Dropping a stale one ends its thread, which kills its helper.
            _ => start(d)?,
        };
        Ok(Taken {
            slot: r.slot,
            go: r.go,
            thread: r.thread,
        })
    }

    /// Start a standby if there is none and the daemon is not draining. Best effort: when
    /// it cannot start, the next launch starts its own helper.
    pub fn refill(d: &Arc<Daemon>) {
        let mut slot = d.standby.slot();
        if slot.is_none() && !d.is_draining() {
            *slot = start(d).ok();
        }
    }

    /// Drop the standby and wait until its helper is gone and the cgroups it made for its
    /// run are removed (the daemon is draining, and exits right after).
    pub fn clear(&self) {
        let runner = self.slot().take();
        if let Some(Runner { go, thread, .. }) = runner {
            drop(go);
            let _ = thread.join();
        }
    }

    /// Drop a standby older than [`MAX_AGE`], not replacing it (the next run's end starts
    /// a new one). Until it gets its run, a standby's pid 1 holds a copy of the host's
    /// mounts, so a file system unmounted on the host stays busy there: bounded this way
    /// to [`MAX_AGE`] after the last run.
    pub fn expire(&self) {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|r| r.born.elapsed() >= MAX_AGE) {
            slot.take();
        }
    }
}

/// A runner taken by a launch: it either gets the launch's run or is abandoned.
pub struct Taken {
    /// The run id and cgroup parent the run must use (its helper was started for them).
    pub slot: Ahead,
    go: SyncSender<Go>,
    thread: std::thread::JoinHandle<()>,
}

impl Taken {
    /// Hand the runner its run; the run is its thread's from here on. False: the thread is
    /// gone, and the run with it.
    pub fn start(self, go: Go) -> bool {
        self.go.send(go).is_ok()
    }

    /// The launch was refused: end the runner and wait until its helper is gone and the
    /// cgroups it made for the run are removed, so a refused launch leaves nothing behind
    /// even when airlockd exits right after.
    pub fn abandon(self) {
        drop(self.go);
        let _ = self.thread.join();
    }
}

/// A supervisor thread that spawns a helper now and supervises whatever run it is handed.
fn start(d: &Arc<Daemon>) -> std::io::Result<Runner> {
    let (go_tx, go_rx) = sync_channel::<Go>(1);
    let d2 = d.clone();
    let slot = launch::new_slot(d.cgroup_parent.clone());
    let ahead = slot.clone();
    let thread = std::thread::Builder::new()
        .name("run".into())
        .spawn(move || {
            let helper = process::spawn_helper(Some(&ahead), None);
            match go_rx.recv() {
                Ok(go) => {
                    // A helper that died while waiting (killed by hand, say) is replaced.
                    let helper = match helper {
                        Ok(mut sp) => {
                            if sp.alive() {
                                Ok(sp)
                            } else {
                                sp.abandon();
                                process::spawn_helper(Some(&ahead), None)
                            }
                        }
                        Err(_) => process::spawn_helper(Some(&ahead), None),
                    };
                    runs::supervise_run(d2, go, helper);
                }
                // Dropped before a run was decided: the helper ran nothing.
                Err(_) => {
                    if let Ok(sp) = helper {
                        sp.abandon();
                    }
                }
            }
        })?;
    Ok(Runner {
        go: go_tx,
        slot,
        born: Instant::now(),
        thread,
    })
}
