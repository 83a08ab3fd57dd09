//! The run's gateway, for real: standalone runs whose agent is a scripted MCP client built
//! on the official TypeScript SDK (tests/agents/mcp_client.js), talking to Airlock's own
//! MCP server at $AIRLOCK_GATEWAY/mcp/airlock inside the run's network namespace. Allowed
//! commands run on the run's command side, as the instance uid, in the jail.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::*;
use serde_json::{json, Value};

/// The shipped code role with a few more bash prefixes the tests use.
fn host_with_probe_prefixes() -> Host {
    let h = Host::new(&[("tess", "code")], "");
    h.local_role("code", |t| {
        t.replace(
            "    - cat\n",
            "    - cat\n    - make\n    - sleep\n    - id\n",
        )
    });
    h
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let st = std::process::Command::new("git")
        .args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "git {args:?}");
}

#[test]
fn allowed_commands_run_as_the_instance_in_its_workspace_and_are_journaled() {
    require_journald();
    let h = host_with_probe_prefixes();
    let uid = h.uids[0];
    let ws = h.root.join("repo");
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README"), "hello\n").unwrap();
    git(&ws, &["add", "README"]);
    git(&ws, &["commit", "-q", "-m", "the first commit"]);
    chown_tree(&ws, uid);
    let steps = json!([
        {"list": "tools"},
        {"call": "bash", "args": {"command": "git log --oneline"}},
        {"call": "bash", "args": {"command": "cat /proc/self/status"}},
        {"call": "bash", "args": {"command": "id -u", "cwd": "/home/tess"}},
        {"call": "bash", "args": {"command": "ls", "cwd": "/etc"}},
        {"call": "bash", "args": {"command": "rm -rf ."}},
    ]);
    let ws_arg = ws.to_str().unwrap();
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h
        .launch("code", "tess", &["--workspace", ws_arg], &argv)
        .output()
        .unwrap();
    let lines = agent_lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(step(&lines, 0)["tools"], json!(["bash"]));
    let log = &step(&lines, 1)["structured"];
    assert_eq!(log["exit_code"], 0, "{log}");
    assert!(
        log["stdout"].as_str().unwrap().contains("the first commit"),
        "{log}"
    );
    let status = step(&lines, 2)["structured"]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid_line.split_whitespace().skip(1).collect::<Vec<_>>(),
        vec![uid.to_string(); 4],
        "{status}"
    );
    for cap in ["CapEff", "CapPrm"] {
        let l = status.lines().find(|l| l.starts_with(cap)).unwrap();
        assert!(l.ends_with("0000000000000000"), "{l}");
    }
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    assert_eq!(
        step(&lines, 3)["structured"]["stdout"],
        format!("{uid}\n"),
        "the home is a valid cwd"
    );
    let outside = step(&lines, 4);
    assert_eq!(outside["isError"], true);
    assert!(
        outside["text"].as_str().unwrap().contains("arguments.cwd"),
        "{outside}"
    );
    let refused = step(&lines, 5);
    assert_eq!(refused["isError"], true);
    assert!(
        refused["text"]
            .as_str()
            .unwrap()
            .contains("default: no prefix matches"),
        "{refused}"
    );
    assert!(ws.join("README").exists(), "a refused command ran");

    let run = run_id_of(&o);
    let calls = events(&run, "tool_call", 5);
    assert_eq!(calls.len(), 5, "{calls:?}");
    let field = |r: &Value, k: &str| r[k].as_str().unwrap_or_default().to_string();
    assert_eq!(field(&calls[0], "AIRLOCK_DECISION"), "allow");
    assert_eq!(field(&calls[0], "AIRLOCK_CONNECTOR"), "airlock");
    assert_eq!(field(&calls[0], "AIRLOCK_TOOL"), "bash");
    assert_eq!(field(&calls[0], "AIRLOCK_PROGRAM"), "git");
    assert_eq!(field(&calls[0], "AIRLOCK_RULE"), "run.bash[2]");
    assert_eq!(field(&calls[0], "AIRLOCK_EXIT_CODE"), "0");
    assert_eq!(field(&calls[0], "AIRLOCK_ARGS"), "git log --oneline");
    assert_eq!(field(&calls[3], "AIRLOCK_DECISION"), "deny");
    assert_eq!(field(&calls[3], "AIRLOCK_RULE"), "input");
    assert_eq!(field(&calls[4], "AIRLOCK_DECISION"), "deny");
    assert_eq!(
        field(&calls[4], "AIRLOCK_RULE"),
        "default: no prefix matches"
    );
    assert!(
        field(&calls[4], "MESSAGE").contains("deny"),
        "{:?}",
        calls[4]
    );

    // The run's closing record counts them, and `show` says so.
    let text = h.show(&run);
    assert!(text.contains("3 allowed, 2 refused"), "{text}");
}

