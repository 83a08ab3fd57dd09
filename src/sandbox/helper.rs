//! The jail setup sequence, run by the single-threaded `airlock-jail` helper (never by a
//! fork of the multi-threaded daemon):
//!
//! helper (host namespaces): unshare the pid namespace; when started ahead of its run
//! (`--run-id`), make the run's cgroups; fork pid 1 (born in the v2 cgroup when there is
//! one already); read the spec from stdin to end of file, hand it to pid 1, check it; make
//! the cgroups now if not yet, set the limits, with a command side make each side's
//! cgroups ([`sides`](super::sides)), move pid 1 into the v2 cgroup if it is not there,
//! and tell pid 1 which v1 cgroups to join and where the sides' are; then watch it
//! ([`watch`](super::watch)): forward signals, enforce the deadline, kill pid 1 when the
//! launcher dies, answer the sides' `listen` calls ([`listen_notify`]), kill the cgroups
//! at the end.
//! pid 1 (init): start a child making the net namespace (with `lo` up), unshare mount, ipc
//! and uts namespaces, build the part of the root that is the same for every run; read the
//! spec; open the bind sources, finish the root with the run's part; wait for the helper's
//! word on the cgroups and join the v1 ones; pivot_root, unshare the cgroup namespace,
//! join the net namespace, hostname, rlimits, setsid, close fds; with a command side start
//! it ([`command_side`]: the runner, pid 1 of a pid namespace of its own) and the agent
//! side's init ([`agent_side`]: likewise, it forks the agent), otherwise fork the agent;
//! keep only CAP_KILL, let the agent exec, reap until it (or its side's init) exits.
//! agent child: setsid, drop to the instance uid with no capabilities and no_new_privs,
//! chdir, Landlock, seccomp (all while pid 1 reduces itself), then wait for its word and
//! execve with a clean env.
//!
//! Any failure is written to the status fd with the step that failed, and the agent is
//! never exec'd.

use std::convert::Infallible;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::landlock::{self, LandlockRules};
use super::limits::{self, Enforcement, Forked, ProcLimit, RunCgroups};
use super::listen_notify::{self, Listeners};
use super::runner::GATEWAY_PORT;
use super::setup_marks::SetupMarks;
use super::sides::{CgroupWord, OpenSides, SideFds};
use super::spec::{DiskTarget, ExecAllow, DEFAULT_GRACE_MS, MAX_SPEC_JSON_BYTES, SYSTEM_DIRS};
use super::status::StatusFd;
use super::watch::Watch;
use super::{
    agent_side, command_side, disk, env, fdpass, fds, identity, image_root, init, namespaces,
    priority, rootfs, seccomp, RunSpec, SandboxError,
};

/// Exit code of the helper (and of pid 1) when the jail could not be built.
pub const EXIT_SETUP_FAILED: i32 = 125;

/// Who launched the helper and how to notice that it died; see [`watch`](super::watch).
pub struct Launch {
    /// The launcher's pid, read before the parent-death signal was armed.
    pub launcher: Pid,
    /// Read end of the launcher's lifeline pipe, if it passed one.
    pub lifeline: Option<OwnedFd>,
    /// The launcher's gateway socket (see `airlock-jail --gateway-fd`), if it passed one.
    pub gateway: Option<OwnedFd>,
    /// The program's stdin and stdout (see `airlock-jail --stdio-fd`), if the launcher
    /// passed one.
    pub stdio: Option<OwnedFd>,
    /// When the helper started (setup times count from here).
    pub start: Instant,
    /// The run this helper was started for, when its launcher knew it ahead of the spec.
    pub ahead: Option<Ahead>,
    /// The launcher's end pipe (see `airlock-jail --end-fd`), if it passed one.
    pub end: Option<OwnedFd>,
    /// Built ahead under SCHED_IDLE (`airlock-jail --idle`), put back for the run.
    pub idle: bool,
}

/// What a launcher tells a helper it starts ahead of its run: the run's id and the parent
/// of its cgroup, so the helper can make the run's cgroups before the spec comes. The spec
/// must name the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ahead {
    pub run_id: String,
    pub cgroup_parent: Option<PathBuf>,
}

