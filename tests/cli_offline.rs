//! `airlockctl` as a user runs it: the offline subcommands against the shipped roles and
//! policies, and the daemon subcommands against a fake airlockd (a UnixListener thread that
//! speaks the protocol), checking exit codes, output and `--json` shapes.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread::JoinHandle;

use airlock::control::protocol::{parse_request, Op};
use airlock::supervisor::ledger::{Ledger, LedgerEvent, Outcome, RunClosed, RunOpened};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// airlockctl with the shipped roles and policies and a config in `dir` (never
/// /etc/airlock, so the host's install cannot change the result).
fn ctl(dir: &Path) -> Command {
    let config = dir.join("airlock.yaml");
    if !config.exists() {
        write_config(dir, &[repo().join("roles")], &[]);
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
    cmd.arg("--config").arg(config);
    cmd
}

fn write_config(dir: &Path, roles: &[PathBuf], instances: &[(&str, &str)]) {
    let roles: Vec<String> = roles.iter().map(|r| r.display().to_string()).collect();
    let mut text = format!(
        "roles: {}\npolicies: {}\nstate_dir: {}\nsocket: {}\ninstances:\n",
        serde_json::to_string(&roles).unwrap(),
        repo().join("policies").display(),
        dir.join("state").display(),
        dir.join("missing.sock").display(),
    );
    if instances.is_empty() {
        text.push_str("  {}\n");
    }
    for (name, role) in instances {
        text.push_str(&format!("  {name}: {{role: {role}}}\n"));
    }
    std::fs::write(dir.join("airlock.yaml"), text).unwrap();
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("airlockctl runs");
    (
        status.code().expect("exited, not killed"),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[test]
fn validate_accepts_the_shipped_roles() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(ctl(dir.path()).args(["validate"]));
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run(ctl(dir.path()).args(["validate", "--json"]));
    assert_eq!(code, 0);
    let v = json_of(&out);
    assert_eq!(v["valid"], true);
    assert!(v["roles"].as_array().unwrap().len() >= 9);
    assert!(v["roles"][0]["role"].is_string());
    assert_eq!(v["problems"], json!([]));
}

#[test]
fn validate_names_file_and_key_of_a_broken_role_without_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    copy_role("code", &roles);
    let file = roles.join("code/role.yaml");
    let secret = "ghp_SECRETSECRETSECRETSECRET0123456789";
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("level: L3", &format!("level: {secret}"));
    std::fs::write(&file, text).unwrap();
    write_config(dir.path(), std::slice::from_ref(&roles), &[]);

    let (code, out, err) = run(ctl(dir.path()).args(["validate"]));
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(!all.contains(secret), "{all}");
    let line = all
        .lines()
        .find(|l| l.contains("role.yaml") && l.contains("level"))
        .unwrap_or_else(|| panic!("no line naming role.yaml and `level`: {all}"));
    assert!(line.contains(&file.display().to_string()), "{line}");

    let (code, out, _) = run(ctl(dir.path()).args(["validate", "--json"]));
    assert_eq!(code, 1);
    let v = json_of(&out);
    assert_eq!(v["valid"], false);
    assert!(v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["path"] == "level" && p["file"] == file.display().to_string()));
    assert!(!out.contains(secret));
}

#[test]
fn explain_shows_a_role_and_refuses_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = run(ctl(dir.path()).args(["explain", "code", "--json"]));
    assert_eq!(code, 0);
    assert!(json_of(&out).is_object());
    let (code, out, _) = run(ctl(dir.path()).args(["explain", "code"]));
    assert_eq!(code, 0);
    assert!(out.contains("code"));
    let (code, _, err) = run(ctl(dir.path()).args(["explain", "no-such-role"]));
    assert_ne!(code, 0);
    assert!(err.contains("no valid role"), "{err}");
}

