//! airlockd for real: each test starts the built daemon with its own config, state dir,
//! socket and instance uids, talks to it over the control socket (JSON lines), and checks
//! the runs, the journal (journald or the fallback file), the ledger and the processes.
//! Runs as root (jails need it); waits are bounded polls, never timing assertions.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use airlock::supervisor::ledger;

mod common;
use common::poll;
use serde_json::{json, Value};

static NEXT: AtomicU32 = AtomicU32::new(0);

const REFUSED_ID: &str = "7f0597ea86e342529c908cd66b8072e6";

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the daemon tests must run as root (airlockd builds real jails)"
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

#[derive(Default)]
struct Opts {
    /// Extra top-level config lines.
    extra: String,
    /// Use a copy of the shipped roles (so a test may edit them).
    copy_roles: bool,
    /// journald socket: None = the real one.
    no_journald: bool,
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cfg: PathBuf,
    state: PathBuf,
    sock: PathBuf,
    roles: PathBuf,
    /// uid of instance `tess` (role code); `uid + 1` of `max` (role code).
    uid: u32,
    range: (u32, u32),
    child: Option<Child>,
    /// Extra environment for airlockd.
    vars: Vec<(String, String)>,
    /// Start airlockd in this cgroup v2 directory (as systemd starts it in its service's).
    cgroup: Option<PathBuf>,
}

impl Env {
    fn new(opts: Opts) -> Env {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        // Peers with other uids must reach the socket (its own mode decides the rest).
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let roles = if opts.copy_roles {
            let r = root.join("roles");
            copy_dir(&repo.join("roles"), &r);
            r
        } else {
            repo.join("roles")
        };
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        // Below the jail tests' uids (1880095000 and up), so both suites can run at once.
        let uid = 1_880_080_000 + (std::process::id() % 60) * 200 + (n % 20) * 10;
        let range = (uid + 2, uid + 9);
        let journal = if opts.no_journald {
            format!("journal_socket: {}/no-journald.socket\n", root.display())
        } else {
            String::new()
        };
        let cfg = root.join("airlock.yaml");
        std::fs::write(
            &cfg,
            format!(
                "roles: [{roles}]\npolicies: {policies}\nstate_dir: state\nsocket: {root}/airlockd.sock\nuid_range: {a}-{b}\ngrace_seconds: 2\nlimits: {{max_procs: 64}}\n{journal}{extra}instances:\n  tess: {{role: code, uid: {uid}}}\n  max: {{role: code, uid: {uid2}}}\n",
                roles = roles.display(),
                policies = repo.join("policies").display(),
                root = root.display(),
                a = range.0,
                b = range.1,
                extra = opts.extra,
                uid2 = uid + 1,
            ),
        )
        .unwrap();
        Env {
            state: root.join("state"),
            sock: root.join("airlockd.sock"),
            _dir: dir,
            root,
            cfg,
            roles,
            uid,
            range,
            child: None,
            vars: Vec::new(),
            cgroup: None,
        }
    }

    fn spawn(&self) -> Child {
        // systemd sets WATCHDOG_PID to the service's pid: a shell that execs airlockd
        // knows that pid in advance ($$).
        let mut cmd = if self.vars.iter().any(|(k, _)| k == "WATCHDOG_USEC") {
            let mut c = Command::new("/bin/sh");
            c.args(["-c", "export WATCHDOG_PID=$$; exec \"$0\" \"$@\""])
                .arg(env!("CARGO_BIN_EXE_airlockd"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_airlockd"))
        };
        if let Some(cg) = &self.cgroup {
            let procs = std::ffi::CString::new(cg.join("cgroup.procs").into_os_string().into_vec())
                .unwrap();
            // SAFETY: only open/write/close (async-signal-safe) between fork and exec.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                    libc::close(fd);
                    if ok {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        cmd.arg("--config")
            .arg(&self.cfg)
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.root.join("airlockd.err"))
                    .unwrap(),
            )
            .spawn()
            .unwrap()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.root.join("airlockd.err")).unwrap_or_default()
    }

    /// Start airlockd and wait until it answers `status`.
    fn start(&mut self) {
        let mut child = self.spawn();
        let ready = poll(30, || {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("airlockd exited early ({st}):\n{}", self.stderr());
            }
            let r = try_request(&self.sock, &json!({"v":1,"op":"status"})).ok()?;
            (r.first()?["ok"] == true).then_some(())
        });
        assert!(
            ready.is_some(),
            "airlockd never became ready:\n{}",
            self.stderr()
        );
        self.child = Some(child);
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
    }

    /// Wait (bounded) for the daemon to exit; returns its exit code.
    fn wait_exit(&mut self, secs: u64) -> Option<i32> {
        let child = self.child.as_mut().unwrap();
        let st = poll(secs, || child.try_wait().ok().flatten());
        match st {
            Some(st) => {
                self.child = None;
                st.code()
            }
            None => panic!("airlockd did not exit within {secs} s:\n{}", self.stderr()),
        }
    }

    fn req(&self, v: Value) -> Vec<Value> {
        try_request(&self.sock, &v).unwrap()
    }

    /// A one-line answer.
    fn one(&self, v: Value) -> Value {
        let mut r = self.req(v);
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0)
    }

    fn launch(&self, instance: &str, argv: &[&str], extra: Value) -> Vec<Value> {
        let mut v = json!({"v":1,"op":"launch","role":"code","instance":instance,"command":argv});
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in e {
                m.insert(k.clone(), x.clone());
            }
        }
        self.req(v)
    }

    fn ledger(&self) -> PathBuf {
        self.state.join("ledger.jsonl")
    }

    /// Daemon-level events from the fallback file (tests with `no_journald`).
    fn daemon_fallback(&self) -> String {
        std::fs::read_to_string(self.state.join("journal/airlockd.journal")).unwrap_or_default()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Test hygiene only: these uids belong to this test alone.
        for u in [self.uid, self.uid + 1] {
            for pid in airlock::supervisor::process::pids_of_uid(u) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

fn try_request(sock: &Path, v: &Value) -> std::io::Result<Vec<Value>> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    s.write_all(format!("{v}\n").as_bytes())?;
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        let line = line?;
        out.push(serde_json::from_str(&line).map_err(std::io::Error::other)?);
    }
    Ok(out)
}

/// The `data` of each frame of a launch answer.
fn frames(r: &[Value]) -> Vec<Value> {
    r.iter()
        .map(|l| {
            assert_eq!(l["ok"], true, "{l}");
            l["data"].clone()
        })
        .collect()
}

fn exited(r: &[Value]) -> Value {
    let f = frames(r);
    let last = f.last().cloned().unwrap();
    assert_eq!(last["frame"], "exited", "{f:?}");
    last
}

fn run_id(r: &[Value]) -> String {
    let f = frames(r);
    assert_eq!(f[0]["frame"], "started", "{f:?}");
    f[0]["run"].as_str().unwrap().to_string()
}

fn stdout_of(r: &[Value]) -> String {
    frames(r)
        .iter()
        .filter(|f| f["frame"] == "output" && f["stream"] == "stdout")
        .map(|f| f["data"].as_str().unwrap().to_string())
        .collect()
}

