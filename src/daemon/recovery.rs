//! Crash recovery, before airlockd says READY: every run the ledger still has open was left
//! behind by a supervisor that died (a previous airlockd, or a standalone launch), unless
//! its supervisor still holds the run's [`alive`] file (a standalone run going on now).
//! Nobody supervises the others, so what is left of each is killed and its record is
//! closed as aborted, with the time it was last known alive ([`reap`]). Its jail helper
//! already killed it when its supervisor's end of the lifeline pipe closed; what is left to
//! do here is to kill and remove its cgroups. Nothing is killed by uid: a standalone run of
//! the same instance may be alive and supervised.

use std::collections::HashSet;
use std::path::Path;

use crate::journal::JournalConfig;
use crate::supervisor::alive::{self, Liveness};
use crate::supervisor::ledger::{Ledger, RunOpened};
use crate::supervisor::reap;

pub use crate::supervisor::reap::REASON;

/// What crash recovery did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Runs closed as aborted.
    pub aborted: usize,
    /// Runs whose leftover processes could not be killed: one line each, naming the run
    /// and why. Their records are closed as aborted all the same, with that in the reason.
    pub not_killed: Vec<String>,
    /// Open runs still supervised by another process (a standalone launch): left open.
    pub supervised: Vec<String>,
}

/// Close every run the ledger still has open and nobody supervises as aborted, killing
/// what is left of it first. `cgroup_parent`: where run cgroups live
/// ([`super::cgroup::settle`]) when a run's file does not say.
pub fn recover(
    ledger: &mut Ledger,
    open: &[RunOpened],
    state_dir: &Path,
    journal_dir: &Path,
    journal: &JournalConfig,
    cgroup_parent: Option<&Path>,
) -> Result<Recovered, String> {
    let mut done = Recovered::default();
    for run in open {
        let left = match alive::probe(state_dir, &run.run) {
            Ok(Liveness::Held { .. }) => {
                done.supervised.push(run.run.clone());
                continue;
            }
            Ok(Liveness::Left(l)) => Some(l),
            // No file (or one that cannot be read): closed with the time of this start.
            Ok(Liveness::Missing) | Err(_) => None,
        };
        if let Some(line) = reap::close_aborted(
            ledger,
            run,
            left.as_ref(),
            cgroup_parent,
            journal_dir,
            journal,
        )
        .map_err(|e| e.to_string())?
        {
            done.not_killed.push(line);
        }
        alive::forget(state_dir, &run.run);
        done.aborted += 1;
    }
    // The runs' workspace images (their mounts and loop devices went with their
    // processes), and those of launches killed before their record.
    crate::supervisor::disk::sweep(state_dir, |run| {
        matches!(alive::probe(state_dir, run), Ok(Liveness::Held { .. }))
    });
    // Files of runs the ledger has closed or never opened (a crash between a file and its
    // record): nothing to tell any more.
    let open: HashSet<&str> = open.iter().map(|r| r.run.as_str()).collect();
    for run in alive::list(state_dir).unwrap_or_default() {
        if !open.contains(run.as_str())
            && matches!(alive::probe(state_dir, &run), Ok(Liveness::Left(_)))
        {
            alive::forget(state_dir, &run);
        }
    }
    Ok(done)
}
