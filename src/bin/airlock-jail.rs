//! airlock-jail: the single-threaded jail helper. The supervisor spawns it (never forks
//! itself) with the run spec as JSON on stdin; it builds the jail, execs the agent, watches
//! the run and exits with the agent's exit code. The part of the jail that is the same for
//! every run is built while the spec is still on its way (to end of file), so a launcher
//! may start a helper before it knows the run.
//!
//! ```text
//! airlock-jail [--status-fd N] [--lifeline-fd M] [--gateway-fd G] [--stdio-fd S] [--end-fd E] [--run-id ID [--cgroup-parent DIR]] [--idle] < spec.json
//! ```
//!
//! - `--status-fd N` (default 2): where setup reports go (`INFO ...` lines, one `ERR ...`
//!   line on failure); end-of-file means the agent was exec'd. N >= 2.
//! - `--lifeline-fd M` (optional, M >= 3, M != N): the read end of a pipe whose write end
//!   only the launcher holds (close-on-exec in the launcher, never passed to other
//!   children). When it reports hang-up the launcher is gone and the helper kills the run
//!   at once. Without it the helper still notices its launcher's death through
//!   `PR_SET_PDEATHSIG` plus a `getppid()` check, which only fires when the thread that
//!   spawned the helper dies; a multi-threaded launcher should pass a lifeline.
//! - `--gateway-fd G` (optional, G >= 3, distinct): a unix seqpacket socket to the
//!   launcher. A spec with `gateway: true` needs it: pid 1 sends over it, in one message,
//!   the run's gateway listener (127.0.0.1 in the run's network namespace) and the
//!   channel to the run's command runner.
//! - `--stdio-fd S` (optional, S >= 3, distinct): a socket that becomes the program's
//!   stdin and stdout; a spec with `stdio: true` needs it, and no other spec takes it.
//! - `--end-fd E` (optional, E >= 3, distinct): a pipe to the launcher on which the
//!   helper tells, before it removes the run's cgroups, what their counters say of the
//!   run's end (`OOM_KILL run=N agent=N cmd=N`: processes the OOM killer ended). Until
//!   the helper reads them it is closed at once, and the launcher reads end of file.
//! - `--run-id ID` and `--cgroup-parent DIR` (optional): the run the helper is started
//!   for, when the launcher knows it ahead of the spec. The helper then makes the run's
//!   cgroups while it waits, and refuses a spec for another run.
//! - `--idle` (optional): build what comes before the spec under SCHED_IDLE, put back
//!   under SCHED_OTHER when the spec comes (a jail kept warm by airlockd).
//!
//! The run's deadline (`limits.deadline_ms`, grace `limits.grace_ms`) is enforced here, so
//! it holds even when the launcher's own watcher is gone.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use airlock::sandbox::spec::{valid_cgroup_parent, valid_run_id};
use airlock::sandbox::status::StatusFd;
use airlock::sandbox::{fds, helper, watch, SandboxError};

const USAGE: &str = "usage: airlock-jail [--status-fd N] [--lifeline-fd M] [--gateway-fd G] [--stdio-fd S] [--end-fd E] [--run-id ID [--cgroup-parent DIR]] [--idle] < spec.json";

struct Args {
    status: i32,
    lifeline: Option<i32>,
    gateway: Option<i32>,
    stdio: Option<i32>,
    end: Option<i32>,
    run_id: Option<String>,
    cgroup_parent: Option<PathBuf>,
    idle: bool,
}

fn main() {
    let start = Instant::now();
    // Before anything else: a stop request or the launcher's death signal that arrives
    // during setup is queued for the watch loop instead of killing the helper midway.
    let blocked = watch::block_helper_signals();
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Some(a) => a,
        None => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let status = StatusFd(args.status);
    let code = match blocked.and_then(|()| prepare(&args, start)) {
        Ok(launch) => helper::run(status, launch),
        Err(e) => {
            status.error(&e);
            helper::EXIT_SETUP_FAILED
        }
    };
    std::process::exit(code);
}