fn journal_json(filter: &[&str]) -> Vec<Value> {
    let out = Command::new("journalctl")
        .args(["-o", "json", "--no-pager"])
        .args(filter)
        .output()
        .expect("journalctl runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn record_of(env: &Env, run: &str) -> Value {
    let r = env.one(json!({"v":1,"op":"show","run":run}));
    assert_eq!(r["ok"], true, "{r}");
    r["data"]["run"].clone()
}

fn ledger_closed(path: &Path, run: &str) -> Option<ledger::RunClosed> {
    ledger::records(path)
        .unwrap()
        .into_iter()
        .find_map(|r| match r.event {
            ledger::LedgerEvent::RunClosed(c) if c.run == run => Some(c),
            _ => None,
        })
}

fn pids(uid: u32) -> Vec<i32> {
    airlock::supervisor::process::pids_of_uid(uid)
}

#[test]
fn launch_wait_exit_codes_and_journald_fields() {
    common::require_journald();
    let mut env = Env::new(Opts::default());
    env.start();
    let r = env.launch(
        "tess",
        &["/bin/sh", "-c", "echo hello-from-run; echo oops >&2"],
        json!({"wait": true}),
    );
    let run = run_id(&r);
    assert_eq!(stdout_of(&r), "hello-from-run\n");
    let e = exited(&r);
    assert_eq!(e["exit_code"], 0, "{e}");
    assert_eq!(e["outcome"], "exited");
    assert_eq!(e["run"], run.as_str());

    let r7 = env.launch("tess", &["/bin/sh", "-c", "exit 7"], json!({"wait": true}));
    let run7 = run_id(&r7);
    assert_eq!(exited(&r7)["exit_code"], 7);

    // Without wait: only `started`, the run goes on.
    let r0 = env.launch("max", &["/bin/true"], json!({}));
    assert_eq!(frames(&r0).len(), 1);
    let run0 = run_id(&r0);
    let closed = poll(20, || ledger_closed(&env.ledger(), &run0));
    assert_eq!(closed.unwrap().exit_code, Some(0));

    let rec = record_of(&env, &run7);
    assert_eq!(rec["state"], "exited");
    assert_eq!(rec["exit_code"], 7);
    assert_eq!(rec["uid"], env.uid);
    assert_eq!(rec["launched_by_uid"], 0);
    assert_eq!(rec["instance"], "tess");
    // The closing record is written before the run leaves airlockd's table: ps catches up.
    let ps = poll(10, || {
        let ps = env.one(json!({"v":1,"op":"ps"}));
        ps["data"]["runs"]
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(())
    });
    assert!(ps.is_some(), "a closed run is still listed by ps");

    // The run's stdout line in journald, with its fields.
    let filter = format!("AIRLOCK_RUN={run}");
    let found = poll(15, || {
        let recs = journal_json(&[&filter]);
        let line = recs
            .iter()
            .find(|j| j["MESSAGE"] == "hello-from-run")?
            .clone();
        let exited = recs.iter().any(|j| j["AIRLOCK_EVENT"] == "run_exited");
        exited.then_some((line, recs))
    });
    let (line, recs) = found.unwrap_or_else(|| panic!("run {run} never showed up in journald"));
    assert_eq!(line["AIRLOCK_STREAM"], "stdout");
    assert_eq!(line["AIRLOCK_ROLE"], "code");
    assert_eq!(line["AIRLOCK_INSTANCE"], "tess");
    assert_eq!(line["SYSLOG_IDENTIFIER"], "airlockd");
    assert!(recs
        .iter()
        .any(|j| j["MESSAGE"] == "oops" && j["AIRLOCK_STREAM"] == "stderr"));
    let started = recs
        .iter()
        .find(|j| j["AIRLOCK_EVENT"] == "run_started")
        .unwrap();
    assert_eq!(started["MESSAGE_ID"], "449cbb726be1461eb409c263dcabbeb5");
    assert!(
        recs.iter().any(|j| j["AIRLOCK_EVENT"] == "jail_report"
            && j["MESSAGE"].as_str().unwrap_or("").contains("landlock")),
        "jail report missing"
    );
}

#[test]
fn no_line_lost_without_journald() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let r = env.launch(
        "tess",
        &[
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); echo $i; done; echo done >&2",
        ],
        json!({"wait": true}),
    );
    let run = run_id(&r);
    assert_eq!(exited(&r)["exit_code"], 0);
    let text = std::fs::read_to_string(env.state.join(format!("journal/{run}.journal"))).unwrap();
    let mut n = 0u32;
    let mut events = Vec::new();
    for l in text.lines() {
        let j: Value = serde_json::from_str(l).unwrap();
        assert_eq!(j["AIRLOCK_RUN"], run.as_str());
        assert_eq!(j["SYSLOG_IDENTIFIER"], "airlockd");
        if j["AIRLOCK_STREAM"] == "stdout" {
            n += 1;
            assert_eq!(j["MESSAGE"], n.to_string(), "line {n} lost or out of order");
        }
        if let Some(e) = j["AIRLOCK_EVENT"].as_str() {
            events.push(e.to_string());
        }
    }
    assert_eq!(n, 20000);
    assert!(text.contains("\"MESSAGE\":\"done\""));
    assert_eq!(events.first().map(String::as_str), Some("run_started"));
    assert_eq!(events.last().map(String::as_str), Some("run_exited"));
    // Daemon-level events fall back too.
    assert!(env.daemon_fallback().contains("daemon_started"));
}

/// Connect from a thread whose credentials are changed with raw syscalls (they are
/// per-thread in the kernel), so the daemon sees a different peer uid, gid and groups.
fn request_as(sock: &Path, uid: u32, groups: &[u32], v: Value) -> Vec<Value> {
    let sock = sock.to_path_buf();
    let groups = groups.to_vec();
    std::thread::spawn(move || {
        // SAFETY: raw credential syscalls on this thread only; it never runs as root again.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()),
                0
            );
            assert_eq!(libc::syscall(libc::SYS_setresgid, uid, uid, uid), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
        }
        try_request(&sock, &v).unwrap()
    })
    .join()
    .unwrap()
}

