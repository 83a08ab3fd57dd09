//! The gateway's MCP proxy, for real: runs whose agent is the scripted TypeScript-SDK
//! client talk to `$AIRLOCK_GATEWAY/mcp/<connector>`, in front of real upstreams on the
//! host's loopback: `@modelcontextprotocol/server-everything` (a published server) and a
//! stand-in of ours on the same SDK (tests/agents/reference_server.js) with the tools the
//! checks need. The official conformance suite then runs inside a jail against both
//! Airlock's own server and the proxy.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// A server process on the host's loopback, killed when dropped.
struct Upstream {
    child: Child,
    port: u16,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_listening(port: u16) {
    let end = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < end,
            "the upstream on port {port} never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn reference_server() -> Upstream {
    reference_server_with(&[])
}

/// The reference server with these arguments after its port (`echo-auth`).
fn reference_server_with(args: &[&str]) -> Upstream {
    require_npm("@modelcontextprotocol/sdk");
    let port = free_port();
    let mut child = Command::new("node")
        .arg(Path::new(REPO).join("tests/agents/reference_server.js"))
        .arg(port.to_string())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    Upstream { child, port }
}

fn server_everything() -> Upstream {
    let pkg = require_npm("@modelcontextprotocol/server-everything");
    let port = free_port();
    let child = Command::new("node")
        .arg(pkg.join("dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port);
    Upstream { child, port }
}

fn upstream_log(u: &Upstream) -> Vec<Value> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", u.port)).unwrap();
    use std::io::{Read, Write};
    write!(s, "GET /log HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap()
}

const SECRET: &str = "connector-secret-7d1f0e9a3b";

/// A host whose `code` role reaches `reference` (with a credential) and `everything`
/// through Airlock.
fn host(reference: &Upstream, everything: Option<&Upstream>) -> Host {
    let every = everything.map(|e| format!("{{url: \"http://127.0.0.1:{}/mcp\"}}", e.port));
    host_with(reference, every.as_deref())
}

/// [`host`], with `everything`'s upstream given as config text.
fn host_with(reference: &Upstream, everything: Option<&str>) -> Host {
    let dir = tempfile::tempdir().unwrap().keep();
    let cred = dir.join("reference.token");
    std::fs::write(&cred, format!("{SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut extra = format!(
        "credentials:\n  reference-token: {}\nmcp_connectors:\n  reference: {{url: \"http://127.0.0.1:{}/mcp\", credential: reference-token}}\n",
        cred.display(),
        reference.port
    );
    if let Some(e) = everything {
        extra.push_str(&format!("  everything: {e}\n"));
    }
    let h = Host::new(&[("tess", "code")], &extra);
    h.local_role("code", |t| {
        t.replacen(
            "tools:\n",
            "tools:\n  reference: [test_*, echo, echo_auth, ask_client]\n  everything: [echo, get-*]\n",
            1,
        )
        .replacen(
            "deny:\n",
            "deny:\n  reference: [forbidden_*, test_sampling, \"mem://private/*\"]\n  everything: [get-env]\n",
            1,
        )
        .replacen(
            "resources:\n",
            "resources:\n  reference: [\"test://static-text\", \"test://static-binary\", \"test://template/*\", \"test://embedded-resource\", \"test://mixed-content-resource\", \"test://bundle\", \"repo://example-org/example-repo/*\"]\n  everything: [\"demo://resource/static/document/*\"]\n",
            1,
        )
        .replacen(
            "args:\n",
            "args:\n  reference:\n    echo:\n      message:\n        maxLength: 10\n",
            1,
        )
        .replacen(
            "  mcp:\n",
            "  mcp:\n    reference:\n      via: airlock\n    everything:\n      via: airlock\n",
            1,
        )
    });
    h
}

fn run_agent(h: &Host, server: &str, steps: Value) -> (std::process::Output, Vec<Value>) {
    let argv = mcp_agent(&json!({"server": server, "steps": steps}));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code", "tess", &[], &argv).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    (o, lines)
}

#[test]
fn the_proxy_holds_every_call_to_the_role_and_the_upstream_sees_only_what_passed() {
    require_journald();
    let up = reference_server();
    let h = host(&up, None);
    let long = "x".repeat(20);
    // The secret travels reversed, so the probe's own command line does not hold it.
    let reversed: String = SECRET.chars().rev().collect();
    let probe = format!(
        "const S = '{reversed}'.split('').reverse().join(''); const seen = []; const look = (p) => {{ try {{ if (fs.readFileSync(p, 'latin1').includes(S)) seen.push(p); }} catch (e) {{}} }};
         look('/proc/self/environ'); look('/proc/self/cmdline');
         const walk = (d, depth) => {{ if (depth > 4) return; let names = []; try {{ names = fs.readdirSync(d); }} catch (e) {{ return; }}
           for (const n of names) {{ const p = d + '/' + n; let st; try {{ st = fs.lstatSync(p); }} catch (e) {{ continue; }}
             if (st.isDirectory()) walk(p, depth + 1); else if (st.isFile() && st.size < (1 << 20)) look(p); }} }};
         for (const d of ['/etc', '/home', '/tmp', process.env.AIRLOCK_WORKSPACE]) walk(d, 0);
         return {{ seen, env: Object.keys(process.env) }};"
    );
    let (o, lines) = run_agent(
        &h,
        "reference",
        json!([
            {"list": "tools"},
            {"list": "tools", "cursor": "PAGE"},
            {"call": "echo", "args": {"message": "hi"}},
            {"call": "echo", "args": {"message": long}},
            {"call": "forbidden_tool"},
            {"call": "hidden_tool"},
            {"call": "ask_client"},
            {"list": "resources"},
            {"list": "templates"},
            {"read": "test://static-text"},
            {"read": "mem://private/b"},
            {"request": "prompts/list"},
            {"request": "completion/complete", "params": {"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}},
            {"request": "logging/setLevel", "params": {"level": "debug"}},
            {"raw": "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}]"},
            {"js": probe},
            {"call": "echo_auth"},
        ]),
    );
    // An upstream that echoes the credential hands the agent only Airlock's placeholder.
    let echoed = step(&lines, 16)["text"].as_str().unwrap().to_string();
    assert_eq!(echoed, "you sent: Bearer [withheld by Airlock]");
    // Pages: the first page is filtered, and its cursor is Airlock's own.
    let p0 = step(&lines, 0);
    let first: Vec<&str> = p0["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        first
            .iter()
            .all(|t| t.starts_with("test_") || *t == "echo" || *t == "ask_client"),
        "{p0}"
    );
    let cursor = p0["nextCursor"].as_str().unwrap_or_default();
    assert!(cursor.starts_with("airlock-"), "{p0}");
    let _ = cursor;
    // (The scripted agent sends the literal cursor "PAGE": not one of this session's.)
    assert!(
        step(&lines, 1)["thrown"]
            .as_str()
            .unwrap_or_default()
            .contains("cursor"),
        "{:?}",
        step(&lines, 1)
    );
    assert_eq!(step(&lines, 2)["text"], "echo: hi");
    for (i, rule) in [
        (3, "args.reference.echo.message"),
        (4, "deny.reference[0]"),
        (5, "default: tool not listed"),
    ] {
        let s = step(&lines, i);
        assert_eq!(s["isError"], true, "{s}");
        assert!(s["text"].as_str().unwrap().contains(rule), "{i}: {s}");
    }
    // The upstream asked for sampling, elicitation and roots: Airlock said no, or nothing.
    let asked: Value = serde_json::from_str(step(&lines, 6)["text"].as_str().unwrap()).unwrap();
    assert!(
        asked["sampling"]["error"]
            .as_str()
            .unwrap()
            .contains("Airlock answers no sampling"),
        "{asked}"
    );
    assert!(asked["elicitation"]["error"].is_string(), "{asked}");
    assert_eq!(asked["roots"]["ok"]["roots"], json!([]), "{asked}");
    let done = lines.iter().find(|l| l["step"] == "asked").unwrap();
    assert_eq!(
        done["asked"],
        json!([]),
        "the agent was asked something: {done}"
    );
    assert_eq!(
        done["capabilities"],
        json!({"tools": {}, "resources": {}}),
        "{done}"
    );
    assert_eq!(
        step(&lines, 7)["resources"],
        json!([
            "test://static-text",
            "test://static-binary",
            "test://bundle"
        ])
    );
    assert_eq!(
        step(&lines, 8)["templates"],
        json!(["test://template/{id}/data"])
    );
    assert_eq!(step(&lines, 9)["contents"], 1);
    for i in [10, 11, 12, 13] {
        assert!(
            step(&lines, i)["thrown"].is_string(),
            "{i}: {:?}",
            step(&lines, i)
        );
    }
    assert!(step(&lines, 11)["thrown"]
        .as_str()
        .unwrap()
        .contains("-32601"));
    assert_eq!(step(&lines, 14)["status"], 400);
    let seen = &step(&lines, 15)["value"];
    assert_eq!(
        seen["seen"],
        json!([]),
        "the connector's secret is in the jail: {seen}"
    );

    // What reached the upstream: only what passed, with the credential, in its own session.
    let log = upstream_log(&up);
    let calls: Vec<&str> = log.iter().filter_map(|r| r["tool"].as_str()).collect();
    assert!(
        calls.contains(&"echo") && calls.contains(&"ask_client"),
        "{calls:?}"
    );
    for never in ["forbidden_tool", "hidden_tool"] {
        assert!(
            !calls.contains(&never),
            "{never} reached the upstream: {log:?}"
        );
    }
    assert_eq!(
        calls.iter().filter(|c| **c == "echo").count(),
        1,
        "the long echo reached the upstream"
    );
    let rpcs: Vec<&str> = log.iter().filter_map(|r| r["rpc"].as_str()).collect();
    for never in ["prompts/list", "completion/complete", "logging/setLevel"] {
        assert!(!rpcs.contains(&never), "{never} reached the upstream");
    }
    assert!(
        !log.iter().any(|r| r["uri"] == "mem://private/b"),
        "a refused read reached the upstream"
    );
    for r in &log {
        assert_eq!(r["authorization"], format!("Bearer {SECRET}"), "{r}");
    }
    let up_session = log.iter().find_map(|r| r["session"].as_str()).unwrap();
    assert!(up_session.starts_with("up-"));
    // The run's end ended its upstream session too.
    assert!(
        log.iter()
            .any(|r| r["method"] == "DELETE" && r["session"] == up_session),
        "no DELETE of the upstream session: {log:?}"
    );

    // The journal: every call, arguments by shape only, and never the secret.
    let run = run_id_of(&o);
    let calls = events(&run, "tool_call", 8);
    let echo = calls
        .iter()
        .find(|c| c["AIRLOCK_TOOL"] == "echo" && c["AIRLOCK_DECISION"] == "allow")
        .unwrap();
    assert_eq!(echo["AIRLOCK_CONNECTOR"], "reference");
    assert_eq!(echo["AIRLOCK_ARGS"], "{message: string}");
    assert!(calls
        .iter()
        .any(|c| c["AIRLOCK_TOOL"] == "forbidden_tool" && c["AIRLOCK_DECISION"] == "deny"));
    assert!(calls
        .iter()
        .any(|c| c["AIRLOCK_TOOL"] == "resources/read" && c["AIRLOCK_DECISION"] == "deny"));
    let text = journal_text(&run);
    assert!(!text.contains(SECRET), "the secret is in the journal");
    // Airlock's fields of each call (journald's own _CMDLINE is the launcher's command
    // line, which holds the scripted steps).
    let ours: Vec<Value> = calls
        .iter()
        .map(|c| {
            let m = c.as_object().unwrap();
            Value::Object(
                m.iter()
                    .filter(|(k, _)| k.starts_with("AIRLOCK_") || *k == "MESSAGE")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )
        })
        .collect();
    let call_text = serde_json::to_string(&ours).unwrap();
    assert!(
        !call_text.contains(&long),
        "an argument value is in a call's record"
    );
    assert!(
        !call_text.contains("\"hi\""),
        "an argument value is in a call's record"
    );
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    assert!(!ledger.contains(SECRET));
}

#[test]
fn an_upstream_echoing_its_bearer_in_initialize_lists_or_results_hands_over_only_the_mark() {
    require_journald();
    let up = reference_server_with(&["echo-auth"]);
    let h = host(&up, None);
    let discover =
        json!({"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string();
    let (o, lines) = run_agent(
        &h,
        "reference",
        json!([
            {"list": "tools", "all": true},
            {"call": "echo_auth"},
            {"raw": discover, "nosession": true},
        ]),
    );
    let all = lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    // The upstream did put it everywhere (so this test can fail)...
    let log = upstream_log(&up);
    assert!(log
        .iter()
        .any(|r| r["authorization"] == format!("Bearer {SECRET}")));
    // ...and the agent saw none of it, in no spelling.
    assert!(!all.contains(SECRET), "the bearer reached the agent: {all}");
    let done = lines.iter().find(|l| l["step"] == "asked").unwrap();
    let instructions = done["instructions"].as_str().unwrap_or_default();
    assert!(
        instructions.starts_with("you sent Bearer [withheld by Airlock]; as JSON"),
        "{done}"
    );
    assert!(
        instructions.contains("as base64 QmVhcmVy"),
        "the base64 spelling's start is there, its secret part withheld: {done}"
    );
    assert_eq!(
        done["server"]["title"], "sent Bearer [withheld by Airlock]",
        "{done}"
    );
    assert!(done["server"]["name"]
        .as_str()
        .unwrap()
        .ends_with("[withheld by Airlock]"));
    let tools = &step(&lines, 0)["tools"];
    let desc = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo_auth")
        .unwrap()["description"]
        .clone();
    assert_eq!(desc, "Echoes Bearer [withheld by Airlock]");
    assert_eq!(
        step(&lines, 1)["text"],
        "you sent: Bearer [withheld by Airlock]"
    );
    // The stateless revision's discovery serves the same scrubbed text.
    let discover = &step(&lines, 2);
    assert_eq!(discover["status"], 200, "{discover}");
    assert!(
        discover["body"]
            .as_str()
            .unwrap()
            .contains("you sent Bearer [withheld by Airlock]"),
        "{discover}"
    );
    // The journal says the answers held it, never the value.
    let run = run_id_of(&o);
    let text = journal_text(&run);
    assert!(!text.contains(SECRET), "the secret is in the journal");
    let withheld = events(&run, "withheld", 2);
    assert!(
        withheld.iter().any(|w| w["MESSAGE"]
            .as_str()
            .unwrap_or_default()
            .contains("initialize")),
        "{withheld:?}"
    );
}

#[test]
fn server_everything_through_the_gateway_shows_only_what_the_role_allows() {
    let up = reference_server();
    let every = server_everything();
    let h = host(&up, Some(&every));
    let (_o, lines) = run_agent(
        &h,
        "everything",
        json!([
            {"list": "tools"},
            {"call": "echo", "args": {"message": "hello"}},
            {"call": "get-env"},
            {"list": "resources"},
            {"read": "demo://resource/static/document/architecture.md"},
            {"call": "trigger-sampling-request", "args": {"prompt": "x", "maxTokens": 5}},
        ]),
    );
    let tools: Vec<&str> = step(&lines, 0)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tools.contains(&"echo"), "{tools:?}");
    assert!(
        tools
            .iter()
            .all(|t| *t == "echo" || (t.starts_with("get-") && *t != "get-env")),
        "{tools:?}"
    );
    assert_eq!(step(&lines, 1)["text"], "Echo: hello");
    assert!(step(&lines, 2)["text"]
        .as_str()
        .unwrap()
        .contains("deny.everything[0]"));
    let res = step(&lines, 3)["resources"].as_array().unwrap().clone();
    assert!(!res.is_empty());
    assert!(
        res.iter().all(|r| r
            .as_str()
            .unwrap()
            .starts_with("demo://resource/static/document/")),
        "{res:?}"
    );
    assert_eq!(step(&lines, 4)["contents"], 1);
    assert_eq!(step(&lines, 5)["isError"], true, "{:?}", step(&lines, 5));
    let done = lines.iter().find(|l| l["step"] == "asked").unwrap();
    assert_eq!(done["asked"], json!([]), "{done}");
}

#[test]
fn the_conformance_suite_passes_through_the_proxy_and_on_airlocks_own_server() {
    let up = reference_server();
    let h = host(&up, None);
    let through_proxy = [
        "server-initialize",
        "ping",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "dns-rebinding-protection",
    ];
    let mut failed = Vec::new();
    for sc in through_proxy {
        let (ok, out) = conformance(&h, "reference", sc);
        if !ok {
            failed.push(format!("reference {sc}:\n{out}"));
        }
    }
    for sc in [
        "server-initialize",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
    ] {
        let (ok, out) = conformance(&h, "airlock", sc);
        if !ok {
            failed.push(format!("airlock {sc}:\n{out}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A host whose `everything` connector is server-everything over stdio, run as its own uid
/// (`base` and up, one of nine per test process): the host and that uid.
fn stdio_everything_host(up: &Upstream, base: u32) -> (Host, u32) {
    let pkg = require_npm("@modelcontextprotocol/server-everything");
    let conn_uid = base + std::process::id() % 9;
    let h = host_with(
        up,
        Some(&format!(
            "{{command: [/usr/bin/node, {}, stdio], uid: {conn_uid}}}",
            pkg.join("dist/index.js").display()
        )),
    );
    (h, conn_uid)
}

#[test]
fn server_everything_over_stdio_runs_in_a_jail_of_its_own_and_dies_with_the_run() {
    require_journald();
    let up = reference_server();
    let (h, conn_uid) = stdio_everything_host(&up, 1_880_094_990);
    let instance_uid = h.uids[0];
    let argv = mcp_agent(&json!({"server": "everything", "steps": [
        {"list": "tools"},
        {"call": "echo", "args": {"message": "over stdio"}},
        {"call": "get-env"},
        {"sleep_ms": 1500},
    ]}));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut child = h
        .launch("code", "tess", &[], &argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut during = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(v) = serde_json::from_str::<Value>(&line.unwrap()) else {
            continue;
        };
        if v["step"] == 2 {
            // The agent sleeps now: look at the connector's jail and the agent's from the
            // host (pid namespaces of each).
            let ns = |uid: u32| -> Vec<Option<std::path::PathBuf>> {
                airlock::supervisor::launch::pids_of_uid(uid)
                    .into_iter()
                    .map(|p| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok())
                    .collect()
            };
            during = Some((ns(conn_uid), ns(instance_uid)));
        }
        lines.push(v);
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let tools: Vec<&str> = step(&lines, 0)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"echo") && !tools.contains(&"get-env"),
        "{tools:?}"
    );
    assert_eq!(step(&lines, 1)["text"], "Echo: over stdio");
    assert!(step(&lines, 2)["text"]
        .as_str()
        .unwrap()
        .contains("deny.everything[0]"));
    // Its own uid, in a pid namespace of its own (not the agent's), and gone with the run.
    let (conn, agent) = during.expect("no step 2");
    assert!(!conn.is_empty(), "no connector process during the run");
    assert!(!agent.is_empty(), "no agent process during the run");
    for c in &conn {
        assert!(
            c.is_some() && !agent.contains(c),
            "the connector shares the agent's pid namespace"
        );
    }
    let end = Instant::now() + Duration::from_secs(10);
    while !airlock::supervisor::launch::pids_of_uid(conn_uid).is_empty() {
        assert!(Instant::now() < end, "a connector process outlived its run");
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = run_id_of(&o);
    let text = journal_text(&run);
    assert!(
        text.contains("[connector everything]"),
        "its stderr is not in the run's journal"
    );
}

/// The proxy decides MCP calls and reads exactly as `airlockctl check ROLE tool|resource`
/// does: each case sent through a real run's gateway and checked with the CLI, the two
/// verdicts and rules (the gateway's from its journal) compared.
#[test]
fn airlockctl_check_and_the_proxy_agree_on_tools_and_resources() {
    require_journald();
    let up = reference_server();
    let h = host(&up, None);
    let long = "y".repeat(40);
    let tools: Vec<(&str, Value)> = vec![
        ("echo", json!({"message": "hi"})),
        ("echo", json!({"message": long})),
        ("echo", json!({"message": 7})),
        ("echo", json!({})),
        ("test_simple_text", json!({})),
        ("forbidden_tool", json!({})),
        ("hidden_tool", json!({})),
        ("test_sampling", json!({"prompt": "x"})),
        ("bad name", json!({})),
        ("delete_everything", json!({})),
    ];
    let resources = [
        "test://static-text",
        "test://static-binary",
        "test://template/7/data",
        "mem://private/b",
        "test://static-text/../x",
        "file:///etc/shadow",
    ];
    let mut steps: Vec<Value> = tools
        .iter()
        .map(|(t, a)| json!({"call": t, "args": a}))
        .collect();
    steps.extend(resources.iter().map(|u| json!({"read": u})));
    let (o, _lines) = run_agent(&h, "reference", json!(steps));
    let run = run_id_of(&o);
    let calls = events(&run, "tool_call", steps.len());
    assert_eq!(calls.len(), steps.len(), "{calls:?}");
    let layer = h.root.join("roles.local");
    let check = |args: &[&str]| -> (bool, String) {
        let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
            .arg("--config")
            .arg(&h.cfg)
            .args(["check", "code", "--roles", &format!("{REPO}/roles")])
            .arg("--roles")
            .arg(&layer)
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| panic!("{args:?}: {}", String::from_utf8_lossy(&o.stderr)));
        (v["allow"] == true, v["rule"].as_str().unwrap().to_string())
    };
    let mut disagree = Vec::new();
    let mut i = 0;
    for (t, a) in &tools {
        let want = check(&["tool", "--", "reference", t, &a.to_string()]);
        let got = (
            calls[i]["AIRLOCK_DECISION"] == "allow",
            calls[i]["AIRLOCK_RULE"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        if want != got {
            disagree.push(format!("tool {t} {a}: check {want:?}, gateway {got:?}"));
        }
        i += 1;
    }
    for u in resources {
        let want = check(&["resource", "--", "reference", u]);
        let got = (
            calls[i]["AIRLOCK_DECISION"] == "allow",
            calls[i]["AIRLOCK_RULE"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        if want != got {
            disagree.push(format!("resource {u}: check {want:?}, gateway {got:?}"));
        }
        i += 1;
    }
    assert!(disagree.is_empty(), "{}", disagree.join("\n"));
    // Some of each were allowed and some refused: the comparison covered both.
    let allowed = calls
        .iter()
        .filter(|c| c["AIRLOCK_DECISION"] == "allow")
        .count();
    assert!(
        allowed >= 4 && allowed <= calls.len() - 6,
        "{allowed} of {}",
        calls.len()
    );
}

#[test]
fn stateless_requests_go_through_the_proxy_filtered_like_the_rest() {
    let up = reference_server();
    let h = host(&up, None);
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let req = |id: u32, method: &str, mut params: Value| {
        params["_meta"] = meta.clone();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let (_o, lines) = run_agent(
        &h,
        "reference",
        json!([
            {"raw": req(1, "server/discover", json!({})), "nosession": true},
            {"raw": req(2, "tools/list", json!({})), "nosession": true},
            {"raw": req(3, "tools/call", json!({"name": "echo", "arguments": {"message": "hi"}})), "nosession": true},
            {"raw": req(4, "tools/call", json!({"name": "forbidden_tool", "arguments": {}})), "nosession": true},
        ]),
    );
    let body = |i: usize| -> Value {
        serde_json::from_str(step(&lines, i)["body"].as_str().unwrap()).unwrap()
    };
    let d = body(0);
    assert_eq!(
        d["result"]["capabilities"],
        json!({"tools": {}, "resources": {}}),
        "{d}"
    );
    let list = body(1);
    assert_eq!(list["result"]["resultType"], "complete");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.is_empty() && !names.contains(&"forbidden_tool"),
        "{names:?}"
    );
    assert!(list["result"]["nextCursor"]
        .as_str()
        .unwrap()
        .starts_with("airlock-"));
    assert_eq!(body(2)["result"]["content"][0]["text"], "echo: hi");
    assert_eq!(body(3)["result"]["isError"], true);
    let log = upstream_log(&up);
    assert!(!log.iter().any(|r| r["tool"] == "forbidden_tool"));
}

/// `mcp-server-git` (PyPI), a real stdio server, in a connector jail of its own over a git
/// repository in the connector's home: the role's git tools work, the others are refused.
#[test]
fn mcp_server_git_over_stdio_serves_only_the_roles_git_tools() {
    let py = Path::new(TEST_NPM).join("py");
    assert!(
        py.join("mcp_server_git").is_dir(),
        "mcp-server-git is missing under {}: run scripts/install-deps.sh",
        py.display()
    );
    let conn_uid = 1_880_094_980 + std::process::id() % 9;
    let extra = format!(
        "mcp_connectors:\n  git: {{command: [/usr/bin/python3, -m, mcp_server_git, --repository, /home/git/repo], uid: {conn_uid}, env: {{PYTHONPATH: {}}}}}\n",
        py.display()
    );
    let h = Host::new(&[("tess", "code")], &extra);
    h.local_role("code", |t| {
        t.replacen("tools:\n", "tools:\n  git: [git_status, git_log]\n", 1)
            .replacen("  mcp:\n", "  mcp:\n    git:\n      via: airlock\n", 1)
    });
    // The connector's home (made by the launch, owned by its uid) holds the repository.
    let repo = h.state.join("connectors/git/repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let st = Command::new("git")
            .args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&repo)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "the connector's first commit"]);
    chown_tree(&h.state.join("connectors/git"), conn_uid);
    let (_o, lines) = run_agent(
        &h,
        "git",
        json!([
            {"list": "tools"},
            {"call": "git_log", "args": {"repo_path": "/home/git/repo"}},
            {"call": "git_status", "args": {"repo_path": "/home/git/repo"}},
            {"call": "git_commit", "args": {"repo_path": "/home/git/repo", "message": "x"}},
        ]),
    );
    assert_eq!(
        step(&lines, 0)["tools"],
        json!(["git_status", "git_log"]),
        "{lines:?}"
    );
    let log = step(&lines, 1);
    assert!(
        log["text"]
            .as_str()
            .unwrap()
            .contains("the connector's first commit"),
        "{log}"
    );
    assert!(
        step(&lines, 2)["text"].as_str().unwrap().contains("main"),
        "{:?}",
        step(&lines, 2)
    );
    let commit = step(&lines, 3);
    assert_eq!(commit["isError"], true);
    assert!(
        commit["text"]
            .as_str()
            .unwrap()
            .contains("default: tool not listed"),
        "{commit}"
    );
    assert!(airlock::supervisor::launch::pids_of_uid(conn_uid).is_empty());
}

/// A host whose `code` role reaches server-everything's dynamic text resources but one.
fn everything_host(every: &Upstream) -> Host {
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "mcp_connectors:\n  everything: {{url: \"http://127.0.0.1:{}/mcp\"}}\n",
            every.port
        ),
    );
    h.local_role("code", |t| {
        t.replacen("tools:\n", "tools:\n  everything: [echo, get-*]\n", 1)
            .replacen(
                "deny:\n",
                "deny:\n  everything: [get-env, \"demo://resource/dynamic/text/5\"]\n",
                1,
            )
            .replacen(
                "resources:\n",
                "resources:\n  everything: [\"demo://resource/dynamic/text/*\"]\n",
                1,
            )
            .replacen(
                "  mcp:\n",
                "  mcp:\n    everything:\n      via: airlock\n",
                1,
            )
    });
    h
}

/// `airlockctl check code resource CONNECTOR URI`: (allow, rule).
fn check_resource(h: &Host, connector: &str, uri: &str) -> (bool, String) {
    let layer = h.root.join("roles.local");
    let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args(["check", "code", "--roles", &format!("{REPO}/roles")])
        .arg("--roles")
        .arg(&layer)
        .args(["--json", "resource", "--", connector, uri])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{uri}: {}", String::from_utf8_lossy(&o.stderr)));
    (v["allow"] == true, v["rule"].as_str().unwrap().to_string())
}

/// Findings 1 and 3, against the real server-everything (it reads a dynamic resource's id
/// with `Number()`): with `text/5` denied, no other spelling of 5 reads it, and no tool
/// result hands it over embedded or linked.
#[test]
fn server_everything_gives_no_denied_resource_in_any_spelling_or_inside_a_tool_result() {
    require_journald();
    let every = server_everything();
    let h = everything_host(&every);
    let base = "demo://resource/dynamic/text/";
    let spellings = ["5", "05", "5.0", "+5", "0x5", "5e0", "%35", "%205", "5abc"];
    let mut steps: Vec<Value> = spellings
        .iter()
        .map(|s| json!({"read": format!("{base}{s}")}))
        .collect();
    let n = steps.len();
    steps.extend([
        json!({"read": format!("{base}6")}),
        json!({"call": "get-resource-reference", "args": {"resourceType": "Text", "resourceId": 5}, "full": true}),
        json!({"call": "get-resource-reference", "args": {"resourceType": "Text", "resourceId": 6}, "full": true}),
        json!({"call": "get-resource-links", "args": {"count": 6}, "full": true}),
    ]);
    let (o, lines) = run_agent(&h, "everything", json!(steps));
    for (i, s) in spellings.iter().enumerate() {
        let l = step(&lines, i);
        assert!(
            l["thrown"].is_string(),
            "{base}{s} was read through the gateway: {l}"
        );
        // airlockctl check says what the gateway did.
        let (allow, rule) = check_resource(&h, "everything", &format!("{base}{s}"));
        assert!(!allow, "airlockctl check allows {base}{s} ({rule})");
    }
    let six = step(&lines, n);
    assert!(
        six["texts"][0].as_str().unwrap().starts_with("Resource 6:"),
        "{six}"
    );
    // The tool result that embedded the denied resource: the content is not there.
    let five = step(&lines, n + 1);
    let text = five["content"].to_string();
    assert!(!text.contains("Resource 5: This is"), "{five}");
    assert_eq!(five["content"][1]["type"], "text", "{five}");
    assert!(
        five["content"][1]["text"]
            .as_str()
            .unwrap()
            .contains("refused by deny.everything[1]"),
        "{five}"
    );
    let six = step(&lines, n + 2);
    assert_eq!(six["content"][1]["type"], "resource", "{six}");
    assert!(six["content"][1]["resource"]["text"]
        .as_str()
        .unwrap()
        .starts_with("Resource 6:"));
    // Links: the even ids are text resources (listed), the odd ones blobs (not listed).
    let links = step(&lines, n + 3)["content"].as_array().unwrap().clone();
    let kept: Vec<&str> = links
        .iter()
        .filter(|c| c["type"] == "resource_link")
        .map(|c| c["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        kept,
        [
            "demo://resource/dynamic/text/2",
            "demo://resource/dynamic/text/4",
            "demo://resource/dynamic/text/6"
        ]
    );
    let notices = links
        .iter()
        .filter(|c| {
            c["text"]
                .as_str()
                .is_some_and(|t| t.contains("default: resource not listed"))
        })
        .count();
    assert_eq!(notices, 3, "{links:?}");
    // Journaled: the withheld embedded resource, by rule and the URI's shape.
    let run = run_id_of(&o);
    let calls = events(&run, "tool_call", steps.len() + 4);
    let withheld = calls
        .iter()
        .find(|c| {
            c["AIRLOCK_TOOL"] == "get-resource-reference"
                && c["AIRLOCK_DECISION"] == "deny"
                && c["AIRLOCK_RULE"] == "deny.everything[1]"
        })
        .unwrap_or_else(|| panic!("no record of the withheld resource: {calls:?}"));
    assert_eq!(withheld["AIRLOCK_ARGS"], "embedded demo:…", "{withheld}");
}

/// M1 of the review of issue 29: a query or a fragment (raw or percent-encoded) dodges no
/// resource rule. On the real server-everything (whose template variable takes a query in)
/// with `text/5` denied, no spelling with a fragment, an encoded `?`/`#`, or a query holding
/// `/`, `?` or a second escape is read or allowed by `airlockctl check`; a plain query is
/// allowed. Against our own upstream, which logs what it gets: a query is forwarded in the
/// canonical spelling that was checked, and one that a decoding server would read as
/// `../other-repo/SECRET` never reaches it.
#[test]
fn no_resource_rule_is_dodged_through_a_query_or_fragment() {
    require_journald();
    let every = server_everything();
    let h = everything_host(&every);
    let base = "demo://resource/dynamic/text/";
    let spellings = [
        "5?x",
        "5#frag",
        "5?",
        "5#",
        "5%3Fx",
        "5%23frag",
        "6?/../5",
        "6#/../5",
        "6?x=%2F..%2F5",
        "6#%35",
        "6?x#y",
        "6%3F",
        "6%23",
        "6?a%252F",
        "6?a%25",
        "6?x?y",
    ];
    let steps: Vec<Value> = spellings
        .iter()
        .map(|s| json!({"read": format!("{base}{s}")}))
        .collect();
    let (_o, lines) = run_agent(&h, "everything", json!(steps));
    let mut got = Vec::new();
    for (i, s) in spellings.iter().enumerate() {
        let l = step(&lines, i);
        let (allow, rule) = check_resource(&h, "everything", &format!("{base}{s}"));
        if !l["thrown"].is_string() || allow {
            got.push(format!(
                "{s}: read={} check={allow} ({rule})",
                !l["thrown"].is_string()
            ));
        }
    }
    assert!(
        got.is_empty(),
        "read or allowed through a query or fragment: {got:#?}"
    );
    for plain in ["6?x=1", "6?%78=%31"] {
        let (allow, rule) = check_resource(&h, "everything", &format!("{base}{plain}"));
        assert!(allow, "{plain}: {rule}");
    }

    let up = reference_server();
    let h = host(&up, None);
    let (_o, lines) = run_agent(
        &h,
        "reference",
        json!([
            {"read": "repo://example-org/example-repo/README?v=%31"},
            {"read": "repo://example-org/example-repo/README?%2F..%2F..%2Fother-repo%2FSECRET"},
            {"read": "repo://example-org/example-repo/README#/../../other-repo/SECRET"},
            {"read": "repo://example-org/example-repo/README%3F/../../other-repo/SECRET"},
        ]),
    );
    assert_eq!(
        step(&lines, 0)["texts"][0],
        "owner=example-org repo=example-repo file=README?v=1",
        "{:?}",
        step(&lines, 0)
    );
    for i in 1..4 {
        assert!(
            step(&lines, i)["thrown"].is_string(),
            "{:?}",
            step(&lines, i)
        );
    }
    let uris: Vec<String> = upstream_log(&up)
        .iter()
        .filter(|r| r["rpc"] == "resources/read")
        .filter_map(|r| r["uri"].as_str().map(str::to_string))
        .collect();
    assert_eq!(uris, ["repo://example-org/example-repo/README?v=1"]);
}

/// Findings 2 and 3 against a careless upstream of our own that reads owner and repo by
/// position and logs every URI it gets: what reaches it is the canonical URI that was
/// checked, and what comes back (embedded, linked, or a read's extra contents) is held to
/// the role's resources.
#[test]
fn the_upstream_gets_the_uri_that_was_checked_and_returns_only_what_the_role_may_read() {
    let up = reference_server();
    let h = host(&up, None);
    let (_o, lines) = run_agent(
        &h,
        "reference",
        json!([
            {"read": "repo://example-org/other-repo/../example-repo/SECRET"},
            {"read": "repo://Example-Org/example-repo/%53ECRET"},
            {"read": "repo://example-org/other-repo/SECRET"},
            {"read": "test://bundle"},
            {"call": "test_embedded_private", "full": true},
        ]),
    );
    for i in [0, 1] {
        let l = step(&lines, i);
        assert_eq!(
            l["texts"][0], "owner=example-org repo=example-repo file=SECRET",
            "{i}: {l}"
        );
    }
    assert!(step(&lines, 2)["thrown"].is_string());
    let log = upstream_log(&up);
    let uris: Vec<&str> = log
        .iter()
        .filter(|r| r["rpc"] == "resources/read")
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert_eq!(
        uris,
        [
            "repo://example-org/example-repo/SECRET",
            "repo://example-org/example-repo/SECRET",
            "test://bundle"
        ],
        "the upstream got other spellings than were checked"
    );
    let bundle = step(&lines, 3);
    assert_eq!(bundle["texts"][0], "the bundle");
    assert!(
        !bundle.to_string().contains("the private content"),
        "{bundle}"
    );
    assert_eq!(bundle["uris"], json!(["test://bundle", "test://bundle"]));
    let tool = step(&lines, 4);
    let content = tool["content"].as_array().unwrap();
    assert!(!tool.to_string().contains("the private content"), "{tool}");
    assert!(
        !content
            .iter()
            .any(|c| c["uri"] == "mem://private/b" || c["resource"]["uri"] == "mem://private/b"),
        "{tool}"
    );
    assert_eq!(content[3]["resource"]["text"], "static content");
    assert_eq!(
        content
            .iter()
            .filter(|c| c["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("[Airlock withheld")))
            .count(),
        2,
        "{tool}"
    );
}

/// M2 of the review of issue 29: `structuredContent` is held to the resource rules like
/// `content`: an object in it naming a resource the role may not read (by `uri`, in any
/// case), or a URI string the role denies, and the whole structuredContent is withheld, a
/// notice in `content` and the journal say so; structuredContent naming only what the role
/// may read passes as it came.
#[test]
fn structured_content_gives_no_resource_the_role_may_not_read() {
    require_journald();
    let up = reference_server();
    let h = host(&up, None);
    let (o, lines) = run_agent(
        &h,
        "reference",
        json!([
            {"call": "test_structured_private", "full": true},
            {"call": "test_structured_denied_link", "full": true},
            {"call": "test_structured_ok", "full": true},
        ]),
    );
    for i in [0, 1] {
        let s = step(&lines, i);
        assert!(
            !s.to_string().contains("the private content")
                && !s.to_string().contains("mem://private"),
            "{s}"
        );
        assert!(s["structured"].is_null(), "{s}");
        assert!(
            s["text"].as_str().unwrap().contains("[Airlock withheld"),
            "{s}"
        );
    }
    let ok = step(&lines, 2);
    assert_eq!(
        ok["structured"],
        json!({"items": [{"uri": "test://static-text", "text": "static content"}], "home": "https://host.example/x"}),
        "{ok}"
    );
    let run = run_id_of(&o);
    let calls = events(&run, "tool_call", 5);
    let withheld: Vec<&Value> = calls
        .iter()
        .filter(|c| {
            c["AIRLOCK_DECISION"] == "deny"
                && c["AIRLOCK_ARGS"] == "embedded mem:…"
                && c["AIRLOCK_RULE"] == "deny.reference[2]"
        })
        .collect();
    assert_eq!(withheld.len(), 2, "{calls:?}");
}

/// Finding 5: keys that are one key to Go's encoding/json (simple case folding: `ß` and
/// `ẞ`) are refused before anything reaches the upstream, on server-everything and on our
/// own upstream alike; `ß` and `ss` (two keys to Go) pass.
#[test]
fn keys_go_reads_as_one_never_reach_the_upstream() {
    require_journald();
    let up = reference_server();
    let every = server_everything();
    let h = host(&up, Some(&every));
    let twins = json!({"message": "hi", "stra\u{df}e": 1, "STRA\u{1e9e}E": 2});
    let apart = json!({"message": "hi", "stra\u{df}e": 1, "strasse": 2});
    for server in ["reference", "everything"] {
        let (o, lines) = run_agent(
            &h,
            server,
            json!([{"call": "echo", "args": twins}, {"call": "echo", "args": apart}]),
        );
        let refused = step(&lines, 0);
        assert_eq!(refused["isError"], true, "{server}: {refused}");
        assert!(
            refused["text"]
                .as_str()
                .unwrap()
                .contains("args: keys that differ only in case"),
            "{server}: {refused}"
        );
        assert!(
            step(&lines, 1)["text"].as_str().unwrap().ends_with("hi"),
            "{server}: {:?}",
            step(&lines, 1)
        );
        let calls = events(&run_id_of(&o), "tool_call", 2);
        assert_eq!(calls[0]["AIRLOCK_DECISION"], "deny", "{server}: {calls:?}");
    }
    let echoes = upstream_log(&up)
        .iter()
        .filter(|r| r["tool"] == "echo")
        .count();
    assert_eq!(echoes, 1, "the twin-keyed call reached the upstream");
}

/// The bound the gateway's memory stays under while hostile upstreams try to make it keep
/// what they send (the whole `airlockctl --standalone` process that serves the run's
/// gateway, peak resident set).
const GATEWAY_PEAK_BOUND_KIB: u64 = 160 << 10;

/// Peak resident memory (VmHWM) of a process, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Finding 4: an upstream, over stdio or HTTP, sends requests of its own with 1 MiB method
/// names (100 per call) and answers of 15 MiB holding millions of JSON values: each call
/// fails with an error saying which bound it passed, the connector still answers after,
/// and the gateway's process stays under [`GATEWAY_PEAK_BOUND_KIB`] throughout.
#[test]
fn hostile_upstreams_cannot_make_the_gateway_keep_memory() {
    let script = Path::new(REPO).join("tests/agents/hostile_upstream.py");
    let port = free_port();
    let mut child = Command::new("python3")
        .arg(&script)
        .args(["http", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    let _http = Upstream { child, port };
    let code = std::fs::read_to_string(&script).unwrap();
    let conn_uid = 1_880_094_970 + std::process::id() % 9;
    let command = json!(["/usr/bin/python3", "-c", code, "stdio"]).to_string();
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "mcp_connectors:\n  hostile-stdio: {{command: {command}, uid: {conn_uid}}}\n  hostile-http: {{url: \"http://127.0.0.1:{port}/mcp\"}}\n"
        ),
    );
    h.local_role("code", |t| {
        t.replacen(
            "tools:\n",
            "tools:\n  hostile-stdio: [flood, huge, ok]\n  hostile-http: [flood, huge, ok]\n",
            1,
        )
        .replacen(
            "  mcp:\n",
            "  mcp:\n    hostile-stdio:\n      via: airlock\n    hostile-http:\n      via: airlock\n",
            1,
        )
    });
    let mut steps = Vec::new();
    for _ in 0..4 {
        steps.push(json!({"call": "flood"}));
        steps.push(json!({"call": "huge"}));
    }
    steps.push(json!({"call": "ok"}));
    steps.push(json!({"sleep_ms": 1000}));
    let last = steps.len() - 1;
    for server in ["hostile-stdio", "hostile-http"] {
        let argv = mcp_agent(&json!({"server": server, "steps": steps}));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut run = h
            .launch("code", "tess", &[], &argv)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = run.id();
        let mut lines = Vec::new();
        let mut peak = None;
        for l in BufReader::new(run.stdout.take().unwrap()).lines() {
            let Ok(v) = serde_json::from_str::<Value>(&l.unwrap()) else {
                continue;
            };
            if v["step"] == last - 1 {
                // Every hostile call is done; the agent sleeps next.
                peak = Some(peak_kib(pid));
            }
            lines.push(v);
        }
        let o = run.wait_with_output().unwrap();
        assert!(o.status.success(), "{server}: {lines:?}\n{}", stderr(&o));
        for i in 0..8 {
            let s = step(&lines, i);
            let text = s["text"]
                .as_str()
                .or(s["thrown"].as_str())
                .unwrap_or_default();
            let want = if i % 2 == 0 {
                "requests of its client"
            } else {
                "262144 JSON values"
            };
            // HTTP: a flood also passes 16 MiB of answer; either bound is named.
            assert!(
                text.contains(want) || (i % 2 == 0 && text.contains("16 MiB")),
                "{server} step {i}: {s}"
            );
        }
        assert_eq!(
            step(&lines, 8)["text"],
            "ok",
            "{server}: the connector is gone"
        );
        let peak = peak.unwrap_or_else(|| panic!("{server}: no step {}", last - 1));
        eprintln!(
            "{server}: the gateway's peak resident memory: {} MiB",
            peak >> 10
        );
        assert!(
            peak < GATEWAY_PEAK_BOUND_KIB,
            "{server}: the gateway's process peaked at {} MiB (bound {} MiB)",
            peak >> 10,
            GATEWAY_PEAK_BOUND_KIB >> 10
        );
    }
}

/// Issue 42, finding 6: an upstream that asks its client something while answering a
/// tools/call (sampling, elicitation, roots, and a method it named after the credential it
/// was sent) gets Airlock's answer, and the call's journal record names each ask and that
/// answer in Airlock's words, never the upstream's: over HTTP and over stdio, for a call
/// that succeeds and for one whose upstream then fails.
#[test]
fn what_an_upstream_asks_its_client_during_a_call_is_journaled_with_airlocks_answer() {
    require_journald();
    let script = Path::new(REPO).join("tests/agents/hostile_upstream.py");
    let port = free_port();
    let mut child = Command::new("python3")
        .arg(&script)
        .args(["http", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    let _http = Upstream { child, port };
    let dir = tempfile::tempdir().unwrap().keep();
    let cred = dir.join("hostile.token");
    std::fs::write(&cred, format!("{SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let code = std::fs::read_to_string(&script).unwrap();
    let conn_uid = 1_880_095_010 + std::process::id() % 9;
    let command = json!(["/usr/bin/python3", "-c", code, "stdio"]).to_string();
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "credentials:\n  hostile-token: {}\nmcp_connectors:\n  hostile-stdio: {{command: {command}, uid: {conn_uid}}}\n  hostile-http: {{url: \"http://127.0.0.1:{port}/mcp\", credential: hostile-token}}\n",
            cred.display()
        ),
    );
    h.local_role("code", |t| {
        t.replacen(
            "tools:\n",
            "tools:\n  hostile-stdio: [ask, ask_fail, flood]\n  hostile-http: [ask, ask_fail]\n",
            1,
        )
        .replacen(
            "  mcp:\n",
            "  mcp:\n    hostile-stdio:\n      via: airlock\n    hostile-http:\n      via: airlock\n",
            1,
        )
    });
    for server in ["hostile-http", "hostile-stdio"] {
        // Over stdio also a flood: 100 requests of 1 MiB method names in one answer.
        let mut steps = vec![json!({"call": "ask"}), json!({"call": "ask_fail"})];
        if server == "hostile-stdio" {
            steps.push(json!({"call": "flood"}));
        }
        let (o, lines) = run_agent(&h, server, json!(steps));
        assert_eq!(step(&lines, 0)["text"], "ask", "{server}: {lines:?}");
        let failed = step(&lines, 1);
        assert!(
            failed["isError"] == true || failed["thrown"].is_string(),
            "{server}: {failed}"
        );
        let run = run_id_of(&o);
        let recs = events(&run, "tool_call", 2);
        let rec = |tool: &str| {
            recs.iter()
                .find(|r| r["AIRLOCK_TOOL"] == tool)
                .unwrap_or_else(|| panic!("{server}: no record of {tool}: {recs:?}"))
                .clone()
        };
        let ask = rec("ask");
        assert_eq!(
            ask["AIRLOCK_UPSTREAM_ASKED"],
            "sampling/createMessage: refused, elicitation/create: refused, roots/list: answered with no roots, another method: refused",
            "{server}: {ask}"
        );
        assert!(
            ask["MESSAGE"]
                .as_str()
                .unwrap_or_default()
                .contains("the upstream asked its client: sampling/createMessage: refused"),
            "{server}: {ask}"
        );
        let fail = rec("ask_fail");
        assert_eq!(fail["AIRLOCK_IS_ERROR"], "1", "{server}: {fail}");
        assert_eq!(
            fail["AIRLOCK_UPSTREAM_ASKED"], "roots/list: answered with no roots",
            "{server}: {fail}"
        );
        if server == "hostile-stdio" {
            let recs = events(&run, "tool_call", 3);
            let flood = recs
                .iter()
                .find(|r| r["AIRLOCK_TOOL"] == "flood")
                .unwrap_or_else(|| panic!("no flood record: {recs:?}"));
            assert_eq!(
                flood["AIRLOCK_UPSTREAM_ASKED"], "more than 16 requests of its client: refused",
                "{flood}"
            );
        }
        // The method the upstream named after its credential is not in the journal.
        let text = journal_text(&run);
        assert!(
            !text.contains(SECRET),
            "{server}: the secret is in the journal"
        );
        assert!(
            !text.contains("x/Bearer"),
            "{server}: the upstream's method name is in the journal"
        );
    }
}

/// An upstream that dies in the middle of a run: the agent's next call gets a clear MCP
/// error naming the connector, and the agent (and the run) go on.
#[test]
fn an_upstream_that_dies_mid_run_is_an_error_naming_the_connector_and_the_agent_goes_on() {
    require_journald();
    let mut up = reference_server();
    let h = host(&up, None);
    let argv = mcp_agent(&json!({"server": "reference", "steps": [
        {"call": "echo", "args": {"message": "before"}},
        {"sleep_ms": 3000},
        {"call": "echo", "args": {"message": "after"}},
        {"call": "test_simple_text"},
    ]}));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut child = h
        .launch("code", "tess", &[], &argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(v) = serde_json::from_str::<Value>(&line.unwrap()) else {
            continue;
        };
        if v["step"] == 0 {
            // The upstream dies while the agent sleeps.
            let _ = up.child.kill();
            let _ = up.child.wait();
        }
        lines.push(v);
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(step(&lines, 0)["text"], "echo: before", "{lines:?}");
    for i in [2, 3] {
        let s = step(&lines, i);
        let said = format!(
            "{}{}",
            s["text"].as_str().unwrap_or(""),
            s["thrown"].as_str().unwrap_or("")
        );
        assert!(
            said.contains("reference") && (s["isError"] == true || s["thrown"].is_string()),
            "step {i} should be an error naming the connector: {s}"
        );
        assert!(!said.contains(SECRET), "{said}");
    }
    // The agent went on to its end.
    assert!(lines.iter().any(|l| l["step"] == "asked"), "{lines:?}");
}

/// A stdio connector whose server dies in the middle of a run (killed in its own jail):
/// the agent's next call is an MCP error naming the connector, and the agent goes on.
#[test]
fn a_stdio_connector_that_dies_mid_run_is_an_error_naming_it_and_the_agent_goes_on() {
    require_journald();
    let up = reference_server();
    let (h, conn_uid) = stdio_everything_host(&up, 1_880_094_980);
    let argv = mcp_agent(&json!({"server": "everything", "steps": [
        {"call": "echo", "args": {"message": "before"}},
        {"sleep_ms": 3000},
        {"call": "echo", "args": {"message": "after"}},
    ]}));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut child = h
        .launch("code", "tess", &[], &argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut killed = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(v) = serde_json::from_str::<Value>(&line.unwrap()) else {
            continue;
        };
        if v["step"] == 0 {
            for p in airlock::supervisor::launch::pids_of_uid(conn_uid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
                killed += 1;
            }
        }
        lines.push(v);
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{lines:?}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(killed > 0, "no connector process to kill");
    assert_eq!(step(&lines, 0)["text"], "Echo: before", "{lines:?}");
    assert_error_names(
        step(&lines, 2),
        "everything",
        "the call after the connector died should be an error naming it",
    );
    assert!(lines.iter().any(|l| l["step"] == "asked"), "{lines:?}");
}
