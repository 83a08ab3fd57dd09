//! The agent side's init: with a command side in the run, the agent does not share a pid
//! namespace with it. Pid 1 of the run starts this process as pid 1 of a pid namespace of
//! its own (in the agent side's cgroups), where it makes the agent side's mount and IPC
//! namespaces and its own /proc, forks the agent, and reaps until the agent exits, then
//! exits with its status (its exit kills whatever the agent left in its namespace).
//!
//! So neither side can name the other's processes at all: prlimit, setpriority, the
//! scheduler and ioprio calls, pidfd_open and kill find no such pid (the kernel's
//! PRIO_USER and IOPRIO_WHO_USER walks skip processes outside the caller's namespace too),
//! and a SysV segment or queue of one side is not there for the other. It stays uid 0
//! with only CAP_KILL (to pass signals on to the agent), not dumpable, as pid 1 does: the
//! agent can neither signal nor trace it.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::unistd::{fork, ForkResult};

use super::setup_marks::SetupMarks;
use super::sides::SideFds;
use super::status::StatusFd;
use super::{fds, helper, identity, init, namespaces, rootfs, RunSpec, SandboxError};

/// What the agent's process gets from pid 1: the word to exec, the helper's socket for its
/// `listen` filter, and when the jail's setup started, its spec came and each step ended
/// (for the report).
pub struct Side {
    pub go_r: OwnedFd,
    pub notify: RawFd,
    pub marks: SetupMarks,
    /// The image's tree, when the side's program (a workflow role's command) is rooted in
    /// one ([`image_root`](super::image_root)).
    pub image: Option<OwnedFd>,
}

/// In the child pid 1 of the run started in a new pid namespace: become the agent side's
/// init. Returns only on failure (the process exits with the agent's status otherwise).
pub fn init(
    spec: &RunSpec,
    status: StatusFd,
    side: Side,
    cgroups: &SideFds,
    born_in: bool,
) -> SandboxError {
    match run(spec, status, side, cgroups, born_in) {
        // SAFETY: _exit ends the process without running pid 1's destructors.
        Ok(code) => unsafe { libc::_exit(code) },
        Err(e) => e,
    }
}

fn run(
    spec: &RunSpec,
    status: StatusFd,
    side: Side,
    cgroups: &SideFds,
    born_in: bool,
) -> Result<i32, SandboxError> {
    let Side {
        go_r,
        notify,
        mut marks,
        image,
    } = side;
    cgroups.enter(born_in)?;
    // Nothing of pid 1's stays open here: not its lifeline, not the sides' cgroups.
    let mut keep = vec![status.raw(), go_r.as_raw_fd(), notify];
    keep.extend(image.as_ref().map(AsRawFd::as_raw_fd));
    fds::close_all_except(&keep)?;
    namespaces::unshare_side()?;
    rootfs::side_view(spec, false)?;
    // A workflow role's command rooted in an image (see `image_root`).
    if let Some(tree) = image {
        super::image_root::enter(tree)?;
    }
    // Every mount noexec but the files of its exec set; a workflow role's command (on the
    // command side) keeps the jail's view.
    if let Some(x) = &spec.exec {
        rootfs::agent_view(x)?;
    }
    marks.mark("agent side");
    // The agent's word to exec comes from here, once this process has nothing worth
    // stealing either: pid 1's word, passed on after the reduction below.
    let (agent_go_r, agent_go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::errno("start pipe", e))?;
    // SAFETY: this process is single-threaded; the child execs or _exits.
    match unsafe { fork() }.map_err(|e| SandboxError::errno("fork agent", e))? {
        ForkResult::Child => {
            drop((go_r, agent_go_w));
            let side = Side {
                go_r: agent_go_r,
                notify,
                marks,
                image: None,
            };
            let err = match helper::agent(spec, status, side) {
                Ok(never) => match never {},
                Err(e) => e,
            };
            status.error(&err);
            // SAFETY: leave without running this process's destructors.
            unsafe { libc::_exit(helper::EXIT_SETUP_FAILED) }
        }
        ForkResult::Parent { child } => {
            drop(agent_go_r);
            let _ = nix::unistd::close(notify);
            if let Err(e) = identity::reduce_init() {
                let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
                return Err(e);
            }
            // The status pipe's end of file tells the launcher the agent started.
            let _ = nix::unistd::close(status.raw());
            let mut go = [0u8; 1];
            if std::fs::File::from(go_r).read_exact(&mut go).is_ok() && go == *b"g" {
                let _ = nix::unistd::write(&agent_go_w, b"g");
            }
            drop(agent_go_w);
            // Pid 1's forwarded signals reach the agent side too, but one that came while
            // the agent was not forked yet waits here (a child inherits none pending): it is
            // passed on. Twice for a signal that came later is harmless.
            Ok(init::reap_until(child, init::forward_to_all))
        }
    }
}
