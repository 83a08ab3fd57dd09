//! The helper's watch over a running jail. A run must never outlive its budget or its
//! launcher, whatever happens to the launcher (crash, SIGKILL, OOM kill):
//!
//! - Deadline: the helper enforces `limits.deadline_ms` itself: SIGTERM to pid 1 (which
//!   forwards it to every process of the run), then SIGKILL after the grace period.
//! - Launcher death, two independent ways:
//!   - `PR_SET_PDEATHSIG`: the kernel sends [`LAUNCHER_DEATH_SIGNAL`] when the thread that
//!     spawned the helper dies. That fires on the death of the spawning *thread*, so the
//!     helper confirms with `getppid()` against the launcher pid read at start before it
//!     acts (a multi-threaded launcher whose spawning thread ended is still alive).
//!   - Lifeline (optional, `airlock-jail --lifeline-fd N`): the read end of a pipe whose
//!     only write end the launcher keeps. When the launcher dies, however it dies, the
//!     kernel closes the write end and the read end reports POLLHUP. Unlike pdeathsig it
//!     has no race at start (a launcher already dead shows as POLLHUP at the first poll)
//!     and does not depend on which launcher thread spawned the helper.
//!
//!   On launcher death the helper SIGKILLs pid 1 at once: there is nobody left to report a
//!   graceful stop to. Pid 1's exit makes the kernel kill every process of the run's pid
//!   namespace, so nothing of the run survives.
//! - Signals to the helper (SIGTERM, SIGINT, SIGHUP) are forwarded to pid 1.
//!
//! Everything arrives through one `poll`: a signalfd for the signals, the lifeline fd, and
//! the timeout of the next deadline step. No signal handlers, no threads.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::init::{exit_code, FORWARDED};
use super::listen_notify::Listeners;
use super::SandboxError;

/// What the kernel sends the helper when its launcher (the spawning thread) dies. Not one
/// of the forwarded signals, so a launcher's death is never mistaken for a stop request.
pub const LAUNCHER_DEATH_SIGNAL: Signal = Signal::SIGUSR1;

/// Exit code when pid 1 vanished without a status the helper saw.
const LOST: i32 = 125;

/// Signals the helper takes through its signalfd. They must be blocked from the start of
/// `main` ([`block_helper_signals`]) so none is acted on by its default disposition.
fn helper_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    set.add(LAUNCHER_DEATH_SIGNAL);
    set
}

/// Block the helper's signals; call first thing in `main`.
pub fn block_helper_signals() -> Result<(), SandboxError> {
    helper_signals()
        .thread_block()
        .map_err(|e| SandboxError::errno("block helper signals", e))
}

/// Arm the parent-death signal and return the launcher's pid. Refuses when the launcher
/// is already gone (the helper was reparented before the signal was armed).
pub fn arm_parent_death() -> Result<Pid, SandboxError> {
    let launcher = nix::unistd::getppid();
    nix::sys::prctl::set_pdeathsig(LAUNCHER_DEATH_SIGNAL)
        .map_err(|e| SandboxError::errno("set parent-death signal", e))?;
    // Re-read after arming: a launcher that died in between has reparented us already.
    if launcher.as_raw() <= 1 || nix::unistd::getppid() != launcher {
        return Err(SandboxError::Invalid {
            step: "start helper",
            why: "the launcher exited before the jail started".to_string(),
        });
    }
    Ok(launcher)
}

/// How a run ended, beyond its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Pid 1 exited on its own (the agent exited, or a forwarded signal ended it).
    Exited,
    /// The deadline was reached and the run was stopped.
    Deadline,
    /// The launcher died and the run was killed.
    LauncherGone,
}

/// The exit code of pid 1 (shell style) and why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub code: i32,
    pub ending: Ending,
}

/// The helper's sources of events, set up once the spec has come and before pid 1 may start
/// anything of the run, so that a failure here refuses the run before any of it runs.
pub struct Watch {
    signals: SignalFd,
    lifeline: Option<OwnedFd>,
    /// The sides' `listen` filters, answered as they ask ([`Listeners`]).
    listeners: Option<Listeners>,
    launcher: Pid,
    deadline: Option<Instant>,
    grace: Duration,
}

