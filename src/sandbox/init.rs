//! Pid 1 of a run. It forks the agent, reaps every orphan, forwards SIGTERM/SIGINT/SIGHUP to
//! every process of the run, and exits with the agent's status as soon as the agent exits.
//! When it exits the kernel kills everything left in the pid namespace, so a double-forked
//! daemon cannot outlive the run.
//!
//! Init stays uid 0 (a different uid from the agent, so the agent cannot signal or ptrace
//! it), keeps only CAP_KILL (forwarding signals to the instance uid needs it), is not
//! dumpable, and is hidden from the agent by /proc's hidepid=2.

use nix::errno::Errno;
use nix::sys::signal::{kill, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::SandboxError;

pub const FORWARDED: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

fn waited_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    set
}

/// Block the forwarded signals and SIGCHLD; [`reap_until`] takes them with sigwait, so no
/// signal can slip in between a check and a blocking wait.
pub fn block_signals() -> Result<(), SandboxError> {
    waited_set()
        .thread_block()
        .map_err(|e| SandboxError::errno("block signals", e))
}

/// Every signal back to its default disposition and an empty mask (for the agent; Rust
/// starts with SIGPIPE ignored, which exec would otherwise pass on).
pub fn reset_signals() -> Result<(), SandboxError> {
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for s in Signal::iterator() {
        if matches!(s, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: restoring the default disposition installs no handler code.
        unsafe { sigaction(s, &dfl) }.map_err(|e| SandboxError::errno("reset signals", e))?;
    }
    SigSet::empty()
        .thread_set_mask()
        .map_err(|e| SandboxError::errno("reset signal mask", e))
}

/// Exit code for a wait status, shell style: the code, or 128 + signal.
pub fn exit_code(ws: WaitStatus) -> Option<i32> {
    match ws {
        WaitStatus::Exited(_, c) => Some(c),
        WaitStatus::Signaled(_, s, _) => Some(128 + s as i32),
        _ => None,
    }
}

/// Reap children until `target` exits, calling `forward` for each forwarded signal that
/// arrives. Returns the target's exit code. Signals must be blocked ([`block_signals`]).
pub fn reap_until(target: Pid, forward: impl Fn(Signal)) -> i32 {
    let set = waited_set();
    loop {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(ws) => {
                    if ws.pid() == Some(target) {
                        if let Some(code) = exit_code(ws) {
                            return code;
                        }
                    }
                }
                Err(Errno::EINTR) => continue,
                // No children left: the target is gone without a status we saw.
                Err(_) => return 125,
            }
        }
        if let Ok(sig) = set.wait() {
            if sig != Signal::SIGCHLD {
                forward(sig);
            }
        }
    }
}

/// Forwarding used by pid 1: every process of the namespace but init itself.
pub fn forward_to_all(sig: Signal) {
    let _ = kill(Pid::from_raw(-1), sig);
}