#[test]
fn check_bash_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(ctl(dir.path()).args(["check", "code", "bash", "git status"]));
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run(ctl(dir.path()).args(["check", "code", "bash", "rm -rf /"]));
    assert_eq!(code, 1, "{out}{err}");
    let (code, out, _) = run(ctl(dir.path()).args([
        "check",
        "code",
        "bash",
        "curl https://example.com",
        "--json",
    ]));
    assert_eq!(code, 1);
    let v = json_of(&out);
    assert_eq!(v["allow"], false);
    assert!(v["rule"].is_string() && v["reason"].is_string());
    // Usage errors: a missing argument, and arguments that are not JSON.
    let (code, _, _) = run(ctl(dir.path()).args(["check", "code", "bash"]));
    assert_eq!(code, 2);
    let (code, _, _) = run(ctl(dir.path()).args([
        "check",
        "code",
        "tool",
        "github",
        "create_pull_request",
        "{not json",
    ]));
    assert_eq!(code, 2);
}

/// Copy a shipped role folder into `roles`.
fn copy_role(name: &str, roles: &Path) {
    let from = repo().join("roles").join(name);
    let to = roles.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn timers_for_a_scheduled_role() {
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    copy_role("code", &roles);
    copy_role("review", &roles);
    let file = roles.join("code/role.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nrun:\n"), "the code role has a run section");
    std::fs::write(
        &file,
        text.replace("\nrun:\n", "\nrun:\n  schedule: \"30 6 * * 1-5\"\n"),
    )
    .unwrap();
    write_config(
        dir.path(),
        std::slice::from_ref(&roles),
        &[("tess", "code"), ("rex", "review")],
    );
    let out_dir = dir.path().join("units");

    let (code, out, err) = run(ctl(dir.path()).args(["timers", "--output"]).arg(&out_dir));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("systemctl daemon-reload"), "{out}");
    let timer = std::fs::read_to_string(out_dir.join("airlock-run@tess.timer")).unwrap();
    assert!(
        timer.contains("\nOnCalendar=Mon,Tue,Wed,Thu,Fri *-*-* 06:30:00 UTC\n"),
        "{timer}"
    );
    assert!(timer.contains("\nPersistent=true\n"));
    assert!(timer.contains("\nUnit=airlock-run@tess.service\n"));
    let dropin =
        std::fs::read_to_string(out_dir.join("airlock-run@tess.service.d/role.conf")).unwrap();
    assert!(
        dropin.contains("\nEnvironment=AIRLOCK_ROLE=code\n"),
        "{dropin}"
    );
    // The unscheduled role gets nothing.
    assert!(!out_dir.join("airlock-run@rex.timer").exists());

    // JSON, and an instance whose schedule went away loses the timer this command wrote.
    write_config(
        dir.path(),
        std::slice::from_ref(&roles),
        &[("rex", "review")],
    );
    let (code, out, _) = run(ctl(dir.path())
        .args(["timers", "--json", "--output"])
        .arg(&out_dir));
    assert_eq!(code, 0);
    let v = json_of(&out);
    assert_eq!(v["written"], json!([]));
    assert_eq!(v["removed"].as_array().unwrap().len(), 2, "{v}");
    assert!(!out_dir.join("airlock-run@tess.timer").exists());

    // An operator's own file is never replaced.
    write_config(
        dir.path(),
        std::slice::from_ref(&roles),
        &[("tess", "code")],
    );
    std::fs::write(out_dir.join("airlock-run@tess.timer"), "[Timer]\n").unwrap();
    let (code, _, err) = run(ctl(dir.path()).args(["timers", "--output"]).arg(&out_dir));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not written by airlockctl timers"), "{err}");

    // An instance of a role that does not exist: nothing written, exit 1.
    write_config(dir.path(), &[roles], &[("ghost", "no-such-role")]);
    let (code, _, err) = run(ctl(dir.path()).args(["timers", "--output"]).arg(&out_dir));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("instances.ghost.role"), "{err}");
}

fn opened(run: &str) -> LedgerEvent {
    LedgerEvent::RunOpened(RunOpened {
        run: run.into(),
        launched_by_uid: 0,
        role: "code".into(),
        instance: "tess".into(),
        uid: 1_880_000_001,
        level: airlock::role::Level::L3,
        budgets: json!({}),
        started_at: 1_700_000_000_000,
        deadline_s: 60,
        role_sha256: None,
        rev: None,
        image: None,
        image_digest: None,
    })
}

