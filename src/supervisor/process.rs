//! The one launch path shared by airlockd and `airlockctl launch --standalone`: spawn the
//! single-threaded `airlock-jail` helper (never a fork of the caller, which may be a
//! multi-threaded daemon), pump its output into sinks with bounded buffers, enforce the
//! deadline and stop requests on the monotonic clock (SIGTERM, grace, SIGKILL), and kill
//! whatever is left of the run at the end.
//!
//! [`supervise`] is a task on the caller's tokio runtime (airlockd's one runtime for every
//! run, or a standalone launch's own): the helper's pidfd, status pipe, gateway socket and
//! output pipes are waited on by the runtime, and what must block (the sinks' journal
//! writes, the final cgroup clean-up) goes to its bounded blocking pool. A run costs no
//! thread of its own.

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::socket::SockType;
use std::os::fd::AsFd;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::time::Instant;

use super::launch::LaunchError;
use super::run_end::{EndPipe, Teardown};
use super::spawn::{spawn_process, Child};
use crate::gateway::GatewayFds;
use crate::sandbox::command_cgroup::CommandCgroups;
use crate::sandbox::helper::Ahead;
use crate::sandbox::limits;
use crate::sandbox::sides::CommandSideFds;
use crate::sandbox::spec::RunSpec;
use crate::sandbox::status::{self, StatusReport};
use crate::sandbox::{command_side, fdpass};

/// How often the supervisor looks for the helper's exit on a kernel without pidfds.
const TICK: Duration = Duration::from_millis(100);

/// Where one output stream of the run goes. Called on the runtime's blocking pool, one
/// chunk at a time and in order, so it may block (a journal write); the agent waits on
/// its full pipe meanwhile.
pub trait OutputSink: Send {
    /// A chunk read from the agent, in order.
    fn data(&mut self, bytes: &[u8]);
    /// End of the stream.
    fn finish(&mut self) {}
}

/// Deadline, grace period and stop requests of one run, shared with whoever may stop it.
#[derive(Debug)]
pub struct RunControl {
    pub deadline: Option<Duration>,
    pub grace: Duration,
    stop: Mutex<Option<String>>,
    /// Wakes the run's supervision when a stop is asked for.
    asked: tokio::sync::Notify,
}

impl RunControl {
    pub fn new(deadline: Option<Duration>, grace: Duration) -> RunControl {
        RunControl {
            deadline,
            grace,
            stop: Mutex::new(None),
            asked: tokio::sync::Notify::new(),
        }
    }

    /// Ask for the run to end (SIGTERM, grace, SIGKILL). The first reason is kept; returns
    /// whether this request was the first.
    pub fn request_stop(&self, reason: &str) -> bool {
        let mut s = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_some() {
            return false;
        }
        *s = Some(reason.to_string());
        // A permit is kept when nobody waits yet: the supervision sees it at its next wait.
        self.asked.notify_one();
        true
    }

    /// Until a stop is asked for (at once when one was).
    async fn stop_asked(&self) {
        while self.stop_reason().is_none() {
            self.asked.notified().await;
        }
    }

    pub fn stop_reason(&self) -> Option<String> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Why the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// On its own (or killed by something other than airlock).
    Exited,
    /// The deadline passed and airlock ended it.
    DeadlineReached,
    /// Someone asked airlock to stop it (the reason given with the request).
    Stopped(String),
}

/// Things worth logging as they happen.
#[derive(Debug)]
pub enum Milestone<'a> {
    /// The jail is built (or failed): what it reported on the status pipe.
    Setup(&'a StatusReport),
    /// The deadline passed: SIGTERM sent.
    DeadlineReached,
    /// A stop request was acted on: SIGTERM sent.
    Stopping(&'a str),
    /// The grace period passed: SIGKILL sent.
    Killing,
    /// The jail handed over its gateway listener and command runner: serve them now.
    Gateway(GatewayFds),
}

/// How a supervised run ended.
#[derive(Debug, Clone)]
pub struct Supervised {
    /// The jail's status: its error decides the outcome; its infos were handed to
    /// `Milestone::Setup` as they came and are not kept here.
    pub report: StatusReport,
    /// The agent's exit code, shell style: 128 + signal when it was killed.
    pub exit_code: i32,
    /// The signal that ended the run, when one did (the agent's, or the helper's own).
    pub signal: Option<i32>,
    pub ending: Ending,
    /// The final kill of whatever was left of the run failed: processes of it may live.
    pub cleanup_error: Option<String>,
    /// What the OOM killer did in the run, as the helper read it from the run's cgroups
    /// just before removing them (empty from a helper that does not tell).
    pub oom: OomKills,
}

/// Where a run's own program (its argv) ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MainSide {
    /// The agent side (an agent role's program, contained).
    Agent,
    /// The command side (a workflow role's command).
    Command,
    /// A run without sides (a stdio connector's jail): the whole run.
    #[default]
    Whole,
}

