//! kill -9 of airlockd in the middle of a run's work: a bash command, a streaming model
//! answer, a git push through the GitHub route. After each, the next start closes the run
//! as aborted at the time it was last known alive, revokes every lease (the GitHub token
//! DELETEd at the stand-in, from the file airlockd kept it in), and leaves no process,
//! mount, loop device, cgroup or run directory of the run; the ledger verifies.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use airlock::supervisor::ledger::{self, LedgerEvent, Outcome, RunClosed};
use common::github::StandInGithub;
use common::*;
use serde_json::{json, Value};

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
    recovered(h, gh, run, uid, killed_at);
}

/// After airlockd died at `killed_at`: the run dies with it, and the next start closes it
/// as aborted no later than that, leaving nothing of it.
fn recovered(h: &Host, gh: &StandInGithub, run: &str, uid: u32, killed_at: u64) {
    // The jail helper sees its supervisor's end of the lifeline close and kills the run.
    assert!(
        poll(20, || airlock::supervisor::process::pids_of_uid(uid)
            .is_empty()
            .then_some(()))
        .is_some(),
        "the run outlived its supervisor"
    );
    let _d = Airlockd::start(h);
    let closed = closed_and_gone(h, gh, run, uid);
    assert_eq!(closed.outcome, Outcome::Aborted, "{closed:?}");
    assert!(closed.ended_at <= killed_at, "{closed:?} after {killed_at}");
}

/// `run` is closed in a ledger that verifies, every lease it was issued is revoked (its
/// GitHub tokens dead at the stand-in, none kept), and no process, mount, loop device,
/// cgroup or run directory of it is left. Waits for airlockd's clean-up, which runs after
/// the run's end.
fn closed_and_gone(h: &Host, gh: &StandInGithub, run: &str, uid: u32) -> RunClosed {
    let path = h.state.join(ledger::FILE_NAME);
    let closed = poll(30, || {
        ledger::records(&path)
            .expect("the ledger verifies")
            .into_iter()
            .find_map(|r| match r.event {
                LedgerEvent::RunClosed(c) if c.run == run => Some(c),
                _ => None,
            })
    })
    .expect("the run is closed");
    let all = ledger::records(&path).expect("the ledger verifies");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.last(), Some(&b'\n'), "the ledger ends in a torn line");
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
    let tokens = gh.tokens();
    assert!(!tokens.is_empty(), "the run had no GitHub token");
    for t in &tokens {
        assert!(
            !token_works(gh, t),
            "a GitHub token of the run is still alive"
        );
    }
    let left = poll(20, || {
        let l = leftovers(h, run, uid);
        l.is_empty().then_some(())
    });
    assert!(
        left.is_some(),
        "left of the run: {:?}",
        leftovers(h, run, uid)
    );
    closed
}

/// What is left of `run` on the host: processes of its uid, kept GitHub tokens, mounts,
/// loop devices, cgroups and directories under the state dir's runs/.
fn leftovers(h: &Host, run: &str, uid: u32) -> Vec<String> {
    let mut left = Vec::new();
    for p in airlock::supervisor::process::pids_of_uid(uid) {
        left.push(format!("process {p}"));
    }
    let held = airlock::credentials::github_app::held_dir(&h.state);
    for e in std::fs::read_dir(&held).into_iter().flatten().flatten() {
        left.push(format!("kept token {}", e.path().display()));
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for m in mounts.lines().filter(|l| l.contains(run)) {
        left.push(format!("mount {m}"));
    }
    let loops = Command::new("losetup")
        .args(["--list", "--noheadings", "-O", "NAME,BACK-FILE"])
        .output()
        .unwrap();
    for l in stdout(&loops).lines().filter(|l| l.contains(run)) {
        left.push(format!("loop device {l}"));
    }
    for c in cgroups_of(run) {
        left.push(format!("cgroup {c}"));
    }
    for e in std::fs::read_dir(h.state.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(run) {
            left.push(format!("run directory {n}"));
        }
    }
    left
}

/// The agent's JSON lines on `child`'s stdout, read to its end; `on` sees each as it
/// comes.
fn lines_of(child: &mut Child, mut on: impl FnMut(&Value)) -> Vec<Value> {
    let mut lines = Vec::new();
    let out = child.stdout.take().expect("stdout piped");
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        on(&v);
        lines.push(v);
    }
    lines
}

