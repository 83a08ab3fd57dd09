//! `airlockctl launch --standalone` keeps the daemon's records and budgets: the ledger's
//! opening and closing records, the weekly run budget, the run's journal (here the fallback
//! file: journald is pointed nowhere), and it refuses to run beside an airlockd that owns
//! the ledger. Real jails: runs as root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use airlock::supervisor::ledger::{self, LedgerEvent, Outcome};
use serde_json::Value;

static NEXT: AtomicU32 = AtomicU32::new(0);

const DAEMON_OWNS: &str =
    "airlockd is running and owns the ledger: launch through it (drop --standalone)";

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the standalone tests must run as root (they build real jails)"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

struct Env {
    _dir: tempfile::TempDir,
    /// Instance `tess`'s uid.
    uid: u32,
    root: PathBuf,
    cfg: PathBuf,
    state: PathBuf,
    roles: PathBuf,
    /// The role `tess` is hired for.
    role: &'static str,
}

impl Env {
    /// Instance `tess` of role `code` (a copy of the shipped roles, so tests may edit it),
    /// journald pointed at a socket that does not exist.
    fn new() -> Env {
        Env::for_role("code")
    }

    /// Instance `tess` hired for `role`.
    fn for_role(role: &'static str) -> Env {
        Env::with_limits(role, "{max_procs: 64}")
    }

    /// Instance `tess` hired for `role`, under the config's `limits` (a YAML mapping).
    fn with_limits(role: &'static str, limits: &str) -> Env {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let roles = root.join("roles");
        copy_dir(&repo.join("roles"), &roles);
        // Clear of the daemon tests' (1880080000..) and the jail tests' (1880095000..) uids.
        let uid = 1_880_092_000
            + (std::process::id() % 100) * 20
            + NEXT.fetch_add(1, Ordering::SeqCst) % 20;
        let cfg = root.join("airlock.yaml");
        std::fs::write(
            &cfg,
            format!(
                "roles: [{roles}]\npolicies: {policies}\nstate_dir: state\nsocket: {root}/airlockd.sock\njournal_socket: {root}/no-journald.socket\nuid_range: 1880093000-1880093999\nlimits: {limits}\ninstances:\n  tess: {{role: {role}, uid: {uid}}}\n",
                roles = roles.display(),
                policies = repo.join("policies").display(),
                root = root.display(),
            ),
        )
        .unwrap();
        Env {
            uid,
            state: root.join("state"),
            _dir: dir,
            root,
            cfg,
            roles,
            role,
        }
    }

