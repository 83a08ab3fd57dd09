//! New namespaces for the run: mount, pid, ipc, uts, net and cgroup. No user namespace: the
//! agent runs as a real host uid with no capabilities, so nothing in the jail is "root".
//!
//! The network namespace is the slowest to create (about half a millisecond), so a helper
//! process of pid 1 creates it ([`NetNs::start`]) while pid 1 builds the root, and pid 1
//! joins it ([`NetNs::enter`]) before anything of the run starts.

use std::os::fd::AsRawFd;

use nix::fcntl::OFlag;
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{fork, ForkResult, Pid};

use super::SandboxError;

/// In the helper: a new pid namespace for the next child, which becomes pid 1 of the run.
/// The helper itself stays in every host namespace, so its cleanup (killing and removing
/// the run's cgroups by their host paths) sees what the launcher sees.
pub fn unshare_pid() -> Result<(), SandboxError> {
    unshare(CloneFlags::CLONE_NEWPID).map_err(|e| SandboxError::errno("unshare pid namespace", e))
}

/// In pid 1: the mount, ipc and uts namespaces of the jail. The network one is made by a
/// child ([`NetNs`]); the cgroup one by each side ([`unshare_side`]) or, in a run without
/// sides, by pid 1 once it is in the run's cgroups ([`unshare_cgroup`]).
pub fn unshare_mount_ipc_uts() -> Result<(), SandboxError> {
    let flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWUTS;
    unshare(flags).map_err(|e| SandboxError::errno("unshare namespaces", e))
}

/// In each side's first process (still root, already in its side's cgroups): mount and
/// IPC namespaces of its own, so a side has its own /proc, /tmp and /dev/shm, and its own
/// SysV IPC and POSIX queues; and a cgroup namespace rooted at its side's cgroup.
pub fn unshare_side() -> Result<(), SandboxError> {
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWCGROUP)
        .map_err(|e| SandboxError::errno("unshare the side's namespaces", e))
}

/// In pid 1 of a run without sides, once it is in the run's cgroups: a cgroup namespace
/// rooted there.
pub fn unshare_cgroup() -> Result<(), SandboxError> {
    unshare(CloneFlags::CLONE_NEWCGROUP)
        .map_err(|e| SandboxError::errno("unshare cgroup namespace", e))
}

/// The run's new network namespace, being made by a child of pid 1 (in the run's pid
/// namespace, so it dies with the run whatever happens; it is forked before pid 1 has
/// joined all of the run's cgroups and is killed before anything of the run starts).
pub struct NetNs {
    child: Option<Pid>,
    ready: std::fs::File,
}

/// What the maker child reports: one status byte, then the errno when it failed.
const NET_OK: u8 = 0;
const NET_UNSHARE_FAILED: u8 = 1;
const NET_LO_FAILED: u8 = 2;

impl NetNs {
    /// The child holding the namespace until pid 1 joins it.
    pub fn maker(&self) -> Option<Pid> {
        self.child
    }