impl MainSide {
    pub fn of(spec: &RunSpec) -> MainSide {
        match (spec.exec.is_some(), spec.gateway) {
            (true, _) => MainSide::Agent,
            (false, true) => MainSide::Command,
            (false, false) => MainSide::Whole,
        }
    }
}

/// Processes the OOM killer ended in a run: each cgroup's `oom_kill` counter (v2
/// `memory.events`, v1 `memory.oom_control`), read by the helper before it removes them.
/// `None`: not told (no such cgroup, no memory controller, or an older helper).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OomKills {
    /// The run's own cgroup: every side and pid 1 (the counter is hierarchical).
    pub run: Option<u64>,
    /// The agent side's cgroup.
    pub agent: Option<u64>,
    /// The command side's cgroup.
    pub command: Option<u64>,
    /// Which side ran the run's own program.
    pub main: MainSide,
}

/// The line the helper writes on its `--end-fd` before it removes the run's cgroups:
/// `OOM_KILL` then `run=N`, `agent=N`, `cmd=N` (each optional, in any order), `\n`.
pub const END_OOM_KILL: &str = "OOM_KILL";

impl OomKills {
    /// Parse what the helper wrote on its end pipe. Anything else is ignored: the end
    /// pipe only ever adds detail to a run's outcome, never decides it.
    pub fn parse(text: &str, main: MainSide) -> OomKills {
        let mut o = OomKills {
            main,
            ..OomKills::default()
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some(END_OOM_KILL) {
                continue;
            }
            for w in words {
                let Some((k, v)) = w.split_once('=') else {
                    continue;
                };
                let Ok(n) = v.parse::<u64>() else { continue };
                match k {
                    "run" => o.run = Some(n),
                    "agent" => o.agent = Some(n),
                    "cmd" => o.command = Some(n),
                    _ => {}
                }
            }
        }
        o
    }

    /// Processes of the side that ran the run's own program the OOM killer ended: that
    /// side's counter, or the whole run's where the side's is not known.
    pub fn main_side(&self) -> Option<u64> {
        match self.main {
            MainSide::Agent => self.agent.or(self.run),
            MainSide::Command => self.command.or(self.run),
            MainSide::Whole => self.run,
        }
    }

    /// Processes of the whole run the OOM killer ended.
    pub fn total(&self) -> Option<u64> {
        self.run.or(match (self.agent, self.command) {
            (None, None) => None,
            (a, c) => Some(a.unwrap_or(0).saturating_add(c.unwrap_or(0))),
        })
    }
}

/// A started jail helper, its pipes, and its pidfd.
pub struct Spawned {
    child: Child,
    pidfd: Option<OwnedFd>,
    status: fs::File,
    stdin: Option<fs::File>,
    stdout: Option<fs::File>,
    stderr: Option<fs::File>,
    /// Write end of the helper's lifeline: while this process holds it the run lives; if
    /// this process dies, the kernel closes it and the helper kills the run.
    lifeline: OwnedFd,
    /// The run it was started for, whose cgroups it makes while it waits.
    ahead: Option<Ahead>,
    /// Our end of the helper's gateway socket: pid 1 sends the run's gateway listener and
    /// command runner channel on it.
    gateway: OwnedFd,
    /// Read end of the helper's end pipe (`--end-fd`): what it read of the run's cgroups
    /// before removing them ([`END_OOM_KILL`]), read once the helper has exited.
    end: fs::File,
    /// The run's spec, encoded ahead by [`Spawned::encode_spec`]; else it is encoded when
    /// it is sent.
    encoded: Option<Vec<u8>>,
    /// The state directory's note of this helper, removed with it ([`ahead_marks`]).
    ///
    /// [`ahead_marks`]: super::ahead_marks
    mark: Option<super::ahead_marks::Mark>,
}