/// Build the jail and run the agent in it: the common part of the jail first, then the
/// run's part once its spec (JSON) has been read from stdin to end of file. Returns the
/// exit code the helper process should exit with: the agent's (128 + signal if killed), or
/// [`EXIT_SETUP_FAILED`] after writing the failing step to `status`.
///
/// A launcher may start the helper before it knows the run (a standby): everything before
/// the spec arrives is the same for every run, and nothing of a run starts without one.
pub fn run(status: StatusFd, launch: Launch) -> i32 {
    // The jail makes its mount points and files with the modes it names, whatever umask its
    // launcher has (airlockd's unit sets UMask=0077, which made them 0700 root and the
    // workspace unreachable to the instance); the run's programs start with the usual 022.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    match run_inner(status, launch) {
        Ok(code) => code,
        Err(e) => {
            status.error(&e);
            EXIT_SETUP_FAILED
        }
    }
}

/// Read a run spec to end of file, refusing more than [`MAX_SPEC_JSON_BYTES`].
fn read_spec_bytes(input: &mut dyn Read) -> Result<Vec<u8>, SandboxError> {
    let mut text = Vec::new();
    input
        .take(MAX_SPEC_JSON_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| SandboxError::sys("read run spec", e))?;
    if text.len() as u64 > MAX_SPEC_JSON_BYTES {
        return Err(SandboxError::Invalid {
            step: "read run spec",
            why: format!("the spec is larger than {MAX_SPEC_JSON_BYTES} bytes"),
        });
    }
    Ok(text)
}

/// Parse and check a run spec. serde messages may quote values: say only that it is not
/// a valid spec.
fn parse_spec(text: &[u8]) -> Result<RunSpec, SandboxError> {
    let spec: RunSpec = serde_json::from_slice(text).map_err(|_| SandboxError::Invalid {
        step: "read run spec",
        why: "stdin is not a valid run spec (JSON)".to_string(),
    })?;
    spec.validate()?;
    Ok(spec)
}

