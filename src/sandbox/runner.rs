//! The command side of a run: a runner that pid 1 starts before the agent, as the instance
//! uid with no capabilities, under the run's seccomp filter and a Landlock domain of its
//! own (a sibling of the agent's: neither can ptrace, signal or read the other). It takes
//! commands only from the supervisor, over a socket the agent never holds, and runs each
//! one exactly as decided: the dequoted argv, no shell, the program found on the jail's
//! fixed PATH, a clean environment, a timeout and bounded output.
//!
//! Each command gets a shepherd process, a child subreaper: every process the command
//! starts (double-forked ones included) ends up its descendant, and it kills them all when
//! the command exits, times out or is cancelled (the supervisor closed its result socket).
//! The shepherd writes the result to the socket that came with the request and exits.
//!
//! Where the supervisor sends the command's own cgroup with the request
//! ([`command_cgroup`](super::command_cgroup)), the command joins it before it execs and
//! the shepherd ends it whole with `cgroup.kill`: its sweep of its children is then only
//! the reaping. The supervisor kills the cgroup again when the call is over, so even a
//! shepherd that could not do its part (killed, out of memory) leaves nothing behind.

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, signal, SigHandler, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use serde::{Deserialize, Serialize};

use super::landlock::ExecScope;
use super::{env, fdpass, fds};

/// The port the run's gateway listens on, on 127.0.0.1 of the run's own network namespace
/// (nothing else listens there, and Landlock lets the run bind no port).
pub const GATEWAY_PORT: u16 = 4180;

/// Largest request the runner reads; argv is bounded far below this by the bash lexer.
pub const MAX_REQUEST_BYTES: usize = 256 << 10;

/// Bytes of each output stream a result keeps: the first half and the last half.
pub const MAX_STREAM_BYTES: usize = 64 << 10;

/// One command, as the supervisor decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRequest {
    pub argv: Vec<String>,
    /// Absolute, inside the workspace or home (checked by the gateway).
    pub cwd: PathBuf,
    pub timeout_ms: u64,
    /// Variables set for this command over the run's own (same name: this one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
    /// Command-line git config for this command, numbered after the run's own
    /// `GIT_CONFIG_COUNT` entries (git reads the last of a key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git_config: Vec<(String, String)>,
    /// When set, the command (and all it starts) may execute only files at or beneath
    /// these paths ([`super::landlock::scope_exec_only`]); otherwise what the command
    /// side may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_only: Option<Vec<PathBuf>>,
}

/// What came of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    /// `None` when the command was killed by a signal or never started.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// Some output was left out (its middle), see [`MAX_STREAM_BYTES`].
    pub truncated: bool,
    pub duration_ms: u64,
    /// Why the command did not start (no such program, bad cwd); no values echoed.
    pub error: Option<String>,
}

/// Where a runner's commands run.
pub enum Route {
    /// Here, but for a command with an exec limit: that one goes to the noexec runner
    /// over this socket ([`noexec_view`](super::noexec_view)), and is never run here.
    Exec(OwnedFd),
    /// Here, every one: this is the noexec runner.
    Noexec,
}

/// Whether a request is one for the noexec runner. One that does not parse runs nowhere
/// but in its shepherd, which answers that it is not a valid command.
fn has_exec_limit(bytes: &[u8]) -> bool {
    serde_json::from_slice::<CommandRequest>(bytes).is_ok_and(|r| r.exec_only.is_some())
}

