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
    const STEP: &str = "hand stdout and stderr to the instance";
    let (r, _w) = nix::unistd::pipe().map_err(|e| SandboxError::errno(STEP, e))?;
    let Some(pipefs) = fstat(std::os::fd::AsRawFd::as_raw_fd(&r)) else {
        return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
    };
    for &fd in fds {
        let Some(st) = fstat(fd) else { continue };
        if st.st_mode & libc::S_IFMT == libc::S_IFIFO && st.st_dev == pipefs.st_dev {
            // SAFETY: fchown on an fd number, which is open (fstat just saw it).
            if unsafe { libc::fchown(fd, uid, gid) } != 0 {
                return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
            }
        }
    }
    Ok(())
}

/// fstat of an fd number; None when it is not open.
fn fstat(fd: RawFd) -> Option<libc::stat> {
    // SAFETY: fstat writes only into the struct it is given; a closed fd yields EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st)
}
