//! The real agents in the jail: Claude Code and Codex (installed by
//! scripts/install-agents.sh) run their role's brief through airlockd, with the model a
//! scripted stand-in (tests/agents/standin_provider.py) reached through the run's provider
//! route. The script makes the model try what an agent does: an allowed and a refused bash
//! command, an allowed and a denied MCP tool on a connector, a web fetch the role lacks, and
//! getting the agent to start a program itself. Each test checks what came back to the
//! model and what the journal says.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::{json, Value};

fn require_agent(path: &str) {
    assert!(
        Path::new(path).is_file(),
        "{path} is missing: run scripts/install-agents.sh (scripts/install-deps.sh runs it)"
    );
}

/// A host whose `code` and `review` roles also reach server-everything (stdio, in a jail of
/// its own) with `echo` and `get-*` granted and `get-env` denied, with both providers at the
/// scripted stand-in.
fn host(si: &StandIn) -> Host {
    host_with_limits(si, "{max_procs: 64, tmp_bytes: 8388608}")
}

fn host_with_limits(si: &StandIn, limits: &str) -> Host {
    let pkg = require_npm("@modelcontextprotocol/server-everything");
    let conn_uid = 1_880_094_980 + std::process::id() % 9;
    let extra = format!(
        "{}mcp_connectors:\n  everything: {{command: [/usr/bin/node, {}, stdio], uid: {conn_uid}}}\n",
        si.config(),
        pkg.join("dist/index.js").display()
    );
    let h = Host::with_limits(&[("tess", "code"), ("rex", "review")], limits, &extra);
    // The roles' GitHub identity is left to GitHub (`key_store: github`): these tests are of
    // the agents, and tests/github.rs has the GitHub route's own.
    for role in ["code", "review"] {
        h.local_role(role, |t| {
            t.replacen("key_store: airlock", "key_store: github", 1)
                .replacen("tools:\n", "tools:\n  everything: [echo, get-*]\n", 1)
                .replacen("deny:\n", "deny:\n  everything: [get-env]\n", 1)
                .replacen(
                    "  mcp:\n",
                    "  mcp:\n    everything:\n      via: airlock\n",
                    1,
                )
                // The escape battery, as a command the model may ask for.
                .replacen("  bash:\n", "  bash:\n    - python3 escape_battery.py\n", 1)
        });
    }
    h
}

/// A workspace holding a git repository with one commit, owned by the instance.
fn repo(h: &Host, uid: u32) -> PathBuf {
    let ws = h.workspace("ws", uid);
    for args in [
        &["init", "-q", "-b", "main"][..],
        &[
            "-c",
            "user.name=T",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "initial commit of the demo",
        ][..],
    ] {
        let st = Command::new("git")
            .args(["-c", "safe.directory=*"])
            .args(args)
            .current_dir(&ws)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    }
    chown_tree(&ws, uid);
    ws
}

/// The text of every tool result the model got back in the request after turn `i`.
fn results_after(si: &StandIn, i: u64) -> String {
    si.turns()
        .iter()
        .find(|t| t["turn"] == i + 1)
        .map(|t| t["results"].to_string())
        .unwrap_or_else(|| panic!("no request after turn {i}: {:?}", si.turns()))
}

/// That the tool results the model got after turn `i` hold `needle`.
fn assert_came_back(si: &StandIn, i: u64, needle: &str) {
    let r = results_after(si, i);
    assert!(r.contains(needle), "after turn {i}, no {needle:?} in: {r}");
}

fn tool_calls(run: &str) -> Vec<Value> {
    events(run, "tool_call", 3)
}

fn decided(calls: &[Value], connector: &str, tool: &str, decision: &str) -> usize {
    calls
        .iter()
        .filter(|c| {
            c["AIRLOCK_CONNECTOR"] == connector
                && c["AIRLOCK_TOOL"] == tool
                && c["AIRLOCK_DECISION"] == decision
        })
        .count()
}