/// The runner's loop: one request (with its result socket) per message, until the
/// supervisor's end closes. `envp` is the run's own environment for every command.
///
/// The next command's shepherd is forked ahead: a spare that waits for the next request
/// on the channel itself, so a command waits neither for the runner's fork nor for a hand
/// over from the runner (one process woken per call, not two). The runner waits until the
/// spare has taken a request (or is gone), then forks the next one at once, so that it is
/// ready by the next call even when the host's cores are busy; it takes a request itself only when it has no spare (its fork failed), and forks
/// for it on the spot.
pub fn serve(channel: OwnedFd, envp: Vec<CString>, roots: Vec<PathBuf>, route: Route) -> i32 {
    // Shepherds are reaped by the kernel: the runner never waits for one.
    // SAFETY: SIG_IGN installs no handler code.
    let _ = unsafe { signal(Signal::SIGCHLD, SigHandler::SigIgn) };
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    loop {
        if let Some(taken) = fork_spare(&channel, &envp, &roots, &route) {
            match spare_left(&taken) {
                SpareLeft::Took => continue,
                SpareLeft::ChannelEnded(code) => return code,
            }
        }
        let (n, fds) = match fdpass::recv(channel.as_fd(), &mut buf) {
            Ok((0, _)) => return 0,
            Ok(m) => m,
            // Too large: its descriptors were closed with it, which answers the caller.
            Err(Errno::EMSGSIZE) => continue,
            Err(_) => return 1,
        };
        if fds.is_empty() {
            continue;
        }
        let Some(fds) = route_here(&route, &buf[..n], fds) else {
            continue;
        };
        // SAFETY: the runner is single-threaded, so the child may run any code; it
        // _exits.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                drop(channel);
                run_request(&buf[..n], fds, &envp, &roots, Ahead::default())
            }
            // The descriptors are the shepherd's now; the runner's copies go.
            Ok(ForkResult::Parent { .. }) => {}
            Err(e) => {
                let result = CommandResult {
                    error: Some(fork_failed(e)),
                    ..Default::default()
                };
                if let Some(reply) = fds.into_iter().next() {
                    let _ = write_result(reply, &result);
                }
            }
        }
    }
}

/// The request's descriptors back when it runs here; None when it went to the noexec
/// runner (or was answered, failing closed, because that one is gone).
fn route_here(route: &Route, bytes: &[u8], fds: Vec<OwnedFd>) -> Option<Vec<OwnedFd>> {
    let Route::Exec(noexec) = route else {
        return Some(fds);
    };
    if !has_exec_limit(bytes) {
        return Some(fds);
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    if fdpass::send(noexec.as_fd(), bytes, &raw).is_err() {
        // Fail closed: never run here what must run without exec on the run's writable
        // mounts.
        let result = CommandResult {
            error: Some("the runner for commands with an exec limit is gone".into()),
            ..Default::default()
        };
        if let Some(reply) = fds.into_iter().next() {
            let _ = write_result(reply, &result);
        }
    }
    None
}

/// How a spare left the runner's wait: it took a request (or died: either way the next
/// one is forked), or the channel ended (the runner ends, with this code).
#[derive(Debug, PartialEq, Eq)]
enum SpareLeft {
    Took,
    ChannelEnded(i32),
}

/// Wait on a spare's socket: it closes it once it has taken a request, or writes the
/// runner's exit code when the supervisor's channel ended.
fn spare_left(taken: &OwnedFd) -> SpareLeft {
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(taken.as_raw_fd(), &mut b) {
            Err(Errno::EINTR) => continue,
            Ok(1) => return SpareLeft::ChannelEnded(i32::from(b[0] != b'0')),
            _ => return SpareLeft::Took,
        }
    }
}

/// Fork a spare shepherd: it takes the next request off the channel, runs it and exits;
/// the socket returned tells the runner when it took one ([`spare_left`]). None when the
/// fork fails (the command side at its process limit).
fn fork_spare(
    channel: &OwnedFd,
    envp: &[CString],
    roots: &[PathBuf],
    route: &Route,
) -> Option<OwnedFd> {
    let (ours, theirs) = fdpass::pair(nix::sys::socket::SockType::SeqPacket).ok()?;
    // SAFETY: the runner is single-threaded, so the child may run any code; it _exits.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(ours);
            // The command's Landlock domain as most commands have it (no exec limit), made
            // while there is nothing to wait for.
            let guarded = [
                std::process::id() as i32,
                1,
                nix::unistd::getppid().as_raw(),
            ];
            let ahead = Ahead {
                scope: super::landlock::ExecScope::build(None, &guarded).ok(),
                ready: Ready::make(),
            };
            spare(channel, theirs, envp, roots, route, ahead)
        }
        Ok(ForkResult::Parent { .. }) => Some(ours),
        Err(_) => None,
    }
}

