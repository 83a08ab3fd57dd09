//! The CPU priority of a helper built ahead of its run (a warm jail): it builds under
//! SCHED_IDLE, so keeping jails warm takes only CPU no run wants (unlike nice 19, whose
//! weight adds up across many waiting jails), and is put back under the usual policy the
//! moment its run's spec comes, so the run itself never starts slow.

use nix::unistd::Pid;

use super::SandboxError;

fn set(pid: Pid, policy: libc::c_int, step: &'static str) -> Result<(), SandboxError> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on one process by pid, with a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(pid.as_raw(), policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(SandboxError::sys(step, std::io::Error::last_os_error()))
    }
}

/// Put this process (and what it forks from now on) under SCHED_IDLE.
pub fn lower() -> Result<(), SandboxError> {
    set(
        Pid::from_raw(0),
        libc::SCHED_IDLE,
        "lower the warm jail's priority",
    )
}

/// Put this process and `pid1` back under SCHED_OTHER (root may).
pub fn restore(pid1: Pid) -> Result<(), SandboxError> {
    const STEP: &str = "raise the jail's priority for its run";
    set(Pid::from_raw(0), libc::SCHED_OTHER, STEP)?;
    set(pid1, libc::SCHED_OTHER, STEP)
}

/// Give `child` (a helper process pid 1 forked while building ahead) pid 1's own policy,
/// once that has been put back for the run.
pub fn share_with(child: Pid) -> Result<(), SandboxError> {
    const STEP: &str = "raise the jail's priority for its run";
    // SAFETY: sched_getscheduler of this process.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
    }
    set(child, policy, STEP)
}