#[test]
fn peers_outside_the_groups_are_refused_and_logged() {
    common::require_journald();
    // A peer uid nobody uses; the socket's group is its gid so it can connect at all, but it
    // is in neither the admin nor the operator group.
    let probe = Env::new(Opts::default());
    let outsider = probe.uid + 7;
    let (admin, operator) = (probe.uid + 8, probe.uid + 9);
    drop(probe);
    let mut env = Env::new(Opts {
        extra: format!(
            "admin_group: {admin}\noperator_group: {operator}\nsocket_group: {outsider}\n"
        ),
        ..Opts::default()
    });
    env.start();
    let mode = std::fs::metadata(&env.sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);

    let r = request_as(&env.sock, outsider, &[], json!({"v":1,"op":"ps"}));
    assert_eq!(r[0]["ok"], false, "{r:?}");
    assert_eq!(r[0]["error"]["code"], "forbidden");
    let r = request_as(
        &env.sock,
        outsider,
        &[],
        json!({"v":1,"op":"launch","role":"code","instance":"tess","command":["/bin/true"]}),
    );
    assert_eq!(r[0]["error"]["code"], "forbidden");
    // Whatever an outsider sends, even nonsense, it is refused (not parsed) and logged.
    let r = request_as(&env.sock, outsider, &[], json!({"v": 99, "bogus": true}));
    assert_eq!(r[0]["error"]["code"], "forbidden", "{r:?}");

    // An operator (by supplementary group) may read but not reload.
    let r = request_as(
        &env.sock,
        outsider,
        &[operator],
        json!({"v":1,"op":"status"}),
    );
    assert_eq!(r[0]["ok"], true, "{r:?}");
    let r = request_as(
        &env.sock,
        outsider,
        &[operator],
        json!({"v":1,"op":"reload"}),
    );
    assert_eq!(r[0]["error"]["code"], "forbidden");
    // An operator launches; the workspace must be theirs (or the instance's).
    let ws = env.root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let launch = |ws: &Path| {
        json!({"v":1,"op":"launch","role":"code","instance":"tess","wait":true,
               "workspace": ws.display().to_string(),
               "command":["/bin/sh","-c","pwd"]})
    };
    let r = request_as(&env.sock, outsider, &[operator], launch(&ws));
    assert_eq!(r[0]["error"]["code"], "refused", "{r:?}");
    assert!(r[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("owned by you"));
    std::os::unix::fs::chown(&ws, Some(outsider), Some(outsider)).unwrap();
    let r = request_as(&env.sock, outsider, &[operator], launch(&ws));
    assert_eq!(exited(&r)["exit_code"], 0, "{r:?}");
    assert_eq!(stdout_of(&r), format!("{}\n", ws.display()));
    assert_eq!(record_of(&env, &run_id(&r))["launched_by_uid"], outsider);
    // An admin may reload.
    let r = request_as(&env.sock, outsider, &[admin], json!({"v":1,"op":"reload"}));
    assert_eq!(r[0]["ok"], true, "{r:?}");

    let want = format!("from uid {outsider}");
    let found = poll(15, || {
        let recs = journal_json(&["AIRLOCK_RUN=airlockd", &format!("MESSAGE_ID={REFUSED_ID}")]);
        let hits: Vec<Value> = recs
            .into_iter()
            .filter(|j| j["MESSAGE"].as_str().unwrap_or("").contains(&want))
            .collect();
        (hits.len() >= 4).then_some(hits)
    });
    let hits = found.expect("four refusals in journald (ps, launch, nonsense, reload)");
    assert_eq!(hits[0]["AIRLOCK_EVENT"], "control_refused");
    assert_eq!(hits[0]["AIRLOCK_PEER_UID"], outsider.to_string());
    assert_eq!(hits[0]["SYSLOG_IDENTIFIER"], "airlockd");
}

#[test]
fn malformed_oversize_and_slow_requests_get_errors() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let raw = |bytes: &[u8]| -> Value {
        let mut s = UnixStream::connect(&env.sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = s.write_all(bytes);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        serde_json::from_str(out.lines().next().unwrap_or("null")).unwrap()
    };
    assert_eq!(raw(b"not json\n")["error"]["code"], "bad-request");
    assert_eq!(
        raw(b"{\"v\":1,\"op\":\"nope\"}\n")["error"]["code"],
        "bad-request"
    );
    assert_eq!(
        raw(b"{\"v\":9,\"op\":\"ps\"}\n")["error"]["code"],
        "unsupported-version"
    );
    assert_eq!(raw(&vec![b'x'; 200_000])["error"]["code"], "too-large");
    // A peer that says nothing does not stall anyone else.
    let mut slow = UnixStream::connect(&env.sock).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(env.one(json!({"v":1,"op":"status"}))["ok"], true);
    let mut out = String::new();
    let _ = slow.read_to_string(&mut out);
    let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "bad-request");
    assert_eq!(env.one(json!({"v":1,"op":"status"}))["ok"], true);
}

#[test]
fn sighup_with_a_broken_role_keeps_the_old_set() {
    let mut env = Env::new(Opts {
        copy_roles: true,
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let before = env.one(json!({"v":1,"op":"status"}))["data"].clone();
    let role = env.roles.join("code/role.yaml");
    let good = std::fs::read_to_string(&role).unwrap();
    std::fs::write(&role, format!("{good}\nnot_a_role_key: true\n")).unwrap();
    env.signal(nix::sys::signal::Signal::SIGHUP);
    let refused = poll(20, || {
        env.daemon_fallback()
            .contains("reload_refused")
            .then_some(())
    });
    assert!(
        refused.is_some(),
        "no reload_refused event:\n{}",
        env.daemon_fallback()
    );
    // The reason names the file and what is wrong (never the offending text).
    let log = env.daemon_fallback();
    assert!(
        log.contains("code/role.yaml") && log.contains("not a known key"),
        "{log}"
    );
    let after = env.one(json!({"v":1,"op":"status"}))["data"].clone();
    assert_eq!(after["loaded_at"], before["loaded_at"]);
    assert_eq!(after["roles"], before["roles"]);
    // The old `code` role is still in force.
    let r = env.launch("tess", &["/bin/true"], json!({"wait": true}));
    assert_eq!(exited(&r)["exit_code"], 0);

    // Fixed: the next reload (through the socket this time) swaps the set.
    std::fs::write(&role, good).unwrap();
    let r = env.one(json!({"v":1,"op":"reload"}));
    assert_eq!(r["ok"], true, "{r}");
    let later = env.one(json!({"v":1,"op":"status"}))["data"].clone();
    assert!(later["loaded_at"].as_u64() > before["loaded_at"].as_u64());
    assert!(env.daemon_fallback().contains("\"reloaded\""));
}

#[test]
fn sigterm_drains_running_runs() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let r = env.launch("tess", &["/bin/sleep", "60"], json!({}));
    let run = run_id(&r);
    assert!(poll(20, || (!pids(env.uid).is_empty()).then_some(())).is_some());
    env.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(env.wait_exit(60), Some(0), "{}", env.stderr());
    let c = ledger_closed(&env.ledger(), &run).expect("record closed");
    assert_eq!(c.outcome, ledger::Outcome::Stopped);
    assert!(c.reason.contains("shutting down"), "{}", c.reason);
    assert!(pids(env.uid).is_empty());
}

#[test]
fn deadline_kills_the_run_and_its_descendants() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let r = env.launch(
        "tess",
        &[
            "/usr/bin/python3",
            "-c",
            "import os, time\nos.fork(); os.fork()\ntime.sleep(100)",
        ],
        json!({"wait": true, "max_seconds": 2}),
    );
    let run = run_id(&r);
    let e = exited(&r);
    assert_eq!(e["outcome"], "timed_out", "{e}");
    assert!(e["reason"].as_str().unwrap().contains("deadline"), "{e}");
    assert!(
        pids(env.uid).is_empty(),
        "processes of the instance survived"
    );
    let c = ledger_closed(&env.ledger(), &run).unwrap();
    assert_eq!(c.outcome, ledger::Outcome::TimedOut);
    assert!(c.reason.contains("deadline of 2 s"), "{}", c.reason);
    let text = std::fs::read_to_string(env.state.join(format!("journal/{run}.journal"))).unwrap();
    assert!(text.contains("deadline_reached"));
}