impl Spawned {
    /// Keep the state directory's note of this helper ([`ahead_marks::Mark`], made before
    /// it started) until the helper is done with.
    ///
    /// [`ahead_marks::Mark`]: super::ahead_marks::Mark
    pub fn keep_mark(&mut self, mark: super::ahead_marks::Mark) {
        self.mark = Some(mark);
    }

    /// Whether the helper is still running (it may wait a while for its spec).
    pub fn alive(&mut self) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: poll on one valid pollfd with a zero timeout; a pidfd turns
                // readable when its process exits.
                unsafe { libc::poll(&mut pfd, 1, 0) == 0 }
            }
            None => matches!(self.child.try_wait(), Ok(None)),
        }
    }

    /// Encode the spec this helper is to be sent now, so the caller can let go of what
    /// only the jail needs (the files it writes into the jail) instead of holding it for
    /// the run's life. False when it cannot be encoded: it is then encoded, and the error
    /// told, when it is sent.
    pub fn encode_spec(&mut self, spec: &RunSpec) -> bool {
        self.encoded = serde_json::to_vec(spec).ok();
        self.encoded.is_some()
    }

    /// The helper's pid (in airlockd's pid namespace).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Give up a helper that was never handed a spec (the launch was refused after it was
    /// started): it has run nothing, so killing and reaping it is all there is to do.
    pub fn abandon(self) {
        let Spawned {
            mut child,
            pidfd,
            ahead,
            mark,
            ..
        } = self;
        match &pidfd {
            Some(fd) => pidfd_signal(fd, libc::SIGKILL),
            None => child.kill(),
        }
        let _ = child.wait();
        // Killed, it could not remove the cgroups it made for its run (its pid 1 died with
        // it, so they are empty or soon will be).
        if let Some(a) = ahead {
            let _ = limits::RunCgroups::existing(a.cgroup_parent.as_deref(), &a.run_id)
                .kill_and_remove();
        }
        drop(mark);
    }
}

fn jail_binary() -> Result<PathBuf, LaunchError> {
    let exe = std::env::current_exe().map_err(|e| LaunchError::Io(format!("current_exe: {e}")))?;
    let jail = exe
        .parent()
        .map(|d| d.join("airlock-jail"))
        .ok_or_else(|| LaunchError::Io("cannot locate airlock-jail".into()))?;
    if !jail.is_file() {
        return Err(LaunchError::Io(format!(
            "{}: the jail helper is not installed next to this binary",
            jail.display()
        )));
    }
    Ok(jail)
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    crate::sandbox::fds::pidfd_open(pid as libc::pid_t).ok()
}