/// In a spare: take one request off the channel and run it.
fn spare(
    channel: &OwnedFd,
    taken: OwnedFd,
    envp: &[CString],
    roots: &[PathBuf],
    route: &Route,
    ahead: Ahead,
) -> ! {
    let leave = |code: &[u8]| -> ! {
        let _ = nix::unistd::write(&taken, code);
        // SAFETY: leave without running the runner's destructors.
        unsafe { libc::_exit(0) }
    };
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    loop {
        let (n, fds) = match fdpass::recv(channel.as_fd(), &mut buf) {
            Ok((0, _)) => leave(b"0"),
            Ok(m) => m,
            Err(Errno::EMSGSIZE) => continue,
            Err(_) => leave(b"1"),
        };
        if fds.is_empty() {
            continue;
        }
        // The channel is the runner's: the shepherd and its command do not keep it.
        let _ = nix::unistd::close(channel.as_raw_fd());
        // Taken: the runner forks the next spare now.
        drop(taken);
        let Some(fds) = route_here(route, &buf[..n], fds) else {
            // SAFETY: leave without running the runner's destructors.
            unsafe { libc::_exit(0) }
        };
        run_request(&buf[..n], fds, envp, roots, ahead)
    }
}

/// In a shepherd: run the request whose message is `bytes` (its descriptors: the result
/// socket, then the command's cgroup.procs and cgroup.kill when the supervisor made one),
/// write its result and exit. `ahead`: what a spare made before the request came.
fn run_request(
    bytes: &[u8],
    fds: Vec<OwnedFd>,
    envp: &[CString],
    roots: &[PathBuf],
    ahead: Ahead,
) -> ! {
    let mut fds = fds.into_iter();
    let Some(reply) = fds.next() else {
        // No result socket: nobody to answer (callers never send one without).
        // SAFETY: leave without running the runner's destructors.
        unsafe { libc::_exit(1) }
    };
    let cgroup = match <[OwnedFd; 2]>::try_from(fds.collect::<Vec<_>>()) {
        Ok([procs, kill]) => Some(Cgroup { procs, kill }),
        Err(_) => None,
    };
    let result = match serde_json::from_slice::<CommandRequest>(bytes) {
        Ok(req) => {
            let envp = env::with_command_env(envp, &req.env, &req.git_config);
            shepherd(&req, &reply, cgroup.as_ref(), &envp, roots, ahead)
        }
        Err(_) => CommandResult {
            error: Some("the request is not a valid command".into()),
            ..Default::default()
        },
    };
    let code = i32::from(write_result(reply, &result).is_err());
    // SAFETY: leave without running the runner's destructors.
    unsafe { libc::_exit(code) }
}

/// What a spare makes while it waits for its request, off the command's path.
#[derive(Default)]
struct Ahead {
    /// The Landlock domain of a command without an exec limit.
    scope: Option<ExecScope>,
    ready: Option<Ready>,
}

/// A shepherd made ready: a child subreaper that waits for its children, with the
/// command's output pipes and the stack its child uses until it execs.
struct Ready {
    out: (OwnedFd, OwnedFd),
    err: (OwnedFd, OwnedFd),
    stack: Vec<u8>,
}

impl Ready {
    /// None when a step fails (the shepherd then says which, as it tries them again).
    fn make() -> Option<Ready> {
        // SAFETY: SIG_DFL installs no handler code; the shepherd waits for its children.
        let _ = unsafe { signal(Signal::SIGCHLD, SigHandler::SigDfl) };
        // SAFETY: prctl with an integer argument.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return None;
        }
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok();
        let (out, err) = (pipe()?, pipe()?);
        Some(Ready {
            out,
            err,
            stack: vec![0u8; CHILD_STACK],
        })
    }
}

/// A command's own cgroup, as its shepherd holds it.
struct Cgroup {
    procs: OwnedFd,
    kill: OwnedFd,
}

impl Cgroup {
    fn kill(&self) {
        let _ = nix::unistd::write(&self.kill, b"1");
    }
}