    fn launch(&self, extra: &[&str], argv: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlockctl"))
            .arg("--config")
            .arg(&self.cfg)
            .args(["launch", self.role, "--instance", "tess", "--standalone"])
            .args(extra)
            .args(if argv.is_empty() { None } else { Some("--") })
            .args(argv)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn ledger(&self) -> PathBuf {
        self.state.join(ledger::FILE_NAME)
    }

    /// The closing record of `run`, after checking its opening record.
    fn record(&self, run: &str) -> ledger::RunClosed {
        let records = ledger::records(&self.ledger()).unwrap();
        let opened = records
            .iter()
            .find_map(|r| match &r.event {
                LedgerEvent::RunOpened(o) if o.run == run => Some(o.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no run_opened record for {run}: {records:?}"));
        assert_eq!(opened.instance, "tess");
        assert_eq!(opened.role, self.role);
        assert_eq!(opened.launched_by_uid, 0);
        records
            .iter()
            .find_map(|r| match &r.event {
                LedgerEvent::RunClosed(c) if c.run == run => Some(c.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no run_closed record for {run}"))
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// With --wait the run id is the first line on stderr.
fn run_id_wait(o: &Output) -> String {
    stderr(o)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn a_standalone_run_is_opened_and_closed_in_the_ledger() {
    let env = Env::new();
    let o = env.launch(&["--wait"], &["/bin/sh", "-c", "echo hi; exit 7"]);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(stdout(&o), "hi\n");
    let run = run_id_wait(&o);
    let c = env.record(&run);
    assert_eq!(c.outcome, Outcome::Exited);
    assert_eq!(c.exit_code, Some(7));
    assert_eq!(c.signal, None);

    // Killed by a signal: the same mapping as the daemon's.
    let o = env.launch(&["--wait"], &["/bin/sh", "-c", "kill -9 $$"]);
    assert_eq!(o.status.code(), Some(137), "{}", stderr(&o));
    let c = env.record(&run_id_wait(&o));
    assert_eq!(c.outcome, Outcome::Killed);
    assert_eq!((c.exit_code, c.signal), (Some(137), Some(9)));

    // The deadline: timed out.
    let o = env.launch(&["--wait", "--max-seconds", "1"], &["/bin/sleep", "30"]);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", stderr(&o));
    let c = env.record(&run_id_wait(&o));
    assert_eq!(c.outcome, Outcome::TimedOut);

    // Without --wait: the run id on stdout, the record closed all the same.
    let o = env.launch(&[], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = env.record(stdout(&o).trim());
    assert_eq!((c.outcome, c.exit_code), (Outcome::Exited, Some(0)));

    // An agent program that is not installed: refused before anything starts (its exec
    // set is looked up first), exit 2, and no record is opened for it.
    let records = std::fs::read_to_string(env.ledger())
        .unwrap()
        .lines()
        .count();
    let o = env.launch(&["--wait"], &["no-such-program-xyz"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no such agent program"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(env.ledger())
            .unwrap()
            .lines()
            .count(),
        records
    );

    assert_eq!(ledger::verify(&env.ledger()).unwrap(), 8);
    assert!(ledger::open_runs(&env.ledger()).unwrap().is_empty());
}

/// The shipped smoke role needs no credential, provider or connector: launched without
/// `-- CMD`, `hello` runs its workflow.sh with /bin/sh on the command side, as the
/// instance's uid, and writes its workspace.
#[test]
fn the_shipped_hello_role_runs_its_workflow() {
    let env = Env::for_role("hello");
    let o = env.launch(&["--wait"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id_wait(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("hello from Airlock: run {run}, role hello, instance tess").as_str()),
        "{out}"
    );
    let uid = env.uid;
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("id: uid={uid}(tess) gid="))),
        "not run as the instance's uid: {out}"
    );
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let release = release.trim();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("kernel: Linux ") && l.contains(release)),
        "{out}"
    );
    // The file it wrote, listed, and read back.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("-rw") && l.ends_with(" hello.txt")),
        "{out}"
    );
    assert!(
        lines.contains(&format!("hello from run {run}").as_str()),
        "{out}"
    );
    assert_eq!(lines.last().copied(), Some("hello: done"), "{out}");
    let c = env.record(&run);
    assert_eq!(
        (c.outcome, c.exit_code, c.signal),
        (Outcome::Exited, Some(0), None)
    );

    // `-- CMD` still replaces the workflow, under the same jail.
    let o = env.launch(&["--wait"], &["/bin/sh", "-c", "id -u; exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{uid}\n"));

    // Without its script the role is refused before anything starts, naming the file.
    std::fs::remove_file(env.roles.join("hello/workflow.sh")).unwrap();
    let o = env.launch(&["--wait"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("hello/workflow.sh"), "{}", stderr(&o));
    assert!(stderr(&o).contains("-- CMD"), "{}", stderr(&o));
    assert_eq!(ledger::verify(&env.ledger()).unwrap(), 4);
}

/// Touches 16 MiB at a time until the OOM killer ends it.
const MEMORY_HOG: &str = "h = []\nwhile True:\n    b = bytearray(16 << 20)\n    for i in range(0, len(b), 4096):\n        b[i] = 1\n    h.append(b)\n    print(len(h), flush=True)\n";

/// A run whose own program the OOM killer ends is told as out of memory, not as a bare
/// signal 9: an agent (the agent side's memory) and a workflow's command (the command
/// side's), each under the run's memory limit.
#[test]
fn an_oom_killed_run_is_told_as_out_of_memory() {
    let limits =
        "{max_procs: 64, memory_bytes: 268435456, agent_reserve: {memory_bytes: 134217728}}";
    for (role, side) in [("code", "the agent"), ("hello", "the run's command")] {
        let env = Env::with_limits(role, limits);
        let o = env.launch(&["--wait"], &["/usr/bin/python3", "-c", MEMORY_HOG]);
        assert_eq!(o.status.code(), Some(137), "{role}: {}", stderr(&o));
        // It got somewhere before it was stopped: the limit, not a failure to start.
        assert!(stdout(&o).lines().count() >= 2, "{role}: {}", stdout(&o));
        let c = env.record(&run_id_wait(&o));
        assert_eq!(c.outcome, Outcome::Killed, "{role}");
        assert_eq!((c.exit_code, c.signal), (Some(137), Some(9)), "{role}");
        assert!(
            c.reason.starts_with("killed: out of memory"),
            "{role}: {}",
            c.reason
        );
        assert!(c.reason.contains(side), "{role}: {}", c.reason);
    }
}

#[test]
fn output_lines_land_in_the_fallback_journal_without_journald() {
    let env = Env::new();
    let o = env.launch(
        &[],
        &[
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 5000 ]; do i=$((i+1)); echo $i; done; echo oops >&2",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = stdout(&o).trim().to_string();
    // Without --wait nothing of the agent's reaches our stdout but its run id.
    assert!(!stdout(&o).contains("4999"));
    let text = std::fs::read_to_string(env.state.join(format!("journal/{run}.journal"))).unwrap();
    let mut n = 0u32;
    let mut events = Vec::new();
    let mut stderr_lines = Vec::new();
    for l in text.lines() {
        let j: Value = serde_json::from_str(l).unwrap();
        assert_eq!(j["AIRLOCK_RUN"], run.as_str());
        assert_eq!(j["AIRLOCK_INSTANCE"], "tess");
        assert_eq!(j["AIRLOCK_ROLE"], "code");
        assert_eq!(j["SYSLOG_IDENTIFIER"], "airlockd");
        match j["AIRLOCK_STREAM"].as_str() {
            Some("stdout") => {
                n += 1;
                assert_eq!(j["MESSAGE"], n.to_string(), "line {n} lost or out of order");
            }
            Some("stderr") => stderr_lines.push(j["MESSAGE"].as_str().unwrap().to_string()),
            _ => {}
        }
        if let Some(e) = j["AIRLOCK_EVENT"].as_str() {
            events.push(e.to_string());
        }
    }
    assert_eq!(n, 5000);
    assert_eq!(stderr_lines, ["oops"]);
    assert_eq!(events.first().map(String::as_str), Some("run_started"));
    assert!(events.iter().any(|e| e == "jail_report"), "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("run_exited"));

    // With --wait the output is on the terminal (here a pipe, so exact) and in the journal.
    let o = env.launch(&["--wait"], &["/bin/sh", "-c", "echo both-places"]);
    assert_eq!(stdout(&o), "both-places\n");
    let run = run_id_wait(&o);
    let text = std::fs::read_to_string(env.state.join(format!("journal/{run}.journal"))).unwrap();
    assert!(text.contains("\"MESSAGE\":\"both-places\""), "{text}");

    // `airlockctl logs` reads the standalone run's journal like a daemon run's.
    let logs = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&env.cfg)
        .args(["logs", &run])
        .output()
        .unwrap();
    assert!(
        stdout(&logs).contains("both-places"),
        "{}{}",
        stdout(&logs),
        stderr(&logs)
    );
}

#[test]
fn runs_per_week_refuses_the_standalone_launch_after_the_budget() {
    let env = Env::new();
    let role = env.roles.join("code/role.yaml");
    let text = std::fs::read_to_string(&role).unwrap();
    assert!(text.contains("runs_per_week: 20"));
    std::fs::write(&role, text.replace("runs_per_week: 20", "runs_per_week: 1")).unwrap();
    let o = env.launch(&["--wait"], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = env.launch(&["--wait"], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("runs_per_week") && stderr(&o).contains("1 of its 1"),
        "{}",
        stderr(&o)
    );
    // The refused launch opened no record and created no run directory (and the run that
    // ran left none behind).
    assert_eq!(ledger::records(&env.ledger()).unwrap().len(), 2);
    assert_eq!(
        std::fs::read_dir(env.state.join("runs")).unwrap().count(),
        0
    );
}

#[test]
fn a_standalone_launch_is_refused_while_airlockd_holds_the_ledger() {
    let env = Env::new();
    let err = std::fs::File::create(env.root.join("airlockd.err")).unwrap();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_airlockd"))
        .arg("--config")
        .arg(&env.cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let sock = env.root.join("airlockd.sock");
    let end = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        if let Ok(Some(st)) = daemon.try_wait() {
            panic!(
                "airlockd exited early ({st}): {}",
                std::fs::read_to_string(env.root.join("airlockd.err")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < end, "airlockd never opened its socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = env.launch(&["--wait"], &["/bin/sh", "-c", "echo must-not-run"]);
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(DAEMON_OWNS), "{}", stderr(&o));
    assert!(!stdout(&o).contains("must-not-run"));
    assert!(ledger::records(&env.ledger()).unwrap().is_empty());
}

/// Whoever holds the ledger lock for good (here this test) is taken for airlockd once the
/// launch has waited out what a standalone append would take.
#[test]
fn a_ledger_held_for_good_refuses_the_launch() {
    let env = Env::new();
    std::fs::create_dir_all(&env.state).unwrap();
    let held = ledger::Ledger::open(&env.ledger()).unwrap();
    let o = env.launch(&["--wait"], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(DAEMON_OWNS), "{}", stderr(&o));
    drop(held);
    let o = env.launch(&["--wait"], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// A standalone `--wait` launch whose agent (`/bin/sleep 60`: the agent side may start no
/// other program, so the agent is the one that waits) is running, and its run id.
struct Running {
    child: std::process::Child,
    run: String,
}

impl Env {
    fn ctl(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
        cmd.arg("--config").arg(&self.cfg);
        cmd
    }

    fn start_sleeper(&self) -> Running {
        use std::io::{BufRead, BufReader};
        let mut child = self
            .ctl()
            .args([
                "launch",
                "code",
                "--instance",
                "tess",
                "--standalone",
                "--wait",
            ])
            .args(["--", "/bin/sleep", "60"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut run = String::new();
        err.read_line(&mut run).unwrap();
        // The rest of stderr is drained so the launch never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        self.wait_for_agent("sleep");
        Running {
            child,
            run: run.trim().to_string(),
        }
    }

    /// Waits (bounded, to avoid a hang) until the instance runs a process named `comm`:
    /// the jail is built and the agent is going.
    fn wait_for_agent(&self, comm: &str) {
        let end = Instant::now() + Duration::from_secs(60);
        let running = || {
            airlock::supervisor::process::pids_of_uid(self.uid)
                .iter()
                .any(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == comm)
                })
        };
        while !running() {
            assert!(Instant::now() < end, "the agent {comm} never started");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `airlockctl ARGS` with no daemon running: (exit code, stdout, stderr).
    fn read(&self, args: &[&str]) -> (i32, String, String) {
        let o = self.ctl().args(args).stdin(Stdio::null()).output().unwrap();
        (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
    }
}

/// Waits (bounded, to avoid a hang) until no process runs as `uid`.
fn wait_no_process_of(uid: u32) {
    let end = Instant::now() + Duration::from_secs(30);
    while !airlock::supervisor::process::pids_of_uid(uid).is_empty() {
        assert!(
            Instant::now() < end,
            "processes of uid {uid} outlived their run"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ctrl-C typed on the launch's terminal (a real pseudo-terminal, its controlling
/// terminal): the line discipline sends SIGINT to the foreground process group, and the
/// launch stops the run as `airlockctl stop` does and records why.
#[test]
fn ctrl_c_on_the_terminal_stops_the_run_and_records_it_as_interrupted() {
    use std::io::{Read, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::process::CommandExt;
    use std::sync::{Arc, Mutex};

    let env = Env::new();
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave: OwnedFd = pty.slave;
    let mut cmd = env.ctl();
    cmd.args([
        "launch",
        "code",
        "--instance",
        "tess",
        "--standalone",
        "--wait",
    ])
    .args(["--", "/bin/sleep", "60"])
    .stdin(Stdio::from(slave.try_clone().unwrap()))
    .stdout(Stdio::from(slave.try_clone().unwrap()))
    .stderr(Stdio::from(slave.try_clone().unwrap()));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // A session of its own with the pty as its controlling terminal: the launch
            // is then the terminal's foreground process group, as in a shell.
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    // The reader sees EOF (EIO) only once no slave fd is left open here.
    drop(cmd);
    drop(slave);
    let mut master = std::fs::File::from(pty.master);
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = {
        let seen = seen.clone();
        let mut master = master.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the last slave fd is closed.
            while let Ok(n @ 1..) = master.read(&mut buf) {
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let text = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    env.wait_for_agent("sleep");
    master.write_all(b"\x03").unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let shown = text();
    assert_eq!(status.code(), Some(130), "{shown}");
    assert!(shown.contains("SIGINT: stopping run"), "{shown}");
    let run = shown
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("r-"))
        .unwrap_or_else(|| panic!("no run id in {shown}"))
        .to_string();
    let c = env.record(&run);
    assert_eq!(c.outcome, Outcome::Interrupted, "{}", c.reason);
    assert!(c.reason.contains("SIGINT"), "{}", c.reason);
    // The agent was ended by the stop's SIGTERM: the terminal's SIGINT reached only the
    // launch, not the jail.
    assert_eq!(
        (c.exit_code, c.signal),
        (Some(143), Some(15)),
        "{}",
        c.reason
    );
    assert!(ledger::open_runs(&env.ledger()).unwrap().is_empty());
    assert!(!env.state.join("alive").join(&run).exists());
}

/// SIGTERM and SIGHUP to the launch (no terminal): the same stop, the same record, exit
/// 128 + the signal.
#[test]
fn sigterm_and_sighup_stop_the_run_and_exit_128_plus_the_signal() {
    let env = Env::new();
    for (sig, code) in [
        (nix::sys::signal::Signal::SIGTERM, 143),
        (nix::sys::signal::Signal::SIGHUP, 129),
    ] {
        let mut r = env.start_sleeper();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(r.child.id() as i32), sig).unwrap();
        let status = r.child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{sig}");
        let c = env.record(&r.run);
        assert_eq!(c.outcome, Outcome::Interrupted, "{sig}: {}", c.reason);
        assert!(c.reason.contains(sig.as_str()), "{}", c.reason);
    }
    assert!(ledger::open_runs(&env.ledger()).unwrap().is_empty());
}

/// A supervisor killed with SIGKILL can close nothing: its run dies with it (the helper's
/// lifeline) and its record stays open, until the next standalone launch, which closes it
/// as aborted at the time the run was last known alive (its heartbeat), not its own start.
#[test]
fn a_sigkilled_supervisor_leaves_its_record_to_the_next_launch() {
    let env = Env::new();
    let mut r = env.start_sleeper();
    // Long enough for a heartbeat or two.
    std::thread::sleep(Duration::from_secs(3));
    let killed_at = ledger::now_ms();
    r.child.kill().unwrap();
    r.child.wait().unwrap();
    let open = ledger::open_runs(&env.ledger()).unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].run, r.run);
    wait_no_process_of(open[0].uid);

    // Read without a daemon meanwhile: the record is open and nobody supervises it.
    let (code, out, err) = env.read(&["show", &r.run]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("unsupervised"), "{out}");
    let (code, out, _) = env.read(&["ps"]);
    assert_eq!(code, 0);
    assert!(!out.contains(&r.run), "{out}");

    std::thread::sleep(Duration::from_secs(1));
    let o = env.launch(&["--wait"], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let next = run_id_wait(&o);
    let records = ledger::records(&env.ledger()).unwrap();
    let next_started = records
        .iter()
        .find_map(|rec| match &rec.event {
            LedgerEvent::RunOpened(o) if o.run == next => Some(o.started_at),
            _ => None,
        })
        .unwrap();
    let c = env.record(&r.run);
    assert_eq!(c.outcome, Outcome::Aborted, "{}", c.reason);
    assert!(c.reason.contains("last known alive"), "{}", c.reason);
    assert!(c.reason.contains("--standalone"), "{}", c.reason);
    assert!(c.ended_at >= open[0].started_at, "{c:?}");
    assert!(c.ended_at <= killed_at, "{} > {killed_at}", c.ended_at);
    assert!(c.ended_at < next_started, "{c:?}");
    assert!(ledger::open_runs(&env.ledger()).unwrap().is_empty());
    assert_eq!(ledger::verify(&env.ledger()).unwrap(), 4);
    assert!(!env.state.join("alive").join(&r.run).exists());
}

/// With no airlockd, the read commands read the ledger, the registry and the journal
/// themselves, say so once, and answer as the daemon would.
#[test]
fn read_commands_work_without_the_daemon() {
    let env = Env::new();
    let o = env.launch(&["--wait"], &["/bin/sh", "-c", "echo first-run; exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let done = run_id_wait(&o);
    let mut live = env.start_sleeper();

    let offline = "airlockd is not running";
    let (code, out, err) = env.read(&["runs"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches(offline).count(), 1, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("RUN "), "{out}");
    assert!(
        lines[1].starts_with(&done) && lines[1].contains("exited"),
        "{out}"
    );
    assert!(lines[1].ends_with(" 3"), "{out}");
    assert!(
        lines[2].starts_with(&live.run) && lines[2].contains("running"),
        "{out}"
    );

    let (code, out, err) = env.read(&["runs", "--json"]);
    assert_eq!(code, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["runs"][0]["run"], done.as_str());
    assert_eq!(j["runs"][0]["exit_code"], 3);
    assert_eq!(j["more"], false);

    let (code, out, err) = env.read(&["ps"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&live.run) && !out.contains(&done), "{out}");
    assert!(err.contains(offline), "{err}");

    let (code, out, _) = env.read(&["show", &done]);
    assert_eq!(code, 0);
    assert!(
        out.contains("exited") && out.contains("exited with code 3"),
        "{out}"
    );

    let (code, out, err) = env.read(&["logs", &done]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("first-run"), "{out}");

    let (code, out, err) = env.read(&["instances"]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("tess "))
        .unwrap_or_else(|| panic!("{out}"));
    // One active run; no lease left (a `-- CMD` run of a host without providers holds none).
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols[1], cols[5], cols[6]), ("code", "1", "-"), "{out}");
    assert!(err.contains(offline), "{err}");

    // Unknown runs are named.
    for cmd in ["show", "logs", "stop"] {
        let (code, _, err) = env.read(&[cmd, "r-20990101-deadbeef"]);
        assert_eq!(code, 1, "{cmd}: {err}");
        assert!(
            err.contains("no run r-20990101-deadbeef in the ledger"),
            "{cmd}: {err}"
        );
    }
    // A known run cannot be stopped without airlockd, and the message says what to do.
    let (code, _, err) = env.read(&["stop", &live.run]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("airlockctl launch --standalone"), "{err}");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(live.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert_eq!(live.child.wait().unwrap().code(), Some(130));
}

/// airlockd as the next owner of the ledger: at its start it closes the record of a run
/// whose standalone supervisor was SIGKILLed (aborted, at the run's last heartbeat) and
/// leaves a live standalone run alone. And it answers `runs` and `show` exactly as the
/// files read without it do.
#[test]
fn airlockd_closes_abandoned_runs_leaves_live_ones_and_reads_like_the_files() {
    let env = Env::new();
    let o = env.launch(&["--wait"], &["/bin/sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let done = run_id_wait(&o);
    let mut dead = env.start_sleeper();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let killed_at = ledger::now_ms();
    let mut live = env.start_sleeper();

    let err = std::fs::File::create(env.root.join("airlockd.err")).unwrap();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_airlockd"))
        .arg("--config")
        .arg(&env.cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let sock = env.root.join("airlockd.sock");
    let end = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        if let Ok(Some(st)) = daemon.try_wait() {
            panic!(
                "airlockd exited early ({st}): {}",
                std::fs::read_to_string(env.root.join("airlockd.err")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < end, "airlockd never opened its socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    let through = |args: &[&str]| {
        let (code, out, err) = env.read(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!err.contains("offline"), "{args:?}: {err}");
        out
    };
    let runs_daemon = through(&["runs", "--json"]);
    let show_daemon = through(&["show", &done, "--json"]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    daemon.wait().unwrap();

    let c = env.record(&dead.run);
    assert_eq!(c.outcome, Outcome::Aborted, "{}", c.reason);
    assert!(c.reason.contains("last known alive"), "{}", c.reason);
    assert!(c.ended_at <= killed_at, "{} > {killed_at}", c.ended_at);
    let open = ledger::open_runs(&env.ledger()).unwrap();
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(
        open[0].run, live.run,
        "the live standalone run is left open"
    );

    let (code, runs_files, err) = env.read(&["runs", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("offline"), "{err}");
    assert_eq!(runs_files, runs_daemon);
    let (_, show_files, _) = env.read(&["show", &done, "--json"]);
    assert_eq!(show_files, show_daemon);
    let j: Value = serde_json::from_str(&runs_files).unwrap();
    let states: Vec<&str> = j["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["exited", "aborted", "running"]);

    // The live run was never touched: it still stops, and records, as its own.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(live.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert_eq!(live.child.wait().unwrap().code(), Some(130));
    assert_eq!(env.record(&live.run).outcome, Outcome::Interrupted);
}
