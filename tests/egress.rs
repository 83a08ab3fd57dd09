//! Egress, for real: standalone runs whose agent (tests/agents/egress_probe.py, the Debian
//! python3) goes out through the run's gateway proxy, from inside the jail. Names are
//! resolved by a DNS stub of the test's own that airlockd's config names; the one allowed
//! destination is a TLS and plain HTTP server in a network namespace of the test's own,
//! behind a veth pair, at a public-looking address with a host route to it (there is no
//! internet here). Every refusal must be journaled with its rule.

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use common::netns::{dns_stub, test_ca, NetNs};
use common::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------- the allowed destination

/// A network namespace of the test's own with a TLS (443) and plain HTTP (80) server at
/// its public address.
struct TestNet {
    net: NetNs,
}

impl std::ops::Deref for TestNet {
    type Target = NetNs;
    fn deref(&self) -> &NetNs {
        &self.net
    }
}

const SERVER: &str = r#"
import socket, ssl, sys, threading
pub, cert, key = sys.argv[1:4]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
def head(c):
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(65536)
        if not d:
            break
        data += d
    return data.split(b"\r\n\r\n")[0]
def answer(c, body):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\nKeep-Alive: timeout=5\r\n\r\n" % len(body) + body)
    c.close()
def tls(c):
    try:
        t = ctx.wrap_socket(c, server_side=True)
        answer(t, b"tls-ok " + head(t).split(b"\r\n")[0])
    except Exception:
        c.close()
def plain(c):
    try:
        answer(c, b"plain-ok\n" + head(c))
    except Exception:
        c.close()
def listen(port, fn):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((pub, port))
    s.listen(64)
    def loop():
        while True:
            c, _ = s.accept()
            threading.Thread(target=fn, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
listen(443, tls)
listen(80, plain)
print("ready", flush=True)
sys.stdin.read()
"#;

impl TestNet {
    fn new() -> TestNet {
        let mut net = NetNs::new();
        // A certificate for the allowed name (the agent does not verify it: what is
        // tested is the path, not the PKI).
        let d = net.dir.path().to_path_buf();
        let (_, cert, key) = test_ca(&d, &["allowed.test"]);
        let mut c = net.exec("python3");
        c.args(["-c", SERVER, &net.public.to_string()])
            .arg(&cert)
            .arg(&key);
        net.serve(c, "the test server");
        TestNet { net }
    }
}

// ---------------------------------------------------------------- runs

fn probe_agent(probes: &Value) -> Vec<String> {
    let script =
        std::fs::read_to_string(Path::new(REPO).join("tests/agents/egress_probe.py")).unwrap();
    vec![
        "/usr/bin/python3".into(),
        "-c".into(),
        script,
        probes.to_string(),
    ]
}

fn run(h: &Host, role: &str, instance: &str, probes: &Value) -> (String, Vec<Value>) {
    let argv = probe_agent(probes);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch(role, instance, &[], &argv).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    let n = probes.as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(
        lines.len(),
        n,
        "one line per probe:\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    (run_id_of(&o), lines)
}

fn field(r: &Value, k: &str) -> String {
    r[k].as_str().unwrap_or_default().to_string()
}

/// The run's egress record for `host` (and `port`), which must be there.
fn record<'a>(recs: &'a [Value], host: &str, port: u16) -> &'a Value {
    recs.iter()
        .find(|r| {
            field(r, "AIRLOCK_EGRESS_HOST") == host
                && field(r, "AIRLOCK_EGRESS_PORT") == port.to_string()
        })
        .unwrap_or_else(|| panic!("no egress record for {host}:{port} in {recs:#?}"))
}

fn assert_refused(recs: &[Value], host: &str, port: u16, rule: &str) {
    let r = record(recs, host, port);
    assert_eq!(field(r, "AIRLOCK_DECISION"), "deny", "{r:#}");
    assert_eq!(field(r, "AIRLOCK_RULE"), rule, "{r:#}");
    assert_eq!(
        field(r, "MESSAGE_ID"),
        "5b0d7c2e9a4f4e1c8d3b6a7f2e1c0d94",
        "{r:#}"
    );
}

fn assert_403(line: &Value, rule: &str) {
    assert_eq!(line["status"], 403, "{line}");
    let body = line["body"].as_str().unwrap_or_default();
    assert!(body.contains(&format!("refused by {rule}:")), "{line}");
}