/// Why a fork for a command failed, as the agent is told.
fn fork_failed(e: Errno) -> String {
    match e {
        Errno::EAGAIN => "the runner could not start the command: fork failed: process limit (the command side has as many processes as it may)".into(),
        Errno::ENOMEM => "the runner could not start the command: fork failed: out of memory".into(),
        e => format!("the runner could not start the command (fork failed: {})", e.desc()),
    }
}

fn write_result(reply: OwnedFd, result: &CommandResult) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(result).map_err(std::io::Error::other)?;
    std::fs::File::from(reply).write_all(&bytes)
}

/// Keeps the first and the last half of [`MAX_STREAM_BYTES`] of a stream.
#[derive(Default)]
struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: u64,
}

impl Capture {
    const HALF: usize = MAX_STREAM_BYTES / 2;

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = Self::HALF.saturating_sub(self.head.len());
        let take = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        self.tail.extend_from_slice(bytes);
        // Amortized: trim only once the tail holds twice what it keeps.
        if self.tail.len() > 2 * Self::HALF {
            let cut = self.tail.len() - Self::HALF;
            self.tail.drain(..cut);
        }
    }

    fn finish(mut self) -> (String, bool) {
        if self.tail.len() > Self::HALF {
            let cut = self.tail.len() - Self::HALF;
            self.tail.drain(..cut);
        }
        let kept = (self.head.len() + self.tail.len()) as u64;
        let truncated = kept < self.total;
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if truncated {
            text.push_str(&format!(
                "\n[airlock: {} bytes of output left out]\n",
                self.total - kept
            ));
        }
        text.push_str(&String::from_utf8_lossy(&self.tail));
        (text, truncated)
    }
}

