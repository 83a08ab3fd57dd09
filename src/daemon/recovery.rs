//! Crash recovery, before airlockd says READY: every run the ledger still has open was left
//! behind by a daemon that died. Nobody supervises it, so it is killed (its cgroup, then
//! every process of its uid as a backstop) and its record is closed as aborted.

use std::path::Path;

use crate::journal::{EventKind, JournalConfig, RunFields, RunJournal};
use crate::sandbox::limits;
use crate::supervisor::ledger::{self, Ledger, LedgerEvent, Outcome, RunClosed};
use crate::supervisor::process;

pub const REASON: &str = "airlockd restarted; the run was not supervised";

/// Returns how many runs were aborted.
pub fn recover(
    ledger: &mut Ledger,
    journal_dir: &Path,
    journal: &JournalConfig,
) -> Result<usize, String> {
    let open = ledger::open_runs(ledger.path()).map_err(|e| e.to_string())?;
    let parent = if open.is_empty() {
        None
    } else {
        limits::prepare_parent()
    };
    for run in &open {
        if let Some(parent) = &parent {
            // A leftover cgroup that will not go away still has the uid backstop below.
            let _ = limits::kill_and_remove(&parent.join(&run.run));
        }
        process::kill_uid(run.uid);
        let fields = RunFields {
            run: run.run.clone(),
            role: run.role.clone(),
            instance: run.instance.clone(),
        };
        if let Ok(mut j) = RunJournal::open_with(fields, journal_dir, journal.clone()) {
            let _ = j.event(EventKind::RunAborted, REASON, &[]);
        }
        ledger
            .append(LedgerEvent::RunClosed(RunClosed {
                run: run.run.clone(),
                ended_at: ledger::now_ms(),
                outcome: Outcome::Aborted,
                exit_code: None,
                signal: None,
                reason: REASON.to_string(),
            }))
            .map_err(|e| e.to_string())?;
    }
    Ok(open.len())
}