fn pidfd_signal(fd: &OwnedFd, sig: libc::c_int) {
    // SAFETY: raw syscall on a pidfd we own; a dead process yields ESRCH, ignored.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// Start a jail helper before its run is decided. It builds the part of the jail that is
/// the same for every run, then waits for the spec on its stdin, which only [`supervise`]
/// writes: so a caller can overlap the helper's start with recording the run, and still
/// start nothing of the run before the record is durable. A helper that is not supervised
/// must be [`Spawned::abandon`]ed (or dies with its launcher, through its lifeline).
///
/// `stdio`: a socket that becomes the program's stdin and stdout (a stdio connector).
pub fn spawn_helper(
    ahead: Option<&Ahead>,
    stdio: Option<&OwnedFd>,
) -> Result<Spawned, LaunchError> {
    spawn(ahead, stdio, false)
}

/// [`spawn_helper`] for a jail kept warm: it builds under SCHED_IDLE until its
/// run's spec comes (`airlock-jail --idle`).
pub fn spawn_warm_helper(ahead: &Ahead) -> Result<Spawned, LaunchError> {
    spawn(Some(ahead), None, true)
}

fn spawn(
    ahead: Option<&Ahead>,
    stdio: Option<&OwnedFd>,
    idle: bool,
) -> Result<Spawned, LaunchError> {
    let jail = jail_binary()?;
    let pipe = |what: &str| {
        nix::unistd::pipe2(OFlag::O_CLOEXEC)
            .map_err(|e| LaunchError::Io(format!("{what} pipe: {e}")))
    };
    let (in_r, in_w) = pipe("stdin")?;
    let (out_r, out_w) = pipe("stdout")?;
    let (err_r, err_w) = pipe("stderr")?;
    let (st_r, st_w) = pipe("status")?;
    let (life_r, life_w) = pipe("lifeline")?;
    let (end_r, end_w) = pipe("end")?;
    let (gw_ours, gw_theirs) = fdpass::pair(SockType::SeqPacket)
        .map_err(|e| LaunchError::Io(format!("gateway socket: {e}")))?;
    let mut args = vec![
        "--status-fd",
        "3",
        "--lifeline-fd",
        "4",
        "--gateway-fd",
        "5",
        "--end-fd",
        "7",
    ];
    if stdio.is_some() {
        args.extend(["--stdio-fd", "6"]);
    }
    if idle {
        args.push("--idle");
    }
    if let Some(a) = ahead {
        args.extend(["--run-id", a.run_id.as_str()]);
        if let Some(p) = a.cgroup_parent.as_ref().and_then(|p| p.to_str()) {
            args.extend(["--cgroup-parent", p]);
        }
    }
    let mut fds = vec![
        (in_r.as_raw_fd(), 0),
        (out_w.as_raw_fd(), 1),
        (err_w.as_raw_fd(), 2),
        (st_w.as_raw_fd(), 3),
        (life_r.as_raw_fd(), 4),
        (gw_theirs.as_raw_fd(), 5),
        (end_w.as_raw_fd(), 7),
    ];
    fds.extend(stdio.map(|s| (s.as_raw_fd(), 6)));
    let child = spawn_process(&jail, &args, &fds).map_err(|e| {
        LaunchError::Io(format!(
            "{}: cannot start the jail helper: {e}",
            jail.display()
        ))
    })?;
    // The child's ends: only the helper may hold them, or EOFs would never come.
    drop((in_r, out_w, err_w, st_w, life_r, gw_theirs, end_w));
    let pidfd = pidfd_open(child.id());
    Ok(Spawned {
        child,
        pidfd,
        status: fs::File::from(st_r),
        stdin: Some(fs::File::from(in_w)),
        stdout: Some(fs::File::from(out_r)),
        stderr: Some(fs::File::from(err_r)),
        lifeline: life_w,
        ahead: ahead.cloned(),
        gateway: gw_ours,
        end: fs::File::from(end_r),
        encoded: None,
        mark: None,
    })
}

/// Most bytes of status read from the helper; the rest is not read.
const MAX_STATUS: usize = 1 << 20;

/// The helper's status pipe, read as it comes until EOF.
struct StatusPipe {
    /// `None` once EOF (or the cap) is reached.
    pipe: Option<pipe::Receiver>,
    text: Vec<u8>,
}

impl StatusPipe {
    /// Read what is there (waiting for it). True when the status is complete.
    async fn read_some(&mut self) -> bool {
        let Some(p) = self.pipe.as_mut() else {
            return false;
        };
        if p.readable().await.is_err() {
            self.pipe = None;
            return true;
        }
        let mut buf = vec![0u8; 4096];
        let done = match p.try_read(&mut buf) {
            Ok(0) => true,
            Ok(n) => {
                self.text.extend_from_slice(&buf[..n]);
                self.text.len() >= MAX_STATUS
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                false
            }
            Err(_) => true,
        };
        if done {
            self.pipe = None;
        }
        done
    }

    /// Read to EOF (every writer is gone by now). False when the status was already taken.
    async fn read_rest(&mut self) -> bool {
        let Some(p) = self.pipe.take() else {
            return false;
        };
        let room = MAX_STATUS.saturating_sub(self.text.len()) as u64;
        let _ = p.take(room).read_to_end(&mut self.text).await;
        true
    }

    fn report(&mut self) -> StatusReport {
        // Taken once: the raw lines are not kept for the rest of the run.
        let mut bytes = std::mem::take(&mut self.text);
        bytes.truncate(MAX_STATUS);
        // Not UTF-8 is not a status the helper sends: parse nothing from it.
        let text = std::str::from_utf8(&bytes).unwrap_or_default();
        status::parse(text)
    }
}

/// Take the jail's gateway hand-over once the socket is readable: one message with the
/// listener and the runner's channel. `Err(())` when nothing is there yet (a spurious
/// wake-up); `Ok(None)` when the socket closed or sent something else (the run then has
/// no gateway; its agent finds nothing listening).
fn take_gateway(sock: &OwnedFd) -> Result<Option<GatewayFds>, ()> {
    let mut buf = [0u8; 8];
    let (n, mut fds) = match fdpass::recv(sock.as_fd(), &mut buf) {
        Ok(x) => x,
        Err(nix::errno::Errno::EAGAIN) => return Err(()),
        Err(_) => return Ok(None),
    };
    let Some(tags) = buf[..n].strip_prefix(command_side::HANDOVER) else {
        return Ok(None);
    };
    if fds.len() < 2 {
        return Ok(None);
    }
    let Some(cgroups) = CommandSideFds::from_tagged(tags, fds.split_off(2)) else {
        return Ok(None);
    };
    let runner = fds.pop();
    let listener = fds.pop();
    Ok(listener.zip(runner).map(|(listener, runner)| GatewayFds {
        listener,
        runner,
        commands: CommandCgroups::new(cgroups),
    }))
}

/// Bytes read from the agent's pipes at a time: a flooding agent blocks on its full pipe
/// while a chunk is written. The buffer exists only while output flows, so a quiet run
/// holds none.
const CHUNK: usize = 16 * 1024;

/// Copy one of the helper's output pipes into `sink` until EOF: a read on the runtime,
/// then the sink's write on the blocking pool, chunk after chunk.
fn pump(from: fs::File, sink: Box<dyn OutputSink>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let from = pipe::Receiver::from_file(from)?;
    Ok(tokio::spawn(async move {
        let mut sink = sink;
        loop {
            if from.readable().await.is_err() {
                break;
            }
            let mut buf = vec![0u8; CHUNK];
            let n = match from.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e)
                    if e.kind() == std::io::ErrorKind::Interrupted
                        || e.kind() == std::io::ErrorKind::WouldBlock =>
                {
                    continue
                }
                Err(_) => break,
            };
            let wrote = tokio::task::spawn_blocking(move || {
                sink.data(&buf[..n]);
                sink
            })
            .await;
            match wrote {
                Ok(back) => sink = back,
                // The sink panicked: nothing more can be written through it.
                Err(_) => return,
            }
        }
        let _ = tokio::task::spawn_blocking(move || sink.finish()).await;
    }))
}