fn run_inner(status: StatusFd, mut launch: Launch) -> Result<i32, SandboxError> {
    let lifeline_note = if launch.lifeline.is_some() {
        " and lifeline fd"
    } else {
        " only (no lifeline fd)"
    };
    // Best effort: a jail built at the usual priority is the same jail (restored below
    // either way).
    if launch.idle {
        let _ = priority::lower();
    }
    namespaces::unshare_pid()?;
    let pipe =
        || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| SandboxError::errno("helper pipe", e));
    let (life_r, life_w) = pipe()?;
    let (cg_r, cg_w) = pipe()?;
    let (spec_r, spec_w) = pipe()?;
    // The sides' `listen` filters come back to the helper on this ([`listen_notify`]).
    let (notify_r, notify_w) = fdpass::pair(nix::sys::socket::SockType::SeqPacket)
        .map_err(|e| SandboxError::errno("helper socket", e))?;
    // The run's cgroups, removed at the end whatever happened. Told its run ahead, the
    // helper makes them now, so pid 1 is born in the v2 one (see `RunCgroups`).
    let mut cgroups = match &launch.ahead {
        Some(a) => Some(RunCgroups::provision(
            a.cgroup_parent.as_deref(),
            &a.run_id,
        )?),
        None => None,
    };
    // Pid 1's alone: the helper's copy is closed right after the fork, so the launcher
    // sees the socket close when pid 1 is gone.
    let gateway = launch.gateway.take();
    let stdio = launch.stdio.take();
    let forked = limits::fork_into(cgroups.as_ref().and_then(RunCgroups::v2_dir));
    let (child, born_in) = match forked {
        Ok(Forked::Child { .. }) => {
            drop((life_w, cg_w, spec_w, notify_r));
            let code = match pid1(
                status,
                Pid1Fds {
                    life_r,
                    cg_r,
                    spec_r,
                    notify: notify_w,
                    gateway,
                    stdio,
                },
                launch.start,
            ) {
                Ok(code) => code,
                // The helper reports a spec it could not hand over; the rest is ours.
                Err(Pid1Error::NoSpec) => EXIT_SETUP_FAILED,
                Err(Pid1Error::Setup(e)) => {
                    status.error(&e);
                    EXIT_SETUP_FAILED
                }
            };
            // SAFETY: _exit ends the process without running parent-owned destructors.
            unsafe { libc::_exit(code) }
        }
        Ok(Forked::Parent { child, born_in }) => (child, born_in),
        Err(e) => {
            if let Some(c) = &cgroups {
                let _ = c.kill_and_remove();
            }
            return Err(e);
        }
    };
    drop((life_r, cg_r, spec_r, notify_w, gateway, stdio));
    let mut notify_r = Some(notify_r);
    // Dropped (below) before the write ends of the pipes: on an error pid 1 is killed (and
    // with it the whole run) before it can read the end of a pipe.
    let mut guard = Pid1Guard(Some(child));
    // Closed once the spec is handed over: pid 1 reads it to end of file.
    let mut spec_w = Some(spec_w);
    // Closed once pid 1 has its word on the cgroups: it reads that to end of file too.
    let mut cg_w = Some(cg_w);
    let mut body = || -> Result<i32, SandboxError> {
        if let Some(c) = cgroups.as_mut() {
            if born_in {
                c.born_in_v2();
            }
            // Not born there (an old kernel): moved while the spec is on its way, so the
            // move's wait for the kernel's cgroup lock is off the run's path.
            c.join_v2(child)?;
            // The sides' cgroups too (and a v1 memory one): after the spec only their limits
            // are written.
            c.make_ahead()?;
        }
        // Handed to pid 1 as read (it is building the common root meanwhile), then checked
        // here; pid 1 parses the same bytes.
        wait_for_spec(child)?;
        // Raised before pid 1 has the spec: whatever of the common part it is still
        // building is the run's own start now.
        if launch.idle {
            priority::restore(child)?;
        }
        let text = read_spec_bytes(&mut std::io::stdin().lock())?;
        let handed = spec_w
            .take()
            .map_or(Ok(()), |w| write_all(w, &text, "hand the spec to pid 1"));
        let spec = parse_spec(&text)?;
        handed?;
        if let Some(a) = &launch.ahead {
            if a.run_id != spec.run_id || a.cgroup_parent != spec.cgroup_parent {
                return Err(SandboxError::Invalid {
                    step: "read run spec",
                    why: "the spec is for another run than the helper was started for".to_string(),
                });
            }
        }
        // The deadline counts from the spec's arrival: the helper may have waited long.
        let deadline = spec.limits.deadline_ms.map(Duration::from_millis);
        let grace = Duration::from_millis(spec.limits.grace_ms.unwrap_or(DEFAULT_GRACE_MS));
        let watch = Watch::new(
            launch.launcher,
            launch.lifeline.take(),
            notify_r
                .take()
                .map(|s| Listeners::new(s, spec.uid, spec.gid)),
            Instant::now(),
            deadline,
            grace,
        )?;
        // Otherwise made now, while pid 1 builds the run's part of the root: pid 1 waits
        // for them only before it starts anything of the run (see `pid1`).
        let c = match &mut cgroups {
            Some(c) => c,
            None => cgroups.insert(RunCgroups::provision(
                spec.cgroup_parent.as_deref(),
                &spec.run_id,
            )?),
        };
        let enforced = c.limit(&spec.limits)?;
        // Two sides only where there is a command side (a connector's jail has one program).
        let split = if spec.gateway {
            Some(c.split(&spec.limits)?)
        } else {
            None
        };
        c.join_v2(child)?;
        let word = CgroupWord {
            nproc: enforced.procs == ProcLimit::RlimitNproc,
            join: c.v1_dirs().cloned().collect(),
            sides: split.as_ref().map(|(s, _)| s.clone()),
        };
        cg_w.take()
            .map_or(Ok(()), |w| write_all(w, &word.encode(), "start pid 1"))?;
        report(&spec, status, c, enforced, deadline, grace, lifeline_note);
        if let Some((_, r)) = &split {
            status.info(&r.to_string());
        }
        // Our copy of the status fd is no longer needed: EOF comes from the agent's exec.
        let _ = nix::unistd::close(status.raw());
        let outcome = watch.supervise(child);
        // Reaped: nothing left to kill, and the pid may be reused.
        guard.0 = None;
        Ok(outcome.code)
    };
    let result = body();
    drop(guard);
    drop(life_w);
    let mut end = launch.end.take();
    // What the run's cgroups counted, told before they go.
    if let (Some(end), Some(c)) = (&end, cgroups.as_ref()) {
        let _ = nix::unistd::write(end, c.oom_kill_line().as_bytes());
    }
    // Pid 1 is reaped (by the watch, or by the guard above), so its pid namespace is empty:
    // the run is over. With an end pipe the launcher hears its exit code now and may answer
    // while the cgroups below are removed; the helper's own output ends first, so the
    // run's output streams reach end of file with the answer.
    let told = match (&end, &result) {
        (Some(e), Ok(code)) => end_run(e, *code),
        _ => false,
    };
    // Backstop: nothing of the run survives pid 1, whatever it did. Pid 1's exit already
    // killed every process of its pid namespace; this also frees the cgroups.
    if let Some(Err(e)) = cgroups.as_ref().map(RunCgroups::kill_and_remove) {
        match &result {
            // Told its end, the launcher removes them itself once the helper has exited,
            // and journals what it could not.
            Ok(_) if told => {}
            // The status fd is closed once pid 1 runs; the run's stderr is what is left.
            Ok(_) => eprintln!("airlock-jail: {e}"),
            Err(_) => status.error(&e),
        }
    }
    drop(end.take());
    result
}