#[test]
fn claude_code_runs_its_brief_through_airlock_and_gets_only_what_the_role_allows() {
    require_journald();
    require_agent(
        "/usr/local/lib/airlock-agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude",
    );
    let turns = json!([
        {"tool": "bash", "input": {"command": "git log --oneline"}},
        {"tool": "bash", "input": {"command": "rm -rf ."}},
        {"tool": "echo", "input": {"message": "hello-through-airlock"}},
        {"tool": "mcp__everything__get-env", "input": {}, "force": true},
        {"tool": "WebFetch", "input": {"url": "https://example.com/", "prompt": "read it"}, "force": true},
        {"tool": "Bash", "input": {"command": "touch pwned-by-bash"}, "force": true},
        {"text": "All done."}
    ]);
    let si = StandIn::scripted(&turns);
    let h = host(&si);
    let ws = repo(&h, h.uids[0]);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "code", "tess", &["--workspace", ws.to_str().unwrap()]);
    let run = run_id_of(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));

    // The allowed command ran in the workspace and its output reached the model.
    assert_came_back(&si, 0, "initial commit of the demo");
    // The refused one came back as a refusal, naming the rule.
    assert_came_back(&si, 1, "refused");
    // The connector's allowed tool answered.
    assert_came_back(&si, 2, "hello-through-airlock");
    // The denied tool was not even offered to the model.
    let offered = si.turns()[0]["tools"].to_string();
    assert!(offered.contains("mcp__everything__echo"), "{offered}");
    assert!(!offered.contains("get-env"), "{offered}");
    assert!(
        !offered.contains("\"Bash\"") && !offered.contains("WebFetch"),
        "{offered}"
    );
    for i in [3, 4, 5] {
        let r = results_after(&si, i);
        assert!(
            r.contains("\"error\":true"),
            "turn {i} came back without an error: {r}"
        );
    }
    assert!(
        !ws.join("pwned-by-bash").exists(),
        "the agent started a program itself"
    );

    let calls = tool_calls(&run);
    assert_eq!(decided(&calls, "airlock", "bash", "allow"), 1, "{calls:?}");
    assert_eq!(decided(&calls, "airlock", "bash", "deny"), 1, "{calls:?}");
    assert_eq!(
        decided(&calls, "everything", "echo", "allow"),
        1,
        "{calls:?}"
    );
    assert!(
        calls.iter().all(|c| c["AIRLOCK_TOOL"] != "get-env"),
        "{calls:?}"
    );
    // The model was reached through the provider route with the real key only, on run.model.
    for r in si.requests() {
        assert_eq!(r["x_api_key"], si.key.as_str(), "{r}");
        assert!(
            r["model"].is_null() || r["model"] == "claude-sonnet-4-5",
            "{r}"
        );
    }
    // `logs` interleaves the agent's own events, readable, with Airlock's decisions.
    let logs = stdout(&h.ctl(&["logs", &run]));
    let call = logs.find(r#"agent: calls mcp__airlock__bash {"command":"git log --oneline"}"#);
    let decision = logs.find("tool_call: airlock/bash allow by run.bash");
    assert!(
        call.is_some() && decision.is_some() && call < decision,
        "{logs}"
    );
    assert!(logs.contains("agent: finished: success"), "{logs}");
    // `show` counts them: the bash command run apart from the other tool calls.
    let shown = h.show(&run);
    let line = |k: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(k))
            .map(|l| l[k.len()..].trim_start_matches(':').trim().to_string())
            .unwrap_or_else(|| panic!("no {k} in {shown}"))
    };
    assert_eq!(line("tool calls"), "2 allowed, 1 refused", "{shown}");
    assert_eq!(line("bash commands"), "1 run", "{shown}");
    // The agent's own events are in the journal with Airlock's decisions.
    let text = journal_text(&run);
    assert!(
        text.contains("\\\"type\\\":\\\"result\\\"") || text.contains("\"type\":\"result\""),
        "no agent result event in the journal"
    );
    assert!(!text.contains(&si.key));
}

