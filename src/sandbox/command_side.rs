//! In pid 1, once it is in the run's network namespace: the run's gateway listener and its
//! command runner ([`runner`](super::runner)), both handed to the launcher over the
//! helper's gateway socket. The listener is made before the agent exists, so whatever
//! answers on 127.0.0.1:[`GATEWAY_PORT`] in the run is Airlock (Landlock lets the run bind
//! no port); connections wait in its backlog until the supervisor serves them.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::sys::socket::SockType;
use nix::unistd::{fork, ForkResult, Pid};

use super::runner::{self, GATEWAY_PORT};
use super::status::StatusFd;
use super::{env, fdpass, fds, helper, identity, init, landlock, seccomp, RunSpec, SandboxError};

/// The byte pid 1 sends with the listener and the runner's channel.
pub const HANDOVER: &[u8] = b"g";

/// The started runner, as pid 1 sees it.
pub struct Runner {
    pid: Pid,
    ready: std::fs::File,
}

impl Runner {
    /// Wait until the runner is set up (uid, Landlock, seccomp). Its error, if any, is on
    /// the status pipe already.
    pub fn wait_ready(mut self) -> Result<(), SandboxError> {
        let mut b = [0u8; 1];
        match self.ready.read_exact(&mut b) {
            Ok(()) => Ok(()),
            Err(_) => {
                let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
                Err(SandboxError::Invalid {
                    step: "start the command runner",
                    why: "the runner did not finish its setup".into(),
                })
            }
        }
    }
}

/// Listen on the gateway port, start the runner, and hand the listener and the runner's
/// channel to the launcher over `gateway` (closed here: only pid 1 held it).
pub fn start(spec: &RunSpec, status: StatusFd, gateway: OwnedFd) -> Result<Runner, SandboxError> {
    const STEP: &str = "start the gateway";
    // std's listener: close-on-exec, and listening with a backlog of 128.
    let listener = OwnedFd::from(
        std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, GATEWAY_PORT))
            .map_err(|e| SandboxError::sys(STEP, e))?,
    );
    let (ours, theirs) =
        fdpass::pair(SockType::SeqPacket).map_err(|e| SandboxError::errno(STEP, e))?;
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::errno(STEP, e))?;
    // SAFETY: pid 1 is single-threaded, so the child may run any code; it _exits.
    match unsafe { fork() }.map_err(|e| SandboxError::errno("fork command runner", e))? {
        ForkResult::Child => {
            drop((listener, ours, gateway, ready_r));
            let code = match runner_child(spec, status, theirs, ready_w) {
                Ok(code) => code,
                Err(e) => {
                    status.error(&e);
                    helper::EXIT_SETUP_FAILED
                }
            };
            // SAFETY: leave without running pid 1's destructors.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            drop((theirs, ready_w));
            fdpass::send(
                gateway.as_fd(),
                HANDOVER,
                &[listener.as_raw_fd(), ours.as_raw_fd()],
            )
            .map_err(|e| SandboxError::errno("hand the gateway to the launcher", e))?;
            Ok(Runner {
                pid: child,
                ready: std::fs::File::from(ready_r),
            })
        }
    }
}

/// The runner: the instance uid, no capabilities, the command side's Landlock rules, the
/// run's seccomp filter; then it serves the supervisor until its channel closes.
fn runner_child(
    spec: &RunSpec,
    status: StatusFd,
    channel: OwnedFd,
    ready: OwnedFd,
) -> Result<i32, SandboxError> {
    init::reset_signals()?;
    nix::unistd::setsid().map_err(|e| SandboxError::errno("setsid runner", e))?;
    fds::close_all_except(&[status.raw(), channel.as_raw_fd(), ready.as_raw_fd()])?;
    identity::become_instance(spec.uid, spec.gid)?;
    nix::unistd::chdir(&spec.workspace)
        .map_err(|e| SandboxError::errno("chdir workspace (runner)", e))?;
    let report = landlock::apply(&helper::command_side_rules(spec))?;
    helper::require_isolation(spec, &report)?;
    let envp = env::to_cstrings(&env::build(spec))?;
    seccomp::install(seccomp::Side::Command)?;
    status.info(&format!("command side: runner ready, {report}"));
    nix::unistd::write(&ready, b"r").map_err(|e| SandboxError::errno("runner ready", e))?;
    drop(ready);
    // The status pipe's end of file tells the launcher the run started: not ours to hold.
    let _ = nix::unistd::close(status.raw());
    Ok(runner::serve(
        channel,
        envp,
        vec![spec.workspace.clone(), spec.jail_home()],
    ))
}
