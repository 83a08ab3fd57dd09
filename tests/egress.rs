//! Egress, for real: standalone runs whose agent (tests/agents/egress_probe.py, the Debian
//! python3) goes out through the run's gateway proxy, from inside the jail. Names are
//! resolved by a DNS stub of the test's own that airlockd's config names; the one allowed
//! destination is a TLS and plain HTTP server in a network namespace of the test's own,
//! behind a veth pair, at a public-looking address with a host route to it (there is no
//! internet here). Every refusal must be journaled with its rule.

mod common;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use common::*;
use serde_json::{json, Value};

// ---------------------------------------------------------------- DNS stub

/// A DNS server on the host's loopback answering A queries from `names`; AAAA and other
/// types get an empty answer; other names NXDOMAIN. Serves until the test process ends.
fn dns_stub(names: Vec<(&'static str, Ipv4Addr)>) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind the DNS stub");
    let addr = sock.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            if let Some(reply) = dns_reply(&buf[..n], &names) {
                let _ = sock.send_to(&reply, from);
            }
        }
    });
    addr
}

fn dns_reply(q: &[u8], names: &[(&str, Ipv4Addr)]) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*q.get(at)?, *q.get(at + 1)?]);
    let qend = at + 4;
    let name = labels.join(".");
    let hits: Vec<Ipv4Addr> = names
        .iter()
        .filter(|(n, _)| *n == name)
        .map(|(_, a)| *a)
        .collect();
    let known = names.iter().any(|(n, _)| *n == name);
    let mut r = q.get(..qend)?.to_vec();
    r[2] = 0x81;
    r[3] = if known { 0x80 } else { 0x83 };
    let answers: Vec<Ipv4Addr> = if qtype == 1 { hits } else { Vec::new() };
    r[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
    r[8..12].copy_from_slice(&[0, 0, 0, 0]);
    for a in answers {
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4]);
        r.extend_from_slice(&a.octets());
    }
    Some(r)
}

// ---------------------------------------------------------------- the allowed destination

static NEXT_NET: AtomicU32 = AtomicU32::new(1);

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect(
        "iproute2's `ip` is needed for the egress tests' network namespace: run scripts/install-deps.sh",
    );
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A network namespace with a TLS (443) and plain HTTP (80) server at `public`, reached
/// from the host through a veth pair; the host side also carries `own`, a public-looking
/// address that is therefore one of the host's own. Removed on drop, even after a failure.
struct TestNet {
    ns: String,
    veth: String,
    public: Ipv4Addr,
    own: Ipv4Addr,
    server: Option<Child>,
    _dir: tempfile::TempDir,
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
        require_root();
        let pid = std::process::id();
        let n = NEXT_NET.fetch_add(1, Ordering::SeqCst);
        let dir = tempfile::tempdir().unwrap();
        // Unique per process and test: concurrent test runs do not collide.
        let mut net = TestNet {
            ns: format!("airlock-eg-{pid}-{n}"),
            veth: format!("aeg{}x{n}", pid % 100_000),
            public: Ipv4Addr::new(11, (pid >> 8) as u8, pid as u8, (10 + 2 * n) as u8),
            own: Ipv4Addr::new(11, (pid >> 8) as u8, pid as u8, (200 + n) as u8),
            server: None,
            _dir: dir,
        };
        let host_side = Ipv4Addr::new(10, 254, pid as u8, n as u8);
        let peer = format!("{}p", net.veth);
        let (ns, veth) = (net.ns.clone(), net.veth.clone());
        let (public, own) = (net.public.to_string(), net.own.to_string());
        let host_side = host_side.to_string();
        ip(&["netns", "add", &ns]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &ns]);
        ip(&["addr", "add", &format!("{host_side}/32"), "dev", &veth]);
        ip(&["addr", "add", &format!("{own}/32"), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        ip(&["route", "add", &format!("{public}/32"), "dev", &veth]);
        let inside = |args: &[&str]| {
            let mut a = vec!["-n", &ns];
            a.extend_from_slice(args);
            ip(&a);
        };
        inside(&["link", "set", "lo", "up"]);
        inside(&["addr", "add", &format!("{public}/32"), "dev", &peer]);
        inside(&["link", "set", &peer, "up"]);
        inside(&["route", "add", &format!("{host_side}/32"), "dev", &peer]);
        inside(&["route", "add", &format!("{own}/32"), "dev", &peer]);
        // A certificate for the allowed name (the agent does not verify it: what is
        // tested is the path, not the PKI).
        let d = net._dir.path();
        let (cert, key) = (d.join("cert.pem"), d.join("key.pem"));
        let st = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=allowed.test"])
            .args(["-addext", "subjectAltName=DNS:allowed.test"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl is needed to make the test server's certificate");
        assert!(st.success(), "openssl req failed");
        let mut server = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c", SERVER, &public])
            .arg(&cert)
            .arg(&key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the test server in its namespace");
        let mut line = String::new();
        let out = server.stdout.take().unwrap();
        net.server = Some(server);
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the test server did not start");
        net
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        let quiet = |args: &[&str]| {
            let _ = Command::new("ip").args(args).stderr(Stdio::null()).status();
        };
        quiet(&["netns", "del", &self.ns]);
        quiet(&["link", "del", &self.veth]);
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