#[test]
fn verify_ledger_counts_and_names_the_first_broken_record() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let path = state.join("ledger.jsonl");
    {
        let mut ledger = Ledger::open(&path).unwrap();
        ledger.append(opened("r1")).unwrap();
        ledger
            .append(LedgerEvent::RunClosed(RunClosed {
                run: "r1".into(),
                ended_at: 1_700_000_001_000,
                outcome: Outcome::Exited,
                exit_code: Some(0),
                signal: None,
                reason: "exited".into(),
                calls: None,
                spend: None,
                github: None,
                egress: None,
            }))
            .unwrap();
        ledger.append(opened("r2")).unwrap();
    }
    // Default path: <state_dir>/ledger.jsonl from the config.
    let (code, out, err) = run(ctl(dir.path()).args(["verify-ledger"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("3 records"), "{out}");
    let (code, out, _) = run(ctl(dir.path()).args(["verify-ledger", "--json"]));
    assert_eq!(code, 0);
    assert_eq!(json_of(&out)["records"], 3);

    let text = std::fs::read_to_string(&path).unwrap();
    let tampered = text.replacen("\"r2\"", "\"r3\"", 1);
    assert_ne!(text, tampered);
    let copy = dir.path().join("tampered.jsonl");
    std::fs::write(&copy, tampered).unwrap();
    let (code, out, _) = run(ctl(dir.path())
        .args(["verify-ledger", "--ledger"])
        .arg(&copy));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("record 3"), "{out}");
    let (code, out, _) = run(ctl(dir.path())
        .args(["verify-ledger", "--json", "--ledger"])
        .arg(&copy));
    assert_eq!(code, 1);
    assert_eq!(json_of(&out)["broken"]["seq"], 3);

    let (code, _, _) = run(ctl(dir.path())
        .args(["verify-ledger", "--ledger"])
        .arg(dir.path().join("nope.jsonl")));
    assert_eq!(code, 2);
}

/// Commands that need airlockd say that it is not running and how to start it; only
/// launch, which has a way without it, mentions --standalone.
#[test]
fn a_missing_socket_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    // A run in the ledger, so `stop` gets past "no such run".
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    let mut ledger = Ledger::open(&dir.path().join("state/ledger.jsonl")).unwrap();
    ledger.append(opened("r-open")).unwrap();
    drop(ledger);
    for args in [
        vec!["hire", "bob", "--role", "code"],
        vec!["fire", "bob"],
        vec!["reload"],
        vec!["launch", "code", "--instance", "tess", "--", "/bin/true"],
    ] {
        let (code, _, err) = run(ctl(dir.path()).args(&args));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("airlockd is not running"), "{args:?}: {err}");
        assert!(err.contains("systemctl start airlockd"), "{args:?}: {err}");
        assert_eq!(
            err.contains("--standalone"),
            args[0] == "launch",
            "{args:?}: {err}"
        );
    }
    // A run whose supervisor is gone (no alive file) has nothing left to stop.
    let (code, _, err) = run(ctl(dir.path()).args(["stop", "r-open"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("airlockd is not running"), "{err}");
    assert!(err.contains("systemctl start airlockd"), "{err}");
    assert!(err.contains("nothing to stop"), "{err}");
    // status: one line, and systemctl's exit code for an inactive service.
    let (code, out, err) = run(ctl(dir.path()).arg("status"));
    assert_eq!(code, 3, "{err}");
    assert_eq!(out, "");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("airlockd is not running"), "{err}");
    assert!(err.contains("systemctl start airlockd"), "{err}");
}