/// Run one command to its end as a subreaper; everything it started is dead on return.
fn shepherd(
    req: &CommandRequest,
    reply: &OwnedFd,
    cgroup: Option<&Cgroup>,
    envp: &[CString],
    roots: &[PathBuf],
    ahead: Ahead,
) -> CommandResult {
    let started = Instant::now();
    let fail = |why: String| CommandResult {
        error: Some(why),
        exit_code: Some(127),
        duration_ms: ms(started.elapsed()),
        ..Default::default()
    };
    let runner = nix::unistd::getppid().as_raw();
    let Ahead { scope, ready } = ahead;
    let Some(Ready {
        out: (out_r, out_w),
        err: (err_r, err_w),
        mut stack,
    }) = ready.or_else(Ready::make)
    else {
        return fail("the runner could not become a subreaper or make its pipes".into());
    };
    let Some(program) = req.argv.first() else {
        return fail("empty command".into());
    };
    if program.contains('/') || program.is_empty() {
        return fail("the program must be a bare name, looked up on the jail's PATH".into());
    }
    let argv: Vec<CString> = match req
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect()
    {
        Ok(v) => v,
        Err(_) => return fail("an argument contains a NUL byte".into()),
    };
    let Ok(cwd) = CString::new(req.cwd.as_os_str().as_encoded_bytes()) else {
        return fail("the working directory contains a NUL byte".into());
    };
    let roots: Vec<Vec<u8>> = roots
        .iter()
        .map(|r| r.as_os_str().as_encoded_bytes().to_vec())
        .collect();
    // The environment's PATH (the image's, when the side has one), trusted folders only.
    let path = envp
        .iter()
        .find_map(|kv| kv.to_bytes().strip_prefix(b"PATH="))
        .and_then(|p| std::str::from_utf8(p).ok())
        .unwrap_or(env::JAIL_PATH);
    let candidates = env::program_candidates_on(program, path);
    // The command's own Landlock domain: it keeps the command from signalling or tracing
    // its shepherd (this process: the child's parent), the runner (pid 1 of the command
    // side's pid namespace) and the noexec runner (the shepherd's parent, when the command
    // is one of its). Made here, entered by the child.
    let scope = match (scope, req.exec_only.as_deref()) {
        (Some(s), None) => s,
        (_, exec_only) => {
            let guarded = [std::process::id() as i32, 1, runner];
            match ExecScope::build(exec_only, &guarded) {
                Ok(s) => s,
                // Which step and why (a kernel without Landlock, a rule refused): no value
                // of the request's is in it.
                Err(e) => return fail(format!("the command could not start: {e}")),
            }
        }
    };
    // Why the child could not exec, written by it into this (shared) memory before it
    // _exits; left 0 when it exec'd. No pipe to make and read: the shepherd resumes only
    // once the child has exec'd or exited.
    let exec_errno = std::sync::atomic::AtomicI32::new(0);
    // Everything the child needs, made here: it shares this process's memory until it
    // execs, so it allocates nothing.
    let nul_ended = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (argv_p, envp_p) = (nul_ended(&argv), nul_ended(envp));
    let child_main = Box::new(|| {
        let errno = exec_child(
            &argv_p,
            &scope,
            &cwd,
            &roots,
            &candidates,
            &envp_p,
            cgroup.map(|c| &c.procs),
            &out_w,
            &err_w,
        );
        exec_errno.store(
            if errno == 0 { libc::EIO } else { errno },
            std::sync::atomic::Ordering::SeqCst,
        );
        // SAFETY: leave without running any destructor (the memory is the shepherd's).
        unsafe { libc::_exit(127) }
    });
    // The command's process shares the shepherd's memory and the shepherd waits until it
    // has exec'd or failed (vfork's semantics, on a stack of its own): no copy of the
    // shepherd's page tables to make and tear down again at exec, on the path of every
    // command. It has its own descriptors, cwd, credentials and signal dispositions.
    // SAFETY: the shepherd is single-threaded and suspended until the child execs or
    // _exits; the child runs exec_child, which makes system calls only, on `stack`.
    let cloned = unsafe {
        nix::sched::clone(
            child_main,
            &mut stack,
            nix::sched::CloneFlags::CLONE_VM | nix::sched::CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    };
    let child = match cloned {
        Err(e) => return fail(fork_failed(e)),
        Ok(child) => child,
    };
    drop(stack);
    drop((out_w, err_w));
    let failed = exec_errno.load(std::sync::atomic::Ordering::SeqCst);
    if failed != 0 {
        let _ = waitpid(child, None);
        kill_descendants(cgroup);
        let errno = Errno::from_raw(failed);
        return fail(match errno {
            Errno::ENOENT => "no such program on the jail's PATH".to_string(),
            Errno::EXDEV => {
                "the working directory resolves outside the workspace and the home".to_string()
            }
            e => format!("the command could not start: {}", e.desc()),
        });
    }
    let deadline = started + Duration::from_millis(req.timeout_ms);
    let mut out = Capture::default();
    let mut err = Capture::default();
    let (status, timed_out, open) =
        watch(child, &out_r, &err_r, reply, deadline, &mut out, &mut err);
    kill_descendants(cgroup);
    // Every writer is dead now: drain what is left in the pipes not at their end yet.
    if open[0] {
        drain(&out_r, &mut out);
    }
    if open[1] {
        drain(&err_r, &mut err);
    }
    let (stdout, t1) = out.finish();
    let (stderr, t2) = err.finish();
    let (exit_code, signal) = match status {
        Some(WaitStatus::Exited(_, c)) => (Some(c), None),
        Some(WaitStatus::Signaled(_, s, _)) => (None, Some(s as i32)),
        _ => (None, Some(libc::SIGKILL)),
    };
    CommandResult {
        exit_code,
        signal,
        stdout,
        stderr,
        timed_out,
        truncated: t1 || t2,
        duration_ms: ms(started.elapsed()),
        error: None,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The command's stack until it execs (it uses a few KiB).
const CHILD_STACK: usize = 256 << 10;

/// In the command's child: its own cgroup (when it has one: failing closed), its own
/// process group and session, stdio, cwd (resolved by the kernel, it must still be inside
/// one of `roots`: a symlink does not lead out), a Landlock domain of its own (`scope`)
/// that keeps it from signalling or tracing its shepherd, exec. System calls only: it
/// shares the shepherd's memory. `argv` and `envp` end with a null pointer. Returns the
/// errno of the failure (EXDEV: the cwd resolved outside).
#[allow(clippy::too_many_arguments)]
fn exec_child(
    argv: &[*const libc::c_char],
    scope: &ExecScope,
    cwd: &CString,
    roots: &[Vec<u8>],
    candidates: &[CString],
    envp: &[*const libc::c_char],
    cgroup_procs: Option<&OwnedFd>,
    out_w: &OwnedFd,
    err_w: &OwnedFd,
) -> i32 {
    if let Some(procs) = cgroup_procs {
        match nix::unistd::write(procs, b"0") {
            Ok(1) => {}
            Ok(_) => return libc::EIO,
            Err(e) => return e as i32,
        }
    }
    let _ = nix::unistd::setsid();
    // SAFETY: plain fd and path syscalls on descriptors and strings we own.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        if null < 0
            || libc::dup2(null, 0) < 0
            || libc::dup2(out_w.as_raw_fd(), 1) < 0
            || libc::dup2(err_w.as_raw_fd(), 2) < 0
        {
            return Errno::last_raw();
        }
        // The command gets 0, 1 and 2 only (the escape battery found this one open).
        if null > 2 {
            libc::close(null);
        }
        if libc::chdir(cwd.as_ptr()) != 0 {
            return Errno::last_raw();
        }
    }
    let mut at = [0u8; libc::PATH_MAX as usize];
    // SAFETY: getcwd writes at most `at.len()` bytes, NUL included, into `at`.
    if unsafe { libc::getcwd(at.as_mut_ptr().cast(), at.len()) }.is_null() {
        return libc::ENOENT;
    }
    let Ok(real) = std::ffi::CStr::from_bytes_until_nul(&at) else {
        return libc::ENOENT;
    };
    let real = real.to_bytes();
    let inside = roots.iter().any(|r| {
        real.starts_with(r) && (real.len() == r.len() || real.get(r.len()) == Some(&b'/'))
    });
    if !inside {
        return libc::EXDEV;
    }
    if scope.enter().is_err() {
        return libc::EPERM;
    }
    let mut last = Errno::ENOENT;
    for prog in candidates {
        // SAFETY: NUL-terminated strings and null-ended arrays of them, alive here.
        unsafe { libc::execve(prog.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        let e = Errno::last();
        if e != Errno::ENOENT || last == Errno::ENOENT {
            last = e;
        }
    }
    last as i32
}

/// Read both pipes until the command exits, the deadline passes or the supervisor
/// cancels (closes `reply`). Returns the command's status (None when it had to be killed),
/// whether the deadline ended it, and which pipes (out, err) were not at their end.
fn watch(
    child: Pid,
    out_r: &OwnedFd,
    err_r: &OwnedFd,
    reply: &OwnedFd,
    deadline: Instant,
    out: &mut Capture,
    err: &mut Capture,
) -> (Option<WaitStatus>, bool, [bool; 2]) {
    let pidfd = fds::pidfd_open(child.as_raw()).ok();
    let mut open = [true, true];
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return (stop(child), true, open);
        }
        let wait = deadline - now;
        let pfd = |fd: RawFd, events: libc::c_short| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let mut fds = [
            pfd(if open[0] { out_r.as_raw_fd() } else { -1 }, libc::POLLIN),
            pfd(if open[1] { err_r.as_raw_fd() } else { -1 }, libc::POLLIN),
            pfd(pidfd.as_ref().map_or(-1, |p| p.as_raw_fd()), libc::POLLIN),
            pfd(reply.as_raw_fd(), libc::POLLRDHUP),
        ];
        // Without a pidfd, look for the exit a few times a second.
        let cap = if pidfd.is_some() { 60_000 } else { 50 };
        let timeout = wait.as_millis().min(cap) as libc::c_int;
        // SAFETY: poll on an array of valid (or negative, ignored) pollfds.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if rc < 0 && Errno::last() != Errno::EINTR {
            return (stop(child), false, open);
        }
        for (i, (fd, cap)) in [(out_r, &mut *out), (err_r, &mut *err)]
            .into_iter()
            .enumerate()
        {
            if open[i] && fds[i].revents != 0 {
                match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
                    Ok(0) | Err(_) => open[i] = false,
                    Ok(n) => cap.push(&buf[..n]),
                }
            }
        }
        if fds[3].revents != 0 {
            return (stop(child), false, open);
        }
        if pidfd.is_none() || fds[2].revents != 0 {
            match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(ws) => return (Some(ws), false, open),
                Err(Errno::EINTR) => {}
                Err(_) => return (None, false, open),
            }
        }
    }
}

