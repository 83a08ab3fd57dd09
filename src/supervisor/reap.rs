//! Closing the records of runs whose supervisor died, by the next process that owns the
//! ledger: airlockd when it starts (every open run, see `daemon::recovery`), or the next
//! `launch --standalone` (the runs whose [`alive`] file nobody holds).
//!
//! Such a run was killed when its supervisor died (the jail helper's lifeline broke); what
//! is left is to kill and remove its cgroups, tell its journal, and close its record as
//! aborted, with the time it was last known alive rather than the time of the cleanup.

use std::path::Path;

use super::alive::{self, Left, Liveness, Supervisor};
use super::ledger::{self, Ledger, LedgerError, LedgerEvent, Outcome, RunClosed, RunOpened};
use crate::journal::{EventKind, JournalConfig, RunFields, RunJournal};
use crate::sandbox::limits;

/// The reason when nothing tells when the run was last alive (no [`alive`] file: a run of
/// a build that kept none).
pub const REASON: &str = "airlockd restarted; the run was not supervised";

/// What a cleanup did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    /// Runs closed as aborted.
    pub aborted: usize,
    /// Runs whose leftover processes could not be killed: one line each, naming the run
    /// and why. Their records are closed as aborted all the same, with that in the reason.
    pub not_killed: Vec<String>,
}

/// When an abandoned run ended, as far as anyone can tell: its last heartbeat (never
/// before it started), else `now`.
pub fn ended_at(started_at: u64, left: Option<&Left>, now: u64) -> u64 {
    match left {
        Some(l) => l.last_alive_ms.max(started_at),
        None => now,
    }
}

/// The closing record's reason for an abandoned run.
pub fn reason(left: Option<&Left>) -> String {
    let Some(l) = left else {
        return REASON.to_string();
    };
    let at = crate::calendar::utc(l.last_alive_ms);
    match (l.supervisor, l.pid) {
        (Some(Supervisor::Airlockd) | None, _) => format!(
            "airlockd restarted; the run was not supervised after {at} UTC, when it was last known alive"
        ),
        (Some(s), pid) => format!(
            "its supervisor ({}{}) died; the run was not supervised after {at} UTC, when it was last known alive",
            s.describe(),
            pid.map(|p| format!(", pid {p}")).unwrap_or_default()
        ),
    }
}

/// Close one abandoned run as aborted, killing what is left of it first. `cgroup_parent`:
/// where its cgroups live when its file does not say. Returns the kill failure, if any.
pub fn close_aborted(
    ledger: &mut Ledger,
    run: &RunOpened,
    left: Option<&Left>,
    cgroup_parent: Option<&Path>,
    journal_dir: &Path,
    journal: &JournalConfig,
) -> Result<Option<String>, LedgerError> {
    let parent = left
        .and_then(|l| l.cgroup_parent.as_deref())
        .or(cgroup_parent);
    let base = reason(left);
    let (reason, not_killed) = match limits::RunCgroups::existing(parent, &run.run)
        .kill_and_remove()
    {
        Ok(()) => (base, None),
        Err(e) => (
            format!("{base}; killing what was left of it failed ({e}), so processes of the run may still be alive"),
            Some(format!("run {}: {e}", run.run)),
        ),
    };
    let fields = RunFields {
        run: run.run.clone(),
        role: run.role.clone(),
        instance: run.instance.clone(),
    };
    if let Ok(mut j) = RunJournal::open_with(fields, journal_dir, journal.clone()) {
        let _ = j.event(EventKind::RunAborted, &reason, &[]);
    }
    let mut closed = RunClosed::new(
        &run.run,
        Outcome::Aborted,
        None,
        None,
        &reason,
        Default::default(),
    );
    closed.ended_at = ended_at(run.started_at, left, closed.ended_at);
    ledger.append(LedgerEvent::RunClosed(closed))?;
    Ok(not_killed)
}

/// For a standalone launch, which holds the ledger only for its appends: close every run
/// whose [`alive`] file nobody holds, and remove the files of runs the ledger has closed
/// (or never opened: a crash between the file and the opening record). Runs still held
/// are someone else's and are left alone.
pub fn reap_left(
    ledger: &mut Ledger,
    state_dir: &Path,
    journal_dir: &Path,
    journal: &JournalConfig,
) -> Result<Reaped, LedgerError> {
    let mut done = Reaped::default();
    let runs = match alive::list(state_dir) {
        Ok(r) => r,
        // Nothing can be told of runs whose files cannot be read; airlockd's start closes
        // them from the ledger.
        Err(_) => return Ok(done),
    };
    for run in runs {
        let left = match alive::probe(state_dir, &run) {
            Ok(Liveness::Left(l)) => l,
            _ => continue,
        };
        // Closed, or never opened: only the file is left to remove.
        if let Some((opened, None)) = ledger::find_run(ledger.path(), &run)? {
            if let Some(line) =
                close_aborted(ledger, &opened, Some(&left), None, journal_dir, journal)?
            {
                done.not_killed.push(line);
            }
            done.aborted += 1;
        }
        alive::forget(state_dir, &run);
    }
    // What dead launches left of their workspace images (under the ledger lock).
    super::disk::sweep(state_dir, |run| {
        matches!(alive::probe(state_dir, run), Ok(Liveness::Held { .. }))
    });
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(supervisor: Option<Supervisor>, at: u64) -> Left {
        Left {
            last_alive_ms: at,
            supervisor,
            pid: Some(77),
            cgroup_parent: None,
        }
    }

    #[test]
    fn an_abandoned_run_ends_when_it_was_last_alive() {
        let l = left(Some(Supervisor::Standalone), 5_000);
        assert_eq!(ended_at(1_000, Some(&l), 9_000), 5_000);
        // A heartbeat never dates the end before the start (clocks, coarse mtimes).
        assert_eq!(ended_at(6_000, Some(&l), 9_000), 6_000);
        assert_eq!(ended_at(1_000, None, 9_000), 9_000);
    }

    #[test]
    fn the_reason_names_the_supervisor_and_the_time() {
        let r = reason(Some(&left(Some(Supervisor::Standalone), 0)));
        assert!(r.contains("airlockctl launch --standalone, pid 77"), "{r}");
        assert!(r.contains("1970-01-01 00:00:00 UTC"), "{r}");
        assert!(r.contains("not supervised"), "{r}");
        let r = reason(Some(&left(Some(Supervisor::Airlockd), 0)));
        assert!(r.starts_with("airlockd restarted"), "{r}");
        assert_eq!(reason(None), REASON);
    }
}
