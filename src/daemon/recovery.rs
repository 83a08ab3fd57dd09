//! Crash recovery, before airlockd says READY: every run the ledger still has open was left
//! behind by a daemon that died. Nobody supervises it, so it is killed and its record is
//! closed as aborted. Its jail helper already killed it when the daemon's end of the
//! lifeline pipe closed; what is left to do here is to kill and remove its cgroups. Nothing
//! is killed by uid: a standalone run of the same instance may be alive and supervised.

use std::path::Path;

use crate::journal::{EventKind, JournalConfig, RunFields, RunJournal};
use crate::sandbox::limits;
use crate::supervisor::ledger::{self, Ledger, LedgerEvent, Outcome, RunClosed, RunOpened};

pub const REASON: &str = "airlockd restarted; the run was not supervised";

/// What crash recovery did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Runs closed as aborted.
    pub aborted: usize,
    /// Runs whose leftover processes could not be killed: one line each, naming the run
    /// and why. Their records are closed as aborted all the same, with that in the reason.
    pub not_killed: Vec<String>,
}

/// Close every run the ledger still has open as aborted, killing what is left of it first.
/// `cgroup_parent`: where run cgroups live ([`super::cgroup::settle`]).
pub fn recover(
    ledger: &mut Ledger,
    open: &[RunOpened],
    journal_dir: &Path,
    journal: &JournalConfig,
    cgroup_parent: Option<&Path>,
) -> Result<Recovered, String> {
    let mut done = Recovered::default();
    for run in open {
        let reason = match limits::RunCgroups::existing(cgroup_parent, &run.run).kill_and_remove() {
            Ok(()) => REASON.to_string(),
            Err(e) => {
                done.not_killed.push(format!("run {}: {e}", run.run));
                format!("{REASON}; killing what was left of it failed ({e}), so processes of the run may still be alive")
            }
        };
        let fields = RunFields {
            run: run.run.clone(),
            role: run.role.clone(),
            instance: run.instance.clone(),
        };
        if let Ok(mut j) = RunJournal::open_with(fields, journal_dir, journal.clone()) {
            let _ = j.event(EventKind::RunAborted, &reason, &[]);
        }
        ledger
            .append(LedgerEvent::RunClosed(RunClosed {
                run: run.run.clone(),
                ended_at: ledger::now_ms(),
                outcome: Outcome::Aborted,
                exit_code: None,
                signal: None,
                reason,
            }))
            .map_err(|e| e.to_string())?;
        done.aborted += 1;
    }
    Ok(done)
}
