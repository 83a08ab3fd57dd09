//! The CPU priority of a helper built ahead of its run (a warm jail): it builds at the
//! lowest priority, so keeping jails warm never takes CPU from runs, and is raised back
//! the moment its run's spec comes, so the run itself never starts slow.

use nix::unistd::Pid;

use super::SandboxError;

/// The nice value a warm jail builds at.
pub const WARM_NICE: i32 = 19;

fn set(pid: Pid, nice: i32, step: &'static str) -> Result<(), SandboxError> {
    // SAFETY: setpriority on one process by pid; no memory is passed.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, pid.as_raw() as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(SandboxError::sys(step, std::io::Error::last_os_error()))
    }
}

/// Lower this process (and what it forks from now on) to [`WARM_NICE`].
pub fn lower() -> Result<(), SandboxError> {
    set(
        Pid::from_raw(0),
        WARM_NICE,
        "lower the warm jail's priority",
    )
}

/// Raise this process and `pid1` back to the usual nice 0 (root may raise it).
pub fn restore(pid1: Pid) -> Result<(), SandboxError> {
    const STEP: &str = "raise the jail's priority for its run";
    set(Pid::from_raw(0), 0, STEP)?;
    set(pid1, 0, STEP)
}

/// Give `child` (a helper process pid 1 forked while building ahead) pid 1's own priority,
/// once that has been raised for the run.
pub fn share_with(child: Pid) -> Result<(), SandboxError> {
    const STEP: &str = "raise the jail's priority for its run";
    nix::errno::Errno::clear();
    // SAFETY: getpriority of this process; -1 is a valid answer, told apart by errno.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if nice == -1 && nix::errno::Errno::last_raw() != 0 {
        return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
    }
    set(child, nice, STEP)
}
