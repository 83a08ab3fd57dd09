//! `listen(2)` from inside a run, decided outside it. Landlock governs a TCP socket's
//! `bind` but not the bind the kernel does itself when `listen` is called on an unbound
//! socket, and seccomp cannot see what kind of socket a descriptor is. So the jail's filter
//! turns every `listen` into a user notification ([`seccomp`](super::seccomp)), and the
//! helper, outside the jail, answers it: it takes the caller's descriptor (`pidfd_getfd`),
//! and only for a unix socket does it listen, on that same socket, as the instance's uid
//! (so a client's `SO_PEERCRED` names the instance, though with pid 0: the helper's child
//! is no process of the run's). Anything else gets EPERM. Deciding on the descriptor it
//! holds, the helper cannot be raced: swapping the caller's descriptor number meanwhile
//! changes nothing of what is listened on.
//!
//! Each side hands its filter's notification descriptor to the helper over a socket pid 1
//! got before anything of the run started ([`send_listener`]).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::fdpass;

/// The kernel's struct seccomp_data, seccomp_notif and seccomp_notif_resp.
#[repr(C)]
#[derive(Default)]
struct Data {
    nr: i32,
    arch: u32,
    instruction_pointer: u64,
    args: [u64; 6],
}

#[repr(C)]
#[derive(Default)]
struct Notif {
    id: u64,
    pid: u32,
    flags: u32,
    data: Data,
}

#[repr(C)]
struct Resp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

// _IOWR('!', 0, struct seccomp_notif), _IOWR('!', 1, struct seccomp_notif_resp),
// _IOW('!', 2, __u64) of <linux/seccomp.h>.
const NOTIF_RECV: libc::c_ulong = 0xc050_2100;
const NOTIF_SEND: libc::c_ulong = 0xc018_2101;
const NOTIF_ID_VALID: libc::c_ulong = 0x4008_2102;

/// The byte each side's listener comes with.
const LISTENER: &[u8] = b"l";

/// In a side's process, right after its filter is loaded: hand the filter's notification
/// descriptor to the helper over `notify` (pid 1's end of the helper's socket, inherited),
/// then close both (a side's process holds nothing of the helper's).
pub fn send_listener(
    notify: std::os::fd::RawFd,
    listener: OwnedFd,
) -> Result<(), super::SandboxError> {
    // SAFETY: `notify` is open in this process (inherited from pid 1) and used only here.
    let sock = unsafe { BorrowedFd::borrow_raw(notify) };
    let sent = fdpass::send(sock, LISTENER, &[listener.as_raw_fd()]);
    let _ = nix::unistd::close(notify);
    sent.map_err(|e| super::SandboxError::errno("hand the listen filter to the helper", e))
}

/// The helper's end: the socket the sides' listeners arrive on, and the listeners.
pub struct Listeners {
    sock: Option<OwnedFd>,
    listeners: Vec<OwnedFd>,
    uid: u32,
    gid: u32,
}

impl Listeners {
    /// `uid`, `gid`: the instance, as whom a unix socket listens.
    pub fn new(sock: OwnedFd, uid: u32, gid: u32) -> Listeners {
        Listeners {
            sock: Some(sock),
            listeners: Vec::new(),
            uid,
            gid,
        }
    }

    /// What to poll, in the order [`Listeners::ready`] takes the results.
    pub fn pollfds(&self) -> Vec<libc::pollfd> {
        self.sock
            .iter()
            .chain(&self.listeners)
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect()
    }

    /// Act on what `poll` reported for [`Listeners::pollfds`]: take new listeners, answer
    /// one notification of each ready listener, drop the ones whose processes are all gone.
    pub fn ready(&mut self, polled: &[libc::pollfd]) {
        let mut polled = polled.iter();
        let mut arrived = Vec::new();
        if let Some(sock) = &self.sock {
            let Some(p) = polled.next() else { return };
            if p.revents & libc::POLLIN != 0 {
                let mut buf = [0u8; 1];
                match fdpass::recv(sock.as_fd(), &mut buf) {
                    Ok((1, fds)) if buf[..1] == *LISTENER => arrived = fds,
                    Ok((0, _)) | Err(_) => self.sock = None,
                    Ok(_) => {}
                }
            } else if p.revents != 0 {
                self.sock = None;
            }
        }
        // Only the listeners that were polled are looked at; new ones are next time.
        let mut keep = Vec::with_capacity(self.listeners.len() + arrived.len());
        let mut old = std::mem::take(&mut self.listeners).into_iter();
        for (l, p) in old.by_ref().zip(polled) {
            if p.revents & libc::POLLIN != 0 {
                answer(&l, self.uid, self.gid);
            }
            if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) == 0 {
                keep.push(l);
            }
        }
        keep.extend(old);
        keep.extend(arrived);
        self.listeners = keep;
    }
}