#[test]
fn weekly_budget_refuses_after_the_last_allowed_run() {
    let mut env = Env::new(Opts {
        copy_roles: true,
        no_journald: true,
        ..Opts::default()
    });
    let role = env.roles.join("code/role.yaml");
    let text = std::fs::read_to_string(&role).unwrap();
    assert!(text.contains("runs_per_week: 20"));
    std::fs::write(&role, text.replace("runs_per_week: 20", "runs_per_week: 2")).unwrap();
    env.start();
    for _ in 0..2 {
        let r = env.launch("tess", &["/bin/true"], json!({"wait": true}));
        assert_eq!(exited(&r)["exit_code"], 0);
    }
    let r = env.launch("tess", &["/bin/true"], json!({"wait": true}));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["ok"], false);
    assert_eq!(r[0]["error"]["code"], "refused");
    let msg = r[0]["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("runs_per_week") && msg.contains("2 of its 2"),
        "{msg}"
    );
    // The budget is per instance.
    let r = env.launch("max", &["/bin/true"], json!({"wait": true}));
    assert_eq!(exited(&r)["exit_code"], 0);
    assert!(env.daemon_fallback().contains("launch_refused"));
    // The refused launch opened no record.
    assert_eq!(ledger::records(&env.ledger()).unwrap().len(), 6);
    // `runs` lists the newest runs, oldest first, and says when older ones exist.
    let r = env.one(json!({"v":1,"op":"runs","last":2}));
    assert_eq!(r["ok"], true, "{r}");
    let listed: Vec<&str> = r["data"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["instance"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["tess", "max"], "{r}");
    assert_eq!(r["data"]["more"], true, "{r}");
    let r = env.one(json!({"v":1,"op":"runs"}));
    assert_eq!(r["data"]["runs"].as_array().unwrap().len(), 3, "{r}");
    assert_eq!(r["data"]["more"], false, "{r}");
}

#[test]
fn kill9_mid_run_then_restart_aborts_the_orphan() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let r = env.launch(
        "tess",
        &[
            "/usr/bin/python3",
            "-c",
            "import os, time\nos.fork(); os.fork()\ntime.sleep(100)",
        ],
        json!({}),
    );
    let run = run_id(&r);
    assert!(poll(20, || (pids(env.uid).len() >= 2).then_some(())).is_some());
    let mut child = env.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = ledger::now_ms();
    // Nobody supervises the run now: its jail helper sees the daemon's end of the lifeline
    // close and kills the whole run on its own, before any restart.
    let gone = poll(10, || pids(env.uid).is_empty().then_some(()));
    assert!(gone.is_some(), "the run outlived its supervisor");
    assert!(ledger_closed(&env.ledger(), &run).is_none());

    env.start();
    let left = poll(10, || pids(env.uid).is_empty().then_some(()));
    assert!(
        left.is_some(),
        "processes of the instance survived the restart"
    );
    let c = ledger_closed(&env.ledger(), &run).expect("closed by recovery");
    assert_eq!(c.outcome, ledger::Outcome::Aborted);
    assert!(c.reason.contains("not supervised"), "{}", c.reason);
    // Ended when the run was last known alive (its heartbeat), not at the restart.
    assert!(c.reason.contains("last known alive"), "{}", c.reason);
    assert!(c.ended_at <= killed_at, "{} > {killed_at}", c.ended_at);
    assert_eq!(record_of(&env, &run)["state"], "aborted");
    let text = std::fs::read_to_string(env.state.join(format!("journal/{run}.journal"))).unwrap();
    assert!(text.contains("run_aborted"));
    assert!(ledger::verify(&env.ledger()).is_ok());
}

#[test]
fn ledger_verifies_and_tampering_is_detected() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    for code in [0, 3] {
        let r = env.launch(
            "tess",
            &["/bin/sh", "-c", &format!("exit {code}")],
            json!({"wait": true}),
        );
        assert_eq!(exited(&r)["exit_code"], code);
    }
    // A second airlockd on the same state refuses to start.
    let mut second = env.spawn();
    let st = poll(20, || second.try_wait().ok().flatten()).expect("second airlockd exits");
    assert_eq!(st.code(), Some(1));
    assert!(
        env.stderr().contains("held by another process"),
        "{}",
        env.stderr()
    );

    env.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(env.wait_exit(30), Some(0));
    assert_eq!(ledger::verify(&env.ledger()).unwrap(), 4);
    let text = std::fs::read_to_string(env.ledger()).unwrap();
    assert!(text.contains("exited with code 3"));
    std::fs::write(
        env.ledger(),
        text.replace("exited with code 3", "exited with code 0"),
    )
    .unwrap();
    match ledger::verify(&env.ledger()) {
        Err(ledger::LedgerError::Broken { seq, .. }) => assert_eq!(seq, 4),
        other => panic!("tampering not detected: {other:?}"),
    }
    // airlockd refuses to run on a broken ledger.
    let mut child = env.spawn();
    let st = poll(20, || child.try_wait().ok().flatten()).expect("airlockd exits");
    assert_eq!(st.code(), Some(1));
    assert!(
        env.stderr().contains("broken at line 4"),
        "{}",
        env.stderr()
    );
}

