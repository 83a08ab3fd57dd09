//! kill -9 of airlockd in the middle of a run's work: a bash command, a streaming model
//! answer, a git push through the GitHub route. After each, the next start closes the run
//! as aborted at the time it was last known alive, revokes every lease (the GitHub token
//! DELETEd at the stand-in, from the file airlockd kept it in), and leaves no process,
//! mount, loop device, cgroup or run directory of the run; the ledger verifies.

mod common;

use std::process::{Child, Command, Stdio};

use airlock::supervisor::ledger::{self, LedgerEvent, Outcome};
use common::github::StandInGithub;
use common::*;
use serde_json::json;

/// The run of `instance` the ledger has opened.
fn run_of(h: &Host, instance: &str) -> Option<String> {
    ledger::records(&h.state.join(ledger::FILE_NAME))
        .ok()?
        .into_iter()
        .find_map(|r| match r.event {
            LedgerEvent::RunOpened(o) if o.instance == instance => Some(o.run),
            _ => None,
        })
}

/// `airlockctl launch ROLE --instance I --wait -- ARGV` through the host's airlockd, as a
/// child the test leaves running.
fn launch(h: &Host, role: &str, instance: &str, argv: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args(["launch", role, "--instance", instance, "--wait", "--"])
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Whether the stand-in still takes `token`.
fn token_works(gh: &StandInGithub, token: &str) -> bool {
    let o = Command::new("/usr/bin/curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H"])
        .arg(format!("Authorization: token {token}"))
        .arg(format!(
            "http://127.0.0.1:{}/repos/example-org/example-repo",
            gh.port
        ))
        .output()
        .unwrap();
    stdout(&o) != "401"
}

/// Every cgroup directory whose name holds `run`, to a few levels.
fn cgroups_of(run: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![(std::path::PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let p = e.path();
                if e.file_name().to_string_lossy().contains(run) {
                    found.push(p.display().to_string());
                }
                if depth < 5 {
                    dirs.push((p, depth + 1));
                }
            }
        }
    }
    found
}

/// Kill airlockd with SIGKILL, restart it, and check what is left of `run`.
fn kill9_and_recover(h: &Host, d: Airlockd, gh: &StandInGithub, run: &str, uid: u32) {
    let tokens = gh.tokens();
    assert!(!tokens.is_empty(), "the run had no GitHub token");
    assert!(
        tokens.iter().all(|t| token_works(gh, t)),
        "a token died early"
    );
    let killed_at = ledger::now_ms();
    d.kill9();
    // The jail helper sees its supervisor's end of the lifeline close and kills the run.
    assert!(
        poll(20, || airlock::supervisor::process::pids_of_uid(uid)
            .is_empty()
            .then_some(()))
        .is_some(),
        "the run outlived its supervisor"
    );
    let _d = Airlockd::start(h);
    let path = h.state.join(ledger::FILE_NAME);
    let all = ledger::records(&path).expect("the ledger verifies after the crash");
    let closed = all
        .iter()
        .find_map(|r| match &r.event {
            LedgerEvent::RunClosed(c) if c.run == run => Some(c.clone()),
            _ => None,
        })
        .expect("recovery closes the run");
    assert_eq!(closed.outcome, Outcome::Aborted, "{closed:?}");
    assert!(closed.ended_at <= killed_at, "{closed:?} after {killed_at}");
    let issued: Vec<String> = all
        .iter()
        .filter_map(|r| match &r.event {
            LedgerEvent::LeaseIssued(l) if l.run == run => Some(l.lease.clone()),
            _ => None,
        })
        .collect();
    assert!(!issued.is_empty());
    for l in &issued {
        let revoked = all.iter().any(|r| {
            matches!(&r.event, LedgerEvent::LeaseRevoked(x) if &x.lease == l && x.state == "revoked")
        });
        assert!(revoked, "lease {l} is not revoked: {all:?}");
    }
    for t in &tokens {
        assert!(
            !token_works(gh, t),
            "a GitHub token of the run is still alive"
        );
    }
    let held = airlock::credentials::github_app::held_dir(&h.state);
    assert_eq!(
        std::fs::read_dir(&held).map(|d| d.count()).unwrap_or(0),
        0,
        "a revoked token is still kept"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(run),
        "a mount of the run is left:\n{mounts}"
    );
    let loops = Command::new("losetup")
        .args(["--list", "--noheadings", "-O", "BACK-FILE"])
        .output()
        .unwrap();
    assert!(!stdout(&loops).contains(run), "{}", stdout(&loops));
    assert_eq!(cgroups_of(run), Vec::<String>::new());
    let left: Vec<String> = std::fs::read_dir(h.state.join("runs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(run))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// A host whose `code` instance may run `sleep` through its bash tool, with the stand-in
/// GitHub's App (so each run holds an installation token) and `more` config.
fn code_host(gh: &StandInGithub, more: &str) -> Host {
    let cfg = if more.is_empty() {
        gh.config()
    } else {
        gh.config_beside(more)
    };
    let h = Host::new(&[("tess", "code")], &cfg);
    h.local_role("code", |t| {
        t.replace("    - cat\n", "    - cat\n    - sleep\n")
    });
    h
}

#[test]
fn airlockd_killed_during_a_bash_command_leaves_nothing_and_revokes_every_lease() {
    require_journald();
    let gh = StandInGithub::start();
    let h = code_host(&gh, "");
    let uid = h.uids[0];
    let d = Airlockd::start(&h);
    let argv = mcp_agent(&json!([{"call": "bash", "args": {"command": "sleep 60"}}]));
    let mut ctl = launch(&h, "code", "tess", &argv);
    let sleeping = poll(30, || {
        airlock::supervisor::process::pids_of_uid(uid)
            .into_iter()
            .any(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"sleep\x0060"))
            })
            .then_some(())
    });
    assert!(sleeping.is_some(), "the bash command never ran");
    let run = run_of(&h, "tess").expect("the run is in the ledger");
    kill9_and_recover(&h, d, &gh, &run, uid);
    let _ = ctl.kill();
    let _ = ctl.wait();
}