/// The line on the end pipe that tells the run's exit code (as the helper exits with it)
/// once pid 1 has been reaped: `EXIT N`.
pub const END_EXIT: &str = "EXIT";

/// End the helper's part in the run's output (stdout and stderr become /dev/null), then
/// tell the launcher the exit code. Whether it was told: if the output could not be let
/// go, the launcher waits for the helper's exit as before.
fn end_run(end: &OwnedFd, code: i32) -> bool {
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return false;
    };
    for fd in [1, 2] {
        if nix::unistd::dup2(null.as_raw_fd(), fd).is_err() {
            return false;
        }
    }
    let line = format!("{END_EXIT} {code}\n");
    matches!(nix::unistd::write(end, line.as_bytes()), Ok(n) if n == line.len())
}

/// Wait until the spec starts to come on stdin (or stdin closes), watching pid 1 meanwhile:
/// a helper started ahead of its run may wait long, and one whose pid 1 died (a failed
/// common build, a stray kill) must exit then, so its launcher sees it is not usable.
fn wait_for_spec(pid1: Pid) -> Result<(), SandboxError> {
    const STEP: &str = "wait for the run spec";
    if wait_input_or_exit(0, pid1, STEP)? {
        return Ok(());
    }
    Err(SandboxError::Invalid {
        step: STEP,
        why: "pid 1 exited before the run came".to_string(),
    })
}

/// Wait until `input` is readable (or closed): true; false if `watched` exits first.
fn wait_input_or_exit(
    input: libc::c_int,
    watched: Pid,
    step: &'static str,
) -> Result<bool, SandboxError> {
    let pidfd = fds::pidfd_open(watched.as_raw()).map_err(|e| SandboxError::sys(step, e))?;
    let mut fds = [
        libc::pollfd {
            fd: input,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: poll on two valid pollfds, no timeout.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(SandboxError::sys(step, e));
        }
        if fds[1].revents != 0 {
            return Ok(false);
        }
        if fds[0].revents != 0 {
            return Ok(true);
        }
    }
}

/// Write all of `bytes` to a pipe and close it: its reader reads to end of file.
fn write_all(fd: OwnedFd, bytes: &[u8], step: &'static str) -> Result<(), SandboxError> {
    std::fs::File::from(fd)
        .write_all(bytes)
        .map_err(|e| SandboxError::sys(step, e))
}

/// Why pid 1 stopped before the run started.
enum Pid1Error {
    /// The helper handed over no valid spec; it reports why.
    NoSpec,
    Setup(SandboxError),
}

impl From<SandboxError> for Pid1Error {
    fn from(e: SandboxError) -> Self {
        Pid1Error::Setup(e)
    }
}

/// The run log's lines on how the jail is limited, ended and watched.
fn report(
    spec: &RunSpec,
    status: StatusFd,
    cgroups: &RunCgroups,
    enforced: Enforcement,
    deadline: Option<Duration>,
    grace: Duration,
    lifeline_note: &str,
) {
    status.info(&format!(
        "{enforced} (max_procs {}); cgroups: {}",
        spec.limits.max_procs,
        if cgroups.dirs.is_empty() {
            "none".to_string()
        } else {
            cgroups
                .dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));
    for target in [DiskTarget::Workspace, DiskTarget::Home] {
        let what = target.as_str();
        status.info(&match spec.disks.iter().find(|d| d.target == target) {
            Some(d) => format!(
                "disk: {what} bounded by the kernel: its own ext4 filesystem on {} ({} bytes, {} inodes); a write past either gets ENOSPC",
                d.device.display(),
                d.bytes,
                d.inodes
            ),
            None => format!("disk: {what} not bounded by Airlock; the host's own limits apply"),
        });
    }
    // When the run ends, pid 1 is reaped last: its exit kills every process left in the
    // run's pid namespace, so no sweep over the instance uid is ever needed.
    status.info("teardown: every process of the run is killed with pid 1 of its pid namespace");
    status.info(&format!(
        "watch: deadline {}; launcher death by parent-death signal{lifeline_note}",
        match deadline {
            Some(d) => format!(
                "{} ms (grace {} ms) enforced by the helper",
                d.as_millis(),
                grace.as_millis()
            ),
            None => "none".to_string(),
        },
    ));
}

/// Pid 1 of the run, killed (and reaped) if the helper leaves before it was reaped: on
/// every error path after the fork, the run's pid namespace dies with it.
struct Pid1Guard(Option<Pid>);

impl Drop for Pid1Guard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
        }
    }
}