/// `fd` waited on by the current runtime for readability.
fn watch(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd owns its descriptor until it is dropped, which is when the
    // AsyncFd holding it is.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
}

/// Until `fd` (when there is one) is readable; never, without one.
async fn readable(
    fd: Option<&AsyncFd<OwnedFd>>,
) -> Option<tokio::io::unix::AsyncFdReadyGuard<'_, OwnedFd>> {
    match fd {
        Some(fd) => fd.readable().await.ok(),
        None => std::future::pending().await,
    }
}

/// Until `at`, when there is one; never, without one.
async fn until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Kill anything of the run that is still alive and remove its cgroups. The run's pid
/// namespace already died with its pid 1 (the helper kills it on every exit path); this
/// is for cgroups a SIGKILLed helper left behind. Never kills by uid: another run of the
/// same instance may be alive.
/// An error means processes of the run may still be alive: the caller records it.
pub fn backstop(spec: &RunSpec) -> Result<(), String> {
    limits::RunCgroups::existing(spec.cgroup_parent.as_deref(), &spec.run_id)
        .kill_and_remove()
        .map_err(|e| e.to_string())
}

/// Host pids whose real uid is `uid`.
pub fn pids_of_uid(uid: u32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
                })
                == Some(uid)
        })
        .collect()
}

fn exit_of(status: &ExitStatus) -> (i32, Option<i32>) {
    match (status.code(), status.signal()) {
        (Some(c), _) => exit_of_code(c),
        (None, Some(s)) => (128 + s, Some(s)),
        (None, None) => (125, None),
    }
}

/// The helper passes on the agent's status shell style: above 128 is a signal.
fn exit_of_code(c: i32) -> (i32, Option<i32>) {
    if c > 128 && c <= 128 + 64 {
        (c, Some(c - 128))
    } else {
        (c, None)
    }
}

