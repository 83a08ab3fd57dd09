//! Close every inherited file descriptor except stdio and the ones the jail needs. Leaked
//! fds (a directory fd of the host, a socket, a credential file) are a classic escape.

use std::os::fd::RawFd;

use super::SandboxError;

/// Close all fds >= 3 except those in `keep`.
pub fn close_all_except(keep: &[RawFd]) -> Result<(), SandboxError> {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter(|fd| **fd > 2)
        .map(|fd| *fd as u32)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut first: u32 = 3;
    for k in keep {
        if k > first {
            close_range(first, k - 1)?;
        }
        first = k + 1;
    }
    close_range(first, u32::MAX)
}

fn close_range(first: u32, last: u32) -> Result<(), SandboxError> {
    // SAFETY: close_range only closes descriptors; callers own every fd in the range.
    let rc = unsafe { libc::close_range(first, last, 0) };
    if rc != 0 {
        return Err(SandboxError::sys(
            "close inherited fds",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// A pidfd for process `pid` (one of ours, not yet reaped): it turns readable when the
/// process exits, and names that process only, whatever its pid is reused for.
pub fn pidfd_open(pid: libc::pid_t) -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: raw syscall with integer arguments; the returned fd is owned right away.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by pidfd_open and is owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as RawFd) })
}

/// `openat(dir, name, flags | O_CLOEXEC)`: a file below a folder held open, wherever that
/// folder is (a cgroup's, outside the caller's view).
pub fn openat(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::CStr,
    flags: libc::c_int,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    // SAFETY: openat on a descriptor we own with a NUL-terminated name; the fd is owned
    // right away.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by openat and is not owned elsewhere.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Mark an fd close-on-exec.
pub fn set_cloexec(fd: RawFd) -> Result<(), SandboxError> {
    // SAFETY: fcntl on an fd number; a bad fd yields EBADF, which we report.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    if rc != 0 {
        return Err(SandboxError::sys(
            "mark status fd close-on-exec",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Hand the anonymous pipes among `fds` (the agent's stdout and stderr) to the instance, so
/// the agent can reopen them as `/dev/stdout`, `/dev/stderr` or `/proc/self/fd/N`, as shell
/// scripts and many tools do: a pipe belongs to whoever made it (the root launcher) with
/// mode 0600, and reopening checks that. Only anonymous pipes change hands (they are the
/// run's own); a file or named FIFO the launcher passed stays as it is. Runs as root,
/// before the agent drops to the instance.
pub fn give_pipes(fds: &[RawFd], uid: u32, gid: u32) -> Result<(), SandboxError> {
    // The kernel's pipe file system, where every anonymous pipe lives (linux/magic.h).
    const PIPEFS_MAGIC: libc::c_long = 0x5049_5045;
    for &fd in fds {
        // SAFETY: fstatfs writes only into the struct it is given; a closed fd yields EBADF.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(fd, &mut fs) } != 0 || fs.f_type as libc::c_long != PIPEFS_MAGIC {
            continue;
        }
        nix::unistd::fchown(
            fd,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .map_err(|e| SandboxError::errno("hand stdout and stderr to the instance", e))?;
    }
    Ok(())
}
