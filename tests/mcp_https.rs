//! Hosted MCP connectors over HTTPS, for real: the real server-everything (streamable
//! HTTP) and our SDK reference server behind a real stunnel4 with a CA made in the test,
//! reached by the run's gateway with rustls. The credential is a static bearer; the agent,
//! its jail and the journal never see it. A certificate for another name, a CA the host
//! does not trust, and an upstream's redirect all fail the call, never followed.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use common::tls::{
    free_port, reference_server, reference_server_with, spawn_listening, stunnel, wait_listening,
    Proc, TestCa,
};
use common::*;
use serde_json::{json, Value};

const SECRET: &str = "https-connector-secret-5c2e8b17d4";

fn server_everything() -> (Proc, u16) {
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
    (Proc(child), port)
}

/// What reached the reference server (its `/log`, read over plain http on its own port).
fn upstream_log(port: u16) -> Vec<Value> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET /log HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.split_once("\r\n\r\n").unwrap().1).unwrap()
}

/// A host whose `code` role reaches `reference` and `everything` through Airlock, with the
/// given upstream config text for each.
fn host(reference: &str, everything: &str) -> Host {
    let dir = tempfile::tempdir().unwrap().keep();
    let cred = dir.join("reference.token");
    std::fs::write(&cred, format!("{SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "credentials:\n  reference-token: {}\nmcp_connectors:\n  reference: {reference}\n  everything: {everything}\n",
        cred.display(),
    );
    let h = Host::new(&[("tess", "code")], &extra);
    h.local_role("code", |t| {
        t.replacen(
            "tools:\n",
            "tools:\n  reference: [test_*, echo, echo_auth, cut_*]\n  everything: [echo, get-*]\n",
            1,
        )
        .replacen(
            "deny:\n",
            "deny:\n  reference: [forbidden_*]\n  everything: [get-env]\n",
            1,
        )
        .replacen(
            "resources:\n",
            "resources:\n  reference: [\"test://static-text\"]\n  everything: [\"demo://resource/static/document/*\"]\n",
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

/// An https upstream on this port with the static bearer, verified by the test's CA.
fn bearer_upstream(port: u16, ca: &TestCa) -> String {
    format!(
        "{{url: \"https://localhost:{port}/mcp\", credential: reference-token, ca_file: {}}}",
        ca.ca_pem.display()
    )
}

/// A plain loopback upstream on this port.
fn plain_upstream(port: u16) -> String {
    format!("{{url: \"http://127.0.0.1:{port}/mcp\"}}")
}

fn run(h: &Host, server: &str, steps: Value) -> std::process::Output {
    let argv = mcp_agent(&json!({"server": server, "steps": steps}));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    h.launch("code", "tess", &[], &argv).output().unwrap()
}

/// The jail's whole environment and the agent's config files, as the agent sees them.
const JAIL_VIEW: &str = "const out = [JSON.stringify(process.env)]; \
    for (const d of [process.env.HOME, process.env.HOME + '/.claude', '/etc/claude-code']) { \
      try { for (const f of fs.readdirSync(d)) { try { out.push(fs.readFileSync(d + '/' + f, 'utf8')); } catch (e) {} } } catch (e) {} } \
    return out.join('\\n');";

#[test]
fn calls_through_a_run_reach_https_upstreams_with_the_static_bearer() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let leaf = ca.leaf("localhost", &["localhost"]);
    let (_r, ref_port) = reference_server();
    let (_e, every_port) = server_everything();
    let (_t1, ref_tls) = stunnel(&ca, &leaf, ref_port);
    let (_t2, every_tls) = stunnel(&ca, &leaf, every_port);
    let h = host(
        &bearer_upstream(ref_tls, &ca),
        &format!(
            "{{url: \"https://localhost:{every_tls}/mcp\", ca_file: {}}}",
            ca.ca_pem.display()
        ),
    );
    let o = run(
        &h,
        "reference",
        json!([
            {"list": "tools"},
            {"call": "echo", "args": {"message": "over tls"}},
            {"call": "echo_auth"},
            {"call": "forbidden_tool"},
            {"read": "test://static-text"},
            {"js": JAIL_VIEW},
        ]),
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    // (The reference server pages its tools: the first page, filtered.)
    let tools = step(&lines, 0)["tools"].as_array().unwrap().clone();
    assert!(
        !tools.is_empty() && !tools.contains(&json!("forbidden_tool")),
        "{tools:?}"
    );
    assert_eq!(step(&lines, 1)["text"], "echo: over tls");
    // The upstream got the bearer over TLS; the agent only Airlock's placeholder.
    assert_eq!(
        step(&lines, 2)["text"],
        "you sent: Bearer [withheld by Airlock]"
    );
    assert!(step(&lines, 3)["text"]
        .as_str()
        .unwrap()
        .contains("deny.reference[0]"));
    assert_eq!(step(&lines, 4)["contents"], 1);
    let log = upstream_log(ref_port);
    assert!(log
        .iter()
        .any(|l| l["tool"] == "echo_auth" && l["authorization"] == format!("Bearer {SECRET}")));
    assert!(log.iter().all(|l| l["tool"] != "forbidden_tool"));
    // The upstream's session went through (one Mcp-Session-Id for the run's calls).
    let sessions: std::collections::BTreeSet<String> = log
        .iter()
        .filter_map(|l| l["session"].as_str().map(str::to_string))
        .collect();
    assert_eq!(sessions.len(), 1, "{log:?}");
    let out = stdout(&o);
    assert!(!out.contains(SECRET), "the token reached the jail: {out}");
    let run_id = run_id_of(&o);
    let journal = journal_text(&run_id);
    assert!(journal.contains("echo_auth"), "the calls are journaled");
    assert!(!journal.contains(SECRET), "the token is in the journal");

    // server-everything answers in SSE streams, with its own session.
    let o = run(
        &h,
        "everything",
        json!([
            {"list": "tools"},
            {"call": "echo", "args": {"message": "hello"}},
            {"call": "get-env"},
            {"read": "demo://resource/static/document/architecture.md"},
        ]),
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    let tools: Vec<&str> = step(&lines, 0)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tools.contains(&"echo"), "{tools:?}");
    assert!(!tools.contains(&"get-env"), "{tools:?}");
    assert_eq!(step(&lines, 1)["text"], "Echo: hello");
    assert!(step(&lines, 2)["text"]
        .as_str()
        .unwrap()
        .contains("deny.everything[0]"));
    assert_eq!(step(&lines, 3)["contents"], 1);
}

/// The message the agent got when its connection to the connector failed.
fn failure(o: &std::process::Output) -> String {
    let lines = agent_lines(o);
    let fatal = lines.iter().find(|l| l["step"] == "fatal");
    assert!(
        fatal.is_some() && !o.status.success(),
        "the run's calls should have failed: {}\n{}",
        stdout(o),
        stderr(o)
    );
    fatal.unwrap()["thrown"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_server_that_speaks_http2_gets_a_runs_calls_on_one_http2_connection() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let leaf = ca.leaf("localhost", &["localhost"]);
    let (_r, ref_port) = reference_server();
    let port = free_port();
    let log = dir.path().join("h2.log");
    let _front = spawn_listening(
        Command::new("node")
            .arg(std::path::Path::new(REPO).join("tests/agents/h2_front.mjs"))
            .args([
                &port.to_string(),
                leaf.0.to_str().unwrap(),
                leaf.1.to_str().unwrap(),
                &ref_port.to_string(),
                log.to_str().unwrap(),
            ])
            .stderr(Stdio::inherit()),
    );
    let (_e, every_port) = server_everything();
    let h = host(&bearer_upstream(port, &ca), &plain_upstream(every_port));
    let o = run(
        &h,
        "reference",
        json!([
            {"list": "tools"},
            {"call": "echo", "args": {"message": "over h2"}},
            {"call": "echo_auth"},
        ]),
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    assert_eq!(step(&lines, 1)["text"], "echo: over h2");
    assert_eq!(
        step(&lines, 2)["text"],
        "you sent: Bearer [withheld by Airlock]"
    );
    let seen: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        seen.len() >= 4,
        "initialize, initialized, list, calls: {seen:?}"
    );
    assert!(
        seen.iter().all(|r| r["version"] == "2.0"),
        "every request over HTTP/2: {seen:?}"
    );
    assert!(
        seen.iter().all(|r| r["connection"] == 1),
        "one connection: {seen:?}"
    );
}

#[test]
fn a_cut_answer_stream_is_resumed_with_last_event_id_or_named_when_it_cannot_be() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let leaf = ca.leaf("localhost", &["localhost"]);
    // The SDK's own resumability: an event store, and a tool that closes its stream
    // (closeSSEStream) before it answers.
    let (_r, ref_port) = reference_server_with(&["resumable"]);
    let (_t, ref_tls) = stunnel(&ca, &leaf, ref_port);
    let (_e, every_port) = server_everything();
    let h = host(&bearer_upstream(ref_tls, &ca), &plain_upstream(every_port));
    let o = run(
        &h,
        "reference",
        json!([
            {"call": "cut_and_resume"},
            {"call": "cut_without_ids"},
            {"call": "echo", "args": {"message": "still here"}},
        ]),
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    assert_eq!(
        step(&lines, 0)["text"],
        "answered after the cut",
        "{lines:?}"
    );
    // A stream cut without ids: the call fails naming the connector and why; the agent
    // goes on and its next call works.
    let cut = step(&lines, 1)["thrown"].as_str().unwrap_or_default();
    assert!(
        cut.contains("connector `reference`")
            && cut.contains("offered no event id to resume it by"),
        "{lines:?}"
    );
    assert_eq!(step(&lines, 2)["text"], "echo: still here");
    // The resumption was a GET after the last event the gateway saw, in the call's
    // session, with the protocol revision and the connector's own credential.
    let log = upstream_log(ref_port);
    let call = log
        .iter()
        .find(|r| r["tool"] == "cut_and_resume")
        .unwrap_or_else(|| panic!("{log:?}"));
    let gets: Vec<&Value> = log.iter().filter(|r| r["method"] == "GET").collect();
    assert_eq!(gets.len(), 1, "one resumption: {log:?}");
    let get = gets[0];
    assert!(get["last_event_id"].is_string(), "{get}");
    assert_eq!(get["session"], call["session"]);
    assert_eq!(get["version"], "2025-11-25");
    assert_eq!(get["authorization"], format!("Bearer {SECRET}"));
    assert!(!stdout(&o).contains(SECRET) && !stderr(&o).contains(SECRET));
}

#[test]
fn a_certificate_for_another_name_or_from_an_untrusted_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let other = ca.leaf("other", &["other.example"]);
    let right = ca.leaf("localhost", &["localhost"]);
    let (_r, ref_port) = reference_server();
    let (_t1, wrong_name) = stunnel(&ca, &other, ref_port);
    let (_t2, right_name) = stunnel(&ca, &right, ref_port);
    // `reference`: the right CA, a certificate for another name; `everything`: the right
    // name, but the system store (which does not hold the test's CA).
    let h = host(
        &bearer_upstream(wrong_name, &ca),
        &format!("{{url: \"https://localhost:{right_name}/mcp\", credential: reference-token}}"),
    );
    for server in ["reference", "everything"] {
        let o = run(&h, server, json!([{"list": "tools"}]));
        let msg = failure(&o);
        assert!(
            msg.contains("TLS certificate was refused"),
            "{server}: {msg}\n{}",
            stderr(&o)
        );
        assert!(!stdout(&o).contains(SECRET));
    }
    assert!(
        upstream_log(ref_port).is_empty(),
        "nothing may reach the upstream past a refused certificate"
    );
}

/// A plain server answering every request with a redirect to `to`.
const REDIRECTOR: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(307)
        self.send_header("Location", sys.argv[2])
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_GET = do_POST
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

#[test]
fn an_upstreams_redirect_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let leaf = ca.leaf("localhost", &["localhost"]);
    // Where the redirect points: a listener of the test's, which must see no connection.
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let trap_port = trap.local_addr().unwrap().port();
    let port = free_port();
    let redirector = Proc(
        Command::new("/usr/bin/python3")
            .args(["-c", REDIRECTOR, &port.to_string()])
            .arg(format!("https://localhost:{trap_port}/mcp"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(port);
    let (_t, tls) = stunnel(&ca, &leaf, port);
    let (_r, ref_port) = reference_server();
    let h = host(&bearer_upstream(tls, &ca), &plain_upstream(ref_port));
    let o = run(&h, "reference", json!([{"list": "tools"}]));
    let msg = failure(&o);
    assert!(msg.contains("redirect (HTTP 307)"), "{msg}");
    assert!(
        matches!(trap.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the redirect was followed"
    );
    drop(redirector);
}

#[test]
fn the_conformance_suite_passes_through_an_https_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let leaf = ca.leaf("localhost", &["localhost"]);
    let (_r, ref_port) = reference_server();
    let (_t, ref_tls) = stunnel(&ca, &leaf, ref_port);
    let h = host(&bearer_upstream(ref_tls, &ca), &plain_upstream(ref_port));
    // The role of the loopback suite (tests/mcp_proxy.rs) grants more of the reference
    // server's tools and resources; the same scenarios, over TLS.
    h.local_role("code", |t| {
        t.replacen(
            "tools:\n",
            "tools:\n  reference: [test_*, echo]\n",
            1,
        )
        .replacen(
            "resources:\n",
            "resources:\n  reference: [\"test://static-text\", \"test://static-binary\", \"test://template/*\", \"test://embedded-resource\", \"test://mixed-content-resource\"]\n",
            1,
        )
        .replacen("  mcp:\n", "  mcp:\n    reference:\n      via: airlock\n", 1)
    });
    let mut failed = Vec::new();
    for sc in [
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
    ] {
        let (ok, out) = conformance(&h, "reference", sc);
        if !ok {
            failed.push(format!("reference over https, {sc}:\n{out}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The seed's direct form, `run.mcp.tracker: {url, header}`: served by the run's gateway in
/// front of the role's URL, its bearer the host's `ROLE_CODE_TRACKER_TOKEN`, the role's
/// tools/deny/args for `tracker` holding each call. Without the credential a launch is
/// refused naming it, and `hire` names it either way.
#[test]
fn a_roles_direct_connector_goes_through_the_gateway_with_its_role_token() {
    require_journald();
    let (_r, ref_port) = reference_server();
    let dir = tempfile::tempdir().unwrap().keep();
    let cred = dir.join("tracker.token");
    std::fs::write(&cred, format!("{SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let role = |t: String| {
        t.replace("key_store: airlock", "key_store: github")
            .replacen(
                "tools:\n",
                "tools:\n  tracker: [echo, echo_auth, forbidden_*]\n",
                1,
            )
            .replacen("deny:\n", "deny:\n  tracker: [forbidden_*]\n", 1)
            .replacen(
                "args:\n",
                "args:\n  tracker:\n    echo:\n      message:\n        maxLength: 10\n",
                1,
            )
            .replace(
                "  mcp:\n    board:\n      via: airlock\n    github:\n      via: airlock\n",
                &format!("  mcp:\n    tracker:\n      url: \"http://127.0.0.1:{ref_port}/mcp\"\n"),
            )
    };
    let provider = "providers:\n  claude: {url: \"http://127.0.0.1:9\"}\n";
    let with_token = format!(
        "credentials:\n  ROLE_CODE_TRACKER_TOKEN: {}\n{provider}",
        cred.display()
    );

    // Without the credential: the launch is refused naming it, and so is a hire.
    let bare = Host::new(&[("tess", "code")], provider);
    bare.local_role("code", role);
    let o = run(&bare, "tracker", json!([{"list": "tools"}]));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("credentials.ROLE_CODE_TRACKER_TOKEN: no such entry"),
        "{}",
        stderr(&o)
    );
    {
        let _d = Airlockd::start(&bare);
        let o = bare.ctl(&["hire", "rhea", "--role", "code"]);
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains("credentials.ROLE_CODE_TRACKER_TOKEN")
                || stdout(&o).contains("credentials.ROLE_CODE_TRACKER_TOKEN"),
            "{}{}",
            stdout(&o),
            stderr(&o)
        );
    }

    let h = Host::new(&[("tess", "code")], &with_token);
    h.local_role("code", role);
    let o = run(
        &h,
        "tracker",
        json!([
            {"call": "echo", "args": {"message": "short"}},
            {"call": "echo", "args": {"message": "far too long for the role"}},
            {"call": "forbidden_tool"},
            {"call": "echo_auth"},
            {"js": JAIL_VIEW},
        ]),
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    assert_eq!(step(&lines, 0)["text"], "echo: short");
    assert_eq!(step(&lines, 1)["isError"], true, "{:?}", step(&lines, 1));
    assert!(step(&lines, 1)["text"]
        .as_str()
        .unwrap()
        .contains("args.tracker.echo"));
    assert!(step(&lines, 2)["text"]
        .as_str()
        .unwrap()
        .contains("deny.tracker[0]"));
    assert_eq!(
        step(&lines, 3)["text"],
        "you sent: Bearer [withheld by Airlock]"
    );
    let log = upstream_log(ref_port);
    assert!(log
        .iter()
        .any(|l| l["tool"] == "echo_auth" && l["authorization"] == format!("Bearer {SECRET}")));
    assert!(log.iter().all(|l| l["tool"] != "forbidden_tool"));
    assert_eq!(
        log.iter().filter(|l| l["tool"] == "echo").count(),
        1,
        "only the call within args reached the upstream"
    );
    assert!(!stdout(&o).contains(SECRET), "the token reached the jail");
    assert!(!journal_text(&run_id_of(&o)).contains(SECRET));

    let _d = Airlockd::start(&h);
    let o = h.ctl(&["hire", "rhea", "--role", "code"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(&format!("connector tracker: credentials.ROLE_CODE_TRACKER_TOKEN, sent by the run's gateway only to http://127.0.0.1:{ref_port}/mcp in Authorization")),
        "{}",
        stdout(&o)
    );
}
