//! New namespaces for the run: mount, pid, ipc, uts, net and cgroup. No user namespace: the
//! agent runs as a real host uid with no capabilities, so nothing in the jail is "root".

use nix::sched::{unshare, CloneFlags};

use super::SandboxError;

/// In the helper: a new pid namespace for the next child, which becomes pid 1 of the run.
/// The helper itself stays in every host namespace, so its cleanup (killing and removing
/// the run's cgroups by their host paths) sees what the launcher sees.
pub fn unshare_pid() -> Result<(), SandboxError> {
    unshare(CloneFlags::CLONE_NEWPID).map_err(|e| SandboxError::errno("unshare pid namespace", e))
}

/// In pid 1, after it joined the run's cgroups: every other namespace of the jail. The
/// cgroup namespace is rooted at the run's cgroup because pid 1 joined it first.
pub fn unshare_rest() -> Result<(), SandboxError> {
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWCGROUP;
    unshare(flags).map_err(|e| SandboxError::errno("unshare namespaces", e))
}

/// The jail's hostname is its run id.
pub fn set_hostname(name: &str) -> Result<(), SandboxError> {
    nix::unistd::sethostname(name).map_err(|e| SandboxError::errno("set hostname", e))
}

/// Bring up `lo` in the new network namespace: the run may talk to itself on loopback, and
/// to nothing else (no other interface exists).
pub fn loopback_up() -> Result<(), SandboxError> {
    const STEP: &str = "bring up lo";
    // SAFETY: plain socket/ioctl/close calls on a socket we own; ifreq is zero-initialised
    // and its name is a NUL-terminated "lo".
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        let mut rc = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req);
        if rc == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req);
        }
        let err = std::io::Error::last_os_error();
        libc::close(sock);
        if rc != 0 {
            return Err(SandboxError::sys(STEP, err));
        }
    }
    Ok(())
}