#[test]
fn messages_outside_the_protocol_are_refused_before_anything_runs() {
    let h = host_with_probe_prefixes();
    let ping = |id: u32| json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string();
    let steps = json!([
        {"raw": format!("[{}]", ping(1))},
        {"raw": "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"method\":\"tools/list\"}"},
        {"raw": ping(3), "headers": {"mcp-session-id": "0123"}},
        {"raw": ping(4), "headers": {"mcp-session-id": ""}},
        {"raw": ping(5), "method": "GET"},
        {"raw": ping(6), "headers": {"content-type": "text/plain"}},
        {"raw": ping(7), "headers": {"origin": "http://evil.example"}},
        {"big": 5 << 20},
        {"raw": json!({"jsonrpc": "2.0", "id": 9, "method": "prompts/list"}).to_string()},
        {"raw": json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "exec", "arguments": {}}}).to_string()},
        {"raw": ping(11)},
        {"raw": "[".repeat(100) + &"]".repeat(100)},
    ]);
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code", "tess", &[], &argv).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    let status = |i: usize| step(&lines, i)["status"].as_u64().unwrap();
    let body = |i: usize| step(&lines, i)["body"].as_str().unwrap().to_string();
    assert_eq!(status(0), 400);
    assert!(body(0).contains("batches are not accepted"), "{}", body(0));
    assert_eq!(status(1), 400);
    assert!(body(1).contains("same key twice"), "{}", body(1));
    assert_eq!(status(2), 404, "an unknown session");
    assert_eq!(status(3), 404, "an empty session id is no session");
    assert_eq!(status(4), 405, "no server-initiated stream");
    assert_eq!(status(5), 415);
    assert_eq!(status(6), 403);
    assert_eq!(status(7), 413);
    assert_eq!(status(8), 200);
    assert!(body(8).contains("-32601"), "{}", body(8));
    assert!(
        body(9).contains("-32602") && body(9).contains("has the bash tool"),
        "{}",
        body(9)
    );
    assert_eq!(status(10), 200);
    assert!(body(10).contains("\"result\":{}"), "{}", body(10));
    assert_eq!(status(11), 400);
    assert!(body(11).contains("deeper than 64"), "{}", body(11));
}