#[test]
fn codex_runs_its_brief_through_airlock_and_gets_only_what_the_role_allows() {
    require_journald();
    require_agent("/usr/local/lib/airlock-agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex");
    let turns = json!([
        {"tool": "bash", "input": {"command": "git log --oneline"}},
        {"tool": "bash", "input": {"command": "git push origin main"}},
        {"tool": "echo", "input": {"message": "codex-through-airlock"}},
        {"tool": "shell", "input": {"command": ["touch", "pwned-by-shell"]}, "force": true},
        {"text": "All done."}
    ]);
    let si = StandIn::scripted(&turns);
    let h = host(&si);
    let ws = repo(&h, h.uids[1]);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "review", "rex", &["--workspace", ws.to_str().unwrap()]);
    let run = run_id_of(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    assert_came_back(&si, 0, "initial commit of the demo");
    assert_came_back(&si, 1, "refused");
    assert_came_back(&si, 2, "codex-through-airlock");
    let offered = si.turns()[0]["tools"].to_string();
    assert!(!offered.contains("get-env"), "{offered}");
    assert!(
        !offered.contains("\"shell\""),
        "Codex offered its own shell: {offered}"
    );
    assert!(
        !ws.join("pwned-by-shell").exists(),
        "the agent started a program itself"
    );
    let calls = tool_calls(&run);
    assert_eq!(decided(&calls, "airlock", "bash", "allow"), 1, "{calls:?}");
    assert_eq!(decided(&calls, "airlock", "bash", "deny"), 1, "{calls:?}");
    assert_eq!(
        decided(&calls, "everything", "echo", "allow"),
        1,
        "{calls:?}"
    );
    for r in si.requests() {
        assert_eq!(r["authorization"], format!("Bearer {}", si.key), "{r}");
    }
}