/// `launch`, with the agent's output piped to the test.
fn launch_piped(h: &Host, role: &str, instance: &str, argv: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args(["launch", role, "--instance", instance, "--wait", "--"])
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The pid of a process of `uid` whose argv starts with `argv0` and `arg1`.
fn process_of(uid: u32, cmdline: &[u8]) -> Option<i32> {
    airlock::supervisor::process::pids_of_uid(uid)
        .into_iter()
        .find(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(cmdline)))
}

/// A field of /proc/PID/status.
fn status_field(pid: i32, key: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(':')
            .map(|v| v.trim().to_string())
    })
}

fn parent_of(pid: i32) -> Option<i32> {
    status_field(pid, "PPid")?.parse().ok()
}

fn sigkill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
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

/// The GitHub connector's tools/call the agent makes in the tests below.
fn get_issue() -> Value {
    json!({"call": "get_issue", "args": {"owner": "example-org", "repo": "example-repo", "issue_number": 1}})
}

#[test]
fn airlockd_killed_during_an_mcp_tools_call_leaves_nothing_and_revokes_every_lease() {
    require_journald();
    let gh = StandInGithub::start();
    let h = code_host(&gh, "");
    let uid = h.uids[0];
    let d = Airlockd::start(&h);
    std::fs::write(gh.dir.path().join("hold_mcp"), "").unwrap();
    let argv = mcp_agent(&json!({"server": "github", "steps": [get_issue()]}));
    let mut ctl = launch(&h, "code", "tess", &argv);
    let arrived = gh.dir.path().join("mcp_arrived");
    assert!(
        poll(30, || arrived.exists().then_some(())).is_some(),
        "the tools/call never reached the upstream"
    );
    let run = run_of(&h, "tess").expect("the run is in the ledger");
    kill9_and_recover(&h, d, &gh, &run, uid);
    let _ = std::fs::remove_file(gh.dir.path().join("hold_mcp"));
    let _ = ctl.kill();
    let _ = ctl.wait();
}

/// Stop airlockd (pid `pid`) in its next `write` to the ledger, let the kernel take half
/// of that write's bytes, and SIGKILL it there: an append torn in the middle, by airlockd
/// itself. Returns once it is dead.
fn tear_next_ledger_append(pid: u32, ledger: &std::path::Path) -> u64 {
    let fd = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == ledger))
        .and_then(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .expect("airlockd holds the ledger open");
    // Bounded: a write gdb never catches fails the test below instead of hanging it.
    let o = Command::new("timeout")
        .args(["120", "gdb", "-p", &pid.to_string(), "-batch", "-nx"])
        .args(["-ex", "set pagination off", "-ex", "set confirm off"])
        .args(["-ex", "handle all nostop noprint pass"])
        .args(["-ex", &format!("break __write if $rdi == {fd}")])
        .args(["-ex", "continue"])
        // At libc's write (`__write`: no Rust function has that name): the count is the
        // third argument.
        .args(["-ex", "printf \"TEAR %d of %d\\n\", $rdx / 2, $rdx"])
        .args(["-ex", "set $rdx = $rdx / 2"])
        .args(["-ex", "finish"])
        .args(["-ex", "kill"])
        .stdin(Stdio::null())
        .output()
        .expect("gdb runs (scripts/install-deps.sh installs it)");
    let killed_at = ledger::now_ms();
    let out = stdout(&o);
    assert!(
        out.contains("TEAR "),
        "gdb never caught the append:\n{out}\n{}",
        stderr(&o)
    );
    assert!(
        poll(10, || (!std::path::Path::new(&format!("/proc/{pid}"))
            .exists()
            || status_field(pid as i32, "State")
                .is_some_and(|s| s.starts_with('Z')))
        .then_some(()))
        .is_some(),
        "airlockd outlived gdb's kill"
    );
    killed_at
}