/// What pid 1 gets from the helper: the helper's lifeline, its word on the cgroups, the
/// spec, the socket the sides' `listen` filters go back on, and the launcher's sockets.
struct Pid1Fds {
    life_r: OwnedFd,
    cg_r: OwnedFd,
    spec_r: OwnedFd,
    notify: OwnedFd,
    gateway: Option<OwnedFd>,
    stdio: Option<OwnedFd>,
}

/// Pid 1 of the run.
fn pid1(status: StatusFd, fds: Pid1Fds, start: Instant) -> Result<i32, Pid1Error> {
    let Pid1Fds {
        life_r,
        cg_r,
        spec_r,
        notify,
        gateway,
        stdio,
    } = fds;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| SandboxError::errno("set parent-death signal", e))?;
    // The helper may have died before the line above: then the lifeline is already closed.
    if helper_gone(&life_r) {
        return Err(SandboxError::Invalid {
            step: "start pid 1",
            why: "the jail helper exited".to_string(),
        }
        .into());
    }
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| SandboxError::errno("init not dumpable", e))?;
    // Stdin is the launcher's spec pipe: the agent's is /dev/null, or the launcher's stdio
    // socket for a program that speaks over stdio.
    let has_stdio = stdio.is_some();
    let stdin: OwnedFd = match stdio {
        Some(s) => s,
        None => std::fs::File::open("/dev/null")
            .map_err(|e| SandboxError::sys("stdin", e))?
            .into(),
    };
    nix::unistd::dup2(stdin.as_raw_fd(), 0).map_err(|e| SandboxError::errno("stdin", e))?;
    drop(stdin);
    // No memfd of this pid namespace may be executed (a child cannot lower it). Through the
    // host's /proc, still mounted here: the setting is the writer's pid namespace's.
    // A kernel without the setting (before 6.3) gets no memfd on either side instead.
    namespaces::memfd_noexec_strict()?;
    // The network namespace is the slowest to make: a child makes it while this process
    // builds the root.
    let mut net = namespaces::NetNs::start()?;
    namespaces::unshare_mount_ipc_uts()?;
    rootfs::build_common()?;
    // A jail whose net namespace maker died while it waited (a stray kill) could only fail
    // its run: pid 1 exits instead, and with it the helper, so its launcher does not hand it
    // out. (Its run's spec may be on its way: the helper then reports the step.)
    if let Some(maker) = net.maker() {
        if !wait_input_or_exit(spec_r.as_raw_fd(), maker, "wait for the run spec")? {
            return Err(net.why_gone().into());
        }
    }
    let text = read_spec_bytes(&mut std::fs::File::from(spec_r)).map_err(|_| Pid1Error::NoSpec)?;
    let mut marks = SetupMarks::new(start, Instant::now());
    let spec = parse_spec(&text).map_err(|_| Pid1Error::NoSpec)?;
    let spec = &spec;
    // A warm jail's maker child was forked under SCHED_IDLE; it gets pid 1's policy, put back
    // by now. Best effort: a maker that failed has exited, and `enter` below says why.
    if let Some(maker) = net.maker() {
        let _ = priority::share_with(maker);
    }
    // Fail closed on a mismatch: a stdio program must not talk to /dev/null, and an agent
    // must never get a launcher's socket as its stdin.
    if (spec.stdio || spec.tty) != has_stdio {
        return Err(SandboxError::Invalid {
            step: "stdio",
            why: "the spec's stdio and the helper's --stdio-fd disagree".into(),
        }
        .into());
    }
    // Open the bind sources refusing symlinked components. After the unshare: a bind
    // source must be a mount of the namespace that binds it.
    // The bounded filesystems first: the sources opened below are then their roots.
    disk::mount_all(spec)?;
    let sources = rootfs::Sources::open(spec)?;
    rootfs::finish(spec, &sources)?;
    drop(sources);
    // The image's tree for each side rooted in it, taken while the host's root is in view:
    // the command side's, and a workflow role's command's (on a side of its own).
    if spec.image.is_some() && !spec.gateway {
        return Err(SandboxError::Invalid {
            step: "open the image's tree",
            why: "an image roots the command side, and this run has none (no gateway)".into(),
        }
        .into());
    }
    let image_command = image_root::open_tree(spec)?;
    let image_agent = match spec.exec {
        None => image_root::open_tree(spec)?,
        Some(_) => None,
    };
    marks.mark("root");
    // In the run's cgroups (made meanwhile) before anything of the run starts, so every
    // later process is counted: the helper has put this process in the v2 one, and names
    // the v1 ones to join while their host paths are still visible (before the pivot).
    let mut word = Vec::new();
    let read = std::fs::File::from(cg_r).read_to_end(&mut word);
    let Some(word) = read.ok().and_then(|_| CgroupWord::decode(&word)) else {
        return Err(SandboxError::Invalid {
            step: "join run cgroup",
            why: "the jail helper did not place pid 1 in the run's cgroups".to_string(),
        }
        .into());
    };
    limits::join_self_v1(&word.join)?;
    // The sides' cgroups, opened while their host paths are still in view.
    let sides = match &word.sides {
        Some(s) => OpenSides::open(s)?,
        None => OpenSides::default(),
    };
    marks.mark("cgroups");
    rootfs::switch_root()?;
    // A run without sides is rooted in pid 1's cgroup. With sides, each side's first
    // process unshares its own once it is in its cgroup (`unshare_side`): pid 1 stays in
    // the host's cgroup namespace, since under `nsdelegate` (systemd's cgroup2 mount) the
    // kernel refuses to place a process in a cgroup outside the placer's namespace root,
    // and the sides are siblings of pid 1's `init`, not below it.
    if !spec.gateway {
        namespaces::unshare_cgroup()?;
    }
    // Joined before anything of the run starts; `lo` is up in it already.
    net.enter()?;
    namespaces::set_hostname(&spec.run_id)?;
    limits::apply_rlimits(&spec.limits, word.nproc)?;
    nix::unistd::setsid().map_err(|e| SandboxError::errno("setsid", e))?;
    let mut keep = vec![status.raw(), life_r.as_raw_fd(), notify.as_raw_fd()];
    keep.extend(gateway.as_ref().map(AsRawFd::as_raw_fd));
    keep.extend(sides.raw_fds());
    keep.extend(
        image_command
            .iter()
            .chain(&image_agent)
            .map(AsRawFd::as_raw_fd),
    );
    fds::close_all_except(&keep)?;
    init::block_signals()?;
    marks.mark("pivot");
    // The command side first, before the agent's Landlock domain exists: the runner's own
    // domain is then a sibling of the agent's, never nested under it.
    let OpenSides {
        agent: agent_fds,
        command: command_fds,
        handover,
    } = sides;
    let runner = match (spec.gateway, gateway) {
        (false, _) => None,
        (true, Some(gateway)) => Some(command_side::start(
            spec,
            status,
            notify.as_raw_fd(),
            &command_fds,
            command_side::Handed {
                gateway,
                handover,
                image: image_command,
            },
            marks.spec_at(),
        )?),
        (true, None) => {
            return Err(SandboxError::Invalid {
                step: "start the gateway",
                why: "the spec asks for a gateway but the helper has no --gateway-fd".into(),
            }
            .into())
        }
    };
    if runner.is_some() {
        marks.mark("command side forked");
    }

    let (go_r, go_w) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| SandboxError::errno("start pipe", e))?;
    // With a command side, the agent's own: a workflow role's command is on the command side.
    let agent_cgroups = match (spec.gateway, &spec.exec) {
        (false, _) => None,
        (true, Some(_)) => Some(&agent_fds),
        (true, None) => Some(&command_fds),
    };
    // With two sides, the agent side in a pid namespace of its own, whose pid 1 is the
    // agent side's init ([`agent_side`]); otherwise the agent is pid 1's child.
    let forked = limits::clone_into(
        agent_cgroups.and_then(SideFds::v2),
        agent_cgroups.is_some(),
        "fork agent",
    )?;
    match forked {
        Forked::Child { born_in } => {
            drop(go_w);
            drop(life_r);
            let side = agent_side::Side {
                go_r,
                notify: notify.as_raw_fd(),
                marks,
                image: image_agent,
            };
            let err = match agent_cgroups {
                Some(fds) => agent_side::init(spec, status, side, fds, born_in),
                None => agent_alone(spec, status, side),
            };
            status.error(&err);
            // SAFETY: leave without running pid 1's destructors.
            unsafe { libc::_exit(EXIT_SETUP_FAILED) }
        }
        Forked::Parent { child, .. } => {
            drop((agent_fds, command_fds, notify, image_agent));
            drop(go_r);
            let ready = identity::reduce_init().and_then(|()| match runner {
                Some(r) => r.wait_ready(),
                None => Ok(()),
            });
            if let Err(e) = ready {
                let _ = kill(child, Signal::SIGKILL);
                return Err(e.into());
            }
            // Only now may the agent exec: init no longer has anything worth stealing.
            nix::unistd::write(&go_w, b"g").map_err(|e| SandboxError::errno("start agent", e))?;
            drop(go_w);
            let _ = nix::unistd::close(status.raw());
            Ok(init::reap_until(child, init::forward_to_all))
        }
    }
}