#[test]
fn airlockd_killed_during_a_streaming_model_answer_leaves_nothing_and_revokes_every_lease() {
    require_journald();
    let gh = StandInGithub::start();
    let provider = StandIn::start();
    let h = code_host(&gh, &provider.config());
    let uid = h.uids[0];
    let d = Airlockd::start(&h);
    let argv = provider_agent(
        &json!([{"op": "call", "api": "anthropic", "model": "claude-sonnet-4-5", "stream": true, "hold": true, "keep_held": true}]),
    );
    let mut ctl = launch(&h, "code", "tess", &argv);
    let holding = provider.log.with_extension("jsonl.holding");
    assert!(
        poll(30, || holding.exists().then_some(())).is_some(),
        "the model's stream never started"
    );
    let run = run_of(&h, "tess").expect("the run is in the ledger");
    kill9_and_recover(&h, d, &gh, &run, uid);
    let _ = ctl.kill();
    let _ = ctl.wait();
}

#[test]
fn airlockd_killed_during_a_git_push_leaves_nothing_and_revokes_every_lease() {
    require_journald();
    let gh = StandInGithub::start();
    let h = Host::new(&[("gina", "ghprobe")], &gh.config());
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("role.yaml"),
        "schema: 1
role: ghprobe
level: L3
brief: brief.md
kind: workflow
identity:
  board_name: airlock:ghprobe
  key_store: airlock
writes:
  repos: [example-org/example-repo]
  pull_requests: [open]
tools: {}
budget:
  runs_per_week: 100
  minutes_per_run: 5
  github_writes_per_run: 5
",
    )
    .unwrap();
    std::fs::write(dir.join("brief.md"), "# Push\n").unwrap();
    let uid = h.uids[0];
    let d = Airlockd::start(&h);
    std::fs::write(gh.dir.path().join("hold_push"), "").unwrap();
    let script = "git config --global user.name a && git config --global user.email a@example.com \
        && git clone -q https://github.com/example-org/example-repo.git r && cd r \
        && git checkout -q -b airlock/chaos && echo x >> README.md && git commit -qam x \
        && git push -q origin HEAD:refs/heads/airlock/chaos";
    let argv: Vec<String> = ["/bin/sh", "-c", script].map(String::from).to_vec();
    let mut ctl = launch(&h, "ghprobe", "gina", &argv);
    let arrived = gh.dir.path().join("push_arrived");
    assert!(
        poll(60, || arrived.exists().then_some(())).is_some(),
        "the push never reached GitHub"
    );
    let run = run_of(&h, "gina").expect("the run is in the ledger");
    kill9_and_recover(&h, d, &gh, &run, uid);
    let _ = std::fs::remove_file(gh.dir.path().join("hold_push"));
    let _ = ctl.kill();
    let _ = ctl.wait();
}
