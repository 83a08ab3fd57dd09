//! The agent's pseudo-terminal (`launch --tty`): opened from the run's own devpts (a
//! `newinstance` mount, see [`super::rootfs`]), never the host's. The agent gets the slave
//! as its controlling terminal and stdin, stdout and stderr; the master goes to the
//! launcher over the helper's `--stdio-fd` socket, so only airlockd ever holds it.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::error::SandboxError;
use super::fdpass;

/// What the master is sent with, so the receiver knows what it got.
pub const MASTER_TAG: &[u8] = b"airlock-pty-master";

/// Make the pty, send its master over `sock` and make the slave this process's controlling
/// terminal and fds 0, 1 and 2 (owned by the instance, so it may reopen `/dev/tty`). The
/// caller is a session leader without a controlling terminal. `sock` is fd 0 on entry and
/// is replaced by the slave.
pub fn take_terminal(sock: RawFd, uid: u32, gid: u32) -> Result<(), SandboxError> {
    let sys = |what: &'static str| move |e: nix::errno::Errno| SandboxError::errno(what, e);
    // SAFETY: plain syscalls on fds this function opens; results are checked.
    let master = unsafe {
        libc::open(
            c"/dev/pts/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if master < 0 {
        return Err(sys("open the run's /dev/pts/ptmx")(
            nix::errno::Errno::last(),
        ));
    }
    // SAFETY: `master` was just opened and is owned here alone.
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } != 0 {
        return Err(sys("unlock the pty")(nix::errno::Errno::last()));
    }
    // The slave from the master itself (no path lookup in a devpts that could be raced).
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a new fd.
    let slave = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY,
        )
    };
    if slave < 0 {
        return Err(sys("open the pty's slave")(nix::errno::Errno::last()));
    }
    // SAFETY: a fresh fd owned here alone.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    // SAFETY: TIOCSCTTY takes an int by value; this process leads a session with no
    // controlling terminal.
    if unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCSCTTY, 0) } != 0 {
        return Err(sys("make the pty the controlling terminal")(
            nix::errno::Errno::last(),
        ));
    }
    nix::unistd::fchown(
        slave.as_raw_fd(),
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(sys("give the pty to the instance"))?;
    // SAFETY: `sock` is fd 0, the launcher's socket, borrowed for the send only.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(sock) };
    fdpass::send(borrowed, MASTER_TAG, &[master.as_raw_fd()])
        .map_err(sys("send the pty's master"))?;
    drop(master);
    for fd in 0..=2 {
        nix::unistd::dup2(slave.as_fd().as_raw_fd(), fd).map_err(sys("pty as stdio"))?;
    }
    Ok(())
}