/// The host's primary address: the source of its default route.
fn host_primary_address() -> String {
    let o = Command::new("ip")
        .args(["-o", "route", "get", "192.0.2.1"])
        .output()
        .expect("ip route get");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "src" {
            if let Some(a) = words.next() {
                return a.to_string();
            }
        }
    }
    panic!("the host has no default route source address: {text}");
}

/// The first nameserver of the host's resolv.conf, if any.
fn host_nameserver() -> Option<String> {
    let text = std::fs::read_to_string("/etc/resolv.conf").ok()?;
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("nameserver"))
            .then(|| w.next().map(str::to_string))
            .flatten()
    })
}

// ---------------------------------------------------------------- the tests

#[test]
fn a_web_role_reaches_the_public_web_and_nothing_inside() {
    require_journald();
    let net = TestNet::new();
    let dns = dns_stub(vec![
        ("allowed.test", net.public),
        ("inside.test", Ipv4Addr::new(10, 1, 2, 3)),
        ("split.test", net.public),
        ("split.test", Ipv4Addr::new(192, 168, 7, 7)),
        ("hold.test", net.public),
    ]);
    let h = Host::new(
        &[("wr", "web-researcher")],
        &format!("egress: {{nameservers: ['{dns}']}}\n"),
    );
    let public = net.public.to_string();
    let own = net.own.to_string();
    let primary = host_primary_address();
    let probes = json!([
        // 0-1: allowed, through the proxy the environment names, as any client goes.
        {"url": "https://allowed.test/"},
        {"url": "http://allowed.test/page?q=1", "headers": {"Proxy-Authorization": "Basic eDp5", "X-Test": "kept"}},
        // 2: an IP literal with no server name reaches it too.
        {"connect": format!("{public}:443")},
        // 3-9: refused before anything is dialled.
        {"connect": "127.0.0.1:443"},
        {"connect": format!("{own}:443")},
        {"connect": format!("{primary}:443")},
        {"connect": "169.254.169.254:443"},
        {"connect": "[::ffff:10.0.0.1]:443"},
        {"connect": "inside.test:443"},
        {"connect": "split.test:443"},
        // 10: not a TLS port.
        {"connect": "allowed.test:22"},
        // 11-13: the tunnel's TLS server name must be its target.
        {"connect": "allowed.test:443", "sni": "evil.test"},
        {"connect": format!("{public}:443"), "sni": "allowed.test"},
        {"connect": "allowed.test:443", "raw": "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
        // 14: an unknown name.
        {"connect": "nx.test:443"},
        // 15: plain HTTP to the metadata service.
        {"url": "http://169.254.169.254/latest/meta-data/"},
        // 16: more tunnels at once than a run may hold (each held tunnel has left the
        // gateway's HTTP connection slots, or the 17th would never be answered).
        {"hold": 33, "target": "hold.test:443"},
    ]);
    let (run, lines) = run(&h, "web-researcher", "wr", &probes);
    let line = |i: usize| step(&lines, i).clone();

    let tls = line(0);
    assert_eq!(tls["status"], 200, "{tls}");
    assert_eq!(tls["body"], "tls-ok GET / HTTP/1.1", "{tls}");
    let plain = line(1);
    assert_eq!(plain["status"], 200, "{plain}");
    let echoed = plain["body"].as_str().unwrap().to_ascii_lowercase();
    assert!(
        echoed.starts_with("plain-ok\nget /page?q=1 http/1.1"),
        "origin form: {plain}"
    );
    assert!(echoed.contains("host: allowed.test"), "{plain}");
    assert!(echoed.contains("x-test: kept"), "{plain}");
    assert!(
        !echoed.contains("proxy-authorization"),
        "a Proxy-* header went on: {plain}"
    );
    assert!(
        line(2)["tls"]
            .as_str()
            .unwrap_or_default()
            .contains("tls-ok"),
        "{}",
        line(2)
    );

    assert_403(&line(3), "address: loopback");
    assert_403(&line(4), "address: host's own address");
    assert_eq!(line(5)["status"], 403, "{}", line(5));
    assert_403(&line(6), "address: cloud metadata");
    assert_403(&line(7), "address: private");
    assert!(
        line(7)["body"].as_str().unwrap().contains("IPv4-mapped"),
        "{}",
        line(7)
    );
    assert_403(&line(8), "address: private");
    assert_403(&line(9), "address: private");
    assert_403(&line(10), "egress.ports");
    assert!(
        line(11).get("tls_error").is_some(),
        "a mismatched SNI got through: {}",
        line(11)
    );
    assert!(
        line(12).get("tls_error").is_some(),
        "SNI on an IP target got through: {}",
        line(12)
    );
    assert!(
        line(13)["raw_reply"].as_str().is_none_or(str::is_empty),
        "non-TLS bytes got an answer: {}",
        line(13)
    );
    assert_eq!(line(14)["status"], 502, "{}", line(14));
    assert_403(&line(15), "address: cloud metadata");
    let mut want = vec![200; 32];
    want.push(429);
    assert_eq!(line(16)["statuses"], json!(want), "{}", line(16));

    let recs = events(&run, "egress", 16 + 33);
    let ok = record(&recs, "allowed.test", 443);
    // The first allowed.test:443 record is the tunnel that went through.
    assert_eq!(field(ok, "AIRLOCK_DECISION"), "allow", "{ok:#}");
    assert_eq!(field(ok, "AIRLOCK_RULE"), "run.tools[0] WebFetch", "{ok:#}");
    assert_eq!(field(ok, "AIRLOCK_EGRESS_ADDR"), public, "{ok:#}");
    let bytes = |r: &Value, k: &str| field(r, k).parse::<u64>().unwrap_or(0);
    assert!(bytes(ok, "AIRLOCK_BYTES_UP") > 100, "{ok:#}");
    assert!(bytes(ok, "AIRLOCK_BYTES_DOWN") > 100, "{ok:#}");
    let http = record(&recs, "allowed.test", 80);
    assert_eq!(field(http, "AIRLOCK_DECISION"), "allow", "{http:#}");
    assert_eq!(field(http, "AIRLOCK_EGRESS_METHOD"), "GET", "{http:#}");
    assert!(bytes(http, "AIRLOCK_BYTES_DOWN") > 20, "{http:#}");
    assert_refused(&recs, "127.0.0.1", 443, "address: loopback");
    assert_refused(&recs, &own, 443, "address: host's own address");
    let r = record(&recs, &primary, 443);
    assert_eq!(field(r, "AIRLOCK_DECISION"), "deny", "{r:#}");
    assert!(field(r, "AIRLOCK_RULE").starts_with("address: "), "{r:#}");
    assert_refused(&recs, "169.254.169.254", 443, "address: cloud metadata");
    assert_refused(&recs, "::ffff:10.0.0.1", 443, "address: private");
    assert_refused(&recs, "inside.test", 443, "address: private");
    assert_refused(&recs, "split.test", 443, "address: private");
    assert_refused(&recs, "allowed.test", 22, "egress.ports");
    assert_refused(&recs, "nx.test", 443, "egress: dns");
    assert_refused(&recs, "169.254.169.254", 80, "address: cloud metadata");
    let held: Vec<&Value> = recs
        .iter()
        .filter(|r| field(r, "AIRLOCK_EGRESS_HOST") == "hold.test")
        .collect();
    assert_eq!(held.len(), 33, "{held:#?}");
    assert_eq!(
        held.iter()
            .filter(|r| field(r, "AIRLOCK_RULE") == "egress: connection limit")
            .count(),
        1,
        "{held:#?}"
    );
    let tls_refusals: Vec<&Value> = recs
        .iter()
        .filter(|r| field(r, "AIRLOCK_EGRESS_HOST") != "hold.test")
        .filter(|r| field(r, "AIRLOCK_RULE").starts_with("egress: tls"))
        .collect();
    assert_eq!(tls_refusals.len(), 3, "{recs:#?}");
    assert!(tls_refusals
        .iter()
        .all(|r| field(r, "AIRLOCK_DECISION") == "deny"));
    let rules: Vec<String> = tls_refusals
        .iter()
        .map(|r| field(r, "AIRLOCK_RULE"))
        .collect();
    assert!(rules.contains(&"egress: tls".to_string()), "{rules:?}");
    assert_eq!(
        rules
            .iter()
            .filter(|r| *r == "egress: tls server name")
            .count(),
        2,
        "{rules:?}"
    );

    // The closing record sums the same connections (`show` from the ledger).
    let shown = h.ctl(&["show", &run, "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let e = &shown["run"]["egress"];
    let allowed: Vec<&Value> = recs
        .iter()
        .filter(|r| field(r, "AIRLOCK_DECISION") == "allow")
        .collect();
    let sum = |k: &str| allowed.iter().map(|r| bytes(r, k)).sum::<u64>();
    assert_eq!(e["allowed"], allowed.len() as u64, "{shown}");
    assert_eq!(e["refused"], (recs.len() - allowed.len()) as u64, "{shown}");
    assert_eq!(e["bytes_up"], sum("AIRLOCK_BYTES_UP"), "{shown}");
    assert_eq!(e["bytes_down"], sum("AIRLOCK_BYTES_DOWN"), "{shown}");
    assert!(h.show(&run).contains(&format!(
        "{} allowed, {} refused; {} bytes up",
        allowed.len(),
        recs.len() - allowed.len(),
        sum("AIRLOCK_BYTES_UP")
    )));
}

#[test]
fn a_role_without_the_web_reaches_nothing() {
    require_journald();
    let net = TestNet::new();
    let dns = dns_stub(vec![("allowed.test", net.public)]);
    let h = Host::new(
        &[("tess", "code")],
        &format!("egress: {{nameservers: ['{dns}']}}\n"),
    );
    let probes = json!([
        {"connect": "allowed.test:443", "sni": "allowed.test"},
        {"connect": format!("{}:443", net.public)},
        {"url": "http://allowed.test/"},
        // The command side's commands have the same proxy, and the gateway's own
        // endpoints are reached directly (NO_PROXY), not through it.
        {"mcp_bash": "cat /proc/self/environ"},
    ]);
    let (run, lines) = run(&h, "code", "tess", &probes);
    for i in 0..3 {
        assert_403(step(&lines, i), "egress: no grant");
    }
    let environ = step(&lines, 3)["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let vars: Vec<&str> = environ.split('\0').collect();
    for v in [
        "HTTPS_PROXY=http://127.0.0.1:4180",
        "HTTP_PROXY=http://127.0.0.1:4180",
        "https_proxy=http://127.0.0.1:4180",
        "http_proxy=http://127.0.0.1:4180",
        "NO_PROXY=127.0.0.1,localhost",
        "no_proxy=127.0.0.1,localhost",
    ] {
        assert!(vars.contains(&v), "the command side lacks {v}: {vars:?}");
    }
    assert!(
        !vars
            .iter()
            .any(|v| v.to_ascii_uppercase().starts_with("ALL_PROXY=")),
        "{vars:?}"
    );
    let recs = events(&run, "egress", 3);
    assert_refused(&recs, "allowed.test", 443, "egress: no grant");
    assert_refused(&recs, &net.public.to_string(), 443, "egress: no grant");
    assert_refused(&recs, "allowed.test", 80, "egress: no grant");
}

#[test]
fn plain_dns_and_udp_have_no_way_out() {
    let h = Host::new(&[("tess", "code")], "");
    let mut probes = vec![
        json!({"udp": "8.8.8.8"}),
        json!({"udp": "2001:4860:4860::8888"}),
    ];
    if let Some(ns) = host_nameserver() {
        probes.push(json!({"udp": ns}));
    }
    let (_, lines) = run(&h, "code", "tess", &Value::Array(probes.clone()));
    for (i, p) in probes.iter().enumerate() {
        let l = step(&lines, i);
        assert!(
            l.get("udp_reply").is_none(),
            "a DNS answer reached the run from {p}: {l}"
        );
        assert!(l.get("udp_error").is_some(), "{l}");
    }
    // No UDP socket may be made at all (seccomp); and a public address is not even
    // routable from the run's namespace (tests/jail_escape.rs tries that layer with TCP).
    for i in 0..2 {
        let e = step(&lines, i)["udp_error"].as_str().unwrap().to_string();
        assert!(
            e.contains("Operation not permitted") || e.contains("unreachable"),
            "{e}"
        );
    }
}

#[test]
fn explain_says_what_a_role_may_reach() {
    let h = Host::new(&[("tess", "code")], "");
    let explain = |role: &str, json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
        c.arg("--config").arg(&h.cfg).args(["explain", role]);
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert!(
        explain("web-researcher", false)
            .contains("egress      the public web (run.tools[0] WebFetch) on the ports"),
        "{}",
        explain("web-researcher", false)
    );
    assert!(explain("code", false).contains("egress      nothing (run.tools grants no WebFetch"));
    let j: Value = serde_json::from_str(&explain("web-researcher", true)).unwrap();
    assert_eq!(j["egress"]["public_web"], "run.tools[0] WebFetch");
    let j: Value = serde_json::from_str(&explain("code", true)).unwrap();
    assert_eq!(j["egress"]["public_web"], Value::Null);
}

/// The asks waiting, as `airlockctl asks --json` lists them.
fn asks_listed(h: &Host) -> Vec<Value> {
    let o = h.ctl(&["--json", "asks"]);
    serde_json::from_str::<Value>(&stdout(&o))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Answer the ask for `what` (`allow` or `deny`) once it waits.
fn answer(h: &Host, what: &str, how: &str) {
    let a = poll(60, || {
        asks_listed(h).into_iter().find(|a| a["what"] == what)
    })
    .unwrap_or_else(|| panic!("no ask for {what}: {:?}", asks_listed(h)));
    assert_eq!(a["kind"], "egress", "{a}");
    assert_eq!(a["rule"], "egress: no grant", "{a}");
    let o = h.ctl(&[how, a["id"].as_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{how} {what}: {}", stderr(&o));
}

/// For a role the host's `asks` names, a destination no grant names waits for a person:
/// allowed, it is reached; denied, it is refused naming who; allowed, an address inside
/// is still refused (an ask answers "no grant", never the address check).
#[test]
fn an_egress_host_no_grant_names_waits_for_a_person_and_its_addresses_are_still_checked() {
    require_journald();
    let net = TestNet::new();
    let dns = dns_stub(vec![
        ("allowed.test", net.public),
        ("denied.test", net.public),
        ("inside.test", Ipv4Addr::new(10, 1, 2, 3)),
    ]);
    let h = Host::new(
        &[("tess", "code")],
        &format!("egress: {{nameservers: ['{dns}']}}\nasks: {{roles: [code], wait_seconds: 60}}\n"),
    );
    let _d = Airlockd::start(&h);
    let probes = json!([
        {"url": "https://allowed.test/"},
        {"connect": "denied.test:443", "sni": "denied.test"},
        {"connect": "inside.test:443", "sni": "inside.test"},
    ]);
    let child = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args(["launch", "code", "--instance", "tess", "--wait", "--"])
        .args(probe_agent(&probes))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    answer(&h, "allowed.test:443", "allow");
    answer(&h, "denied.test:443", "deny");
    answer(&h, "inside.test:443", "allow");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    let tls = step(&lines, 0);
    assert_eq!(tls["status"], 200, "{tls}");
    assert_eq!(tls["body"], "tls-ok GET / HTTP/1.1", "{tls}");
    let denied = step(&lines, 1);
    assert_403(denied, "egress: no grant");
    assert!(
        denied["body"]
            .as_str()
            .unwrap_or_default()
            .contains("denied by uid 0"),
        "{denied}"
    );
    let inside = step(&lines, 2);
    assert_eq!(inside["status"], 403, "{inside}");
    assert!(
        inside["body"]
            .as_str()
            .unwrap_or_default()
            .contains("refused by address: "),
        "{inside}"
    );

    let run = run_id_of(&o);
    let recs = events(&run, "egress", 3);
    let r = record(&recs, "allowed.test", 443);
    assert_eq!(field(r, "AIRLOCK_DECISION"), "allow", "{r:#}");
    assert_eq!(field(r, "AIRLOCK_RULE"), "ask: allowed by uid 0", "{r:#}");
    assert_refused(&recs, "denied.test", 443, "egress: no grant");
    let r = record(&recs, "inside.test", 443);
    assert_eq!(field(r, "AIRLOCK_DECISION"), "deny", "{r:#}");
    assert!(field(r, "AIRLOCK_RULE").starts_with("address: "), "{r:#}");
    let states: Vec<String> = events(&run, "ask", 6)
        .iter()
        .map(|r| field(r, "AIRLOCK_ASK_STATE"))
        .collect();
    assert_eq!(
        states,
        ["waiting", "allowed", "waiting", "denied", "waiting", "allowed"]
    );
}
