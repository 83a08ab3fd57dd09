//! What a signal means to `airlockctl launch --wait` through airlockd, as a pure decision.
//!
//! The run belongs to airlockd, not to the terminal that waits for it: it may be long, and
//! losing the terminal (a dropped ssh session) must not end it. So Ctrl-C (SIGINT) first
//! detaches, which can be taken back (`airlockctl stop RUN`), rather than stopping, which
//! cannot; a second Ctrl-C within [`AGAIN_WITHIN`] asks airlockd to stop the run and waits
//! for its end; a third stops waiting. SIGTERM (`systemctl stop airlock-run@…`, `kill`)
//! is a request to end the work: the run is stopped at once. SIGHUP (the terminal went
//! away) detaches without waiting for a second signal that nobody can send.

use std::time::{Duration, Instant};

/// How long after a detaching Ctrl-C a second one stops the run instead.
pub const AGAIN_WITHIN: Duration = Duration::from_secs(3);

/// Where the waiting launch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Streaming the run's output.
    Following,
    /// Told the user it detached; leaves at `until` unless a second Ctrl-C comes first.
    Detaching { until: Instant },
    /// Asked airlockd to stop the run; waiting for its end.
    Stopping,
}

/// What to do about one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Say the run goes on; `then_leave`: leave at once, else wait out [`AGAIN_WITHIN`].
    Detach { then_leave: bool },
    /// Ask airlockd to stop the run, and go on reading until it has ended.
    Stop,
    /// Stop waiting now; the run (or its stop) goes on.
    Leave,
}

/// The next phase and the action for signal `sig` arriving at `now`.
pub fn on_signal(phase: Phase, sig: i32, now: Instant) -> (Phase, Action) {
    match (sig, phase) {
        (libc::SIGHUP, _) => (phase, Action::Detach { then_leave: true }),
        (_, Phase::Stopping) => (Phase::Stopping, Action::Leave),
        (libc::SIGINT, Phase::Following) => (
            Phase::Detaching {
                until: now + AGAIN_WITHIN,
            },
            Action::Detach { then_leave: false },
        ),
        (libc::SIGINT, Phase::Detaching { until }) if now >= until => (phase, Action::Leave),
        // A second Ctrl-C in time, or SIGTERM at any point before a stop.
        _ => (Phase::Stopping, Action::Stop),
    }
}

/// How long to wait for the run's next frame before leaving (a detach waiting out its
/// window); `None`: as long as the run takes.
pub fn patience(phase: Phase, now: Instant) -> Option<Duration> {
    match phase {
        Phase::Detaching { until } => Some(until.saturating_duration_since(now)),
        Phase::Following | Phase::Stopping => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_c_detaches_then_stops_then_leaves() {
        let t = Instant::now();
        let (p, a) = on_signal(Phase::Following, libc::SIGINT, t);
        assert_eq!(a, Action::Detach { then_leave: false });
        assert_eq!(patience(p, t), Some(AGAIN_WITHIN));
        let (p, a) = on_signal(p, libc::SIGINT, t + Duration::from_secs(1));
        assert_eq!((p, a), (Phase::Stopping, Action::Stop));
        assert_eq!(patience(p, t), None);
        let (p, a) = on_signal(p, libc::SIGINT, t + Duration::from_secs(2));
        assert_eq!((p, a), (Phase::Stopping, Action::Leave));
    }

    #[test]
    fn a_late_second_ctrl_c_does_not_stop() {
        let t = Instant::now();
        let (p, _) = on_signal(Phase::Following, libc::SIGINT, t);
        let (_, a) = on_signal(p, libc::SIGINT, t + AGAIN_WITHIN);
        assert_eq!(a, Action::Leave);
    }

    #[test]
    fn sigterm_stops_and_sighup_detaches_for_good() {
        let t = Instant::now();
        assert_eq!(
            on_signal(Phase::Following, libc::SIGTERM, t),
            (Phase::Stopping, Action::Stop)
        );
        let (p, _) = on_signal(Phase::Following, libc::SIGINT, t);
        assert_eq!(on_signal(p, libc::SIGTERM, t).1, Action::Stop);
        assert_eq!(
            on_signal(Phase::Following, libc::SIGHUP, t).1,
            Action::Detach { then_leave: true }
        );
        assert_eq!(
            on_signal(Phase::Stopping, libc::SIGHUP, t).1,
            Action::Detach { then_leave: true }
        );
    }
}
