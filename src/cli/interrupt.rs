//! The signals that end a foreground `airlockctl launch --wait` (SIGINT from Ctrl-C,
//! SIGTERM, SIGHUP when the terminal goes), taken through a signalfd so that each is a
//! decision of the launch (stop the run, or detach from it) rather than a sudden death
//! that leaves a run behind with nobody to say so.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// The signals taken.
pub const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The shell's exit code for a process ended by `sig`.
pub fn exit_code(sig: i32) -> i32 {
    128 + sig
}

/// The [`SIGNALS`], blocked and readable from one fd.
pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Block the signals in this thread, and so in every thread it starts from now on
    /// (call it before starting any), and read them from a signalfd instead. Children
    /// started with `posix_spawn` get an empty mask back (see `supervisor::spawn`).
    pub fn take() -> io::Result<Signals> {
        let mut set = SigSet::empty();
        for s in SIGNALS {
            set.add(s);
        }
        set.thread_block().map_err(io::Error::from)?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC).map_err(io::Error::from)?;
        Ok(Signals { fd })
    }

    /// Wait for the next signal; `None` if reading failed.
    pub fn wait(&mut self) -> Option<i32> {
        loop {
            match self.fd.read_signal() {
                Ok(Some(info)) => return i32::try_from(info.ssi_signo).ok(),
                Ok(None) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return None,
            }
        }
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Wait until `socket` or the signals are readable, or `timeout` passes. Returns
/// (socket readable or closed, signal waiting).
pub fn wait_either(
    socket: BorrowedFd<'_>,
    signals: &Signals,
    timeout: Option<Duration>,
) -> io::Result<(bool, bool)> {
    // Too long to say in milliseconds: as good as forever.
    let timeout = match timeout {
        None => PollTimeout::NONE,
        Some(t) => PollTimeout::try_from(t).unwrap_or(PollTimeout::MAX),
    };
    let mut fds = [
        PollFd::new(socket, PollFlags::POLLIN),
        PollFd::new(signals.as_fd(), PollFlags::POLLIN),
    ];
    loop {
        match poll(&mut fds, timeout) {
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    let ready = |p: &PollFd| {
        p.revents().is_some_and(|r| {
            r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
        })
    };
    Ok((ready(&fds[0]), ready(&fds[1])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal() {
        assert_eq!(exit_code(libc::SIGINT), 130);
        assert_eq!(exit_code(libc::SIGTERM), 143);
        assert_eq!(exit_code(libc::SIGHUP), 129);
    }
}
