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