fn parse_args(args: Vec<String>) -> Option<Args> {
    let mut out = Args {
        status: 2,
        lifeline: None,
        gateway: None,
        stdio: None,
        end: None,
        run_id: None,
        cgroup_parent: None,
        idle: false,
    };
    let mut it = args.into_iter();
    let mut seen_status = false;
    while let Some(flag) = it.next() {
        if flag == "--idle" && !out.idle {
            out.idle = true;
            continue;
        }
        let value = it.next()?;
        let fd = || value.parse::<i32>().ok();
        match flag.as_str() {
            "--status-fd" if !seen_status => {
                out.status = fd().filter(|n| *n >= 2)?;
                seen_status = true;
            }
            "--lifeline-fd" if out.lifeline.is_none() => {
                out.lifeline = Some(fd().filter(|n| *n >= 3)?);
            }
            "--gateway-fd" if out.gateway.is_none() => {
                out.gateway = Some(fd().filter(|n| *n >= 3)?);
            }
            "--stdio-fd" if out.stdio.is_none() => {
                out.stdio = Some(fd().filter(|n| *n >= 3)?);
            }
            "--end-fd" if out.end.is_none() => {
                out.end = Some(fd().filter(|n| *n >= 3)?);
            }
            "--run-id" if out.run_id.is_none() && valid_run_id(&value) => {
                out.run_id = Some(value);
            }
            "--cgroup-parent"
                if out.cgroup_parent.is_none() && valid_cgroup_parent(Path::new(&value)) =>
            {
                out.cgroup_parent = Some(PathBuf::from(value));
            }
            _ => return None,
        }
    }
    let same = |a: Option<i32>, b: Option<i32>| a.is_some() && a == b;
    if same(out.lifeline, Some(out.status))
        || same(out.gateway, Some(out.status))
        || same(out.gateway, out.lifeline)
        || same(out.stdio, Some(out.status))
        || same(out.stdio, out.lifeline)
        || same(out.stdio, out.gateway)
        || same(out.end, Some(out.status))
        || same(out.end, out.lifeline)
        || same(out.end, out.gateway)
        || same(out.end, out.stdio)
        || (out.cgroup_parent.is_some() && out.run_id.is_none())
    {
        return None;
    }
    Some(out)
}

fn invalid(step: &'static str, why: &str) -> SandboxError {
    SandboxError::Invalid {
        step,
        why: why.to_string(),
    }
}

fn prepare(args: &Args, start: Instant) -> Result<helper::Launch, SandboxError> {
    // Armed first: from here on the launcher's death ends the run.
    let launcher = watch::arm_parent_death()?;
    let mut keep = vec![args.status];
    keep.extend(args.lifeline);
    keep.extend(args.gateway);
    keep.extend(args.stdio);
    keep.extend(args.end);
    // Nothing the launcher leaked (directory fds, sockets) may reach the jail.
    fds::close_all_except(&keep)?;
    let lifeline = take_fd(
        args.lifeline,
        "lifeline fd",
        "--lifeline-fd is not an open fd",
    )?;
    let gateway = take_fd(args.gateway, "gateway fd", "--gateway-fd is not an open fd")?;
    let stdio = take_fd(args.stdio, "stdio fd", "--stdio-fd is not an open fd")?;
    // Where the run's cgroup counters go before the cgroups are removed (`--end-fd`).
    let end = take_fd(args.end, "end fd", "--end-fd is not an open fd")?;
    if !nix::unistd::geteuid().is_root() {
        return Err(invalid("start helper", "airlock-jail must run as root"));
    }
    let threads = std::fs::read_dir("/proc/self/task")
        .map_err(|e| SandboxError::sys("start helper", e))?
        .count();
    if threads != 1 {
        return Err(invalid(
            "start helper",
            "the helper must be single-threaded",
        ));
    }
    Ok(helper::Launch {
        launcher,
        lifeline,
        gateway,
        stdio,
        start,
        ahead: args.run_id.clone().map(|run_id| helper::Ahead {
            run_id,
            cgroup_parent: args.cgroup_parent.clone(),
        }),
        end,
        idle: args.idle,
    })
}

/// Own a descriptor the launcher passed by number, close-on-exec from now on. A number that
/// is not an open fd is refused rather than used for nothing.
fn take_fd(
    fd: Option<i32>,
    step: &'static str,
    why: &str,
) -> Result<Option<OwnedFd>, SandboxError> {
    let Some(fd) = fd else {
        return Ok(None);
    };
    // SAFETY: fcntl(F_GETFD) on an fd number only queries it.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(invalid(step, why));
    }
    fds::set_cloexec(fd)?;
    // SAFETY: the fd is open, was handed to us by the launcher, and nothing else in this
    // process owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}