/// Take one notification from `listener` and answer it.
fn answer(listener: &OwnedFd, uid: u32, gid: u32) {
    let mut n = Notif::default();
    // SAFETY: the kernel fills the zeroed struct it was given, of its own size.
    if unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_RECV, &mut n as *mut Notif) } != 0 {
        return;
    }
    let (val, error) = match decide(listener, &n, uid, gid) {
        Ok(()) => (0, 0),
        Err(errno) => (0, -errno),
    };
    let resp = Resp {
        id: n.id,
        val,
        error,
        flags: 0,
    };
    // SAFETY: the kernel reads the struct of its own size. A caller gone meanwhile makes
    // this fail (ENOENT): nothing to answer.
    unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_SEND, &resp as *const Resp) };
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The caller's `listen(fd, backlog)`: Ok once done, or the errno to fail it with.
fn decide(listener: &OwnedFd, n: &Notif, uid: u32, gid: u32) -> Result<(), i32> {
    if i64::from(n.data.nr) != libc::SYS_listen {
        return Err(libc::EPERM);
    }
    let pidfd = thread_pidfd(n.pid as libc::pid_t).ok_or(libc::ESRCH)?;
    // The pid is the caller's only while its notification is pending.
    // SAFETY: the kernel reads the u64 id.
    if unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_ID_VALID, &n.id as *const u64) } != 0 {
        return Err(libc::ESRCH);
    }
    // The kernel reads an int: the low 32 bits.
    let target = n.data.args[0] as u32 as i32;
    let backlog = n.data.args[1] as u32 as i32;
    // SAFETY: pidfd_getfd on a pidfd we own; the returned descriptor is owned right away.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: just returned by the kernel, owned here alone.
    let sock = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int into `domain`, whose size `len` gives.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            &mut domain as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(last_errno());
    }
    if domain != libc::AF_UNIX {
        return Err(libc::EPERM);
    }
    // Without Landlock's abstract-unix scoping (before Linux 6.12), an abstract name (an
    // unbound socket gets one when it listens) could join the two sides: refused.
    if super::landlock::probe_abi() < 6 && !bound_to_a_path(sock.as_fd()) {
        return Err(libc::EPERM);
    }
    listen_as(sock.as_fd(), backlog, uid, gid)
}

/// Whether a unix socket is bound to a filesystem path (not to an abstract name, nor
/// unbound).
fn bound_to_a_path(sock: BorrowedFd<'_>) -> bool {
    // SAFETY: a zeroed sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: getsockname writes at most `len` bytes into `addr`.
    let rc = unsafe {
        libc::getsockname(
            sock.as_raw_fd(),
            &mut addr as *mut libc::sockaddr_un as *mut libc::sockaddr,
            &mut len,
        )
    };
    let family = std::mem::size_of::<libc::sa_family_t>() as libc::socklen_t;
    rc == 0 && len > family && addr.sun_path[0] != 0
}

/// A pidfd through which the caller's descriptors can be taken (any thread of a process
/// may call: a notification names the thread). PIDFD_THREAD (Linux 6.9) opens the thread
/// itself; before it only a thread group's leader has a pidfd, so another thread's call is
/// answered through its leader's, whose descriptor table the thread shares.
fn thread_pidfd(tid: libc::pid_t) -> Option<OwnedFd> {
    const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
    let open = |pid: libc::pid_t, flags: libc::c_uint| {
        // SAFETY: pidfd_open with integer arguments; the descriptor is owned right away.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
        // SAFETY: just returned by the kernel.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
    };
    open(tid, PIDFD_THREAD)
        .or_else(|| open(tid, 0))
        .or_else(|| open(thread_group_of(tid)?, 0))
}

/// The thread group (process) a thread belongs to, from `/proc/<tid>/status`.
fn thread_group_of(tid: libc::pid_t) -> Option<libc::pid_t> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `listen` on `sock` in a child of the helper that is the instance's uid and gid.
fn listen_as(sock: BorrowedFd<'_>, backlog: i32, uid: u32, gid: u32) -> Result<(), i32> {
    // SAFETY: the helper is single-threaded; the child only makes syscalls and _exits.
    match unsafe { nix::unistd::fork() } {
        Err(e) => Err(e as i32),
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: plain syscalls on values we own; the child leaves by _exit.
            unsafe {
                let code = if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(gid, gid, gid) != 0
                    || libc::setresuid(uid, uid, uid) != 0
                    || libc::listen(sock.as_raw_fd(), backlog) != 0
                {
                    last_errno()
                } else {
                    0
                };
                libc::_exit(code)
            }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => loop {
            match nix::sys::wait::waitpid(child, None) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => return Ok(()),
                Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => return Err(code),
                _ => return Err(libc::EIO),
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_structs_are_the_kernels() {
        assert_eq!(std::mem::size_of::<Notif>(), 80);
        assert_eq!(std::mem::size_of::<Resp>(), 24);
        // The ioctl numbers encode those sizes.
        assert_eq!((NOTIF_RECV >> 16) & 0x3fff, 80);
        assert_eq!((NOTIF_SEND >> 16) & 0x3fff, 24);
    }
}
