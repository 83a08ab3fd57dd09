//! Asks, for real: airlockd runs a `-- CMD` agent (the scripted MCP client) whose role
//! (`code`, named by the host's `asks`) lacks a bash prefix; the gateway holds the call
//! while a person answers with `airlockctl allow` / `deny` from outside, and a rail or a
//! guard is refused at once, never asked.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn start_agent(h: &Host, ws: &std::path::Path, steps: &Value) -> Child {
    let argv = mcp_agent(steps);
    Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args([
            "launch",
            "code",
            "--instance",
            "tess",
            "--wait",
            "--workspace",
        ])
        .arg(ws)
        .arg("--")
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The asks waiting, as `airlockctl asks --json` lists them.
fn asks(h: &Host) -> Vec<Value> {
    let o = h.ctl(&["--json", "asks"]);
    assert!(o.status.success(), "asks: {}", stderr(&o));
    serde_json::from_str::<Value>(&stdout(&o))
        .unwrap_or_else(|_| panic!("asks --json: {}", stdout(&o)))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The one ask waiting for `what`, once it is there.
fn ask_for(h: &Host, what: &str) -> Value {
    poll(60, || asks(h).into_iter().find(|a| a["what"] == what))
        .unwrap_or_else(|| panic!("no ask for {what}: {:?}", asks(h)))
}

#[test]
fn an_ask_waits_for_allow_for_run_lets_the_same_through_and_rails_are_refused_at_once() {
    require_journald();
    let h = Host::new(
        &[("tess", "code")],
        "asks: {roles: [code], wait_seconds: 60}\n",
    );
    let _d = Airlockd::start(&h);
    let ws = h.workspace("ws", h.uids[0]);
    let steps = json!([
        {"call": "bash", "args": {"command": "touch allowed-once"}},
        {"call": "bash", "args": {"command": "touch for-run"}},
        {"call": "bash", "args": {"command": "touch for-run"}},
        {"call": "bash", "args": {"command": "git push origin main"}},
        {"call": "bash", "args": {"command": "sudo id"}},
        {"call": "bash", "args": {"command": "touch denied"}},
    ]);
    let child = start_agent(&h, &ws, &steps);

    let a = ask_for(&h, "touch allowed-once");
    let id = a["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("a-"), "{a}");
    assert_eq!(a["instance"], "tess");
    assert_eq!(a["kind"], "bash");
    assert_eq!(a["rule"], "default: no prefix matches");
    assert!(a["run"].as_str().unwrap().starts_with("r-"), "{a}");
    assert!(
        !ws.join("allowed-once").exists(),
        "it ran before anyone answered"
    );
    let o = h.ctl(&["allow", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Answered: a second answer, and an ask nobody raised, each fail with their own code.
    let again = h.ctl(&["allow", &id]);
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already answered"),
        "{}",
        stderr(&again)
    );
    let unknown = h.ctl(&["allow", "a-999999"]);
    assert_eq!(unknown.status.code(), Some(3), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("no ask a-999999"),
        "{}",
        stderr(&unknown)
    );
    let neither = h.ctl(&["deny", "x-1"]);
    assert_eq!(neither.status.code(), Some(2), "{}", stderr(&neither));
    assert!(stderr(&neither).contains("d-N") && stderr(&neither).contains("a-N"));

    let b = ask_for(&h, "touch for-run");
    let o = h.ctl(&["allow", b["id"].as_str().unwrap(), "--for-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // The same request again, the rail and the guard: none is ever asked.
    let c = ask_for(&h, "touch denied");
    let o = h.ctl(&["deny", c["id"].as_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    for i in [0, 1, 2] {
        let s = step(&lines, i);
        assert_eq!(s["isError"], false, "step {i}: {s}");
        assert_eq!(s["structured"]["exit_code"], 0, "step {i}: {s}");
    }
    assert!(ws.join("allowed-once").exists() && ws.join("for-run").exists());
    let rail = step(&lines, 3);
    assert_eq!(rail["isError"], true);
    assert!(rail["text"].as_str().unwrap().contains("rail: "), "{rail}");
    let guard = step(&lines, 4);
    assert!(
        guard["text"]
            .as_str()
            .unwrap()
            .contains("guard: wrapper sudo"),
        "{guard}"
    );
    let denied = step(&lines, 5);
    assert_eq!(denied["isError"], true);
    assert!(
        denied["text"].as_str().unwrap().contains("denied by uid 0"),
        "{denied}"
    );
    assert!(!ws.join("denied").exists());

    // Every ask and answer is in the run's journal, with who answered.
    let run = run_id_of(&o);
    let recs = events(&run, "ask", 7);
    let states: Vec<&str> = recs
        .iter()
        .map(|r| r["AIRLOCK_ASK_STATE"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        states,
        [
            "waiting",
            "allowed",
            "waiting",
            "allowed_for_run",
            "granted_for_run",
            "waiting",
            "denied"
        ],
        "{recs:?}"
    );
    assert_eq!(recs[1]["AIRLOCK_ANSWERED_BY"], "uid 0");
    assert_eq!(recs[1]["AIRLOCK_ASK"], id.as_str());
    // And the run's closing ledger record counts them.
    let shown = h.show(&run);
    assert!(
        shown.contains("3 asked: 2 allowed, 1 denied, 0 unanswered"),
        "{shown}"
    );
}

#[test]
fn an_ask_nobody_answers_is_refused_after_wait_seconds() {
    require_journald();
    let h = Host::new(
        &[("tess", "code")],
        "asks: {roles: [code], wait_seconds: 2}\n",
    );
    let _d = Airlockd::start(&h);
    let ws = h.workspace("ws", h.uids[0]);
    let steps = json!([{"call": "bash", "args": {"command": "touch nobody"}}]);
    let started = Instant::now();
    let child = start_agent(&h, &ws, &steps);
    let a = ask_for(&h, "touch nobody");
    let o = child.wait_with_output().unwrap();
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    let s = step(&lines, 0);
    assert_eq!(s["isError"], true, "{s}");
    let text = s["text"].as_str().unwrap();
    assert!(text.contains("nobody answered within 2 s"), "{text}");
    assert!(text.contains("default: no prefix matches"), "{text}");
    assert!(!ws.join("nobody").exists());
    // Gone from the list, and a late answer is told it came too late.
    assert!(asks(&h).is_empty());
    let late = h.ctl(&["allow", a["id"].as_str().unwrap()]);
    assert_eq!(late.status.code(), Some(4), "{}", stderr(&late));
    let shown = h.show(&run_id_of(&o));
    assert!(
        shown.contains("1 asked: 0 allowed, 0 denied, 1 unanswered"),
        "{shown}"
    );
}

/// The reference MCP server (tests/agents/reference_server.js) on the host's loopback.
struct Upstream(Child, u16);

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn reference_server() -> Upstream {
    use std::io::BufRead;
    require_npm("@modelcontextprotocol/sdk");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new("node")
        .arg(std::path::Path::new(REPO).join("tests/agents/reference_server.js"))
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    Upstream(child, port)
}

#[test]
fn an_mcp_tool_no_pattern_lists_is_asked_and_a_deny_entry_never() {
    require_journald();
    let up = reference_server();
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "asks: {{roles: [code], wait_seconds: 60}}\nmcp_connectors:\n  reference: {{url: \"http://127.0.0.1:{}/mcp\"}}\n",
            up.1
        ),
    );
    h.local_role("code", |t| {
        t.replacen("tools:\n", "tools:\n  reference: [echo]\n", 1)
            .replacen("deny:\n", "deny:\n  reference: [forbidden_*]\n", 1)
            .replacen(
                "  mcp:\n",
                "  mcp:\n    reference:\n      via: airlock\n",
                1,
            )
    });
    let _d = Airlockd::start(&h);
    let ws = h.workspace("ws", h.uids[0]);
    let steps = json!({"server": "reference", "steps": [
        {"call": "hidden_tool"},
        {"call": "hidden_tool"},
        {"call": "forbidden_tool"},
    ]});
    let child = start_agent(&h, &ws, &steps);
    let a = ask_for(&h, "reference/hidden_tool");
    assert_eq!(a["kind"], "tool");
    assert_eq!(a["rule"], "default: tool not listed");
    let o = h.ctl(&["allow", a["id"].as_str().unwrap(), "--for-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    for i in [0, 1] {
        assert_eq!(step(&lines, i)["text"], "hidden", "step {i}");
    }
    let denied = step(&lines, 2);
    assert_eq!(denied["isError"], true);
    assert!(
        denied["text"]
            .as_str()
            .unwrap()
            .contains("deny.reference[0]"),
        "{denied}"
    );
    let run = run_id_of(&o);
    let states: Vec<String> = events(&run, "ask", 3)
        .iter()
        .map(|r| {
            r["AIRLOCK_ASK_STATE"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(states, ["waiting", "allowed_for_run", "granted_for_run"]);
}