/// kill -9 of airlockd in the middle of a ledger append: its write of the run's closing
/// records (the leases' revocations and `run_closed`) is cut in half. The next start cuts
/// the torn line away, keeps every whole record, and closes the run as aborted; the
/// leases the torn records would have closed are revoked again.
#[test]
fn airlockd_killed_in_the_middle_of_a_ledger_append_keeps_the_chain_and_closes_the_run() {
    require_journald();
    let gh = StandInGithub::start();
    let h = code_host(&gh, "");
    let uid = h.uids[0];
    let d = Airlockd::start(&h);
    let path = h.state.join(ledger::FILE_NAME);
    // The agent sleeps itself (the agent side may not start `sleep`), so gdb is attached
    // well before its exit makes the run's closing append.
    let argv: Vec<String> = ["python3", "-c", "import time; time.sleep(10)"]
        .map(String::from)
        .to_vec();
    let mut ctl = launch(&h, "code", "tess", &argv);
    let run = poll(30, || run_of(&h, "tess")).expect("the run is in the ledger");
    let before = ledger::records(&path).unwrap().len();
    // The run's next append is its closing one, when the agent exits.
    let killed_at = tear_next_ledger_append(d.pid(), &path);
    drop(d);
    let torn = std::fs::read(&path).unwrap();
    assert_ne!(torn.last(), Some(&b'\n'), "the append was not torn");
    let kept = ledger::records(&path).expect("the whole records verify");
    assert!(kept.len() >= before);
    assert!(
        !kept
            .iter()
            .any(|r| matches!(&r.event, LedgerEvent::RunClosed(c) if c.run == run)),
        "the closing record was not the torn one"
    );
    recovered(&h, &gh, &run, uid, killed_at);
    let _ = ctl.kill();
    let _ = ctl.wait();
}

