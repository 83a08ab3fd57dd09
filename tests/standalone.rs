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
    root: PathBuf,
    cfg: PathBuf,
    state: PathBuf,
    roles: PathBuf,
}

impl Env {
    /// Instance `tess` of role `code` (a copy of the shipped roles, so tests may edit it),
    /// journald pointed at a socket that does not exist.
    fn new() -> Env {
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
                "roles: [{roles}]\npolicies: {policies}\nstate_dir: state\nsocket: {root}/airlockd.sock\njournal_socket: {root}/no-journald.socket\nuid_range: 1880093000-1880093999\nlimits: {{max_procs: 64}}\ninstances:\n  tess: {{role: code, uid: {uid}}}\n",
                roles = roles.display(),
                policies = repo.join("policies").display(),
                root = root.display(),
            ),
        )
        .unwrap();
        Env {
            state: root.join("state"),
            _dir: dir,
            root,
            cfg,
            roles,
        }
    }

    fn launch(&self, extra: &[&str], argv: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlockctl"))
            .arg("--config")
            .arg(&self.cfg)
            .args(["launch", "code", "--instance", "tess", "--standalone"])
            .args(extra)
            .arg("--")
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
        assert_eq!(opened.role, "code");
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
    // The refused launch opened no record and created no run directory.
    assert_eq!(ledger::records(&env.ledger()).unwrap().len(), 2);
    assert_eq!(
        std::fs::read_dir(env.state.join("runs")).unwrap().count(),
        1
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