#[test]
fn hire_and_fire() {
    // What the code role's runs use: its provider (no key: a local model server), its
    // two connectors and the GitHub App. Nothing here is read before a run needs it.
    let mut env = Env::new(Opts {
        no_journald: true,
        extra: "credentials:\n  gh: /etc/airlock/credentials/gh.pem\nproviders:\n  claude: {url: \"http://127.0.0.1:9\"}\nmcp_connectors:\n  board: {url: \"http://127.0.0.1:9/mcp\"}\n  github: {url: \"http://127.0.0.1:9/mcp\"}\ngithub: {app_id: 7, private_key: gh}\n".into(),
        ..Opts::default()
    });
    env.start();
    // review runs Codex, whose provider this host does not configure: refused, named.
    let r = env.one(json!({"v":1,"op":"hire","instance":"vega","role":"review"}));
    assert_eq!(r["error"]["code"], "refused", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("providers.codex"), "{msg}");
    let r = env.one(json!({"v":1,"op":"hire","instance":"nova","role":"implementer"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["role"], "code");
    let lines: Vec<&str> = r["data"]["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    for want in [
        "provider claude: no key, sent only to http://127.0.0.1:9",
        "connector board: no credential",
        "github: an installation token per run from App 7 (key credentials.gh)",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(want)),
            "{want} in {lines:?}"
        );
    }
    let uid = r["data"]["uid"].as_u64().unwrap() as u32;
    assert!((env.range.0..=env.range.1).contains(&uid));
    // A run of code mints its GitHub tokens at launch (tests/github.rs), and this host's
    // App is not a real one: the runs below go without it.
    let text = std::fs::read_to_string(&env.cfg).unwrap();
    std::fs::write(
        &env.cfg,
        text.replace("github: {app_id: 7, private_key: gh}\n", ""),
    )
    .unwrap();
    assert_eq!(env.one(json!({"v":1,"op":"reload"}))["ok"], true);
    let r = env.launch(
        "nova",
        &["/usr/bin/python3", "-c", "import os; print(os.getuid())"],
        json!({"wait": true}),
    );
    assert_eq!(stdout_of(&r), format!("{uid}\n"), "{r:?}");

    let r = env.launch("nova", &["/bin/sleep", "60"], json!({}));
    let run = run_id(&r);
    assert!(poll(20, || (!pids(uid).is_empty()).then_some(())).is_some());
    let f = env.one(json!({"v":1,"op":"fire","instance":"nova"}));
    assert_eq!(f["ok"], true, "{f}");
    assert_eq!(f["data"]["stopped_runs"], 1);
    // Its one lease (the provider's) is revoked by the fire itself, and said so.
    assert_eq!(
        f["data"]["revoked"],
        json!([format!("run/{run}/provider/1")]),
        "{f}"
    );
    assert_eq!(f["data"]["pending"], json!([]));
    let c = poll(30, || ledger_closed(&env.ledger(), &run)).expect("closed");
    assert_eq!(c.outcome, ledger::Outcome::Stopped);
    assert!(c.reason.contains("fired"), "{}", c.reason);
    assert!(poll(10, || pids(uid).is_empty().then_some(())).is_some());

    let r = env.launch("nova", &["/bin/true"], json!({"wait": true}));
    assert_eq!(r[0]["error"]["code"], "refused", "{r:?}");
    assert!(r[0]["error"]["message"].as_str().unwrap().contains("fired"));
    let r = env.one(json!({"v":1,"op":"hire","instance":"nova","role":"code"}));
    assert_eq!(r["error"]["code"], "refused", "{r}");
    // Config-declared instances can be fired too, for good.
    assert_eq!(
        env.one(json!({"v":1,"op":"fire","instance":"max"}))["ok"],
        true
    );
    let r = env.launch("max", &["/bin/true"], json!({"wait": true}));
    assert_eq!(r[0]["error"]["code"], "refused");
    let list = env.one(json!({"v":1,"op":"instances"}));
    let all = list["data"]["instances"].as_array().unwrap();
    let nova = all.iter().find(|i| i["instance"] == "nova").unwrap();
    assert_eq!(nova["fired"], true);
    assert_eq!(nova["source"], "hired");
    assert_eq!(
        all.iter().find(|i| i["instance"] == "max").unwrap()["fired"],
        true
    );
    assert_eq!(
        all.iter().find(|i| i["instance"] == "tess").unwrap()["fired"],
        false
    );
    // Stop of an active run, by an operator request.
    let r = env.launch("tess", &["/bin/sleep", "60"], json!({}));
    let run = run_id(&r);
    assert_eq!(env.one(json!({"v":1,"op":"stop","run":run}))["ok"], true);
    let c = poll(30, || ledger_closed(&env.ledger(), &run)).expect("closed");
    assert_eq!(c.outcome, ledger::Outcome::Stopped);
}

/// The shipped smoke role on a host that configures nothing else (no provider, connector,
/// credential or GitHub App): hired through airlockd, it lists no credential, and a launch
/// without a command runs its own workflow.sh on the command side, as the instance's uid.
#[test]
fn the_jails_files_reach_every_run_though_airlockd_lets_go_of_them() {
    // airlockd encodes a run's spec ahead and drops the files it carries (brief, agent
    // configuration) before the run goes on: the jail still gets them whole, on the first
    // run (which freezes the instance's revision) and on the next (which runs that frozen
    // revision, its policy shared).
    let mut env = Env::new(Opts::default());
    env.start();
    let brief = std::fs::read_to_string(env.roles.join("code/brief.md")).unwrap();
    assert!(!brief.is_empty());
    for _ in 0..2 {
        let r = env.launch(
            "tess",
            &["/bin/cat", "/etc/airlock/brief.md"],
            json!({"wait": true}),
        );
        let e = exited(&r);
        assert_eq!(e["exit_code"], 0, "{e}");
        // The role's brief, with the floors of its class added after it.
        let out = stdout_of(&r);
        assert!(out.starts_with(&brief), "{out}");
        assert!(out.contains("## Floors"), "{out}");
    }
}