#[test]
fn the_stateless_revision_needs_no_session() {
    let h = host_with_probe_prefixes();
    let meta = |v: &str| json!({"io.modelcontextprotocol/protocolVersion": v, "io.modelcontextprotocol/clientCapabilities": {}});
    let req = |id: u32, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let steps = json!([
        {"raw": req(1, "server/discover", json!({"_meta": meta("2026-07-28")})), "nosession": true},
        {"raw": req(2, "tools/call", json!({"_meta": meta("2026-07-28"), "name": "bash", "arguments": {"command": "id -u"}})), "nosession": true,
         "headers": {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "bash"}},
        {"raw": req(3, "tools/list", json!({"_meta": meta("2031-01-01")})), "nosession": true},
        {"raw": req(4, "tools/list", json!({})), "nosession": true, "headers": {"mcp-protocol-version": "2026-07-28"}},
        {"raw": req(5, "tools/call", json!({"_meta": meta("2026-07-28"), "name": "bash", "arguments": {"command": "id -u"}})), "nosession": true,
         "headers": {"mcp-name": "other"}},
    ]);
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code", "tess", &[], &argv).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    let body = |i: usize| -> Value {
        serde_json::from_str(step(&lines, i)["body"].as_str().unwrap()).unwrap()
    };
    let d = body(0);
    assert_eq!(d["result"]["resultType"], "complete", "{d}");
    assert!(d["result"]["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!("2026-07-28")));
    let call = body(1);
    assert_eq!(call["result"]["resultType"], "complete", "{call}");
    assert_eq!(
        call["result"]["structuredContent"]["stdout"],
        format!("{}\n", h.uids[0])
    );
    assert_eq!(step(&lines, 2)["status"], 400);
    assert!(body(2)["error"]["data"]["supportedVersions"].is_array());
    assert_eq!(
        step(&lines, 3)["status"],
        400,
        "a 2026 header without _meta"
    );
    assert_eq!(
        step(&lines, 4)["status"],
        400,
        "Mcp-Name naming another tool"
    );
}

#[test]
fn a_commands_descendants_die_at_its_timeout_and_the_run_goes_on() {
    let h = host_with_probe_prefixes();
    let uid = h.uids[0];
    let ws = h.workspace("ws", uid);
    // make starts a background sleep that double-forks away from make, then waits.
    std::fs::write(ws.join("Makefile"), "all:\n\t( sleep 300 & ) ; sleep 301\n").unwrap();
    chown_tree(&ws, uid);
    let steps = json!([
        {"call": "bash", "args": {"command": "make", "timeout_ms": 1500}},
        {"sleep_ms": 1500},
        {"call": "bash", "args": {"command": "id -u"}},
    ]);
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut child = h
        .launch(
            "code",
            "tess",
            &["--workspace", ws.to_str().unwrap()],
            &argv,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut lines = Vec::new();
    let mut sleepers_after_timeout = None;
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if v["step"] == 0 {
            // The agent now sleeps: look at the run from the host meanwhile.
            sleepers_after_timeout = Some(sleepers(uid));
        }
        lines.push(v);
    }
    let st = child.wait().unwrap();
    assert!(st.success(), "{lines:?}");
    let timed = &step(&lines, 0)["structured"];
    assert_eq!(timed["timed_out"], true, "{timed}");
    assert_eq!(timed["exit_code"], Value::Null);
    assert_eq!(timed["signal"], 9);
    assert_eq!(
        sleepers_after_timeout,
        Some(Vec::<i32>::new()),
        "a descendant outlived its command's timeout"
    );
    assert_eq!(step(&lines, 2)["structured"]["stdout"], format!("{uid}\n"));
}

/// Host pids of `uid` whose program is sleep.
fn sleepers(uid: u32) -> Vec<i32> {
    airlock::supervisor::launch::pids_of_uid(uid)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })
        .collect()
}

#[test]
fn the_agent_and_the_command_side_cannot_signal_or_read_each_other() {
    let h = host_with_probe_prefixes();
    let steps = json!([
        // A command alive on the command side while the agent probes every pid.
        {"call": "bash", "args": {"command": "sleep 3"}, "nowait": true},
        {"sleep_ms": 500},
        {"probe": "blind", "max": 300},
        {"call": "bash", "args": {"command": "cat /proc/{{pid}}/environ"}},
        {"call": "bash", "args": {"command": "ls /proc/{{pid}}/fd"}},
        {"call": "bash", "args": {"command": "ls /proc"}},
    ]);
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code", "tess", &[], &argv).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    let probe = step(&lines, 2);
    assert_eq!(probe["signalled"], json!([]), "{probe}");
    assert_eq!(probe["read"], json!([]), "{probe}");
    // hidepid=2 shows only processes one may ptrace: neither side sees the other.
    assert_eq!(probe["visible"], json!([]), "{probe}");
    let agent_pid = probe["pid"].as_u64().unwrap();
    for i in [3, 4] {
        let r = &step(&lines, i)["structured"];
        assert_ne!(r["exit_code"], 0, "step {i}: {r}");
    }
    let procs = step(&lines, 5)["structured"]["stdout"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !procs.lines().any(|l| l == agent_pid.to_string()),
        "the command side sees the agent:\n{procs}"
    );
}

