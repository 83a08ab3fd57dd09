//! Passing file descriptors over unix sockets (SCM_RIGHTS): how the jail hands its gateway
//! listener and its command runner's channel out to the supervisor, and how the supervisor
//! hands each command its own result socket.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 8;

/// Send `bytes` (at least one) with `fds` attached, as one message.
pub fn send(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[RawFd]) -> nix::Result<()> {
    let iov = [IoSlice::new(bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e),
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => return Err(nix::errno::Errno::EMSGSIZE),
        }
    }
}

/// Receive one message into `buf`: its length (0 at end of stream) and the descriptors it
/// carried, close-on-exec. A message cut short (larger than `buf`) is refused.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> nix::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e),
            Ok(m) => m,
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for fd in raw {
                    // SAFETY: the kernel just installed this descriptor for us; we own it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        if msg
            .flags
            .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
        {
            return Err(nix::errno::Errno::EMSGSIZE);
        }
        return Ok((msg.bytes, fds));
    }
}

/// A connected pair of unix sockets of `ty`, close-on-exec.
pub fn pair(ty: SockType) -> nix::Result<(OwnedFd, OwnedFd)> {
    socketpair(AddressFamily::Unix, ty, None, SockFlag::SOCK_CLOEXEC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn a_descriptor_crosses_with_its_message() {
        let (a, b) = pair(SockType::SeqPacket).unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        send(a.as_fd(), b"hello", &[r.as_raw_fd()]).unwrap();
        drop(r);
        let mut buf = [0u8; 16];
        let (n, mut fds) = recv(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        std::fs::File::from(w).write_all(b"x").unwrap();
        let mut got = [0u8; 1];
        std::fs::File::from(fds.remove(0))
            .read_exact(&mut got)
            .unwrap();
        assert_eq!(&got, b"x");
    }

    #[test]
    fn a_message_larger_than_the_buffer_is_refused() {
        let (a, b) = pair(SockType::SeqPacket).unwrap();
        send(a.as_fd(), b"0123456789", &[]).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(
            recv(b.as_fd(), &mut buf).err(),
            Some(nix::errno::Errno::EMSGSIZE)
        );
    }
}