#[test]
fn the_smoke_role_is_hired_and_launched_with_nothing_configured() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let r = env.one(json!({"v":1,"op":"hire","instance":"hi","role":"hello"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["role"], "hello");
    assert_eq!(r["data"]["credentials"], json!([]), "{r}");
    let uid = r["data"]["uid"].as_u64().unwrap();
    let r = env
        .req(json!({"v":1,"op":"launch","role":"hello","instance":"hi","command":[],"wait":true}));
    let run = run_id(&r);
    let out = stdout_of(&r);
    let e = exited(&r);
    assert_eq!(
        (e["exit_code"].as_i64(), e["outcome"].as_str()),
        (Some(0), Some("exited")),
        "{e}\n{out}"
    );
    assert!(
        out.starts_with(&format!(
            "hello from Airlock: run {run}, role hello, instance hi\n"
        )),
        "{out}"
    );
    assert!(out.contains(&format!("id: uid={uid}(hi) ")), "{out}");
    assert!(
        out.contains(" hello.txt\n") && out.ends_with("hello: done\n"),
        "{out}"
    );
}

#[test]
fn concurrency_cap_refuses_then_frees() {
    let mut env = Env::new(Opts {
        extra: "max_concurrent_runs: 1\n".into(),
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let run = run_id(&env.launch("tess", &["/bin/sleep", "60"], json!({})));
    let r = env.launch("max", &["/bin/true"], json!({"wait": true}));
    assert_eq!(r[0]["error"]["code"], "busy", "{r:?}");
    assert!(r[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_concurrent_runs"));
    let ps = env.one(json!({"v":1,"op":"ps"}));
    assert_eq!(ps["data"]["runs"][0]["run"], run.as_str());
    assert_eq!(ps["data"]["runs"][0]["state"], "running");
    assert_eq!(env.one(json!({"v":1,"op":"stop","run":run}))["ok"], true);
    assert!(poll(30, || ledger_closed(&env.ledger(), &run)).is_some());
    // The record is in the file before its sync is done; the run leaves the active table
    // (and frees its slot) after.
    let freed = poll(30, || {
        (env.one(json!({"v":1,"op":"status"}))["data"]["active_runs"] == 0).then_some(())
    });
    assert!(freed.is_some(), "the stopped run kept its slot");
    let r = env.launch("max", &["/bin/true"], json!({"wait": true}));
    assert_eq!(exited(&r)["exit_code"], 0);
    let st = env.one(json!({"v":1,"op":"status"}));
    assert_eq!(st["data"]["active_runs"], 0);
    assert_eq!(st["data"]["max_concurrent_runs"], 1);
    assert_eq!(st["data"]["ledger_records"], 4);
}

#[test]
fn sd_notify_ready_status_reloading_watchdog_stopping() {
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    let path = env.root.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    env.vars = vec![
        ("NOTIFY_SOCKET".into(), path.display().to_string()),
        ("WATCHDOG_USEC".into(), "400000".into()),
    ];
    env.start();
    let mut seen: Vec<String> = Vec::new();
    let wait_for = |what: &dyn Fn(&str) -> bool, seen: &mut Vec<String>| {
        poll(20, || {
            let mut buf = [0u8; 4096];
            if let Ok(n) = sock.recv(&mut buf) {
                seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            seen.iter().any(|m| what(m)).then_some(())
        })
        .is_some()
    };
    assert!(
        wait_for(
            &|m| m.contains("READY=1") && m.contains("STATUS=0 active runs"),
            &mut seen
        ),
        "{seen:?}"
    );
    assert!(
        wait_for(&|m| m.contains("WATCHDOG=1"), &mut seen),
        "{seen:?}"
    );
    seen.clear();
    env.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(
        wait_for(
            &|m| m.contains("RELOADING=1") && m.contains("MONOTONIC_USEC="),
            &mut seen
        ),
        "{seen:?}"
    );
    assert!(wait_for(&|m| m.contains("READY=1"), &mut seen), "{seen:?}");
    seen.clear();
    let run = run_id(&env.launch("tess", &["/bin/sleep", "60"], json!({})));
    assert!(
        wait_for(&|m| m.contains("STATUS=1 active run"), &mut seen),
        "{seen:?}"
    );
    env.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        wait_for(&|m| m.contains("STOPPING=1"), &mut seen),
        "{seen:?}"
    );
    assert_eq!(env.wait_exit(60), Some(0));
    assert_eq!(
        ledger_closed(&env.ledger(), &run).unwrap().outcome,
        ledger::Outcome::Stopped
    );
}

fn cgroup2_mount() -> PathBuf {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mi.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split_whitespace().next()? == "cgroup2")
                .then(|| PathBuf::from(pre.split_whitespace().nth(4).unwrap()))
        })
        .expect("a cgroup2 mount (the daemon tests need cgroup v2)")
}

/// An airlockd set up as under systemd with `Delegate=yes`: started in a cgroup of its own
/// (`<cgroup2>/airlock-<tag>-<pid>`, returned), not yet running.
fn delegated_env(tag: &str) -> (Env, PathBuf) {
    let base = cgroup2_mount().join(format!("airlock-{tag}-{}", std::process::id()));
    std::fs::create_dir(&base).unwrap();
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.cgroup = Some(base.clone());
    (env, base)
}

/// The run cgroups left under a delegated base.
fn run_cgroups_left(base: &Path) -> Vec<String> {
    std::fs::read_dir(base.join("airlock"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("r-"))
        .collect()
}

fn remove_delegated(base: &Path) {
    for d in ["airlock", "supervisor", ""] {
        let _ = std::fs::remove_dir(base.join(d));
    }
}

/// The systemd layout (Delegate=yes): airlockd starts in its own cgroup, moves itself into
/// a `supervisor` leaf, runs live in `airlock/<run>`; after kill -9 and a restart in the same
/// cgroup, recovery kills the orphan through its cgroup.
#[test]
fn delegated_cgroup_layout_and_recovery() {
    let (mut env, base) = delegated_env("dtest");
    env.start();
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", env.pid())).unwrap();
    assert!(
        own.lines()
            .any(|l| l.starts_with("0::") && l.ends_with("/supervisor")),
        "{own}"
    );
    let run = run_id(&env.launch(
        "tess",
        &[
            "/usr/bin/python3",
            "-c",
            "import os, time\nos.fork(); os.fork()\ntime.sleep(100)",
        ],
        json!({}),
    ));
    let run_cg = base.join("airlock").join(&run);
    // The agent and what it forks are in the run's agent-side cgroup, below the run's.
    let members = poll(20, || {
        let p = std::fs::read_to_string(run_cg.join("agent/cgroup.procs")).ok()?;
        (p.lines().count() >= 3).then_some(p)
    });
    assert!(members.is_some(), "the run is not in {}", run_cg.display());
    let mut child = env.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // The helper kills the run when the daemon's lifeline closes; the restart's recovery
    // removes whatever cgroup is left and closes the record.
    assert!(poll(10, || pids(env.uid).is_empty().then_some(())).is_some());
    env.start();
    assert!(poll(10, || pids(env.uid).is_empty().then_some(())).is_some());
    assert!(!run_cg.exists(), "the orphan's cgroup is still there");
    assert_eq!(
        ledger_closed(&env.ledger(), &run).unwrap().outcome,
        ledger::Outcome::Aborted
    );
    env.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(env.wait_exit(30), Some(0));
    // airlockd keeps a jail helper on standby with cgroups made for its next run; the
    // drain removes them with it.
    let left = run_cgroups_left(&base);
    assert!(left.is_empty(), "cgroups left after the drain: {left:?}");
    remove_delegated(&base);
}

/// A run's cgroup kept from removal by a tmpfs on its agent cgroup; let go when dropped.
struct Pinned(PathBuf);

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.join("agent")).status();
        let _ = airlock::sandbox::limits::kill_and_remove(&self.0);
    }
}

/// The client's answer and the closing record come once every process of the run is gone,
/// not after the run's cgroups are removed: a teardown that cannot finish (here a tmpfs
/// mounted on the run's agent cgroup, so it cannot be removed) neither holds the answer
/// back nor turns a clean exit into `aborted`; it is journaled once it has failed, and
/// the run's record says how the agent ended. Before the change the answer waited for the
/// helper's and then airlockd's own removal attempts and the record said `aborted`.
#[test]
fn the_answer_does_not_wait_for_the_teardown() {
    let (mut env, base) = delegated_env("teardown");
    env.start();
    let sock = env.sock.clone();
    let waiting = std::thread::spawn(move || {
        try_request(
            &sock,
            &json!({"v":1,"op":"launch","role":"code","instance":"tess","wait":true,
                    "command":["/usr/bin/python3","-c","import sys, time\ntime.sleep(5)\nsys.exit(7)"]}),
        )
    });
    // The run's agent cgroup, once its agent is in it (a standby's cgroups have no sides).
    let agent_cg = poll(20, || {
        std::fs::read_dir(base.join("airlock"))
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("agent"))
            .find(|a| {
                std::fs::read_to_string(a.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
            })
    });
    let Some(agent_cg) = agent_cg else {
        panic!("no agent cgroup; the launch answered {:?}", waiting.join());
    };
    let run_cg = agent_cg.parent().unwrap().to_path_buf();
    let run = run_cg.file_name().unwrap().to_string_lossy().into_owned();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4k", "airlock-test-pin"])
        .arg(&agent_cg)
        .status()
        .unwrap();
    let pin = Pinned(run_cg.clone());
    assert!(
        mounted.success(),
        "mount a tmpfs on {}: the launch answered {:?}",
        agent_cg.display(),
        waiting.join()
    );
    let answer = waiting.join().unwrap().unwrap();
    let end = exited(&answer);
    assert_eq!(end["exit_code"], 7, "{end}");
    assert_eq!(end["outcome"], "exited", "{end}");
    let closed = ledger_closed(&env.ledger(), &run).expect("the run's closing record");
    assert_eq!(closed.outcome, ledger::Outcome::Exited, "{closed:?}");
    assert_eq!(closed.exit_code, Some(7));
    // The teardown's failure is told once airlockd has given up on it.
    let told = poll(60, || {
        env.daemon_fallback()
            .lines()
            .find(|l| l.contains(&run) && l.contains("removing what was left of it failed"))
            .map(str::to_string)
    });
    drop(pin);
    assert!(told.is_some(), "{}", env.daemon_fallback());
    env.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(env.wait_exit(30), Some(0));
    let left = run_cgroups_left(&base);
    assert!(left.is_empty(), "cgroups left: {left:?}");
    remove_delegated(&base);
}