fn helper_gone(life_r: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: life_r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd with a zero timeout.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    rc != 0
}

/// The command side's Landlock rules: system dirs readable and executable, /etc and /proc
/// readable, the workspace, home and scratch spaces writable, a few device nodes, TCP to
/// the gateway only. The spec's jail files live in /etc, so they are readable and never
/// writable or executable.
pub fn command_side_rules(spec: &RunSpec) -> LandlockRules {
    let mut read_exec = existing(&system_dirs());
    if spec.image.is_some() {
        // The image's /opt (its own, read-only): the host's is never in the jail.
        read_exec.extend(existing(&["/opt"]));
    }
    LandlockRules {
        read_exec,
        read_only: existing(&["/etc", "/proc", "/dev"]),
        read_write: writable(spec),
        read_write_noexec: Vec::new(),
        make_sock: socket_dirs(spec),
        connect_tcp: gateway_ports(spec),
        bind_tcp: Vec::new(),
    }
}

/// The agent side's Landlock rules: the same reads and writes as the command side, but
/// execute only on the files of its exec set (the program, its interpreters).
pub fn agent_side_rules(spec: &RunSpec, exec: &ExecAllow) -> LandlockRules {
    let mut read_only = existing(&system_dirs());
    read_only.extend(existing(&["/etc", "/proc", "/dev"]));
    LandlockRules {
        read_exec: exec.programs.clone(),
        read_only,
        read_write: Vec::new(),
        read_write_noexec: writable(spec),
        make_sock: socket_dirs(spec),
        connect_tcp: gateway_ports(spec),
        bind_tcp: Vec::new(),
    }
}