    /// Fork the child that unshares a network namespace and brings up `lo` in it, then
    /// waits to be killed. Pid 1 must be single-threaded.
    pub fn start() -> Result<NetNs, SandboxError> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
            .map_err(|e| SandboxError::errno("net namespace pipe", e))?;
        // SAFETY: pid 1 is single-threaded, so the child may run any code; it _exits.
        match unsafe { fork() }.map_err(|e| SandboxError::errno("fork net namespace maker", e))? {
            ForkResult::Child => {
                drop(r);
                // Nothing of pid 1's (its pipes, the status fd) stays open here.
                let _ = super::fds::close_all_except(&[w.as_raw_fd()]);
                let (code, err) = match unshare(CloneFlags::CLONE_NEWNET) {
                    Err(e) => (NET_UNSHARE_FAILED, e as i32),
                    Ok(()) => match loopback_up() {
                        Err(errno) => (NET_LO_FAILED, errno),
                        Ok(()) => (NET_OK, 0),
                    },
                };
                let mut msg = [0u8; 5];
                msg[0] = code;
                msg[1..].copy_from_slice(&err.to_ne_bytes());
                let _ = nix::unistd::write(&w, &msg);
                if code == NET_OK {
                    // Keep the namespace alive until pid 1 has joined it and kills us.
                    loop {
                        // SAFETY: pause only waits for a signal.
                        unsafe { libc::pause() };
                    }
                }
                // SAFETY: leave without running destructors of pid 1's state.
                unsafe { libc::_exit(1) }
            }
            ForkResult::Parent { child } => {
                drop(w);
                Ok(NetNs {
                    child: Some(child),
                    ready: std::fs::File::from(r),
                })
            }
        }
    }

    /// Why the maker exited, once it has: the failure it reported, else that it died (a
    /// stray kill while the jail waited for its run).
    pub fn why_gone(&mut self) -> SandboxError {
        match self.report() {
            Err(e) => e,
            Ok(()) => SandboxError::Invalid {
                step: "join net namespace",
                why: "the net namespace maker died".to_string(),
            },
        }
    }

    /// The maker's report: its namespace is ready, or the step it failed.
    fn report(&mut self) -> Result<(), SandboxError> {
        const STEP: &str = "join net namespace";
        let mut msg = [0u8; 5];
        match std::io::Read::read_exact(&mut self.ready, &mut msg) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(SandboxError::Invalid {
                    step: STEP,
                    why: "the net namespace maker died".to_string(),
                })
            }
            Err(e) => return Err(SandboxError::sys(STEP, e)),
        }
        let errno = i32::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]);
        let os = std::io::Error::from_raw_os_error(errno);
        match msg[0] {
            NET_OK => {}
            NET_UNSHARE_FAILED => return Err(SandboxError::sys("unshare net namespace", os)),
            NET_LO_FAILED => return Err(SandboxError::sys("bring up lo", os)),
            _ => {
                return Err(SandboxError::Invalid {
                    step: STEP,
                    why: "unexpected report from the net namespace maker".to_string(),
                })
            }
        }
        Ok(())
    }

    /// Wait for the child's namespace, join it (through a pidfd of the child, which needs
    /// no /proc), then kill the child; pid 1's reaping loop collects it later. Any failure
    /// fails the run.
    pub fn enter(mut self) -> Result<(), SandboxError> {
        const STEP: &str = "join net namespace";
        self.report()?;
        let child = self.child.ok_or_else(|| SandboxError::Invalid {
            step: STEP,
            why: "no net namespace maker".to_string(),
        })?;
        let pidfd =
            super::fds::pidfd_open(child.as_raw()).map_err(|e| SandboxError::sys(STEP, e))?;
        setns(&pidfd, CloneFlags::CLONE_NEWNET).map_err(|e| SandboxError::errno(STEP, e))?;
        // Not waited for here: its exit (it may be the last to leave a namespace) is off
        // the path to the agent's start.
        let _ = kill(child, Signal::SIGKILL);
        self.child = None;
        Ok(())
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Some(pid) = self.child.take() {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
        }
    }
}

/// Where the kernel keeps `vm.memfd_noexec` (Linux 6.3 and later).
const MEMFD_NOEXEC: &str = "/proc/sys/vm/memfd_noexec";

/// Whether the kernel has `vm.memfd_noexec`. Without it ([`memfd_noexec_strict`]), neither
/// side of a run may make a memfd at all (the seccomp filters refuse `memfd_create`), so no
/// memfd exists in the run to be executed: the same guarantee by other means.
pub fn kernel_has_memfd_noexec() -> bool {
    std::path::Path::new(MEMFD_NOEXEC).exists()
}

/// `vm.memfd_noexec=2` for the caller's pid namespace (pid 1 of the run): no memfd made in
/// the run can be executed, whatever flags it was made with. Returns false on a kernel
/// before 6.3, which has no such setting; the sides' seccomp filters then refuse
/// `memfd_create` on both sides ([`kernel_has_memfd_noexec`]).
pub fn memfd_noexec_strict() -> Result<bool, SandboxError> {
    const STEP: &str = "vm.memfd_noexec";
    match std::fs::write(MEMFD_NOEXEC, b"2") {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(SandboxError::sys(STEP, e)),
    }
    match std::fs::read_to_string(MEMFD_NOEXEC) {
        Ok(v) if v.trim() == "2" => Ok(true),
        _ => Err(SandboxError::Unsupported {
            step: STEP,
            why: "vm.memfd_noexec did not stay at 2 in the run's pid namespace".into(),
        }),
    }
}

/// The jail's hostname is its run id.
pub fn set_hostname(name: &str) -> Result<(), SandboxError> {
    nix::unistd::sethostname(name).map_err(|e| SandboxError::errno("set hostname", e))
}

/// Bring up `lo` in the new network namespace: the run may talk to itself on loopback, and
/// to nothing else (no other interface exists). Err is the errno, which the net namespace
/// maker child reports to pid 1.
fn loopback_up() -> Result<(), i32> {
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: plain socket/ioctl/close calls on a socket we own; ifreq is zero-initialised
    // and its name is a NUL-terminated "lo".
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(errno());
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
        let err = errno();
        libc::close(sock);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(())
}
