//! The signals that end a foreground `airlockctl launch --wait` (SIGINT from Ctrl-C,
//! SIGTERM, SIGHUP when the terminal goes), taken through a signalfd so that each is a
//! decision of the launch (stop the run, or detach from it) rather than a sudden death
//! that leaves a run behind with nobody to say so.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

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
/// (socket readable, signal waiting).
pub fn wait_either(
    socket: BorrowedFd<'_>,
    signals: &Signals,
    timeout: Option<Duration>,
) -> io::Result<(bool, bool)> {
    let mut fds = [
        libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: signals.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
    loop {
        // SAFETY: poll on two pollfds that live on this stack frame, for their count.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let ready = |p: &libc::pollfd| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
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