/// Kill the command's group and the command, and reap it.
fn stop(child: Pid) -> Option<WaitStatus> {
    let _ = kill(Pid::from_raw(-child.as_raw()), Signal::SIGKILL);
    let _ = kill(child, Signal::SIGKILL);
    loop {
        match waitpid(child, None) {
            Err(Errno::EINTR) => continue,
            Ok(ws) => return Some(ws),
            Err(_) => return None,
        }
    }
}

/// Kill every remaining descendant: the command's cgroup whole, where it has one. As a
/// subreaper the shepherd inherits each orphan, so killing (and reaping) its children
/// until none is left reaches the whole tree, however it forked. Its children are read
/// from its own /proc/self/task/TID/children, which shows every child, a non-dumpable one
/// too (hidepid hides those from /proc/PID); it never blocks on a wait.
fn kill_descendants(cgroup: Option<&Cgroup>) {
    if let Some(c) = cgroup {
        c.kill();
    }
    loop {
        // Reap whatever is dead; no child at all means nothing of the command is left.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => return,
            }
        }
        match own_children() {
            Some(kids) => {
                for pid in kids {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            // Not readable: never taken for "none". The cgroup (killed again) holds every
            // one of them; without one, nothing more can be found from here (the run's end
            // kills the rest).
            None => match cgroup {
                Some(c) => c.kill(),
                None => return,
            },
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The shepherd's children (it is single-threaded: its one task's list); None when the
/// list cannot be read.
fn own_children() -> Option<Vec<i32>> {
    let me = std::process::id();
    std::fs::read_to_string(format!("/proc/self/task/{me}/children"))
        .ok()
        .map(|s| parse_children(&s))
}

fn parse_children(s: &str) -> Vec<i32> {
    s.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Read a pipe whose writers are all gone, to end of file (bounded by time, in case one
/// is not).
fn drain(fd: &OwnedFd, cap: &mut Capture) {
    let end = Instant::now() + Duration::from_millis(500);
    let mut buf = vec![0u8; 16 << 10];
    while Instant::now() < end {
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 100) } <= 0 {
            return;
        }
        match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => cap.push(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_keeps_head_and_tail() {
        let mut c = Capture::default();
        c.push(b"short");
        assert_eq!(c.finish(), ("short".to_string(), false));
        let mut c = Capture::default();
        let big: Vec<u8> = (0..MAX_STREAM_BYTES * 3)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        for chunk in big.chunks(1000) {
            c.push(chunk);
        }
        let (text, truncated) = c.finish();
        assert!(truncated);
        let half = MAX_STREAM_BYTES / 2;
        assert!(text.starts_with(std::str::from_utf8(&big[..half]).unwrap()));
        assert!(text.ends_with(std::str::from_utf8(&big[big.len() - half..]).unwrap()));
        assert!(text.contains(&format!(
            "{} bytes of output left out",
            big.len() - 2 * half
        )));
    }

    #[test]
    fn a_spare_tells_the_runner_it_took_a_request_or_that_the_channel_ended() {
        let pair = || fdpass::pair(nix::sys::socket::SockType::SeqPacket).unwrap();
        // Closed (started its command, or died): the runner forks the next spare.
        let (runner, spare) = pair();
        drop(spare);
        assert_eq!(spare_left(&runner), SpareLeft::Took);
        // The supervisor's channel ended: the runner ends with the spare's code.
        for (byte, code) in [(b"0", 0), (b"1", 1)] {
            let (runner, spare) = pair();
            nix::unistd::write(&spare, byte).unwrap();
            assert_eq!(spare_left(&runner), SpareLeft::ChannelEnded(code));
        }
    }

    #[test]
    fn the_children_list_is_read_as_pids() {
        assert_eq!(parse_children("12 13 400 \n"), vec![12, 13, 400]);
        assert_eq!(parse_children(""), Vec::<i32>::new());
    }
}
