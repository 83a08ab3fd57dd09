//! In pid 1, once it is in the run's network namespace: the run's gateway listener and its
//! command runner ([`runner`](super::runner)), both handed to the launcher over the
//! helper's gateway socket, with the command side's cgroups (each command gets one of its
//! own below them: [`command_cgroup`](super::command_cgroup)). The listener is made before
//! the agent exists, so whatever answers on 127.0.0.1:[`GATEWAY_PORT`] in the run is
//! Airlock (Landlock lets the run bind no port); connections wait in its backlog until the
//! supervisor serves them.
//!
//! The runner is pid 1 of the command side's own pid namespace, in the command side's
//! cgroups, with mount and IPC namespaces of its own: its own /proc, /tmp and /dev/shm
//! (so no socket of one side is where the other can connect to it) and its own SysV IPC.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use nix::sys::socket::SockType;
use nix::unistd::Pid;

use super::limits::{self, Forked};
use super::runner::{self, GATEWAY_PORT};
use super::sides::{CommandSideFds, SideFds};
use super::status::StatusFd;
use super::{
    command_userns, env, fdpass, fds, helper, identity, init, landlock, listen_notify, namespaces,
    noexec_view, rootfs, seccomp, RunSpec, SandboxError,
};

/// The byte pid 1 sends with the listener and the runner's channel; the command side's
/// cgroups follow, each named by its tag ([`CommandSideFds::tagged`]).
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

/// What pid 1 gives the command side: the socket to the launcher, the side's cgroups for
/// the launcher, and the image's tree when the side is rooted in one.
pub struct Handed {
    pub gateway: OwnedFd,
    pub handover: CommandSideFds,
    pub image: Option<OwnedFd>,
}

/// Listen on the gateway port, start the runner, and hand the listener and the runner's
/// channel to the launcher over `gateway` (closed here: only pid 1 held it). `spec_at`: when
/// the spec arrived, for the runner's report of when it was ready.
pub fn start(
    spec: &RunSpec,
    status: StatusFd,
    notify: RawFd,
    cgroups: &SideFds,
    handed: Handed,
    spec_at: Instant,
) -> Result<Runner, SandboxError> {
    const STEP: &str = "start the gateway";
    let Handed {
        gateway,
        handover,
        image,
    } = handed;
    // std's listener: close-on-exec, and listening with a backlog of 128.
    let listener = OwnedFd::from(
        std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, GATEWAY_PORT))
            .map_err(|e| SandboxError::sys(STEP, e))?,
    );
    let (ours, theirs) =
        fdpass::pair(SockType::SeqPacket).map_err(|e| SandboxError::errno(STEP, e))?;
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::errno(STEP, e))?;
    // Pid 1 is single-threaded, so the child may run any code; it _exits.
    match limits::clone_into(cgroups.v2(), true, "fork command runner")? {
        Forked::Child { born_in } => {
            drop((listener, ours, gateway, ready_r, handover));
            let entered = cgroups
                .enter(born_in)
                .and_then(|()| namespaces::unshare_side())
                .and_then(|()| rootfs::side_view(spec, true))
                .and_then(|()| match image {
                    Some(tree) => super::image_root::enter(tree),
                    None => Ok(()),
                });
            let served =
                entered.and_then(|()| runner_child(spec, status, notify, theirs, ready_w, spec_at));
            let code = match served {
                Ok(code) => code,
                Err(e) => {
                    status.error(&e);
                    helper::EXIT_SETUP_FAILED
                }
            };
            // SAFETY: leave without running pid 1's destructors.
            unsafe { libc::_exit(code) }
        }
        Forked::Parent { child, .. } => {
            drop((theirs, ready_w, image));
            let (tags, cgroup_fds) = handover.tagged();
            let mut message = HANDOVER.to_vec();
            message.extend_from_slice(&tags);
            let mut fds = vec![listener.as_raw_fd(), ours.as_raw_fd()];
            fds.extend(cgroup_fds);
            fdpass::send(gateway.as_fd(), &message, &fds)
                .map_err(|e| SandboxError::errno("hand the gateway to the launcher", e))?;
            Ok(Runner {
                pid: child,
                ready: std::fs::File::from(ready_r),
            })
        }
    }
}