/// Run a spawned jail to its end, as a task of the caller's runtime. `on` hears about
/// milestones as they happen (it runs on the runtime: it must not block for long). The
/// whole run is killed before this returns, its cgroups are removed, and both output
/// streams are drained.
pub async fn supervise(
    spec: &RunSpec,
    sp: Spawned,
    ctl: &RunControl,
    stdout: Box<dyn OutputSink>,
    stderr: Box<dyn OutputSink>,
    on: &mut (dyn FnMut(Milestone<'_>) + Send),
) -> Result<Supervised, LaunchError> {
    let (mut s, teardown) = supervise_until_end(spec, sp, ctl, stdout, stderr, on).await?;
    if let Some(t) = teardown {
        s.cleanup_error = t.finish().await.err();
    }
    Ok(s)
}

/// [`supervise`] until the run has ended: every process of it is gone and both output
/// streams are drained. When the helper told the end before exiting, what is left (its
/// exit, the cgroups' removal) comes back as a [`Teardown`] for the caller to finish once
/// it has recorded and answered the run's end.
pub async fn supervise_until_end(
    spec: &RunSpec,
    sp: Spawned,
    ctl: &RunControl,
    stdout: Box<dyn OutputSink>,
    stderr: Box<dyn OutputSink>,
    on: &mut (dyn FnMut(Milestone<'_>) + Send),
) -> Result<(Supervised, Option<Teardown>), LaunchError> {
    let Spawned {
        mut child,
        pidfd,
        status,
        stdin,
        stdout: out_pipe,
        stderr: err_pipe,
        // Held until the helper has exited: the run lives while we supervise it.
        lifeline,
        ahead: _,
        gateway,
        end,
        encoded,
        // Until the run has ended: by then its ledger record is there for crash recovery.
        mark: _mark,
    } = sp;
    let spec_json = match encoded.map_or_else(|| serde_json::to_vec(spec), Ok) {
        Ok(j) => j,
        Err(e) => {
            // The helper got no spec and ran nothing: reap it.
            child.kill();
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
            return Err(LaunchError::Io(format!("encode spec: {e}")));
        }
    };
    let started = Instant::now();
    let mut pumps = Vec::new();
    let mut started_pumps = Ok(());
    for (pipe, sink) in [(out_pipe, stdout), (err_pipe, stderr)] {
        if let Some(pipe) = pipe {
            match pump(pipe, sink) {
                Ok(h) => pumps.push(h),
                Err(e) => started_pumps = Err(LaunchError::Io(format!("output pipe: {e}"))),
            }
        }
    }
    // The gateway socket is read only when the runtime says it is readable.
    let gateway = nix::fcntl::fcntl(
        gateway.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
    )
    .map_err(std::io::Error::from)
    .and_then(|_| watch(gateway));
    let status_pipe = pipe::Receiver::from_file(status);
    let (mut gateway, status_pipe) = match (started_pumps, gateway, status_pipe) {
        (Ok(()), Ok(g), Ok(s)) => (Some(g), s),
        (Err(e), ..) => return Err(abort_start(spec, child, e).await),
        (_, Err(e), _) | (_, _, Err(e)) => {
            let e = LaunchError::Io(format!("the jail helper's pipes: {e}"));
            return Err(abort_start(spec, child, e).await);
        }
    };
    // Without it (out of descriptors) the run's end is known at the helper's exit, as before.
    let mut end = EndPipe::new(pipe::Receiver::from_file(end).ok());

    // The status pipe reaches EOF when the agent is exec'd or setup failed. It is read in
    // the loop below, so the jail's report is told while the run goes on, not after it.
    let mut status = StatusPipe {
        pipe: Some(status_pipe),
        text: Vec::new(),
    };
    if let Some(stdin) = stdin {
        // A helper that died early closes its end; its status line says why. Dropped
        // after writing: the helper reads its spec to end of file.
        if let Ok(mut w) = pipe::Sender::from_file(stdin) {
            let _ = w.write_all(&spec_json).await;
        }
    }
    // Sent: not held for the run's life (kilobytes per live run).
    drop(spec_json);

    // Without one (an old kernel, or out of descriptors), the helper is looked at each TICK.
    let pidfd = pidfd.and_then(|fd| watch(fd).ok());
    let mut report: Option<StatusReport> = None;
    let mut ending = Ending::Exited;
    let mut term_at: Option<Instant> = None;
    let mut killed = false;
    let deadline = ctl.deadline.map(|d| started + d);
    let signal = |sig: libc::c_int, child: &Child| match &pidfd {
        Some(fd) => pidfd_signal(fd.get_ref(), sig),
        None if sig == libc::SIGKILL => child.kill(),
        None => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    };
    let waited = loop {
        let kill_at = term_at.filter(|_| !killed).map(|t| t + ctl.grace);
        tokio::select! {
            // In this order: a helper that told the end and exited since is taken at its
            // word, so the answer does not wait for the backstop.
            biased;
            // The helper reaped pid 1 and told the exit code: nothing of the run runs.
            told = end.read_some(), if end.open() => {
                if let Some(code) = told {
                    break Ok(Ended::Told(code));
                }
            }
            // The helper exited (or, without a pidfd, it is time to look).
            _ = readable(pidfd.as_ref()) => {
                match child.try_wait() {
                    Ok(Some(st)) => break Ok(Ended::Exited(st)),
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
            }
            _ = tokio::time::sleep(TICK), if pidfd.is_none() => {
                match child.try_wait() {
                    Ok(Some(st)) => break Ok(Ended::Exited(st)),
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
            }
            done = status.read_some(), if status.pipe.is_some() => {
                if done {
                    let mut r = status.report();
                    on(Milestone::Setup(&r));
                    // Told now; for the rest of the run only its error decides anything.
                    r.infos = Vec::new();
                    report = Some(r);
                }
            }
            guard = readable(gateway.as_ref()), if gateway.is_some() => {
                let taken = match (guard, gateway.as_ref()) {
                    (Some(mut g), Some(sock)) => match take_gateway(sock.get_ref()) {
                        Err(()) => {
                            g.clear_ready();
                            continue;
                        }
                        Ok(fds) => fds,
                    },
                    _ => None,
                };
                // One message, or the socket closed: either way it is done with.
                gateway = None;
                match taken {
                    Some(fds) => on(Milestone::Gateway(fds)),
                    // Fail closed: a run that asked for a gateway does not go on without it.
                    None if spec.gateway => {
                        ctl.request_stop("the jail handed over no gateway");
                    }
                    None => {}
                }
            }
            _ = ctl.stop_asked(), if term_at.is_none() => {
                let reason = ctl.stop_reason().unwrap_or_default();
                on(Milestone::Stopping(&reason));
                ending = Ending::Stopped(reason);
                signal(libc::SIGTERM, &child);
                term_at = Some(Instant::now());
            }
            _ = until(deadline), if term_at.is_none() && deadline.is_some() => {
                on(Milestone::DeadlineReached);
                ending = Ending::DeadlineReached;
                signal(libc::SIGTERM, &child);
                term_at = Some(Instant::now());
            }
            _ = until(kill_at), if kill_at.is_some() => {
                on(Milestone::Killing);
                signal(libc::SIGKILL, &child);
                killed = true;
            }
        }
    };
    // Whatever is left (double-forked processes, a stuck init) dies now, which also closes
    // every copy of the pipes so the pumps and the status reader reach EOF. A helper that
    // told the end has let go of its copies, and its pid 1 is reaped: the backstop waits
    // for its exit, after the run's end is answered.
    let cleanup_error = match &waited {
        Ok(Ended::Told(_)) => None,
        _ => cleanup(spec).await.err(),
    };
    for h in pumps {
        let _ = h.await;
    }
    let report = match report {
        Some(r) => r,
        None => {
            // Every writer is gone now, so this reads to EOF without waiting long.
            let r = match status.read_rest().await {
                true => status.report(),
                false => StatusReport {
                    infos: Vec::new(),
                    error: Some("the jail helper sent no status".to_string()),
                },
            };
            on(Milestone::Setup(&r));
            r
        }
    };
    let ended = waited.map_err(|e| LaunchError::Io(format!("wait for the jail helper: {e}")))?;
    if let (Ended::Exited(_), Some(fd)) = (&ended, end.take_fd()) {
        end.text.push_str(&read_end(fs::File::from(fd)));
    }
    let oom = OomKills::parse(&end.text, MainSide::of(spec));
    let (exit_code, signal, teardown) = match ended {
        Ended::Exited(st) => {
            let (code, signal) = exit_of(&st);
            (code, signal, None)
        }
        Ended::Told(code) => {
            let (code, signal) = exit_of_code(code);
            let teardown = Teardown {
                spec: spec.clone(),
                child,
                pidfd,
                end,
                lifeline,
            };
            (code, signal, Some(teardown))
        }
    };
    Ok((
        Supervised {
            report,
            exit_code,
            signal,
            ending,
            cleanup_error,
            oom,
        },
        teardown,
    ))
}

/// How the supervision loop saw the run end.
enum Ended {
    /// The helper exited.
    Exited(ExitStatus),
    /// The helper told the exit code on its end pipe; it is removing the cgroups.
    Told(i32),
}

/// Most bytes read from the helper's end pipe.
const MAX_END: usize = 4096;

/// What the exited helper left in its end pipe. Never waits: the helper wrote before it
/// exited, and a writer that leaked would otherwise hold the run's end forever.
fn read_end(end: fs::File) -> String {
    use std::io::Read;
    let nonblocking = nix::fcntl::fcntl(
        end.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
    );
    if nonblocking.is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = end.take(MAX_END as u64).read_to_end(&mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// [`backstop`] on the blocking pool (cgroup files).
pub(super) async fn cleanup(spec: &RunSpec) -> Result<(), String> {
    let spec = spec.clone();
    tokio::task::spawn_blocking(move || backstop(&spec))
        .await
        .unwrap_or_else(|_| Err("the clean-up of the run panicked".to_string()))
}

/// The supervision could not start: the helper is killed and reaped (it had no spec yet
/// or just got one) and whatever it made of the run is removed.
async fn abort_start(spec: &RunSpec, mut child: Child, e: LaunchError) -> LaunchError {
    child.kill();
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    match cleanup(spec).await {
        Ok(()) => e,
        Err(b) => LaunchError::Io(format!(
            "{e}; then killing what was left of the run failed ({b}), so processes of the run may still be alive"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_keeps_the_first_reason() {
        let c = RunControl::new(None, Duration::from_secs(1));
        assert_eq!(c.stop_reason(), None);
        assert!(c.request_stop("fired"));
        assert!(!c.request_stop("shutdown"));
        assert_eq!(c.stop_reason().as_deref(), Some("fired"));
    }

    #[test]
    fn the_end_line_gives_each_sides_oom_kills() {
        let o = OomKills::parse("OOM_KILL run=3 agent=1 cmd=2\n", MainSide::Agent);
        assert_eq!((o.run, o.agent, o.command), (Some(3), Some(1), Some(2)));
        assert_eq!((o.main_side(), o.total()), (Some(1), Some(3)));
        let o = OomKills::parse("OOM_KILL cmd=2 bogus x=y agent=z\n", MainSide::Command);
        assert_eq!((o.run, o.agent, o.command), (None, None, Some(2)));
        assert_eq!((o.main_side(), o.total()), (Some(2), Some(2)));
        // The side's counter unknown: the run's stands in.
        let o = OomKills::parse("OOM_KILL run=1", MainSide::Agent);
        assert_eq!(o.main_side(), Some(1));
        // Nothing told, or something else: nothing known.
        for text in ["", "oom_kill 5\n", "OOM_KILLED run=1\n", "\u{0}"] {
            let o = OomKills::parse(text, MainSide::Whole);
            assert_eq!((o.main_side(), o.total()), (None, None), "{text:?}");
        }
    }

    #[test]
    fn the_end_pipe_is_read_without_waiting() {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        // A writer still open: what is there is read, nothing is waited for.
        nix::unistd::write(&w, b"OOM_KILL run=1\n").unwrap();
        assert_eq!(read_end(fs::File::from(r)), "OOM_KILL run=1\n");
        let (r, _w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        assert_eq!(read_end(fs::File::from(r)), "");
    }

    #[test]
    fn exit_codes_shell_style() {
        assert_eq!(exit_of(&ExitStatus::from_raw(7 << 8)), (7, None));
        assert_eq!(exit_of(&ExitStatus::from_raw(137 << 8)), (137, Some(9)));
        assert_eq!(exit_of(&ExitStatus::from_raw(9)), (137, Some(9)));
    }
}