/// The tool names Claude Code offered in scripted turn `i`.
fn offered(si: &StandIn, i: u64) -> Vec<String> {
    si.turns()
        .iter()
        .find(|t| t["turn"] == i)
        .and_then(|t| t["tools"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect()
}

/// Claude Code's subagent tool (`Agent`, earlier `Task`).
const SUBAGENT: [&str; 2] = ["Agent", "Task"];

/// `run.tools` with real Claude Code, granted: `WebFetch`, `WebSearch` and the subagent
/// tool are offered to the model; a subagent's calls go through the same gateway and the
/// same rules as its parent's (a bash prefix the role lacks is refused, Claude Code's own
/// Bash is not there to call), and what it found comes back to the parent.
#[test]
fn claude_code_offers_granted_builtins_and_a_subagent_has_only_its_parents_tools() {
    require_journald();
    require_agent(
        "/usr/local/lib/airlock-agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude",
    );
    let turns = json!([
        {"tool": SUBAGENT, "input": {"description": "inspect the repo",
          "prompt": "Look at the repository and report.", "subagent_type": "general-purpose",
          "run_in_background": false}},
        {"tool": "bash", "input": {"command": "git log --oneline"}},
        {"tool": "bash", "input": {"command": "rm -rf ."}},
        {"tool": "Bash", "input": {"command": "touch pwned-by-subagent"}, "force": true},
        {"text": "subagent-report: one commit"},
        {"text": "All done."}
    ]);
    let si = StandIn::scripted(&turns);
    let h = host(&si);
    let local = h.root.join("roles.local/code/role.yaml");
    let text = std::fs::read_to_string(&local).unwrap();
    std::fs::write(
        &local,
        text.replacen(
            "  max_turns: 150\n",
            "  max_turns: 150\n  tools: [WebFetch, WebSearch, Agent]\n",
            1,
        ),
    )
    .unwrap();
    let ws = repo(&h, h.uids[0]);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "code", "tess", &["--workspace", ws.to_str().unwrap()]);
    let run = run_id_of(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let parent = offered(&si, 0);
    for t in ["WebFetch", "WebSearch"] {
        assert!(parent.iter().any(|n| n == t), "{t} not offered: {parent:?}");
    }
    assert!(
        parent.iter().any(|n| SUBAGENT.contains(&n.as_str())),
        "no subagent tool offered: {parent:?}"
    );
    // Turn 1 is the subagent's first request: Airlock's bash tool, and not Claude Code's.
    let sub = offered(&si, 1);
    assert!(sub.iter().any(|n| n == "mcp__airlock__bash"), "{sub:?}");
    assert!(!sub.iter().any(|n| n == "Bash"), "{sub:?}");
    assert_came_back(&si, 1, "initial commit of the demo");
    assert_came_back(&si, 2, "refused");
    assert!(results_after(&si, 3).contains("\"error\":true"));
    assert_came_back(&si, 4, "subagent-report");
    assert!(
        !ws.join("pwned-by-subagent").exists(),
        "the subagent started a program itself"
    );
    let calls = tool_calls(&run);
    assert_eq!(decided(&calls, "airlock", "bash", "allow"), 1, "{calls:?}");
    assert_eq!(decided(&calls, "airlock", "bash", "deny"), 1, "{calls:?}");
}

/// `run.tools` with real Claude Code, not granted: none of `WebFetch`, `WebSearch` or the
/// subagent tool is offered, and a model that asks for the subagent anyway gets Claude
/// Code's refusal: no subagent starts (no model request of its own follows).
#[test]
fn claude_code_refuses_builtins_the_role_does_not_grant() {
    require_journald();
    require_agent(
        "/usr/local/lib/airlock-agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude",
    );
    let turns = json!([
        {"tool": SUBAGENT, "force": true, "input": {"description": "inspect the repo",
          "prompt": "Look at the repository and report.", "subagent_type": "general-purpose"}},
        {"tool": "WebSearch", "force": true, "input": {"query": "airlock"}},
        {"text": "All done."}
    ]);
    let si = StandIn::scripted(&turns);
    let h = host(&si);
    let ws = repo(&h, h.uids[0]);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "code", "tess", &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let tools = offered(&si, 0);
    for t in ["WebFetch", "WebSearch", "Agent", "Task"] {
        assert!(!tools.iter().any(|n| n == t), "{t} offered: {tools:?}");
    }
    for i in [0, 1] {
        let r = results_after(&si, i);
        assert!(r.contains("\"error\":true"), "turn {i}: {r}");
    }
    assert_eq!(si.turns().len(), 3, "a subagent ran: {:?}", si.turns());
}

/// `run.max_turns` holds for Codex, which has no turn limit of its own: a role with
/// `max_turns: 3` whose model keeps asking for tools gets three turns; the fourth model
/// request is refused by the gateway (journaled with the rule) and never reaches the model.
#[test]
fn codex_gets_run_max_turns_model_turns_and_no_more() {
    require_journald();
    require_agent("/usr/local/lib/airlock-agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex");
    let log = json!({"tool": "bash", "input": {"command": "git log --oneline"}});
    let turns = json!([log, log, log, log, log, {"text": "All done."}]);
    let si = StandIn::scripted(&turns);
    let h = host(&si);
    let local = h.root.join("roles.local/review/role.yaml");
    let text = std::fs::read_to_string(&local).unwrap();
    std::fs::write(
        &local,
        text.replace("  max_turns: 80\n", "  max_turns: 3\n"),
    )
    .unwrap();
    let ws = repo(&h, h.uids[1]);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "review", "rex", &["--workspace", ws.to_str().unwrap()]);
    let run = run_id_of(&o);
    let served = si.turns();
    assert_eq!(
        served.len(),
        3,
        "{}\n{}\n{served:?}",
        stdout(&o),
        stderr(&o)
    );
    let ev = events(&run, "provider", 4);
    let denied: Vec<&Value> = ev
        .iter()
        .filter(|e| e["AIRLOCK_DECISION"] == "deny")
        .collect();
    assert!(!denied.is_empty(), "{ev:?}");
    assert!(
        denied.iter().all(|e| e["AIRLOCK_RULE"] == "run.max_turns"),
        "{denied:?}"
    );
}

/// The escape battery as a command the model sends through Airlock's bash tool: it runs on
/// the command side of a real Claude Code run, every class holds there, its verdicts come
/// back to the model, and the daemon it leaves behind does not outlive the run. Its fork
/// bomb meets the command side's own process limit, then a memory hog the command side's
/// own memory limit (the agent keeps a floor of both: limits.agent_reserve), the bash tool
/// says what happened, and Claude Code goes on to finish its next turns.
#[test]
fn the_escape_battery_holds_as_a_command_through_the_bash_tool() {
    require_journald();
    require_agent(
        "/usr/local/lib/airlock-agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude",
    );
    // A port listening on the host's loopback and a host file: neither may be reached.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(secret.path().join("key"), "host secret").unwrap();
    let marker = format!("m{}", std::process::id());
    let command = format!(
        "python3 escape_battery.py --host-port {} --host-path {} --max-procs 64 --daemon {marker}",
        listener.local_addr().unwrap().port(),
        secret.path().join("key").display(),
    );
    let si = StandIn::scripted(&json!([
        {"tool": "bash", "input": {"command": command}},
        {"tool": "bash", "input": {"command": "python3 escape_battery.py --memory-hog"}},
        {"tool": "bash", "input": {"command": "git log --oneline"}},
        {"text": "The battery ran."}
    ]));
    // 1 GiB for the run, of which the agent keeps half: the hog gets 512 MiB.
    let h = host_with_limits(
        &si,
        "{max_procs: 64, tmp_bytes: 8388608, memory_bytes: 1073741824, agent_reserve: {memory_bytes: 536870912}}",
    );
    let uid = h.uids[0];
    let ws = repo(&h, uid);
    battery_into(&ws, uid);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "code", "tess", &["--workspace", ws.to_str().unwrap()]);
    let run = run_id_of(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));

    // What came back to the model: the bash tool's result, its stdout the verdicts.
    let turn = si
        .turns()
        .into_iter()
        .find(|t| t["turn"] == 1)
        .expect("no second turn");
    let result = turn["results"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // Claude Code gives the model the tool's text, then its structured content again.
    let out: Value = serde_json::Deserializer::from_str(&result)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no bash tool result: {result}"));
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_battery_held(out["stdout"].as_str().unwrap_or_default(), &[]);
    // The hog was OOM-killed on the command side, and the model was told so.
    let hog = results_after(&si, 1);
    assert!(
        hog.contains("killed: out of memory") && hog.contains("HOG "),
        "the hog's result: {hog}"
    );
    // And the agent went on: its next command ran, and it finished (exit 0 above).
    assert_came_back(&si, 2, "initial commit of the demo");
    // (The battery's `environment` check is what keeps the provider key out of the jail.)
    assert!(
        !battery_daemon_alive(&marker) && airlock::supervisor::launch::pids_of_uid(uid).is_empty(),
        "the battery's daemon (or another process of the instance uid) outlived the run"
    );
    let calls = events(&run, "tool_call", 3);
    assert_eq!(decided(&calls, "airlock", "bash", "allow"), 3, "{calls:?}");
}