fn existing(v: &[&str]) -> Vec<PathBuf> {
    v.iter().map(PathBuf::from).filter(|p| p.exists()).collect()
}

fn system_dirs() -> Vec<&'static str> {
    SYSTEM_DIRS
        .iter()
        .copied()
        .filter(|d| *d != "/etc")
        .collect()
}

/// Each side's own scratch space (the only places it may make a socket).
const SCRATCH: &[&str] = &["/tmp", "/dev/shm"];

/// Where a side may make unix sockets: its own scratch folders, but not one that holds the
/// workspace or the home below it (a `--workspace /tmp/x`), since a Landlock right given
/// on a folder holds for everything below it and those two are both sides'.
fn socket_dirs(spec: &RunSpec) -> Vec<PathBuf> {
    let shared = [spec.jail_workspace(), spec.jail_home()];
    existing(SCRATCH)
        .into_iter()
        .filter(|d| !shared.iter().any(|s| s.starts_with(d)))
        .collect()
}

/// The run's writable places: workspace, home, scratch, a few device nodes.
fn writable(spec: &RunSpec) -> Vec<PathBuf> {
    let mut v = vec![spec.jail_workspace(), spec.jail_home()];
    v.extend(existing(SCRATCH));
    v.extend(existing(&[
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/tty",
        "/dev/pts",
    ]));
    v
}

fn gateway_ports(spec: &RunSpec) -> Vec<u16> {
    let mut ports = spec.connect_tcp.clone();
    if spec.gateway && !ports.contains(&GATEWAY_PORT) {
        ports.push(GATEWAY_PORT);
    }
    ports
}