#[test]
fn commands_cannot_escape_their_timeout_their_shepherd_or_their_cwd() {
    let h = host_with_probe_prefixes();
    let uid = h.uids[0];
    let ws = h.workspace("ws", uid);
    // hide: a descendant that leaves the group and turns non-dumpable (hidepid hides it
    // from /proc/PID); ks: kill the shepherd (make's parent) and keep running.
    std::fs::write(
        ws.join("Makefile"),
        "hide:\n\t( python3 -c 'import os, ctypes, time; os.setsid(); ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); time.sleep(300)' & ) ; sleep 301\n\
ks:\n\tkill -9 $$(awk '{print $$4}' /proc/$$PPID/stat) ; echo still-here\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("/", ws.join("out")).unwrap();
    chown_tree(&ws, uid);
    let ws_s = ws.to_str().unwrap().to_string();
    let steps = json!([
        {"call": "bash", "args": {"command": "make hide", "timeout_ms": 1500}},
        {"call": "bash", "args": {"command": "make ks", "timeout_ms": 5000}},
        {"call": "bash", "args": {"command": "ls", "cwd": format!("{ws_s}/out")}},
        {"call": "bash", "args": {"command": "id -u"}},
    ]);
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut child = h
        .launch(
            "code",
            "tess",
            &["--workspace", &ws_s, "--max-seconds", "120"],
            &argv,
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut left_after_timeout = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(v) = serde_json::from_str::<Value>(&line.unwrap()) else {
            continue;
        };
        if v["step"] == 0 {
            left_after_timeout = Some(
                airlock::supervisor::launch::pids_of_uid(uid)
                    .into_iter()
                    .filter(|p| {
                        std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                            .is_ok_and(|c| c.contains("time.sleep(300)"))
                    })
                    .count(),
            );
        }
        lines.push(v);
    }
    assert!(child.wait().unwrap().success(), "{lines:?}");
    let hide = &step(&lines, 0)["structured"];
    assert_eq!(hide["timed_out"], true, "{hide}");
    assert_eq!(
        left_after_timeout,
        Some(0),
        "a hidden descendant outlived the timeout"
    );
    // The shepherd could not be killed: the call came back with the command's own result.
    let ks = step(&lines, 1);
    assert_eq!(ks["isError"], false, "{ks}");
    assert!(
        ks["structured"]["stdout"]
            .as_str()
            .unwrap()
            .contains("still-here"),
        "{ks}"
    );
    assert!(
        ks["structured"]["stderr"]
            .as_str()
            .unwrap()
            .contains("Operation not permitted"),
        "the kill was not even tried: {ks}"
    );
    let cwd = step(&lines, 2);
    assert_eq!(cwd["isError"], true, "{cwd}");
    assert!(
        cwd["text"].as_str().unwrap().contains("resolves outside"),
        "{cwd}"
    );
    assert_eq!(step(&lines, 3)["structured"]["stdout"], format!("{uid}\n"));
}

/// Finding 6: a workspace whose `.git/config` and `.gitattributes` name programs of the
/// agent's everywhere git would run one (pager, fsmonitor, hooks, diff.external, a diff
/// driver's textconv and command, a filter driver's clean/smudge/process, an alias, gpg
/// for signatures): `git log -p`, `git show`, `git diff`, `git status`, `git add` and
/// `git commit` through the real bash tool in a real run start none of them. Each would
/// leave a marker file; none is there after.
#[test]
fn git_through_the_bash_tool_runs_no_program_of_the_repositorys_config() {
    require_journald();
    let h = Host::new(&[("tess", "code")], "");
    let uid = h.uids[0];
    let ws = h.root.join("hostile-repo");
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(
        ws.join(".gitattributes"),
        "* diff=evil filter=evil merge=evil\n",
    )
    .unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    git(&ws, &["add", "a.txt", ".gitattributes"]);
    git(&ws, &["commit", "-q", "-m", "first"]);
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    git(&ws, &["commit", "-q", "-am", "second"]);
    // Only now the hostile config: the setup's own git must not run it.
    let evil = ws.join("evil.sh");
    std::fs::write(
        &evil,
        format!(
            "#!/bin/sh\ntouch {}/marker-\"$1\"\nshift\n[ -f \"$1\" ] && cat \"$1\" || cat\n",
            ws.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = evil.display();
    let mut config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    config.push_str(&format!(
        "[user]\n\tname = T\n\temail = t@example.invalid\n\
         [core]\n\tpager = {e} pager\n\tfsmonitor = {e}\n\thooksPath = {hooks}\n\teditor = {e} editor\n\
         [diff]\n\texternal = {e} external\n\
         [diff \"evil\"]\n\ttextconv = {e} textconv\n\tcommand = {e} command\n\
         [filter \"evil\"]\n\tclean = {e} clean\n\tsmudge = {e} smudge\n\
         [merge \"evil\"]\n\tdriver = {e} merge\n\
         [log]\n\tshowSignature = true\n\
         [gpg]\n\tprogram = {e}\n\
         [alias]\n\tlg = !{e} alias\n",
        hooks = ws.join("hooks").display()
    ));
    std::fs::write(ws.join(".git/config"), config).unwrap();
    for dir in ["hooks", ".git/hooks"] {
        std::fs::create_dir_all(ws.join(dir)).unwrap();
        for hook in [
            "pre-commit",
            "commit-msg",
            "post-commit",
            "post-index-change",
            "fsmonitor-watchman",
        ] {
            let p = ws.join(dir).join(hook);
            std::fs::write(
                &p,
                format!("#!/bin/sh\ntouch {}/marker-hook-{hook}\n", ws.display()),
            )
            .unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    // A change in the work tree, for diff, status and add to read through the filter.
    std::fs::write(ws.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    chown_tree(&ws, uid);
    let steps = json!([
        {"call": "bash", "args": {"command": "git log -p"}},
        {"call": "bash", "args": {"command": "git show"}},
        {"call": "bash", "args": {"command": "git diff"}},
        {"call": "bash", "args": {"command": "git status"}},
        {"call": "bash", "args": {"command": "git log --show-signature -1"}},
        {"call": "bash", "args": {"command": "git add a.txt"}},
        {"call": "bash", "args": {"command": "git commit -m third"}},
    ]);
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h
        .launch(
            "code",
            "tess",
            &["--workspace", ws.to_str().unwrap()],
            &argv,
        )
        .output()
        .unwrap();
    let lines = agent_lines(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let markers: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("marker-"))
        .collect();
    assert!(
        markers.is_empty(),
        "git ran programs of the repository's config: {markers:?}\n{lines:?}"
    );
    // And git did its work: the log shows both commits' patches, diff the change, status
    // the file, the commit was made.
    let out = |i: usize| {
        step(&lines, i)["structured"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        out(0).contains("+two") && out(0).contains("second"),
        "{:?}",
        step(&lines, 0)
    );
    assert!(out(1).contains("+two"), "{:?}", step(&lines, 1));
    assert!(out(2).contains("+three"), "{:?}", step(&lines, 2));
    assert!(out(3).contains("a.txt"), "{:?}", step(&lines, 3));
    assert_eq!(
        step(&lines, 6)["structured"]["exit_code"],
        0,
        "{:?}",
        step(&lines, 6)
    );
    let log = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "log", "--format=%s", "-1"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.fsmonitor")
        .env("GIT_CONFIG_VALUE_0", "false")
        .current_dir(&ws)
        .output()
        .unwrap();
    assert_eq!(stdout(&log).trim(), "third");
}

/// An executable script at `ws/evil.sh` that leaves `ws/marker-<its first argument>` (and
/// passes its input through, so a driver using it would work).
fn evil_script(ws: &std::path::Path) -> String {
    let evil = ws.join("evil.sh");
    std::fs::write(
        &evil,
        format!(
            "#!/bin/sh\ntouch {}/marker-\"$1\"\nshift\n[ -f \"$1\" ] && cat \"$1\" || cat\n",
            ws.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    evil.display().to_string()
}

fn markers(ws: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(ws)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("marker-"))
        .collect()
}

/// Run `steps` (bash calls, js probes) as tess of the shipped code role in `ws`.
fn run_in(h: &Host, ws: &std::path::Path, steps: &Value) -> Vec<Value> {
    let argv = mcp_agent(steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h
        .launch(
            "code",
            "tess",
            &["--workspace", ws.to_str().unwrap()],
            &argv,
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    agent_lines(&o)
}

/// G1 of the review of issue 29: a submodule's own config (`.git/modules/sub/config`, the
/// agent's to write) names a textconv and an external diff driver, a clean filter and an
/// fsmonitor, and its `.gitattributes` points every file at them; the superproject asks
/// for submodule diffs (`diff.submodule=diff`) and the submodule's work tree is dirty.
/// `git log -p`, `git show`, `git diff`, `git status` (which runs git in the submodule to
/// see it is dirty) and `--submodule=diff` (refused by name) start none of them.
#[test]
fn git_through_the_bash_tool_runs_no_program_of_a_submodules_config() {
    require_journald();
    let h = Host::new(&[("tess", "code")], "");
    let ws = h.root.join("super");
    let src = h.root.join("subsrc");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join(".gitattributes"), "* diff=evil filter=evil\n").unwrap();
    std::fs::write(src.join("a"), "one\n").unwrap();
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "s1"]);
    git(&ws, &["init", "-q", "-b", "main"]);
    let file = ["-c", "protocol.file.allow=always"];
    git(
        &ws,
        &[
            &file[..],
            &["submodule", "-q", "add", src.to_str().unwrap(), "sub"],
        ]
        .concat(),
    );
    git(&ws, &["commit", "-q", "-m", "add sub"]);
    std::fs::write(ws.join("sub/a"), "one\ntwo\n").unwrap();
    git(&ws.join("sub"), &["commit", "-q", "-am", "s2"]);
    git(&ws, &["commit", "-q", "-am", "bump sub"]);
    std::fs::write(ws.join("sub/a"), "one\ntwo\nthree\n").unwrap();
    let e = evil_script(&ws);
    let sub_config = ws.join(".git/modules/sub/config");
    let mut c = std::fs::read_to_string(&sub_config).unwrap();
    c.push_str(&format!(
        "[diff \"evil\"]\n\ttextconv = {e} textconv\n\tcommand = {e} command\n\
         [filter \"evil\"]\n\tclean = {e} clean\n\tsmudge = {e} smudge\n\
         [core]\n\tfsmonitor = {e} fsmonitor\n"
    ));
    std::fs::write(&sub_config, c).unwrap();
    let top = ws.join(".git/config");
    let mut c = std::fs::read_to_string(&top).unwrap();
    c.push_str("[diff]\n\tsubmodule = diff\n[status]\n\tsubmoduleSummary = true\n");
    std::fs::write(&top, c).unwrap();
    chown_tree(&ws, h.uids[0]);
    let steps = json!([
        {"call": "bash", "args": {"command": "git log -p -1"}},
        {"call": "bash", "args": {"command": "git show"}},
        {"call": "bash", "args": {"command": "git diff"}},
        {"call": "bash", "args": {"command": "git status"}},
        {"call": "bash", "args": {"command": "git log -p --submodule=diff -1"}},
        {"call": "bash", "args": {"command": "git diff --submodule=diff"}},
        {"call": "bash", "args": {"command": "git status", "cwd": ws.join("sub").to_str().unwrap()}},
        {"call": "bash", "args": {"command": "git diff", "cwd": ws.join("sub").to_str().unwrap()}},
    ]);
    let lines = run_in(&h, &ws, &steps);
    let found = markers(&ws);
    assert!(
        found.is_empty(),
        "git ran programs of the submodule's config: {found:?}\n{lines:#?}"
    );
    let out = |i: usize| {
        step(&lines, i)["structured"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        out(0).contains("Subproject commit"),
        "{:?}",
        step(&lines, 0)
    );
    assert!(out(3).contains("sub"), "{:?}", step(&lines, 3));
    for i in [4, 5] {
        let s = step(&lines, i);
        assert_eq!(s["isError"], true, "{s}");
        assert!(
            s["text"].as_str().unwrap().contains("--submodule=diff"),
            "{s}"
        );
    }
    assert!(out(7).contains("+three"), "{:?}", step(&lines, 7));
}

/// G2 and G3 of the review of issue 29: the home is the agent's. Its `~/.gitconfig` names
/// an `uploadpack.packObjectsHook` (honoured from the home config, and run by the
/// upload-pack of a local fetch, whose process git gives none of the command's config
/// overrides); a partial clone's lazy fetch of a missing blob (and a plain fetch) would
/// start it. Its `~/.gnupg/gpg.conf` names gpg's `agent-program` and `dirmngr-program`,
/// which `git log --show-signature` of a signed commit (key unknown, auto-key-retrieve on)
/// would start. None runs; the signature shows, unverified.
#[test]
fn git_through_the_bash_tool_runs_no_program_of_the_home_config_or_gnupg() {
    require_journald();
    assert!(
        std::path::Path::new("/usr/bin/gpg").exists(),
        "gpg is missing: run scripts/install-deps.sh"
    );
    let h = Host::new(&[("tess", "code")], "");
    let ws = h.root.join("ws");
    let src = ws.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("a"), "one\n").unwrap();
    git(&src, &["add", "a"]);
    git(&src, &["commit", "-q", "-m", "1"]);
    std::fs::write(src.join("a"), "two\n").unwrap();
    git(&src, &["commit", "-q", "-am", "2"]);
    git(&src, &["config", "uploadpack.allowFilter", "true"]);
    let url = format!("file://{}", src.display());
    git(
        &ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "clone",
            "-q",
            "--filter=blob:none",
            "--no-checkout",
            &url,
            "clone",
        ],
    );
    // A commit signed with a key the jail's gpg has never seen.
    let gnupg = tempfile::tempdir().unwrap();
    let gpg_env = |c: &mut std::process::Command| {
        c.env("GNUPGHOME", gnupg.path());
    };
    let mut keygen = std::process::Command::new("gpg");
    gpg_env(&mut keygen);
    let st = keygen
        .args([
            "--batch",
            "--quiet",
            "--passphrase",
            "",
            "--quick-gen-key",
            "T <t@example.invalid>",
            "ed25519",
            "sign",
            "never",
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let signed = ws.join("signed");
    std::fs::create_dir_all(&signed).unwrap();
    git(&signed, &["init", "-q", "-b", "main"]);
    std::fs::write(signed.join("a"), "a\n").unwrap();
    git(&signed, &["add", "a"]);
    let mut commit = std::process::Command::new("git");
    gpg_env(&mut commit);
    let st = commit
        .args([
            "-c",
            "user.name=T",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-q",
            "-S",
            "-m",
            "signed",
        ])
        .current_dir(&signed)
        .status()
        .unwrap();
    assert!(st.success());
    let e = evil_script(&ws);
    chown_tree(&ws, h.uids[0]);
    let home = "/home/tess";
    let js = format!(
        "fs.writeFileSync('{home}/.gitconfig', '[uploadpack]\\n\\tpackObjectsHook = {e} hook\\n[protocol \"file\"]\\n\\tallow = always\\n');\
         fs.mkdirSync('{home}/.gnupg', {{recursive: true, mode: 0o700}});\
         fs.writeFileSync('{home}/.gnupg/gpg.conf', 'agent-program {e}\\ndirmngr-program {e}\\nauto-key-retrieve\\nkeyserver hkp://127.0.0.1:1\\n');\
         return 'written';"
    );
    let cwd = |d: &std::path::Path| d.to_str().unwrap().to_string();
    let steps = json!([
        {"js": js},
        {"call": "bash", "args": {"command": "git show HEAD~1:a", "cwd": cwd(&ws.join("clone"))}},
        {"call": "bash", "args": {"command": "git fetch origin", "cwd": cwd(&ws.join("clone"))}},
        {"call": "bash", "args": {"command": "git log --show-signature -1", "cwd": cwd(&signed)}},
        {"call": "bash", "args": {"command": "git log -1 --format=%G?:%s", "cwd": cwd(&signed)}},
    ]);
    let lines = run_in(&h, &ws, &steps);
    assert_eq!(step(&lines, 0)["value"], "written", "{:?}", step(&lines, 0));
    let found = markers(&ws);
    assert!(
        found.is_empty(),
        "git or gpg ran programs of the home's config: {found:?}\n{lines:#?}"
    );
    let log = step(&lines, 3)["structured"].clone();
    assert_eq!(log["exit_code"], 0, "{log}");
    assert!(log["stdout"].as_str().unwrap().contains("signed"), "{log}");
    let status = step(&lines, 4)["structured"]["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !status.starts_with("G:"),
        "a signature was taken for verified: {status}"
    );
}

/// G4 of the review of issue 29: while the agent runs `git diff` again and again, its
/// `.git/config` is swapped back and forth (a rename, every millisecond) between one that
/// names no driver and one whose clean filter is the agent's program, so the config git
/// reads can differ from any read before it. No run starts the filter, and git still
/// diffs.
#[test]
fn a_config_swapped_while_git_runs_starts_no_program() {
    require_journald();
    let h = Host::new(&[("tess", "code")], "");
    let ws = h.root.join("racy");
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "first"]);
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    let e = evil_script(&ws);
    let plain = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    let hostile = format!(
        "{plain}[filter \"evil\"]\n\tclean = {e} clean\n\tprocess = {e} process\n[diff \"evil\"]\n\ttextconv = {e} textconv\n"
    );
    chown_tree(&ws, h.uids[0]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, stop) = (ws.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let tmp = ws.join(".git/config.swap");
                std::fs::write(&tmp, if n % 2 == 0 { &hostile } else { &plain }).unwrap();
                std::fs::rename(&tmp, ws.join(".git/config")).unwrap();
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            n
        })
    };
    let steps: Vec<Value> = (0..30)
        .map(|_| json!({"call": "bash", "args": {"command": "git diff"}}))
        .collect();
    let lines = run_in(&h, &ws, &json!(steps));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 30, "{swaps} swaps");
    let found = markers(&ws);
    assert!(found.is_empty(), "a swapped-in driver ran: {found:?}");
    for i in 0..30 {
        let s = step(&lines, i);
        assert!(
            s["structured"]["stdout"]
                .as_str()
                .unwrap_or_default()
                .contains("+two"),
            "{s}"
        );
    }
}