/// Launches still being decided when the drain starts end before airlockd exits: refused
/// ones remove what they made (run directory, helper, cgroups), started ones are stopped
/// and closed. Without the wait, a runner abandoned by a late refusal was cut off by the
/// exit and left its run cgroups behind, with no ledger record to recover them from.
#[test]
fn a_drain_waits_for_launches_being_decided() {
    let (mut env, base) = delegated_env("drain");
    for round in 0..5 {
        env.start();
        std::thread::scope(|s| {
            for _ in 0..6 {
                // Refused, started or cut off by the drain: any answer, or none, will do.
                s.spawn(|| {
                    try_request(
                        &env.sock,
                        &json!({"v":1,"op":"launch","role":"code","instance":"tess","command":["/bin/sleep","30"]}),
                    )
                });
            }
            std::thread::sleep(Duration::from_millis(2 + round));
            env.signal(nix::sys::signal::Signal::SIGTERM);
        });
        assert_eq!(env.wait_exit(60), Some(0), "{}", env.stderr());
        let left = run_cgroups_left(&base);
        assert!(left.is_empty(), "round {round}: run cgroups left: {left:?}");
        assert!(
            ledger::open_runs(&env.ledger()).unwrap().is_empty(),
            "round {round}: a run was left open"
        );
    }
    remove_delegated(&base);
}

/// Ctrl-C on `airlockctl launch --wait` through a real airlockd: the first detaches (the
/// run goes on, and the terminal says how to stop it), a second within the window stops
/// the run and waits for its end.
#[test]
fn ctrl_c_on_launch_wait_detaches_and_twice_stops() {
    use nix::sys::signal::Signal;
    use std::io::{BufRead, BufReader};
    let mut env = Env::new(Opts {
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let ctl = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
        c.arg("--config").arg(&env.cfg);
        c
    };
    let sleeping = || {
        poll(30, || {
            pids(env.uid)
                .iter()
                .any(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "sleep")
                })
                .then_some(())
        })
        .is_some()
    };
    let start = || {
        let mut child = ctl()
            .args([
                "launch",
                "code",
                "--instance",
                "tess",
                "--wait",
                "--",
                "/bin/sleep",
                "60",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut run = String::new();
        err.read_line(&mut run).unwrap();
        assert!(sleeping(), "the run's agent never started");
        (child, err, run.trim().to_string())
    };
    let line = |err: &mut BufReader<std::process::ChildStderr>| {
        let mut l = String::new();
        err.read_line(&mut l).unwrap();
        l
    };
    let sig = |child: &std::process::Child, s: Signal| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), s).unwrap()
    };

    // Once: detached; the run goes on under airlockd.
    let (mut child, mut err, run) = start();
    sig(&child, Signal::SIGINT);
    let said = line(&mut err);
    assert!(
        said.contains(&format!("detached; the run goes on: airlockctl stop {run}")),
        "{said}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let ps = env.one(json!({"v":1,"op":"ps"}));
    assert_eq!(ps["data"]["runs"][0]["run"], run.as_str(), "{ps}");
    let o = ctl().args(["stop", &run]).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let c = poll(30, || ledger_closed(&env.ledger(), &run)).expect("stopped and closed");
    assert_eq!(c.outcome, ledger::Outcome::Stopped, "{}", c.reason);

    // Twice: the run is stopped, and airlockctl exits with its code once it has ended.
    let (mut child, mut err, run) = start();
    sig(&child, Signal::SIGINT);
    assert!(line(&mut err).contains("detached"));
    sig(&child, Signal::SIGINT);
    assert!(line(&mut err).contains(&format!("stopping run {run}")));
    assert_eq!(child.wait().unwrap().code(), Some(143));
    let c = ledger_closed(&env.ledger(), &run).expect("closed before the exit frame");
    assert_eq!(c.outcome, ledger::Outcome::Stopped, "{}", c.reason);
    assert!(c.reason.contains("stop requested by uid 0"), "{}", c.reason);
}