/// The shipped `code` role, unchanged, with its GitHub identity held by Airlock: Claude Code
/// works in the run.clone checkout, then opens a pull request on the stand-in GitHub with
/// the role's GitHub MCP tools (a branch, a commit, the pull request), each write checked
/// and counted; a push to main and a workflow edit are refused and change nothing.
#[test]
fn claude_code_opens_a_pull_request_on_github_through_airlock() {
    require_journald();
    require_agent(
        "/usr/local/lib/airlock-agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude",
    );
    let gh = common::github::StandInGithub::start();
    let repo = json!({"owner": "example-org", "repo": "example-repo"});
    let with = |extra: Value| {
        let mut v = repo.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let readme = "hello\n\n## Usage\nRun it.\n";
    let si = StandIn::scripted(&json!([
        {"tool": "bash", "input": {"command": "git log --oneline", "cwd": "$WORKSPACE/repos/example-repo"}},
        {"tool": "create_branch", "input": with(json!({"branch": "airlock/readme-usage", "from_branch": "main"}))},
        {"tool": "push_files", "input": with(json!({"branch": "airlock/readme-usage", "message": "README: usage",
            "files": [{"path": "README.md", "content": readme}]}))},
        {"tool": "create_pull_request", "input": with(json!({"title": "README: usage",
            "head": "airlock/readme-usage", "base": "main", "body": "From the code role."}))},
        {"tool": "push_files", "input": with(json!({"branch": "main", "message": "to main",
            "files": [{"path": "README.md", "content": "pwned\n"}]}))},
        {"tool": "push_files", "input": with(json!({"branch": "airlock/readme-usage", "message": "ci",
            "files": [{"path": ".github/workflows/ci.yml", "content": "on: pull_request_target\n"}]}))},
        {"tool": "push_files", "input": with(json!({"branch": "airlock/someone-elses", "message": "theirs",
            "files": [{"path": "README.md", "content": "mine now\n"}]}))},
        {"text": "Opened the pull request."}
    ]));
    let h = Host::new(&[("tess", "code")], &gh.config_beside(&si.config()));
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "safe.directory=*", "-C"])
            .arg(gh.bare())
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
        stdout(&o).trim().to_string()
    };
    let main_before = git(&["rev-parse", "main"]);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "code", "tess", &[]);
    let run = run_id_of(&o);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));

    // The run.clone checkout was the workspace's, and git ran in it.
    assert_came_back(&si, 0, "seed");
    // The pull request is open on GitHub, from a branch holding the commit.
    let pulls: Value = serde_json::from_str(
        &std::fs::read_to_string(gh.dir.path().join("pulls.json")).expect("no pull request"),
    )
    .unwrap();
    assert_eq!(pulls.as_array().map(Vec::len), Some(1), "{pulls}");
    assert_eq!(pulls[0]["head"], "airlock/readme-usage");
    assert_eq!(pulls[0]["base"], "main");
    assert_eq!(
        git(&["show", "airlock/readme-usage:README.md"]),
        readme.trim()
    );
    // The refused writes changed nothing.
    assert_eq!(git(&["rev-parse", "main"]), main_before);
    assert_eq!(
        git(&["show", "airlock/readme-usage:.github/workflows/ci.yml"]),
        "on: push"
    );
    assert_came_back(&si, 4, "args.github.push_files.branch");
    assert_came_back(&si, 5, "writes.workflows");
    // A branch the run did not make is not its to write to.
    assert_came_back(&si, 6, "push: branch");
    // Upstream saw the three writes only, each with the run's installation token.
    let token = gh.tokens()[0].clone();
    let seen = gh.mcp_calls();
    let names: Vec<&str> = seen.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["create_branch", "push_files", "create_pull_request"]
    );
    assert!(seen.iter().all(|c| c["auth"] == format!("Bearer {token}")));
    let writes = events(&run, "github_write", 5);
    let allowed = writes
        .iter()
        .filter(|e| e["AIRLOCK_DECISION"] == "allow")
        .count();
    assert_eq!(allowed, 3, "{writes:?}");
    assert!(!journal_text(&run).contains(&token));
    // The operator's view: the writes of the budget, the lease revoked.
    let shown = h.show(&run);
    assert!(
        shown.contains("3 of 12 (budget.github_writes_per_run)"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("run/{run}/github/1 revoked")),
        "{shown}"
    );
}