/// kill -9 of the run's jail helper (airlockd's child, the parent of the run's pid 1): pid
/// 1 dies with it (its parent-death signal) and the whole run with pid 1; airlockd closes
/// the run with the helper's death as its reason, revokes its leases and removes its
/// cgroups, and goes on serving.
#[test]
fn the_jail_helper_killed_mid_run_ends_the_run_and_leaves_nothing() {
    require_journald();
    let gh = StandInGithub::start();
    let h = code_host(&gh, "");
    let uid = h.uids[0];
    let d = Airlockd::start(&h);
    let argv = mcp_agent(&json!([{"call": "bash", "args": {"command": "sleep 60"}}]));
    let ctl = launch_piped(&h, "code", "tess", &argv);
    let sleep = poll(30, || process_of(uid, b"sleep\x0060")).expect("the bash command never ran");
    let run = run_of(&h, "tess").expect("the run is in the ledger");
    // Up from the command: the ancestor whose parent is airlockd is the jail helper.
    let mut helper = sleep;
    while parent_of(helper) != Some(d.pid() as i32) {
        helper = parent_of(helper)
            .filter(|&p| p > 1)
            .expect("the command descends from airlockd");
    }
    let exe = std::fs::read_link(format!("/proc/{helper}/exe")).unwrap();
    assert!(exe.ends_with("airlock-jail"), "{}", exe.display());
    sigkill(helper);
    let o = ctl.wait_with_output().unwrap();
    assert!(!o.status.success(), "the launch succeeded: {}", stdout(&o));
    let closed = closed_and_gone(&h, &gh, &run, uid);
    assert_ne!(closed.outcome, Outcome::Exited, "{closed:?}");
    assert!(
        closed.reason.contains("helper") || closed.signal == Some(9),
        "the reason does not say the jail helper died: {closed:?}"
    );
    // airlockd goes on: the next run of the instance works.
    let o = Airlockd::launch(&h, "code", "tess", &["--", "/bin/true"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// kill -9 of the run's command runner (pid 1 of the command side) in the middle of a bash
/// command: the command dies with it, the agent's call is answered with an MCP error
/// saying the runner is gone, the next one too, and the agent goes on to its end; the run
/// closes as exited and leaves nothing.
#[test]
fn the_runner_killed_mid_command_is_an_mcp_error_and_the_agent_goes_on() {
    require_journald();
    let gh = StandInGithub::start();
    let h = code_host(&gh, "");
    let uid = h.uids[0];
    let _d = Airlockd::start(&h);
    let argv = mcp_agent(&json!([
        {"call": "bash", "args": {"command": "sleep 60"}},
        {"call": "bash", "args": {"command": "ls"}},
    ]));
    let mut ctl = launch_piped(&h, "code", "tess", &argv);
    let sleep = poll(30, || process_of(uid, b"sleep\x0060")).expect("the bash command never ran");
    let run = run_of(&h, "tess").expect("the run is in the ledger");
    // Up from the command: the runner is pid 1 of the command side's pid namespace.
    let mut runner = sleep;
    while !status_field(runner, "NSpid").is_some_and(|n| n.ends_with("\t1") || n.ends_with(" 1")) {
        runner = parent_of(runner)
            .filter(|&p| p > 1)
            .expect("the command has a runner");
    }
    assert_ne!(runner, sleep);
    sigkill(runner);
    let lines = lines_of(&mut ctl, |_| {});
    let o = ctl.wait_with_output().unwrap();
    assert!(o.status.success(), "{lines:?}\n{}", stderr(&o));
    for i in [0, 1] {
        let s = step(&lines, i);
        assert_eq!(s["isError"], true, "step {i}: {s}");
        assert!(
            s["text"].as_str().is_some_and(|t| t.contains("runner")),
            "step {i} should say the runner is gone: {s}"
        );
    }
    assert!(lines.iter().any(|l| l["step"] == "asked"), "{lines:?}");
    let closed = closed_and_gone(&h, &gh, &run, uid);
    assert_eq!(closed.outcome, Outcome::Exited, "{closed:?}");
    assert_eq!(closed.exit_code, Some(0), "{closed:?}");
}

/// Whether the reference server has been asked for tools/call of `tool`.
fn called(port: u16, tool: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = write!(s, "GET /log HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let log: Vec<Value> = out
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or_default();
    log.iter()
        .any(|r| r["rpc"] == "tools/call" && r["tool"] == tool)
}

/// kill -9 of an upstream MCP server in the middle of a tools/call (it holds its answer):
/// the agent's call is an MCP error naming the connector, its next call too, and the agent
/// goes on to its end; the run closes as exited, its leases revoked, nothing left.
#[test]
fn the_upstream_killed_mid_tools_call_is_an_mcp_error_naming_the_connector() {
    require_journald();
    let gh = StandInGithub::start();
    // tests/agents/reference_server.js: its `hold` tool never answers.
    let (mut up, port) = common::tls::reference_server();
    // The stand-in's config has the `mcp_connectors:` key: the reference server joins it.
    let cfg = gh.config_beside("credentials:\n").replacen(
        "mcp_connectors:\n",
        &format!("mcp_connectors:\n  reference: {{url: \"http://127.0.0.1:{port}/mcp\"}}\n"),
        1,
    );
    let h = Host::new(&[("tess", "code")], &cfg);
    h.local_role("code", |t| {
        t.replace("    - cat\n", "    - cat\n    - sleep\n")
            .replacen("tools:\n", "tools:\n  reference: [hold, echo]\n", 1)
            .replacen(
                "  mcp:\n",
                "  mcp:\n    reference:\n      via: airlock\n",
                1,
            )
    });
    let uid = h.uids[0];
    let _d = Airlockd::start(&h);
    let argv = mcp_agent(&json!({"server": "reference", "steps": [
        {"call": "hold"},
        {"call": "echo", "args": {"message": "after"}},
    ]}));
    let mut ctl = launch_piped(&h, "code", "tess", &argv);
    assert!(
        poll(30, || called(port, "hold").then_some(())).is_some(),
        "the tools/call never reached the upstream"
    );
    let run = run_of(&h, "tess").expect("the run is in the ledger");
    let _ = up.0.kill();
    let _ = up.0.wait();
    let lines = lines_of(&mut ctl, |_| {});
    let o = ctl.wait_with_output().unwrap();
    assert!(o.status.success(), "{lines:?}\n{}", stderr(&o));
    for i in [0, 1] {
        assert_error_names(
            step(&lines, i),
            "reference",
            &format!("step {i} should be an error naming the connector"),
        );
    }
    assert!(lines.iter().any(|l| l["step"] == "asked"), "{lines:?}");
    let closed = closed_and_gone(&h, &gh, &run, uid);
    assert_eq!(closed.outcome, Outcome::Exited, "{closed:?}");
}

/// kill -9 of the model provider in the middle of a streaming answer: the agent's stream
/// breaks off, its next request is answered with an error (the provider cannot be
/// reached), and the agent goes on; the run closes as exited and leaves nothing.
#[test]
fn the_provider_killed_mid_stream_breaks_the_answer_and_the_agent_goes_on() {
    require_journald();
    let gh = StandInGithub::start();
    let mut provider = StandIn::start();
    let h = code_host(&gh, &provider.config());
    let uid = h.uids[0];
    let _d = Airlockd::start(&h);
    let argv = provider_agent(&json!([
        {"op": "call", "api": "anthropic", "model": "claude-sonnet-4-5", "stream": true, "hold": true, "keep_held": true},
        {"op": "call", "api": "anthropic", "model": "claude-sonnet-4-5"},
    ]));
    let mut ctl = launch_piped(&h, "code", "tess", &argv);
    let holding = provider.log.with_extension("jsonl.holding");
    assert!(
        poll(30, || holding.exists().then_some(())).is_some(),
        "the model's stream never started"
    );
    let run = run_of(&h, "tess").expect("the run is in the ledger");
    provider.kill9();
    let lines = lines_of(&mut ctl, |_| {});
    let o = ctl.wait_with_output().unwrap();
    assert!(o.status.success(), "{lines:?}\n{}", stderr(&o));
    let first = step(&lines, 0);
    assert!(
        first["broken"].is_string()
            || !first["raw"].as_str().unwrap_or("").contains("message_stop"),
        "the held stream ended as if complete: {first}"
    );
    let next = step(&lines, 1);
    let status = next["status"].as_u64().unwrap_or(0);
    assert!(status >= 500, "the request after the provider died: {next}");
    assert!(
        next["message"].as_str().is_some_and(|m| !m.is_empty()),
        "the error says nothing: {next}"
    );
    let closed = closed_and_gone(&h, &gh, &run, uid);
    assert_eq!(closed.outcome, Outcome::Exited, "{closed:?}");
}

/// A journald of its own for one test (`systemd-journald NAMESPACE`: its socket under
/// /run/systemd/journal.NAMESPACE), so killing it touches no other test's journal.
struct OwnJournald {
    child: Child,
    ns: String,
}

impl OwnJournald {
    fn start() -> OwnJournald {
        let ns = format!("airlock-chaos-{}", std::process::id());
        let child = Command::new("/lib/systemd/systemd-journald")
            .arg(&ns)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("systemd-journald (scripts/install-deps.sh installs it)");
        let j = OwnJournald { child, ns };
        let sock = j.socket();
        assert!(
            poll(10, || std::os::unix::net::UnixDatagram::unbound()
                .and_then(|s| s.connect(&sock))
                .ok())
            .is_some(),
            "the test's journald never listened"
        );
        j
    }

    fn socket(&self) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("/run/systemd/journal.{}/socket", self.ns))
    }

    /// The MESSAGE of every record of `run` it took.
    fn messages(&self, run: &str) -> Vec<String> {
        let o = Command::new("journalctl")
            .arg(format!("--namespace={}", self.ns))
            .args(["-o", "json", "--no-pager"])
            .arg(format!("AIRLOCK_RUN={run}"))
            .output()
            .unwrap();
        stdout(&o)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["MESSAGE"].as_str().map(str::to_string))
            .collect()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnJournald {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(format!("/run/systemd/journal.{}", self.ns));
        for base in ["/var/log/journal", "/run/log/journal"] {
            for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!(".{}", self.ns))
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
}

/// kill -9 of journald in the middle of a run: the run goes on, what it writes from then
/// on goes to its fallback file, nothing is lost (what came before is in journald), and
/// `airlockctl logs` shows what the fallback holds; the run closes as exited and leaves
/// nothing.
#[test]
fn journald_killed_mid_run_keeps_the_runs_records_in_the_fallback_file() {
    require_journald();
    let gh = StandInGithub::start();
    let mut jd = OwnJournald::start();
    let h = code_host(
        &gh,
        &format!("credentials:\njournal_socket: {}\n", jd.socket().display()),
    );
    let uid = h.uids[0];
    let _d = Airlockd::start(&h);
    // Time enough to see the first line in journald and kill it before the second.
    // The agent sleeps itself: the agent side may not start `sleep`.
    let script = "import time\nprint('before-the-kill', flush=True)\ntime.sleep(4)\nprint('after-the-kill', flush=True)\ntime.sleep(0.5)\nprint('at-the-end', flush=True)";
    let argv: Vec<String> = ["python3", "-c", script].map(String::from).to_vec();
    let ctl = launch_piped(&h, "code", "tess", &argv);
    let run = poll(30, || run_of(&h, "tess")).expect("the run is in the ledger");
    assert!(
        poll(30, || jd
            .messages(&run)
            .iter()
            .any(|m| m.contains("before-the-kill"))
            .then_some(()))
        .is_some(),
        "the run's first line never reached journald"
    );
    jd.kill9();
    let o = ctl.wait_with_output().unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let closed = closed_and_gone(&h, &gh, &run, uid);
    assert_eq!(closed.outcome, Outcome::Exited, "{closed:?}");
    let fallback = std::fs::read_to_string(airlock::journal::fallback::path_for(
        &h.state.join("journal"),
        &run,
    ))
    .unwrap_or_default();
    for line in ["after-the-kill", "at-the-end"] {
        assert!(
            fallback.contains(line),
            "{line} is not in the fallback file:\n{fallback}"
        );
    }
    let logs = h.ctl(&["logs", &run]);
    for line in ["after-the-kill", "at-the-end"] {
        assert!(
            stdout(&logs).contains(line),
            "logs: {}{}",
            stdout(&logs),
            stderr(&logs)
        );
    }
}