#[test]
fn a_run_through_airlockd_gets_its_gateway_and_its_bash_tool() {
    common::require_journald();
    let mut env = Env::new(Opts::default());
    env.start();
    let argv = common::mcp_agent(&json!([
        {"list": "tools"},
        {"call": "bash", "args": {"command": "ls -a"}},
        {"call": "bash", "args": {"command": "rm -rf /"}},
    ]));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let r = env.launch("tess", &argv, json!({"wait": true}));
    assert_eq!(exited(&r)["exit_code"], 0, "{r:?}");
    let out = stdout_of(&r);
    let lines: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(common::step(&lines, 0)["tools"], json!(["bash"]), "{out}");
    let ls = &common::step(&lines, 1)["structured"];
    assert_eq!(ls["exit_code"], 0, "{ls}");
    assert!(ls["stdout"].as_str().unwrap().contains(".."), "{ls}");
    assert_eq!(common::step(&lines, 2)["isError"], true);
    let run = run_id(&r);
    let calls = common::events(&run, "tool_call", 2);
    let decisions: Vec<&str> = calls
        .iter()
        .map(|c| c["AIRLOCK_DECISION"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["allow", "deny"]);
}

#[test]
fn a_run_through_airlockd_reaches_a_stdio_connector_through_its_gateway() {
    let pkg = common::require_npm("@modelcontextprotocol/server-everything");
    let conn_uid = 1_880_094_970 + std::process::id() % 9;
    let mut env = Env::new(Opts {
        copy_roles: true,
        extra: format!(
            "mcp_connectors:\n  everything: {{command: [/usr/bin/node, {}, stdio], uid: {conn_uid}}}\n",
            pkg.join("dist/index.js").display()
        ),
        ..Opts::default()
    });
    let role = env.roles.join("code/role.yaml");
    let text = std::fs::read_to_string(&role).unwrap();
    std::fs::write(
        &role,
        text.replacen("tools:\n", "tools:\n  everything: [echo]\n", 1)
            .replacen(
                "  mcp:\n",
                "  mcp:\n    everything:\n      via: airlock\n",
                1,
            ),
    )
    .unwrap();
    env.start();
    let argv = common::mcp_agent(&json!({"server": "everything", "steps": [
        {"list": "tools"},
        {"call": "echo", "args": {"message": "through airlockd"}},
        {"call": "get-env"},
    ]}));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let r = env.launch("tess", &argv, json!({"wait": true}));
    assert_eq!(exited(&r)["exit_code"], 0, "{r:?}");
    let out = stdout_of(&r);
    let lines: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(common::step(&lines, 0)["tools"], json!(["echo"]), "{out}");
    assert_eq!(common::step(&lines, 1)["text"], "Echo: through airlockd");
    assert_eq!(common::step(&lines, 2)["isError"], true);
    assert!(
        poll(50, || pids(conn_uid).is_empty().then_some(())).is_some(),
        "a connector process outlived its run"
    );
}

/// The lease records of `run` in the ledger: (issued, revoked) with each revocation's reason.
fn lease_records(path: &Path, run: &str) -> (Vec<String>, Vec<(String, String)>) {
    let mut issued = Vec::new();
    let mut revoked = Vec::new();
    for r in ledger::records(path).unwrap() {
        match r.event {
            ledger::LedgerEvent::LeaseIssued(l) if l.run == run => issued.push(l.lease),
            ledger::LedgerEvent::LeaseRevoked(l) if l.run == run => {
                revoked.push((l.lease, l.reason))
            }
            _ => {}
        }
    }
    (issued, revoked)
}

/// The run's leases as the lease store holds them, and whether they are still open.
fn stored_leases(env: &Env, run: &str) -> (Vec<Value>, bool) {
    let open = env.state.join(format!("leases/{run}.json"));
    let done = env.state.join(format!("leases/done/{run}.json"));
    let (path, is_open) = if open.exists() {
        (open, true)
    } else {
        (done, false)
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (serde_json::from_str(&text).unwrap(), is_open)
}

fn looping_agent() -> Vec<String> {
    common::provider_agent(&json!([
        {"op": "loop", "api": "anthropic", "model": "claude-sonnet-4-5", "seconds": 60}
    ]))
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_fire_during_a_live_run_stops_it_and_its_token_is_refused_at_once() {
    common::require_journald();
    let si = common::StandIn::start();
    let mut env = Env::new(Opts {
        extra: si.config(),
        ..Opts::default()
    });
    env.start();
    let argv = looping_agent();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = run_id(&env.launch("tess", &argv, json!({})));
    assert!(
        poll(20, || (si.requests().len() >= 2).then_some(())).is_some(),
        "the agent never reached its model"
    );
    let f = env.one(json!({"v":1,"op":"fire","instance":"tess"}));
    let replied = now_s();
    assert_eq!(f["ok"], true, "{f}");
    let lease = format!("run/{run}/provider/1");
    assert_eq!(f["data"]["revoked"], json!([lease]), "{f}");
    assert_eq!(f["data"]["pending"], json!([]));
    // The agent ignores SIGTERM and keeps calling through the grace period: every call
    // after the fire is refused by the gateway, and none reaches the provider.
    let c = poll(30, || ledger_closed(&env.ledger(), &run)).expect("the fired run ended");
    assert_eq!(c.outcome, ledger::Outcome::Stopped, "{c:?}");
    let late: Vec<Value> = si
        .requests()
        .into_iter()
        .filter(|r| r["t"].as_f64().unwrap() > replied)
        .collect();
    assert!(
        late.is_empty(),
        "requests reached the provider after the fire: {late:?}"
    );
    let refused: Vec<Value> = common::events(&run, "provider", 1)
        .into_iter()
        .filter(|e| e["AIRLOCK_DECISION"] == "deny" && e["AIRLOCK_RULE"] == "lease")
        .collect();
    assert!(!refused.is_empty(), "no call was made after the fire");
    assert!(refused
        .iter()
        .all(|e| e["MESSAGE"].as_str().unwrap().contains("revoked")));
    // Revoked in the store and the ledger, once, saying why.
    let (leases, open) = stored_leases(&env, &run);
    assert!(!open);
    assert_eq!(leases[0]["state"], "revoked");
    assert!(leases[0]["revoke_reason"]
        .as_str()
        .unwrap()
        .contains("fired"));
    let (issued, revoked) = lease_records(&env.ledger(), &run);
    assert_eq!(issued, vec![lease.clone()]);
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert!(revoked[0].1.contains("was fired"), "{revoked:?}");
    // `instances` shows no lease left for the fired instance.
    let list = env.one(json!({"v":1,"op":"instances"}));
    let tess = list["data"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["instance"] == "tess")
        .cloned()
        .unwrap();
    assert!(tess.get("leases").is_none(), "{tess}");
}

/// Makes a file immutable (chattr +i) until dropped: a write through an open descriptor
/// then fails with EPERM, as on a failing disk.
struct Immutable(PathBuf);

impl Immutable {
    fn set(p: &Path) -> Immutable {
        let st = Command::new("chattr").arg("+i").arg(p).status().unwrap();
        assert!(st.success(), "chattr +i {}", p.display());
        Immutable(p.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn a_fire_cut_short_by_a_crash_completes_after_the_restart_and_never_claims_more() {
    let si = common::StandIn::start();
    let mut env = Env::new(Opts {
        extra: si.config(),
        no_journald: true,
        ..Opts::default()
    });
    env.start();
    let argv = looping_agent();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = run_id(&env.launch("tess", &argv, json!({})));
    assert!(poll(20, || (si.requests().len() >= 2).then_some(())).is_some());
    let lease = format!("run/{run}/provider/1");
    // The ledger cannot take the revocation: the fire stops the run, refuses its token,
    // and says the revocation is not done.
    let guard = Immutable::set(&env.ledger());
    let f = env.one(json!({"v":1,"op":"fire","instance":"tess"}));
    assert_eq!(f["ok"], true, "{f}");
    assert_eq!(f["data"]["revoked"], json!([]), "{f}");
    assert!(f["data"]["revocation_error"].is_string(), "{f}");
    let served = si.requests().len();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        si.requests().len(),
        served,
        "the token still worked after the fire"
    );
    // airlockd dies before anything more is written.
    let mut child = env.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    drop(guard);
    let (leases, open) = stored_leases(&env, &run);
    assert!(open, "reported revoked before it was");
    assert_eq!(leases[0]["state"], "active");
    assert!(lease_records(&env.ledger(), &run).1.is_empty());

    env.start();
    let (leases, open) = stored_leases(&env, &run);
    assert!(!open);
    assert_eq!(leases[0]["state"], "revoked");
    let (_, revoked) = lease_records(&env.ledger(), &run);
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert_eq!(revoked[0].0, lease);
    assert!(
        revoked[0].1.contains("was fired") && revoked[0].1.contains("airlockd's start"),
        "{revoked:?}"
    );
    let c = ledger_closed(&env.ledger(), &run).expect("closed by recovery");
    assert_eq!(c.outcome, ledger::Outcome::Aborted);
    assert!(ledger::verify(&env.ledger()).is_ok());
}