impl Watch {
    /// `deadline` and `grace` count from `start` (the spec's arrival).
    pub fn new(
        launcher: Pid,
        lifeline: Option<OwnedFd>,
        listeners: Option<Listeners>,
        start: Instant,
        deadline: Option<Duration>,
        grace: Duration,
    ) -> Result<Watch, SandboxError> {
        let signals = SignalFd::with_flags(
            &helper_signals(),
            SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
        )
        .map_err(|e| SandboxError::errno("signalfd", e))?;
        Ok(Watch {
            signals,
            lifeline,
            listeners,
            launcher,
            deadline: deadline.and_then(|d| start.checked_add(d)),
            grace,
        })
    }

    /// Watch pid 1 until it has exited and been reaped, enforcing the deadline and killing
    /// it if the launcher dies. Returns its exit code and why the run ended.
    pub fn supervise(mut self, pid1: Pid) -> Outcome {
        let mut ending = Ending::Exited;
        let mut kill_at: Option<Instant> = None;
        loop {
            if let Some(code) = reap(pid1) {
                return Outcome { code, ending };
            }
            let now = Instant::now();
            if kill_at.is_some_and(|k| now >= k) {
                let _ = kill(pid1, Signal::SIGKILL);
                kill_at = None;
            }
            if ending == Ending::Exited && self.deadline.is_some_and(|d| now >= d) {
                ending = Ending::Deadline;
                let _ = kill(pid1, Signal::SIGTERM);
                kill_at = now.checked_add(self.grace).or(Some(now));
            }
            let next = [kill_at, self.deadline.filter(|_| ending == Ending::Exited)]
                .into_iter()
                .flatten()
                .min();
            let (sig_ready, life_gone) = self.wait(next);
            if life_gone {
                self.lifeline = None;
                self.launcher_gone(pid1, &mut ending, &mut kill_at);
            }
            if sig_ready {
                while let Ok(Some(info)) = self.signals.read_signal() {
                    let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
                        continue;
                    };
                    if sig == LAUNCHER_DEATH_SIGNAL {
                        // Also sent when only the launcher's spawning thread ended.
                        if nix::unistd::getppid() != self.launcher {
                            self.launcher_gone(pid1, &mut ending, &mut kill_at);
                        }
                    } else if FORWARDED.contains(&sig) {
                        let _ = kill(pid1, sig);
                    }
                }
            }
        }
    }

    fn launcher_gone(&self, pid1: Pid, ending: &mut Ending, kill_at: &mut Option<Instant>) {
        *ending = Ending::LauncherGone;
        *kill_at = None;
        let _ = kill(pid1, Signal::SIGKILL);
    }

    /// Poll the signalfd and the lifeline until one is ready or `until` passes, answering
    /// the sides' `listen` calls meanwhile. Returns (signals pending, launcher gone by the
    /// lifeline).
    fn wait(&mut self, until: Option<Instant>) -> (bool, bool) {
        let timeout_ms: i32 = match until {
            None => -1,
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                // Round up: waking a little early would only spin.
                let ms = left.as_micros().div_ceil(1000);
                ms.min(i32::MAX as u128) as i32
            }
        };
        let mut fds = vec![libc::pollfd {
            fd: self.signals.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(l) = &self.lifeline {
            fds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let ours = fds.len();
        if let Some(l) = &self.listeners {
            fds.extend(l.pollfds());
        }
        // SAFETY: poll on a vector of valid pollfds that lives across the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if rc <= 0 {
            return (false, false);
        }
        if let Some(l) = &mut self.listeners {
            l.ready(&fds[ours..]);
        }
        let sig_ready = fds[0].revents != 0;
        let life_gone = match (fds.get(1), &self.lifeline) {
            (Some(p), Some(l)) if p.revents != 0 => lifeline_closed(p.revents, l),
            _ => false,
        };
        (sig_ready, life_gone)
    }
}

/// The lifeline reports readiness: closed (POLLHUP, an error, or end-of-file) means the
/// launcher is gone. Bytes the launcher wrote are read and ignored.
fn lifeline_closed(revents: libc::c_short, fd: &OwnedFd) -> bool {
    if revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return true;
    }
    let mut buf = [0u8; 64];
    match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(Errno::EINTR) | Err(Errno::EAGAIN) => false,
        Err(_) => true,
    }
}

/// Reap every exited child; `Some(code)` once pid 1 has been reaped.
fn reap(pid1: Pid) -> Option<i32> {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return None,
            Ok(ws) => {
                if ws.pid() == Some(pid1) {
                    if let Some(code) = exit_code(ws) {
                        return Some(code);
                    }
                }
            }
            Err(Errno::EINTR) => continue,
            // No child left: pid 1 is gone without a status we saw.
            Err(_) => return Some(LOST),
        }
    }
}