/// The agent child of a run without a command side (a connector's jail): its view, then
/// [`agent`]. Returns only on failure.
fn agent_alone(spec: &RunSpec, status: StatusFd, side: agent_side::Side) -> SandboxError {
    if let Some(x) = &spec.exec {
        if let Err(e) = rootfs::agent_view(x) {
            return e;
        }
    }
    match agent(spec, status, side) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// The agent child (its view already made, see [`rootfs::agent_view`]): become the
/// instance and exec. Returns only on failure.
pub fn agent(
    spec: &RunSpec,
    status: StatusFd,
    side: agent_side::Side,
) -> Result<Infallible, SandboxError> {
    let agent_side::Side {
        go_r,
        notify,
        mut marks,
        image: _,
    } = side;
    init::reset_signals()?;
    nix::unistd::setsid().map_err(|e| SandboxError::errno("setsid agent", e))?;
    fds::close_all_except(&[status.raw(), go_r.as_raw_fd(), notify])?;
    if status.raw() > 2 {
        // Closed by the exec itself: end-of-file tells the launcher the agent started.
        fds::set_cloexec(status.raw())?;
    }
    if spec.tty {
        // The launcher's socket at fd 0 takes the master; the slave becomes 0, 1 and 2.
        super::pty::take_terminal(0, spec.uid, spec.gid)?;
    } else if spec.stdio {
        // Stdout is the same socket as stdin.
        nix::unistd::dup2(0, 1).map_err(|e| SandboxError::errno("stdio", e))?;
    }
    fds::give_pipes(&[1, 2], spec.uid, spec.gid)?;
    identity::become_instance(spec.uid, spec.gid)?;
    nix::unistd::chdir(&spec.jail_workspace())
        .map_err(|e| SandboxError::errno("chdir workspace", e))?;
    if let Some(state) = &spec.home_state {
        // Only the agent's first-run screens are at stake: say so and start it anyway.
        match super::home_state::apply(&spec.jail_home(), state) {
            Ok(()) => status.info(&format!("home: {} prepared for the agent", state.file)),
            Err(why) => status.info(&format!("home: {} not prepared: {why}", state.file)),
        }
    }

    let rules = match &spec.exec {
        Some(x) => agent_side_rules(spec, x),
        None => command_side_rules(spec),
    };
    let report = landlock::apply(&rules)?;
    marks.mark("agent's uid and Landlock");
    status.info(&match &spec.exec {
        Some(x) => format!(
            "agent side: {report}; exec only {} program(s), {} libraries and {} runtime folders, every other mount noexec, no memfd, {}{}",
            x.programs.len(),
            x.libraries.len(),
            x.trees.len(),
            if namespaces::kernel_has_memfd_noexec() {
                "memfd exec off"
            } else {
                "no memfd on the command side either (no vm.memfd_noexec before Linux 6.3)"
            },
            if spec.gateway {
                "; its own pid, mount and IPC namespaces"
            } else {
                ""
            }
        ),
        None => format!("agent on the command side: {report}"),
    });

    let env_pairs = match spec.exec {
        Some(_) => env::build(spec),
        None => env::build_command_side(spec),
    };
    let envp = env::to_cstrings(&env_pairs)?;
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| SandboxError::Invalid {
            step: "exec",
            why: "an argument contains a NUL byte".to_string(),
        })?;
    let path = env_pairs
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(env::JAIL_PATH);
    let candidates = env::program_candidates_on(&spec.argv[0], path);

    // A program on the command side (a workflow role's command) gets that side's filter.
    let listener = seccomp::install(match spec.exec {
        Some(_) => seccomp::Side::Agent,
        None => seccomp::Side::Command,
    })?;
    listen_notify::send_listener(notify, listener)?;
    marks.mark("seccomp");
    // The agent is set up while pid 1 reduces itself; it execs only once pid 1 is done.
    let mut go = [0u8; 1];
    let went = std::fs::File::from(go_r).read_exact(&mut go);
    if went.is_err() || go != *b"g" {
        return Err(SandboxError::Invalid {
            step: "start agent",
            why: "pid 1 did not finish its own setup".to_string(),
        });
    }
    // The word comes once the command side is ready and pid 1 has reduced itself.
    marks.mark("go");
    // The jail's setup cost as benches/jail.sh reports it: helper start to the agent's exec.
    status.info(&marks.line(Instant::now()));
    let mut last = nix::errno::Errno::ENOENT;
    for prog in &candidates {
        match nix::unistd::execve(prog, &argv, &envp) {
            Ok(never) => match never {},
            Err(e) => {
                // Keep the most telling error: EACCES beats ENOENT, like execvp.
                if e != nix::errno::Errno::ENOENT || last == nix::errno::Errno::ENOENT {
                    last = e;
                }
            }
        }
    }
    Err(SandboxError::errno("exec agent program", last))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sandbox::spec::JAIL_FILE_DIRS;

    #[test]
    fn landlock_lets_the_agent_read_its_jail_files_and_nothing_more() {
        let spec = RunSpec {
            ..crate::sandbox::spec::tests::sample()
        };
        let rules = command_side_rules(&spec);
        let covers =
            |v: &[PathBuf], p: &str| v.iter().any(|r| std::path::Path::new(p).starts_with(r));
        for d in JAIL_FILE_DIRS {
            let f = format!("{d}/file");
            assert!(covers(&rules.read_only, &f), "{f} not readable");
            assert!(!covers(&rules.read_write, &f), "{f} writable");
            assert!(!covers(&rules.read_exec, &f), "{f} executable");
        }
    }
}
