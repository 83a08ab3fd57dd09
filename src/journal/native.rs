//! Client side of journald's native protocol: one datagram per record, sent to
//! `/run/systemd/journal/socket`.
//!
//! A datagram is a sequence of fields. A value that is printable UTF-8 without a newline is
//! sent as `NAME=value\n`; anything else (a newline, a NUL, bytes that are not UTF-8) as
//! `NAME\n<value length as little-endian u64><value>\n`, which journald stores byte for byte.
//! A record larger than the socket accepts in one datagram (`EMSGSIZE`/`ENOBUFS`) is written
//! to a sealed memfd whose descriptor is passed with `SCM_RIGHTS`, as journald expects.

use std::io::{self, IoSlice, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::socket::{send, sendmsg, ControlMessage, MsgFlags, UnixAddr};

/// Where journald listens for native-protocol datagrams.
pub const DEFAULT_SOCKET: &str = "/run/systemd/journal/socket";

/// Append one field to a datagram under construction.
pub fn encode_field(buf: &mut Vec<u8>, name: &str, value: &[u8]) {
    buf.extend_from_slice(name.as_bytes());
    if needs_binary(value) {
        buf.push(b'\n');
        buf.extend_from_slice(&(value.len() as u64).to_le_bytes());
        buf.extend_from_slice(value);
    } else {
        buf.push(b'=');
        buf.extend_from_slice(value);
    }
    buf.push(b'\n');
}

fn needs_binary(value: &[u8]) -> bool {
    value.iter().any(|&c| c == b'\n' || c == 0) || std::str::from_utf8(value).is_err()
}

/// A datagram socket aimed at journald. Sends never block for longer than the timeout: a
/// stalled journald must not stall the run whose output we are draining.
#[derive(Debug)]
pub struct NativeSender {
    socket: UnixDatagram,
    path: PathBuf,
    /// A second socket, connected to `path`, for [`NativeSender::send_now`]: a send then
    /// looks no path up. Dropped when a send on it fails otherwise than for room (journald
    /// gone, or restarted with a new socket), connected again by the next one.
    connected: Option<UnixDatagram>,
}

impl NativeSender {
    pub fn new(path: &Path, send_timeout: Duration) -> io::Result<NativeSender> {
        let socket = UnixDatagram::unbound()?;
        // A zero timeout means "block forever" to the kernel; never ask for that.
        let timeout = send_timeout.max(Duration::from_millis(1));
        socket.set_write_timeout(Some(timeout))?;
        Ok(NativeSender {
            socket,
            path: path.to_path_buf(),
            connected: None,
        })
    }

    /// Deliver one encoded record only if journald's socket takes it at once (never waits
    /// for room in its queue). False when it did not take it, whatever the reason (full,
    /// missing, too big for one datagram): the caller then sends it with [`Self::send`],
    /// which waits, passes a large record in a memfd, and reports the error.
    pub fn send_now(&mut self, datagram: &[u8]) -> bool {
        if self.connected.is_none() {
            let socket = UnixDatagram::unbound().and_then(|s| {
                s.connect(&self.path)?;
                Ok(s)
            });
            match socket {
                Ok(s) => self.connected = Some(s),
                Err(_) => return false,
            }
        }
        let Some(socket) = &self.connected else {
            return false;
        };
        loop {
            match send(
                socket.as_raw_fd(),
                datagram,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            ) {
                // A datagram is taken whole or not at all.
                Ok(n) => return n == datagram.len(),
                Err(nix::errno::Errno::EINTR) => continue,
                // No room now, or a record for a memfd: the socket is still good.
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EMSGSIZE) => return false,
                Err(_) => {
                    self.connected = None;
                    return false;
                }
            }
        }
    }

    /// Deliver one encoded record. `Ok` means journald's socket accepted the whole record.
    pub fn send(&self, datagram: &[u8]) -> io::Result<()> {
        loop {
            match self.socket.send_to(datagram, &self.path) {
                Ok(n) if n == datagram.len() => return Ok(()),
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "journald socket took part of a datagram",
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if too_big(&e) => return self.send_memfd(datagram),
                Err(e) => return Err(e),
            }
        }
    }

    fn send_memfd(&self, datagram: &[u8]) -> io::Result<()> {
        let fd = sealed_memfd(datagram)?;
        let addr = UnixAddr::new(&self.path).map_err(io::Error::from)?;
        let fds = [fd.as_raw_fd()];
        let cmsgs = [ControlMessage::ScmRights(&fds)];
        let iov: [IoSlice<'_>; 0] = [];
        loop {
            match sendmsg(
                self.socket.as_raw_fd(),
                &iov,
                &cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                Some(&addr),
            ) {
                Ok(_) => return Ok(()),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(io::Error::from(e)),
            }
        }
    }
}

fn too_big(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMSGSIZE) | Some(libc::ENOBUFS))
}

/// journald only trusts a passed memfd once it is sealed against any further change.
fn sealed_memfd(data: &[u8]) -> io::Result<OwnedFd> {
    let fd = memfd_create(
        c"airlock-journal",
        MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
    )
    .map_err(io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(data)?;
    let seals = SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_SEAL;
    fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals)).map_err(io::Error::from)?;
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary_forms() {
        let mut b = Vec::new();
        encode_field(&mut b, "MESSAGE", b"hello AIRLOCK_RUN=x");
        assert_eq!(b, b"MESSAGE=hello AIRLOCK_RUN=x\n");

        b.clear();
        encode_field(&mut b, "MESSAGE", b"a\nAIRLOCK_RUN=forged");
        let mut want = b"MESSAGE\n".to_vec();
        want.extend_from_slice(&20u64.to_le_bytes());
        want.extend_from_slice(b"a\nAIRLOCK_RUN=forged\n");
        assert_eq!(b, want);

        b.clear();
        encode_field(&mut b, "MESSAGE", &[0xff, 0xfe]);
        assert_eq!(&b[..8], b"MESSAGE\n");
        assert_eq!(&b[8..16], &2u64.to_le_bytes());
        assert_eq!(&b[16..], &[0xff, 0xfe, b'\n']);
    }
}
