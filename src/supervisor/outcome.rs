//! How a supervised run's end is told: the ledger outcome, exit code, signal and reason of
//! its closing record, and the journal event that ends its trail. One mapping, used by
//! airlockd and by `airlockctl launch --standalone`, so both record a run the same way.

use super::launch::LaunchError;
use super::ledger::Outcome;
use super::process::{Ending, MainSide, OomKills, Supervised};
use crate::journal::EventKind;

/// Exit code reported when the agent never ran (the jail could not be started).
pub const NOT_STARTED: i32 = 125;

/// The end of one run, ready for the ledger and the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closing {
    pub outcome: Outcome,
    /// Shell style (128 + signal when killed); [`NOT_STARTED`] when the agent never ran.
    pub code: i32,
    pub signal: Option<i32>,
    /// Written by airlock, never copied from the agent.
    pub reason: String,
    /// The run's last journal event.
    pub kind: EventKind,
    /// What the run's gateway counted, when it had one.
    pub tally: super::ledger::Tally,
}

impl Closing {
    /// The exit code for the ledger: none when the agent never started.
    pub fn exit_code(&self) -> Option<i32> {
        (self.outcome != Outcome::Refused || self.code != NOT_STARTED).then_some(self.code)
    }
}

/// The `outcome` string of the ledger and the protocol.
/// The closing reason, plus how many journal records were lost when any were: the ledger
/// record then says the run's journal is incomplete.
pub fn with_lost(reason: &str, lost: u64) -> String {
    if lost == 0 {
        reason.to_string()
    } else {
        format!("{reason}; {lost} journal record(s) were lost (neither journald nor the fallback file took them)")
    }
}

/// How a run ended by the OOM killer is told: the start of its reason.
pub const OUT_OF_MEMORY: &str = "killed: out of memory";

/// The reason of a run whose own program the OOM killer ended (SIGKILL).
fn out_of_memory(oom: &OomKills) -> String {
    let what = match oom.main {
        MainSide::Agent => "the agent",
        MainSide::Command => "the run's command",
        MainSide::Whole => "the run's program",
    };
    let n = oom.total().or(oom.main_side()).unwrap_or(1);
    format!(
        "{OUT_OF_MEMORY} (the run reached a memory limit and the OOM killer ended {what} with signal 9; {n} process(es) of the run OOM-killed in all)"
    )
}

pub fn outcome_str(o: Outcome) -> &'static str {
    match o {
        Outcome::Exited => "exited",
        Outcome::Killed => "killed",
        Outcome::TimedOut => "timed_out",
        Outcome::Stopped => "stopped",
        Outcome::Interrupted => "interrupted",
        Outcome::Aborted => "aborted",
        Outcome::Refused => "refused",
    }
}

/// A run stopped because its standalone supervisor was interrupted (SIGINT, SIGTERM or
/// SIGHUP) is recorded as interrupted; any other end (it exited, or hit its deadline,
/// before the stop took effect) is recorded as it happened.
pub fn interrupted(mut c: Closing) -> Closing {
    if c.outcome == Outcome::Stopped {
        c.outcome = Outcome::Interrupted;
    }
    c
}