/// `runs`, `show`, `ps`, `instances` and `logs` read the files when airlockd is not
/// running: a real ledger (written by the ledger's own appender), the registry, the
/// journal's fallback file. Each says once that it read offline.
#[test]
fn read_commands_read_the_files_without_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &[repo().join("roles")], &[("tess", "code")]);
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    let mut ledger = Ledger::open(&dir.path().join("state/ledger.jsonl")).unwrap();
    ledger.append(opened("r-done")).unwrap();
    ledger
        .append(LedgerEvent::RunClosed(RunClosed {
            run: "r-done".into(),
            ended_at: 1_700_000_065_000,
            outcome: Outcome::Interrupted,
            exit_code: Some(143),
            signal: Some(15),
            reason: "stopped: SIGINT to its supervisor".into(),
            calls: None,
            spend: None,
            github: None,
            egress: None,
        }))
        .unwrap();
    // Open, and no supervisor holds it (no alive file): nobody supervises it.
    ledger.append(opened("r-left")).unwrap();
    drop(ledger);
    let offline = "airlockd is not running; reading";

    let (code, out, err) = run(ctl(dir.path()).arg("runs"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches(offline).count(), 1, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[1].starts_with("r-done") && lines[1].contains("interrupted"),
        "{out}"
    );
    assert!(lines[1].ends_with("signal 15"), "{out}");
    assert!(
        lines[2].starts_with("r-left") && lines[2].contains("unsupervised"),
        "{out}"
    );

    let (code, out, _) = run(ctl(dir.path()).args(["runs", "--last", "1", "--json"]));
    assert_eq!(code, 0);
    let j = json_of(&out);
    assert_eq!(j["more"], true);
    assert_eq!(j["runs"].as_array().unwrap().len(), 1);
    assert_eq!(j["runs"][0]["run"], "r-left");

    let (code, out, err) = run(ctl(dir.path()).args(["show", "r-done", "--json"]));
    assert_eq!(code, 0, "{err}");
    let j = json_of(&out);
    assert_eq!(j["run"]["state"], "interrupted");
    assert_eq!(j["run"]["exit_code"], 143);
    assert_eq!(j["run"]["ended_at"], 1_700_000_065_000u64);
    let (code, out, _) = run(ctl(dir.path()).args(["show", "r-left"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("unsupervised") && out.contains("closes the record as aborted"),
        "{out}"
    );

    // Nothing is supervised: no active runs, none per instance.
    let (code, out, err) = run(ctl(dir.path()).arg("ps"));
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(
        err.contains("no active runs") && err.contains(offline),
        "{err}"
    );
    let (code, out, err) = run(ctl(dir.path()).args(["instances", "--json"]));
    assert_eq!(code, 0, "{err}");
    let j = json_of(&out);
    assert_eq!(j["instances"][0]["instance"], "tess");
    assert_eq!(j["instances"][0]["source"], "config");
    assert_eq!(j["instances"][0]["active_runs"], 0);

    // Unknown runs are named, and exit 1.
    for cmd in ["show", "logs", "stop"] {
        let (code, _, err) = run(ctl(dir.path()).args([cmd, "r-nowhere"]));
        assert_eq!(code, 1, "{cmd}: {err}");
        assert!(
            err.contains("no run r-nowhere in the ledger"),
            "{cmd}: {err}"
        );
    }
    // An ended run cannot be stopped, and stop says so.
    let (code, _, err) = run(ctl(dir.path()).args(["stop", "r-done"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not active") && err.contains("interrupted"),
        "{err}"
    );
}

/// A fake airlockd: accepts one connection, checks the request parses as the protocol says,
/// answers with `replies` (one per line) and hands the request back.
fn fake_daemon(replies: Vec<Value>) -> (tempfile::TempDir, PathBuf, JoinHandle<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("airlockd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let handle = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut line = Vec::new();
        BufReader::new(conn.try_clone().unwrap())
            .read_until(b'\n', &mut line)
            .unwrap();
        assert_eq!(line.last(), Some(&b'\n'), "one request line");
        let request = parse_request(line.trim_ascii_end()).expect("a valid request");
        for r in replies {
            // The client may stop reading early (launch without --wait).
            let _ = conn.write_all(format!("{r}\n").as_bytes());
        }
        request.op
    });
    (dir, socket, handle)
}

fn ok(data: Value) -> Value {
    json!({"v": 1, "ok": true, "data": data})
}

fn client(socket: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
    cmd.arg("--socket").arg(socket);
    cmd
}

fn run_info(run: &str, state: &str) -> Value {
    json!({
        "run": run, "role": "code", "instance": "tess", "uid": 1880000001,
        "launched_by_uid": 0, "state": state, "started_at": 1700000000000u64,
        "deadline_s": 1800
    })
}

#[test]
fn ps_lists_runs_in_columns_and_as_json() {
    let (_d, socket, h) = fake_daemon(vec![ok(
        json!({"runs": [run_info("r-short", "running"), run_info("r-much-longer-id", "running")]}),
    )]);
    let (code, out, err) = run(client(&socket).arg("ps"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(h.join().unwrap(), Op::Ps);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("RUN "));
    // Columns line up: ROLE starts at the same offset on every line.
    let col = lines[0].find("ROLE").unwrap();
    assert_eq!(lines[1].find("code"), Some(col), "{out}");
    assert_eq!(lines[2].find("code"), Some(col), "{out}");
    assert!(lines[1].contains("2023-11-14 22:13:20"), "{out}");

    let (_d, socket, h) = fake_daemon(vec![ok(json!({"runs": [run_info("r1", "running")]}))]);
    let (code, out, _) = run(client(&socket).args(["ps", "--json"]));
    assert_eq!(code, 0);
    h.join().unwrap();
    assert_eq!(json_of(&out)["runs"][0]["run"], "r1");
}

#[test]
fn status_prints_the_daemon_state() {
    let status = json!({
        "version": "0.1.0", "pid": 4242, "active_runs": 3, "max_concurrent_runs": 16,
        "draining": false, "roles": 9, "loaded_at": 1700000000000u64, "ledger_records": 12
    });
    let (_d, socket, h) = fake_daemon(vec![ok(status.clone())]);
    let (code, out, err) = run(client(&socket).arg("status"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(h.join().unwrap(), Op::Status);
    assert!(out.contains("4242"), "{out}");
    assert!(out.contains("3 of at most 16"), "{out}");

    let (_d, socket, _h) = fake_daemon(vec![ok(status.clone())]);
    let (code, out, _) = run(client(&socket).args(["status", "--json"]));
    assert_eq!(code, 0);
    assert_eq!(json_of(&out), status);

    // An answer of the wrong shape is an error, not a guess.
    let (_d, socket, _h) = fake_daemon(vec![ok(json!({"pid": "x"}))]);
    let (code, _, err) = run(client(&socket).arg("status"));
    assert_eq!(code, 2, "{err}");
}

#[test]
fn launch_wait_streams_output_and_exits_with_the_run_code() {
    let frames = vec![
        ok(json!({"frame": "started", "run": "r-42"})),
        ok(json!({"frame": "output", "stream": "stdout", "data": "hello\n"})),
        ok(json!({"frame": "output", "stream": "stderr", "data": "warn\n"})),
        ok(json!({"frame": "output", "stream": "stdout", "data": "world\n"})),
        ok(
            json!({"frame": "exited", "run": "r-42", "exit_code": 3, "outcome": "exited", "reason": "exited with 3"}),
        ),
    ];
    let (_d, socket, h) = fake_daemon(frames);
    let (code, out, err) = run(client(&socket).args([
        "launch",
        "code",
        "--instance",
        "tess",
        "--wait",
        "--max-seconds",
        "5",
        "--",
        "/bin/echo",
        "hi",
    ]));
    assert_eq!(code, 3, "{err}");
    assert_eq!(out, "hello\nworld\n");
    assert!(err.starts_with("r-42\n"), "{err}");
    assert!(err.contains("warn\n"), "{err}");
    assert_eq!(
        h.join().unwrap(),
        Op::Launch {
            role: "code".into(),
            instance: "tess".into(),
            workspace: None,
            max_seconds: Some(5),
            command: Some(vec!["/bin/echo".into(), "hi".into()]),
            wait: true,
            tty: None,
        }
    );

    // A deadline kill: the exit code is 128 + signal and the reason is shown.
    let (_d, socket, _h) = fake_daemon(vec![
        ok(json!({"frame": "started", "run": "r-43"})),
        ok(
            json!({"frame": "exited", "run": "r-43", "exit_code": 137, "outcome": "timed_out", "reason": "deadline of 5 s reached"}),
        ),
    ]);
    let (code, _, err) =
        run(client(&socket).args(["launch", "code", "--instance", "tess", "--wait"]));
    assert_eq!(code, 137);
    assert!(err.contains("timed_out"), "{err}");

    // The daemon going away mid-run is an error that says where to look.
    let (_d, socket, _h) = fake_daemon(vec![ok(json!({"frame": "started", "run": "r-44"}))]);
    let (code, _, err) =
        run(client(&socket).args(["launch", "code", "--instance", "tess", "--wait"]));
    assert_eq!(code, 2);
    assert!(err.contains("airlockctl show r-44"), "{err}");
}

#[test]
fn launch_without_wait_prints_the_run_id() {
    let (_d, socket, h) = fake_daemon(vec![ok(json!({"frame": "started", "run": "r-7"}))]);
    let (code, out, err) = run(client(&socket).args(["launch", "code", "--instance", "tess"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "r-7\n");
    match h.join().unwrap() {
        Op::Launch { wait, command, .. } => {
            assert!(!wait);
            assert_eq!(command, None);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn daemon_refusals_map_to_exit_codes() {
    let err = |code: &str, msg: &str| json!({"v": 1, "ok": false, "error": {"code": code, "message": msg}});
    for (code_name, args, want) in [
        ("not-found", vec!["show", "r-x"], 1),
        ("forbidden", vec!["hire", "bob", "--role", "code"], 1),
        (
            "refused",
            vec!["launch", "code", "--instance", "tess", "--wait"],
            1,
        ),
        ("draining", vec!["launch", "code", "--instance", "tess"], 2),
        ("internal", vec!["reload"], 2),
    ] {
        let (_d, socket, _h) = fake_daemon(vec![err(code_name, "said \u{1b}[2J why")]);
        let (code, _, stderr) = run(client(&socket).args(&args));
        assert_eq!(code, want, "{code_name}: {stderr}");
        // A missing run is named by the id asked for; other refusals give airlockd's why.
        if args[0] == "show" {
            assert!(stderr.contains("no run r-x in the ledger"), "{stderr}");
        } else {
            assert!(stderr.contains("why"), "{stderr}");
        }
        // Terminal control bytes from the peer are escaped.
        assert!(!stderr.contains('\u{1b}'), "{stderr}");
    }
}

#[test]
fn show_and_instances_and_confirmations() {
    let mut closed = run_info("r-9", "timed_out");
    closed["ended_at"] = json!(1700000065000u64);
    closed["exit_code"] = json!(137);
    closed["signal"] = json!(9);
    closed["reason"] = json!("deadline reached");
    let (_d, socket, h) = fake_daemon(vec![ok(json!({"run": closed}))]);
    let (code, out, _) = run(client(&socket).args(["show", "r-9"]));
    assert_eq!(code, 0);
    assert_eq!(h.join().unwrap(), Op::Show { run: "r-9".into() });
    assert!(
        out.contains("timed_out") && out.contains("deadline reached"),
        "{out}"
    );
    assert!(out.contains("1m05s"), "{out}");

    let inst = json!({"instances": [{"instance": "tess", "role": "code", "uid": 1880000001,
        "source": "config", "fired": false, "active_runs": 1}]});
    let (_d, socket, _h) = fake_daemon(vec![ok(inst.clone())]);
    let (code, out, _) = run(client(&socket).arg("instances"));
    assert_eq!(code, 0);
    assert!(out.starts_with("INSTANCE"), "{out}");
    assert!(out.contains("1880000001"), "{out}");
    let (_d, socket, _h) = fake_daemon(vec![ok(inst.clone())]);
    let (_, out, _) = run(client(&socket).args(["instances", "--json"]));
    assert_eq!(json_of(&out), inst);

    let (_d, socket, h) = fake_daemon(vec![ok(json!({}))]);
    let (code, out, _) = run(client(&socket).args(["hire", "bob", "--role", "review"]));
    assert_eq!(code, 0);
    assert!(out.contains("hired bob"), "{out}");
    assert_eq!(
        h.join().unwrap(),
        Op::Hire {
            instance: "bob".into(),
            role: "review".into(),
            decision: None,
        }
    );
    let (_d, socket, h) = fake_daemon(vec![ok(json!({"message": "stopping r-1"}))]);
    let (code, out, _) = run(client(&socket).args(["stop", "r-1"]));
    assert_eq!(code, 0);
    assert_eq!(out, "stopping r-1\n");
    assert_eq!(h.join().unwrap(), Op::Stop { run: "r-1".into() });
}

#[test]
fn logs_reads_the_fallback_file() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &[repo().join("roles")], &[]);
    let cfg = airlock::config::load(Some(&dir.path().join("airlock.yaml"))).unwrap();
    let run_id = "r-logs-1";
    let fallback = cfg.journal_dir();
    let journal_cfg = airlock::journal::JournalConfig {
        socket: dir.path().join("no-journald"),
        ..Default::default()
    };
    {
        let mut j = airlock::journal::RunJournal::open_with(
            airlock::journal::RunFields {
                run: run_id.into(),
                role: "code".into(),
                instance: "tess".into(),
            },
            &fallback,
            journal_cfg,
        )
        .unwrap();
        j.line(airlock::journal::Stream::Stdout, b"first line")
            .unwrap();
        j.line(airlock::journal::Stream::Stderr, b"second line")
            .unwrap();
        assert_eq!(j.sent_to_fallback(), 2);
    }
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    let mut ledger = Ledger::open(&dir.path().join("state/ledger.jsonl")).unwrap();
    ledger.append(opened(run_id)).unwrap();
    drop(ledger);
    let (code, out, err) = run(ctl(dir.path()).args(["logs", run_id]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("stdout: first line"), "{out}");
    assert!(out.contains("stderr: second line"), "{out}");
    let (code, _, _) = run(ctl(dir.path()).args(["logs", "../etc"]));
    assert_eq!(code, 2);
}

/// A fake airlockd for `launch --wait`: the first connection gets `started` and one output
/// line, then stays open; every later connection is answered `ok` and its op handed to the
/// test, and a `stop` there ends the run on the first connection (exit 143, stopped).
fn waiting_daemon() -> (tempfile::TempDir, PathBuf, std::sync::mpsc::Receiver<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("airlockd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let (ops, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read_op = |conn: &std::os::unix::net::UnixStream| {
            let mut line = Vec::new();
            BufReader::new(conn.try_clone().unwrap())
                .read_until(b'\n', &mut line)
                .unwrap();
            parse_request(line.trim_ascii_end())
                .expect("a valid request")
                .op
        };
        let (mut first, _) = listener.accept().unwrap();
        ops.send(read_op(&first)).unwrap();
        for f in [
            json!({"frame": "started", "run": "r-77"}),
            json!({"frame": "output", "stream": "stdout", "data": "ready\n"}),
        ] {
            first.write_all(format!("{}\n", ok(f)).as_bytes()).unwrap();
        }
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let op = read_op(&conn);
            let stop = matches!(op, Op::Stop { .. });
            let _ = conn.write_all(
                format!("{}\n", ok(json!({"run": "r-77", "stopping": true}))).as_bytes(),
            );
            let _ = ops.send(op);
            if stop {
                let exited = ok(json!({"frame": "exited", "run": "r-77", "exit_code": 143,
                    "outcome": "stopped", "reason": "stopped: stop requested by uid 0"}));
                let _ = first.write_all(format!("{exited}\n").as_bytes());
            }
        }
    });
    (dir, socket, seen)
}

/// `launch --wait` through the fake airlockd, once its run is going (its output is read).
fn waiting_launch(socket: &Path) -> (std::process::Child, BufReader<std::process::ChildStderr>) {
    let mut child = client(socket)
        .args(["launch", "code", "--instance", "tess", "--wait"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut id = String::new();
    err.read_line(&mut id).unwrap();
    assert_eq!(id, "r-77\n");
    (child, err)
}

fn signal(child: &std::process::Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

fn next_line(err: &mut BufReader<std::process::ChildStderr>) -> String {
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    line
}

/// Ctrl-C on a `--wait` through airlockd detaches: the terminal says so and how to stop
/// the run, nothing is sent to airlockd, and airlockctl exits 130 once the window for a
/// second Ctrl-C has passed.
#[test]
fn ctrl_c_on_launch_wait_detaches_and_says_so() {
    use nix::sys::signal::Signal;
    let (_d, socket, ops) = waiting_daemon();
    let (mut child, mut err) = waiting_launch(&socket);
    assert!(matches!(ops.recv().unwrap(), Op::Launch { wait: true, .. }));
    signal(&child, Signal::SIGINT);
    let line = next_line(&mut err);
    assert!(
        line.starts_with("airlockctl: detached; the run goes on: airlockctl stop r-77"),
        "{line}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert!(
        ops.try_recv().is_err(),
        "nothing but the launch reached airlockd"
    );

    // SIGHUP (the terminal is gone): detached at once.
    let (_d, socket, ops) = waiting_daemon();
    let (mut child, mut err) = waiting_launch(&socket);
    signal(&child, Signal::SIGHUP);
    assert!(next_line(&mut err).contains("detached; the run goes on"));
    assert_eq!(child.wait().unwrap().code(), Some(129));
    ops.recv().unwrap();
    assert!(ops.try_recv().is_err());
}

/// A second Ctrl-C soon after the first, or SIGTERM, asks airlockd to stop the run, and
/// airlockctl waits for its end and exits with the run's code.
#[test]
fn a_second_ctrl_c_or_sigterm_stops_the_run() {
    use nix::sys::signal::Signal;
    for sigs in [vec![Signal::SIGINT, Signal::SIGINT], vec![Signal::SIGTERM]] {
        let (_d, socket, ops) = waiting_daemon();
        let (mut child, mut err) = waiting_launch(&socket);
        ops.recv().unwrap();
        for (i, s) in sigs.iter().enumerate() {
            signal(&child, *s);
            let line = next_line(&mut err);
            if i + 1 < sigs.len() {
                assert!(line.contains("detached"), "{sigs:?}: {line}");
            } else {
                assert!(line.contains("stopping run r-77"), "{sigs:?}: {line}");
            }
        }
        assert_eq!(ops.recv().unwrap(), Op::Stop { run: "r-77".into() });
        assert_eq!(child.wait().unwrap().code(), Some(143), "{sigs:?}");
        let rest = std::io::read_to_string(&mut err).unwrap();
        assert!(rest.contains("run r-77 stopped"), "{rest}");
    }
}

/// A stdout whose reader is gone already, as `airlockctl ... | head -1` leaves it once
/// head has its line.
fn closed_pipe() -> std::process::Stdio {
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    w.into()
}

/// Every command that prints ends quietly when its reader goes away: exit 141 (what a
/// shell reports for SIGPIPE), no panic and no word about it on stderr.
#[test]
fn a_reader_gone_ends_every_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    write_config(dir.path(), &[repo().join("roles")], &[("tess", "code")]);
    let mut ledger = Ledger::open(&dir.path().join("state/ledger.jsonl")).unwrap();
    ledger.append(opened("r-open")).unwrap();
    drop(ledger);
    let ledger_path = dir.path().join("state/ledger.jsonl");
    let ledger_arg = ledger_path.to_str().unwrap();
    for args in [
        vec!["validate"],
        vec!["validate", "--json"],
        vec!["explain", "code"],
        vec!["explain", "code", "--json"],
        vec!["check", "code", "bash", "git status"],
        vec!["check", "code", "bash", "rm -rf /"],
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["show", "r-open"],
        vec!["instances"],
        vec!["verify-ledger", "--ledger", ledger_arg],
    ] {
        let o = ctl(dir.path())
            .args(&args)
            .stdout(closed_pipe())
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(141), "{args:?}: {err}");
        assert!(!err.contains("stdout"), "{args:?}: {err}");
    }
    // Through airlockd too.
    let (_dir, socket, _) = fake_daemon(vec![ok(json!({"message": "reloaded"}))]);
    let o = client(&socket)
        .arg("reload")
        .stdout(closed_pipe())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(141), "{err}");
}