/// The runner: the instance uid in a user namespace of the command side's own
/// ([`command_userns`]), no capabilities, the command side's Landlock rules, the run's
/// seccomp filter; then it serves the supervisor until its channel closes. Before it drops
/// root it forks the noexec runner, which it hands every command with an exec limit.
fn runner_child(
    spec: &RunSpec,
    status: StatusFd,
    notify: RawFd,
    channel: OwnedFd,
    ready: OwnedFd,
    spec_at: Instant,
) -> Result<i32, SandboxError> {
    init::reset_signals()?;
    nix::unistd::setsid().map_err(|e| SandboxError::errno("setsid runner", e))?;
    let userns = command_userns::make(spec.uid, spec.gid)?;
    let noexec = start_noexec(
        spec,
        status,
        notify,
        &[channel.as_raw_fd(), ready.as_raw_fd()],
        userns.as_raw_fd(),
    )?;
    fds::close_all_except(&[
        status.raw(),
        notify,
        channel.as_raw_fd(),
        ready.as_raw_fd(),
        noexec.channel.as_raw_fd(),
        noexec.ready.as_raw_fd(),
        userns.as_raw_fd(),
    ])?;
    let (envp, report) = become_runner(spec, notify, userns)?;
    let confined = spec_at.elapsed().as_micros();
    let mut b = [0u8; 1];
    std::fs::File::from(noexec.ready)
        .read_exact(&mut b)
        .map_err(|_| SandboxError::Invalid {
            step: "start the noexec runner",
            why: "it did not finish its setup".into(),
        })?;
    // When in the run's setup (benches/run_part.sh reads it): the agent's start waits for
    // this, and the runner for the noexec runner.
    let at = spec_at.elapsed().as_micros();
    status.info(&format!(
        "command side: runner ready {at} us after the spec's arrival (confined at {confined} us), {report}; its own user (per-user counts apart), pid, mount and IPC namespaces, /tmp and /dev/shm; commands with an exec limit run where every writable mount is noexec"
    ));
    nix::unistd::write(&ready, b"r").map_err(|e| SandboxError::errno("runner ready", e))?;
    drop(ready);
    // The status pipe's end of file tells the launcher the run started: not ours to hold.
    let _ = nix::unistd::close(status.raw());
    Ok(runner::serve(
        channel,
        envp,
        runner_roots(spec),
        runner::Route::Exec(noexec.channel),
    ))
}

fn runner_roots(spec: &RunSpec) -> Vec<std::path::PathBuf> {
    vec![spec.jail_workspace(), spec.jail_home()]
}

/// The runner's setup once its descriptors are its own: the command side's user namespace
/// and the instance uid in it, the workspace as cwd, the command side's Landlock rules, the run's seccomp filter (its notification
/// descriptor handed to the helper). Returns the commands' environment and Landlock's
/// report.
fn become_runner(
    spec: &RunSpec,
    notify: RawFd,
    userns: OwnedFd,
) -> Result<(Vec<std::ffi::CString>, landlock::LandlockReport), SandboxError> {
    command_userns::enter(userns)?;
    identity::become_instance(spec.uid, spec.gid)?;
    nix::unistd::chdir(&spec.jail_workspace())
        .map_err(|e| SandboxError::errno("chdir workspace (runner)", e))?;
    let report = landlock::apply(&helper::command_side_rules(spec))?;
    let envp = env::to_cstrings(&env::build_command_side(spec))?;
    let listener = seccomp::install(seccomp::Side::Command)?;
    listen_notify::send_listener(notify, listener)?;
    Ok((envp, report))
}

/// The noexec runner as the runner holds it: its channel, and a pipe that gets one byte
/// once it is set up.
struct Noexec {
    channel: OwnedFd,
    ready: OwnedFd,
}

/// Fork the noexec runner ([`noexec_view`]): a runner like this one, in a copy of the
/// command side's mount namespace where every writable mount is noexec, and in the same
/// user namespace (`userns`, which the child takes over). `theirs`: the runner's own
/// descriptors, which the child closes first.
fn start_noexec(
    spec: &RunSpec,
    status: StatusFd,
    notify: RawFd,
    theirs: &[RawFd],
    userns: RawFd,
) -> Result<Noexec, SandboxError> {
    const STEP: &str = "start the noexec runner";
    let (ours, channel) =
        fdpass::pair(SockType::SeqPacket).map_err(|e| SandboxError::errno(STEP, e))?;
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::errno(STEP, e))?;
    // SAFETY: the runner is single-threaded, so the child may run any code; it _exits.
    match unsafe { nix::unistd::fork() }.map_err(|e| SandboxError::errno(STEP, e))? {
        nix::unistd::ForkResult::Child => {
            for fd in theirs {
                let _ = nix::unistd::close(*fd);
            }
            drop((ours, ready_r));
            let served = noexec_child(spec, status, notify, channel, ready_w, userns);
            let code = match served {
                Ok(code) => code,
                Err(e) => {
                    status.error(&e);
                    helper::EXIT_SETUP_FAILED
                }
            };
            // SAFETY: leave without running the runner's destructors.
            unsafe { libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { .. } => Ok(Noexec {
            channel: ours,
            ready: ready_r,
        }),
    }
}

fn noexec_child(
    spec: &RunSpec,
    status: StatusFd,
    notify: RawFd,
    channel: OwnedFd,
    ready: OwnedFd,
    userns: RawFd,
) -> Result<i32, SandboxError> {
    let exec = crate::policy::git_overrides::EXEC
        .iter()
        .chain(crate::policy::git_overrides::LIBRARIES)
        .copied()
        .collect::<Vec<_>>();
    noexec_view::enter(&exec)?;
    fds::close_all_except(&[
        status.raw(),
        notify,
        channel.as_raw_fd(),
        ready.as_raw_fd(),
        userns,
    ])?;
    // SAFETY: the runner's descriptor, inherited by the fork; the runner's copy is never
    // dropped in this process (it leaves by _exit), so this is its only owner here.
    let userns = unsafe { OwnedFd::from_raw_fd(userns) };
    let (envp, _) = become_runner(spec, notify, userns)?;
    nix::unistd::write(&ready, b"r").map_err(|e| SandboxError::errno("noexec runner ready", e))?;
    drop(ready);
    let _ = nix::unistd::close(status.raw());
    Ok(runner::serve(
        channel,
        envp,
        runner_roots(spec),
        runner::Route::Noexec,
    ))
}