/// Map what [`super::process::supervise`] returned to the run's closing record.
/// `deadline_s`: the run's deadline (0: none); `grace_s`: SIGTERM to SIGKILL; `sigkilled`:
/// the grace period ran out and SIGKILL was sent.
pub fn closing(
    result: &Result<Supervised, LaunchError>,
    deadline_s: u64,
    grace_s: u64,
    sigkilled: bool,
) -> Closing {
    let c = |outcome, code, signal, reason: String, kind| Closing {
        outcome,
        code,
        signal,
        reason,
        kind,
        tally: Default::default(),
    };
    let mut closing = match result {
        Err(e) => c(
            Outcome::Refused,
            NOT_STARTED,
            None,
            format!("the jail could not be started: {e}"),
            EventKind::RunAborted,
        ),
        Ok(s) => match (&s.report.error, &s.ending) {
            (Some(e), _) => c(
                Outcome::Refused,
                s.exit_code,
                None,
                format!("jail setup failed: {e}; the agent never ran"),
                EventKind::RunAborted,
            ),
            (None, Ending::Stopped(r)) => c(
                Outcome::Stopped,
                s.exit_code,
                s.signal,
                format!("stopped: {r}"),
                EventKind::RunStopped,
            ),
            (None, Ending::DeadlineReached) => c(
                Outcome::TimedOut,
                s.exit_code,
                s.signal,
                format!(
                    "deadline of {deadline_s} s reached (budget.minutes_per_run, narrowed by max_seconds); the run was terminated"
                ),
                EventKind::RunKilled,
            ),
            (None, Ending::Exited) => match s.signal {
                // SIGKILL, and the OOM killer ended a process of the program's side.
                Some(sig) if sig == libc::SIGKILL && s.oom.main_side().is_some_and(|n| n > 0) => c(
                    Outcome::Killed,
                    s.exit_code,
                    Some(sig),
                    out_of_memory(&s.oom),
                    EventKind::RunKilled,
                ),
                Some(sig) => c(
                    Outcome::Killed,
                    s.exit_code,
                    Some(sig),
                    format!("killed by signal {sig}"),
                    EventKind::RunKilled,
                ),
                None => c(
                    Outcome::Exited,
                    s.exit_code,
                    None,
                    format!("exited with code {}", s.exit_code),
                    EventKind::RunExited,
                ),
            },
        },
    };
    // OOM kills that did not end the run (a command the bash tool ran, a child of the
    // agent) are told too.
    if let Ok(s) = result {
        let total = s.oom.total().unwrap_or(0);
        if total > 0 && !closing.reason.starts_with(OUT_OF_MEMORY) {
            closing.reason = format!(
                "{}; the OOM killer ended {total} process(es) of the run",
                closing.reason
            );
        }
    }
    if sigkilled {
        closing.reason = format!(
            "{}; it did not exit within {grace_s} s of SIGTERM and was killed",
            closing.reason
        );
    }
    // The record must not tell of a clean end while processes of the run may still live.
    if let Ok(Supervised {
        cleanup_error: Some(e),
        ..
    }) = result
    {
        closing.outcome = Outcome::Aborted;
        closing.kind = EventKind::RunAborted;
        closing.reason = format!(
            "{}; then killing what was left of the run failed ({e}), so processes of the run may still be alive",
            closing.reason
        );
    }
    closing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_records_are_named_in_the_reason() {
        assert_eq!(with_lost("exited with code 0", 0), "exited with code 0");
        assert!(with_lost("exited with code 0", 3).contains("3 journal record(s) were lost"));
    }
    use crate::sandbox::status::StatusReport;

    fn sup(code: i32, signal: Option<i32>, ending: Ending, cleanup: Option<&str>) -> Supervised {
        Supervised {
            report: StatusReport {
                infos: Vec::new(),
                error: None,
            },
            exit_code: code,
            signal,
            ending,
            cleanup_error: cleanup.map(str::to_string),
            oom: OomKills::default(),
        }
    }

    #[test]
    fn an_oom_kill_is_told_as_out_of_memory() {
        let oom = |text: &str, main| OomKills::parse(text, main);
        let mut s = sup(137, Some(9), Ending::Exited, None);
        s.oom = oom("OOM_KILL run=1 agent=1 cmd=0", MainSide::Agent);
        let c = closing(&Ok(s.clone()), 0, 3, false);
        assert_eq!(
            (c.outcome, c.exit_code(), c.signal, c.kind),
            (Outcome::Killed, Some(137), Some(9), EventKind::RunKilled)
        );
        assert!(
            c.reason.starts_with("killed: out of memory ("),
            "{}",
            c.reason
        );
        assert!(c.reason.contains("the agent"), "{}", c.reason);
        assert!(!c.reason.contains("killed by signal"), "{}", c.reason);

        // A workflow's command, on the command side.
        s.oom = oom("OOM_KILL run=2 agent=0 cmd=2", MainSide::Command);
        let c = closing(&Ok(s.clone()), 0, 3, false);
        assert!(c.reason.starts_with(OUT_OF_MEMORY), "{}", c.reason);
        assert!(c.reason.contains("the run's command"), "{}", c.reason);

        // SIGKILL from elsewhere while only the other side was OOM-killed: a signal 9, and
        // the OOM kill told beside it.
        s.oom = oom("OOM_KILL run=1 agent=0 cmd=1", MainSide::Agent);
        let c = closing(&Ok(s.clone()), 0, 3, false);
        assert!(
            c.reason
                .starts_with("killed by signal 9; the OOM killer ended 1 process(es)"),
            "{}",
            c.reason
        );

        // No OOM kill, or none told: the signal alone.
        s.oom = oom("OOM_KILL run=0 agent=0 cmd=0", MainSide::Agent);
        assert_eq!(
            closing(&Ok(s.clone()), 0, 3, false).reason,
            "killed by signal 9"
        );
        s.oom = OomKills::default();
        assert_eq!(
            closing(&Ok(s.clone()), 0, 3, false).reason,
            "killed by signal 9"
        );

        // Another signal is never out of memory.
        let mut t = sup(143, Some(15), Ending::Exited, None);
        t.oom = oom("OOM_KILL run=1 agent=1", MainSide::Agent);
        let c = closing(&Ok(t), 0, 3, false);
        assert!(
            c.reason
                .starts_with("killed by signal 15; the OOM killer ended 1"),
            "{}",
            c.reason
        );

        // A clean exit after a command was OOM-killed says so.
        let mut e = sup(0, None, Ending::Exited, None);
        e.oom = oom("OOM_KILL run=1 cmd=1", MainSide::Agent);
        let c = closing(&Ok(e), 0, 3, false);
        assert_eq!(c.outcome, Outcome::Exited);
        assert_eq!(
            c.reason,
            "exited with code 0; the OOM killer ended 1 process(es) of the run"
        );
    }

    #[test]
    fn exits_kills_and_deadlines() {
        let c = closing(&Ok(sup(3, None, Ending::Exited, None)), 0, 3, false);
        assert_eq!(
            (c.outcome, c.exit_code(), c.signal, c.kind),
            (Outcome::Exited, Some(3), None, EventKind::RunExited)
        );
        let c = closing(&Ok(sup(137, Some(9), Ending::Exited, None)), 0, 3, false);
        assert_eq!((c.outcome, c.signal), (Outcome::Killed, Some(9)));
        let c = closing(
            &Ok(sup(143, Some(15), Ending::DeadlineReached, None)),
            5,
            3,
            true,
        );
        assert_eq!(
            (c.outcome, c.kind),
            (Outcome::TimedOut, EventKind::RunKilled)
        );
        assert!(
            c.reason.contains("5 s") && c.reason.contains("was killed"),
            "{}",
            c.reason
        );
        let c = closing(&Err(LaunchError::Io("no helper".into())), 0, 3, false);
        assert_eq!((c.outcome, c.exit_code()), (Outcome::Refused, None));
    }

    #[test]
    fn only_a_stopped_run_is_recorded_as_interrupted() {
        let stopped = closing(
            &Ok(sup(143, Some(15), Ending::Stopped("SIGINT".into()), None)),
            0,
            3,
            false,
        );
        let c = interrupted(stopped);
        assert_eq!((c.outcome, c.code), (Outcome::Interrupted, 143));
        assert_eq!(outcome_str(c.outcome), "interrupted");
        let exited = closing(&Ok(sup(0, None, Ending::Exited, None)), 0, 3, false);
        assert_eq!(interrupted(exited).outcome, Outcome::Exited);
    }

    #[test]
    fn a_failed_cleanup_is_never_a_clean_end() {
        let c = closing(
            &Ok(sup(
                0,
                None,
                Ending::Exited,
                Some("remove run cgroup: EBUSY"),
            )),
            0,
            3,
            false,
        );
        assert_eq!(c.outcome, Outcome::Aborted);
        assert_eq!(c.kind, EventKind::RunAborted);
        assert_eq!(c.exit_code(), Some(0));
        assert!(
            c.reason.contains("EBUSY") && c.reason.contains("may still be alive"),
            "{}",
            c.reason
        );
    }
}
