//! airlockd's metrics, scraped by the real Prometheus server (Debian's `prometheus`,
//! started here with a scrape config pointing at airlockd) during a real run through
//! airlockd, and read back through Prometheus's HTTP API: the values must be exactly what
//! the run did.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const PROMETHEUS: &str = "/usr/bin/prometheus";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:port (HTTP/1.0, so the body ends with the connection): the
/// status line, headers and body.
fn get(port: u16, path: &str, accept: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{accept}\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.to_string(), body.to_string())
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The real Prometheus server, scraping `target` every second; killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        assert!(
            Path::new(PROMETHEUS).is_file(),
            "{PROMETHEUS} is missing: run scripts/install-deps.sh (it installs Debian's prometheus)"
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\nscrape_configs:\n  - job_name: airlockd\n    static_configs: [{{targets: ['{target}']}}]\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.err")).unwrap())
            .spawn()
            .unwrap();
        let p = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = TcpStream::connect(("127.0.0.1", port)).is_ok()
                && get(port, "/-/ready", None).0.contains(" 200 ");
            if ready {
                return p;
            }
            assert!(Instant::now() < deadline, "prometheus never became ready");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// An instant query: each result's labels and value.
    fn query(&self, q: &str) -> Vec<(Value, f64)> {
        let (head, body) = get(
            self.port,
            &format!("/api/v1/query?query={}", encode(q)),
            None,
        );
        assert!(head.contains(" 200 "), "{q}: {head}\n{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// The single value of `q` (0 when it has no result).
    fn value(&self, q: &str) -> f64 {
        let r = self.query(q);
        assert!(r.len() <= 1, "{q}: {r:?}");
        r.first().map(|(_, v)| *v).unwrap_or(0.0)
    }

    /// Wait until Prometheus has scraped a value of `q` that `ok` accepts; the last value.
    fn wait_for(&self, q: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.value(q);
            if ok(v) || Instant::now() > deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_exactly_what_a_run_did() {
    require_journald();
    let port = free_port();
    let h = Host::new(
        &[("tess", "code")],
        &format!("metrics: {{listen: 127.0.0.1:{port}}}\n"),
    );
    h.local_role("code", |t| {
        t.replace("    - cat\n", "    - cat\n    - id\n")
    });
    let ws = h.workspace("repo", h.uids[0]);
    std::fs::write(ws.join("README"), "hello\n").unwrap();
    chown_tree(&ws, h.uids[0]);
    let _d = Airlockd::start(&h);
    let prom = Prometheus::start(&format!("127.0.0.1:{port}"));
    // Scraped and up before the run, with nothing counted yet.
    assert_eq!(prom.wait_for("up{job=\"airlockd\"}", |v| v == 1.0), 1.0);
    let bash = "sum by (decision) (airlock_bash_commands_total{role=\"code\"})";
    let before: Vec<_> = prom.query(bash);
    assert!(before.is_empty(), "{before:?}");
    let ledger_before = prom.value("airlock_ledger_records_total");

    // Two allowed commands and three refused (no prefix, a cwd outside, a denied prefix).
    let steps = json!([
        {"call": "bash", "args": {"command": "id -u"}},
        {"call": "bash", "args": {"command": "cat README"}},
        {"call": "bash", "args": {"command": "rm -rf ."}},
        {"call": "bash", "args": {"command": "ls", "cwd": "/etc"}},
        {"call": "bash", "args": {"command": "curl http://registry.example/"}},
    ]);
    let argv = mcp_agent(&steps);
    let mut args = vec!["--workspace", ws.to_str().unwrap(), "--"];
    args.extend(argv.iter().map(String::as_str));
    let o = Airlockd::launch(&h, "code", "tess", &args);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    assert_eq!(step(&lines, 0)["structured"]["exit_code"], 0, "{lines:?}");
    assert_eq!(step(&lines, 1)["structured"]["stdout"], "hello\n");
    for i in 2..5 {
        assert_eq!(step(&lines, i)["isError"], true, "{:?}", step(&lines, i));
    }
    let run = run_id_of(&o);

    let runs = "airlock_runs_total{role=\"code\",outcome=\"exited\"}";
    assert_eq!(prom.wait_for(runs, |v| v >= 1.0), 1.0);
    let by_decision = |d: &str| {
        prom.value(&format!(
            "airlock_bash_commands_total{{role=\"code\",decision=\"{d}\"}}"
        ))
    };
    assert_eq!(by_decision("allow"), 2.0);
    assert_eq!(by_decision("deny"), 3.0);
    assert_eq!(
        prom.value(
            "sum(airlock_tool_calls_total{role=\"code\",connector=\"airlock\",tool=\"bash\"})"
        ),
        5.0
    );
    assert_eq!(
        prom.value("sum(airlock_tool_call_duration_seconds_count{connector=\"airlock\"})"),
        5.0
    );
    assert_eq!(prom.value("airlock_runs_active"), 0.0);
    assert_eq!(prom.value("airlock_launch_duration_seconds_count"), 1.0);
    assert_eq!(prom.value("airlock_run_duration_seconds_count"), 1.0);
    let launch = prom.value("airlock_launch_duration_seconds_sum");
    assert!(launch > 0.0 && launch < 60.0, "{launch}");
    // The run's opening and closing records (and its leases', if any).
    let ledger = prom.wait_for("airlock_ledger_records_total", |v| v >= ledger_before + 2.0);
    assert!(ledger >= ledger_before + 2.0, "{ledger_before} -> {ledger}");
    assert_eq!(
        prom.value("airlock_budget_remaining{instance=\"tess\",budget=\"runs_per_week\"}")
            .fract(),
        0.0
    );
    assert!(prom.value("process_resident_memory_bytes") > 0.0);
    assert_eq!(prom.value("airlock_journal_fallback_records_total"), 0.0);

    // No series names the run or any argument.
    for (labels, _) in prom.query("{job=\"airlockd\"}") {
        let text = labels.to_string();
        for word in [run.as_str(), "README", "rm -rf", "registry.example", "/etc"] {
            assert!(!text.contains(word), "{word} in {text}");
        }
    }

    // Straight from airlockd: the Prometheus text format unless OpenMetrics is asked for.
    let (head, body) = get(port, "/metrics", None);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(
        body.contains("airlock_bash_commands_total{role=\"code\",decision=\"deny\"} 3"),
        "{body}"
    );
    let (head, body) = get(
        port,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0"),
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"));
    assert!(get(port, "/other", None).0.contains(" 404 "));
}

/// `GET /metrics` over the unix socket at `sock`, connecting as `uid`:`gid` and no other
/// group (a child python3 under setpriv, so the kernel checks the socket's mode): the answer, or the
/// child's error.
fn get_unix_as(sock: &Path, uid: u32, gid: u32) -> Result<String, String> {
    let o = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--clear-groups", "/usr/bin/python3"])
        .args([
            "-c",
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall(b'GET /metrics HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n')\nb=b''\nwhile True:\n  c=s.recv(65536)\n  if not c: break\n  b+=c\nsys.stdout.write(b.decode())",
        ])
        .arg(sock)
        .output()
        .unwrap();
    if o.status.success() {
        Ok(stdout(&o))
    } else {
        Err(stderr(&o))
    }
}

#[test]
fn a_unix_socket_listener_has_its_mode_and_group_and_serves_only_them() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    require_journald();
    let adm = nix::unistd::Group::from_name("adm")
        .unwrap()
        .expect("Debian's adm group")
        .gid
        .as_raw();
    let dir = tempfile::tempdir().unwrap();
    // Others may pass through the directory: the socket's own mode is what decides.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let sock = dir.path().join("metrics.sock");
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "metrics: {{listen: {}, mode: \"0660\", group: adm}}\n",
            sock.display()
        ),
    );
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "code", "tess", &["--", "/bin/true"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let md = std::fs::metadata(&sock).unwrap();
    assert_eq!(
        (md.mode() & 0o7777, md.uid(), md.gid()),
        (0o660, 0, adm),
        "the socket's mode and owner"
    );
    // The group reads the same counts as a TCP scrape would.
    let body = get_unix_as(&sock, 65534, adm).unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    assert!(
        body.contains("airlock_runs_total{role=\"code\",outcome=\"exited\"} 1"),
        "{body}"
    );
    // Others may not connect at all.
    let refused = get_unix_as(&sock, 65534, 65534).unwrap_err();
    assert!(refused.contains("PermissionError"), "{refused}");
}

#[test]
fn top_and_ps_show_what_a_running_run_has_done() {
    require_journald();
    let h = Host::new(&[("tess", "code")], "");
    h.local_role("code", |t| {
        t.replace("    - cat\n", "    - cat\n    - id\n")
    });
    let ws = h.workspace("repo", h.uids[0]);
    let _d = Airlockd::start(&h);
    let steps = json!([
        {"call": "bash", "args": {"command": "id -u"}},
        {"call": "bash", "args": {"command": "rm -rf ."}},
        {"sleep_ms": 60000},
    ]);
    let argv = mcp_agent(&steps);
    let mut args = vec![
        "launch",
        "code",
        "--instance",
        "tess",
        "--workspace",
        ws.to_str().unwrap(),
        "--",
    ];
    args.extend(argv.iter().map(String::as_str));
    let o = h.ctl(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let run = stdout(&o).trim().to_string();
    assert!(run.starts_with("r-"), "{run}");

    // Both calls decided: top --json has them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let live = loop {
        let o = h.ctl(&["top", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let r = v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run"] == run.as_str())
            .cloned()
            .unwrap_or(Value::Null);
        if r["live"]["tool_calls"] == 2 {
            break r["live"].clone();
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(live["refused"], 1, "{live}");
    assert_eq!(live["writes"], 0);
    assert_eq!(live["spend_micro_usd"], 0);
    assert_eq!(
        live["last_decision"], "airlock/bash deny by default: no prefix matches",
        "{live}"
    );
    // With a cgroup v2 of its own (airlockd could make one), the run's CPU and memory are
    // its cgroup's; elsewhere they are unknown.
    let own_cgroup = Command::new("find")
        .args([
            "/sys/fs/cgroup",
            "-maxdepth",
            "5",
            "-type",
            "d",
            "-name",
            &run,
        ])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
        && Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if own_cgroup {
        assert!(live["memory_bytes"].as_u64().unwrap_or(0) > 0, "{live}");
        assert!(live["cpu_usec"].as_u64().is_some(), "{live}");
    } else {
        assert!(live.get("memory_bytes").is_none(), "{live}");
    }

    let o = h.ctl(&["top", "--once"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let top = stdout(&o);
    let header = top.lines().next().unwrap();
    for col in [
        "RUN",
        "ROLE",
        "INSTANCE",
        "AGE",
        "CPU",
        "MEM",
        "CALLS",
        "SPEND",
        "WRITES",
        "LAST DECISION",
    ] {
        assert!(header.contains(col), "{top}");
    }
    let line = top.lines().find(|l| l.starts_with(&run)).expect(&top);
    for cell in [
        "code",
        "tess",
        "2 (1 refused)",
        "$0.00",
        "airlock/bash deny by default: no prefix matches",
    ] {
        assert!(line.contains(cell), "{cell}: {top}");
    }
    let o = h.ctl(&["ps"]);
    let ps = stdout(&o);
    assert!(ps.lines().next().unwrap().contains("CALLS"), "{ps}");
    let line = ps.lines().find(|l| l.starts_with(&run)).expect(&ps);
    assert!(
        line.contains("running") && line.contains("2 (1 refused)"),
        "{ps}"
    );

    let o = h.ctl(&["stop", &run]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// The OTLP/HTTP receiver (tests/agents/otlp_receiver.py, opentelemetry-proto's decoder):
/// its spans as JSON lines in `out`; killed when dropped.
struct Receiver(Child);

impl Receiver {
    fn start(port: u16, out: &Path) -> Receiver {
        assert!(
            Path::new("/usr/local/lib/airlock-test/otel-py/opentelemetry/proto").is_dir(),
            "opentelemetry-proto is missing: run scripts/install-deps.sh"
        );
        let mut child = Command::new("/usr/bin/python3")
            .arg(Path::new(REPO).join("tests/agents/otlp_receiver.py"))
            .arg(port.to_string())
            .arg(out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "listening");
        Receiver(child)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spans(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_runs_mcp_calls_are_spans_under_its_run_span_and_a_dead_collector_costs_nothing() {
    require_journald();
    let (otlp, metrics) = (free_port(), free_port());
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "metrics: {{listen: 127.0.0.1:{metrics}}}\ntracing: {{otlp: 'http://127.0.0.1:{otlp}'}}\n"
        ),
    );
    h.local_role("code", |t| {
        t.replace("    - cat\n", "    - cat\n    - id\n")
    });
    let ws = h.workspace("repo", h.uids[0]);
    let out = h.root.join("spans.jsonl");
    let receiver = Receiver::start(otlp, &out);
    let _d = Airlockd::start(&h);
    let steps = json!([
        {"call": "bash", "args": {"command": "id -u"}},
        {"call": "bash", "args": {"command": "rm -rf /tmp/secret-arg"}},
    ]);
    let argv = mcp_agent(&steps);
    let mut args = vec!["--workspace", ws.to_str().unwrap(), "--"];
    args.extend(argv.iter().map(String::as_str));
    let o = Airlockd::launch(&h, "code", "tess", &args);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let run = run_id_of(&o);

    let deadline = Instant::now() + Duration::from_secs(30);
    let all = loop {
        let s = spans(&out);
        if s.iter()
            .any(|s| s["attributes"]["airlock.run"] == run.as_str())
        {
            break s;
        }
        assert!(Instant::now() < deadline, "no run span: {s:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let root = all
        .iter()
        .find(|s| s["attributes"]["airlock.run"] == run.as_str())
        .unwrap();
    assert_eq!(root["name"], "run code");
    assert_eq!(root["parent_span_id"], "");
    assert_eq!(root["service"], "airlockd");
    assert_eq!(root["attributes"]["airlock.instance"], "tess");
    let calls: Vec<&Value> = all
        .iter()
        .filter(|s| s["parent_span_id"] == root["span_id"])
        .collect();
    assert_eq!(
        calls.len(),
        2,
        "{all:?}\n{}",
        get(metrics, "/metrics", None).1
    );
    for (c, decision) in calls.iter().zip(["allow", "deny"]) {
        assert_eq!(c["name"], "tools/call bash", "{c}");
        assert_eq!(c["trace_id"], root["trace_id"]);
        let a = &c["attributes"];
        assert_eq!(a["mcp.method.name"], "tools/call", "{c}");
        assert_eq!(a["gen_ai.tool.name"], "bash");
        assert_eq!(a["gen_ai.operation.name"], "execute_tool");
        assert_eq!(a["airlock.decision"], decision, "{c}");
        assert!(
            a["airlock.rule"].as_str().is_some_and(|r| !r.is_empty()),
            "{c}"
        );
        assert!(a["jsonrpc.request.id"].as_str().is_some(), "{c}");
        assert!(
            a["mcp.session.id"].as_str().is_some_and(|s| !s.is_empty()),
            "{c}"
        );
        assert!(a["mcp.protocol.version"].as_str().is_some(), "{c}");
        assert!(c["start"].as_u64() <= c["end"].as_u64());
        assert!(c["start"].as_u64() >= root["start"].as_u64(), "{c} {root}");
    }
    assert_eq!(
        calls[1]["attributes"]["airlock.rule"], "default: no prefix matches",
        "{:?}",
        calls[1]
    );
    // No argument, command or result in any span.
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        !text.contains("secret-arg") && !text.contains("id -u"),
        "{text}"
    );

    // The collector goes away: the next run is not held up, and its spans are counted as
    // dropped.
    drop(receiver);
    let started = Instant::now();
    let o = Airlockd::launch(&h, "code", "tess", &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = get(metrics, "/metrics", None);
        let dropped = body
            .lines()
            .find_map(|l| l.strip_prefix("airlock_trace_spans_dropped_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        // Its two calls and the run itself.
        if dropped >= 3.0 {
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn two_thousand_made_up_tool_names_are_one_series_and_one_span_name_the_grant() {
    require_journald();
    let (up, up_port) = common::tls::reference_server_with(&[]);
    let (otlp, metrics) = (free_port(), free_port());
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "metrics: {{listen: 127.0.0.1:{metrics}}}\ntracing: {{otlp: 'http://127.0.0.1:{otlp}'}}\nmcp_connectors:\n  reference: {{url: \"http://127.0.0.1:{up_port}/mcp\"}}\n"
        ),
    );
    h.local_role("code", |t| {
        t.replacen("tools:\n", "tools:\n  reference: [get_*, echo]\n", 1)
            .replacen(
                "  mcp:\n",
                "  mcp:\n    reference:\n      via: airlock\n",
                1,
            )
    });
    let out = h.root.join("spans.jsonl");
    let receiver = Receiver::start(otlp, &out);
    let _d = Airlockd::start(&h);
    const N: usize = 2000;
    let mut steps: Vec<Value> = (0..N)
        .map(|i| json!({"call": format!("get_{i}")}))
        .collect();
    steps.push(json!({"call": "echo", "args": {"message": "hi"}}));
    steps.push(json!({"call": "not_granted_x"}));
    let argv = mcp_agent(&json!({"server": "reference", "steps": steps}));
    let mut args = vec!["--"];
    args.extend(argv.iter().map(String::as_str));
    let o = Airlockd::launch(&h, "code", "tess", &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = agent_lines(&o);
    assert!(
        step(&lines, N - 1)["isError"] == true,
        "{:?}",
        step(&lines, N - 1)
    );
    // The calls reached the upstream: the names were granted, and sent.
    drop(up);

    let (_, body) = get(metrics, "/metrics", None);
    let series: Vec<&str> = body
        .lines()
        .filter(|l| {
            l.starts_with("airlock_tool_calls_total{") && l.contains("connector=\"reference\"")
        })
        .collect();
    assert_eq!(series.len(), 3, "{series:#?}");
    let count = |tool: &str| -> f64 {
        series
            .iter()
            .find(|l| l.contains(&format!("tool=\"{tool}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(count("get_*"), N as f64, "{series:#?}");
    assert_eq!(count("echo"), 1.0, "{series:#?}");
    assert_eq!(count("(not granted)"), 1.0, "{series:#?}");
    assert!(
        body.len() < 64 << 10,
        "the scrape grew to {} bytes",
        body.len()
    );

    // The spans: named by the grant too, never by a name the agent made up.
    let deadline = Instant::now() + Duration::from_secs(60);
    let tool_spans = loop {
        let s: Vec<Value> = spans(&out)
            .into_iter()
            .filter(|s| s["attributes"]["gen_ai.tool.name"].is_string())
            .collect();
        if s.len() >= N + 2 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    drop(receiver);
    assert!(tool_spans.len() >= N, "{} spans", tool_spans.len());
    let mut names: Vec<String> = tool_spans
        .iter()
        .map(|s| format!("{} / {}", s["name"], s["attributes"]["gen_ai.tool.name"]))
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names,
        [
            "\"tools/call (not granted)\" / \"(not granted)\"",
            "\"tools/call echo\" / \"echo\"",
            "\"tools/call get_*\" / \"get_*\"",
        ],
    );
}

#[test]
fn a_claude_code_runs_model_requests_and_tool_calls_are_spans_and_counts() {
    require_journald();
    let claude =
        "/usr/local/lib/airlock-agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude";
    assert!(
        Path::new(claude).is_file(),
        "{claude} is missing: run scripts/install-agents.sh"
    );
    let turns = json!([
        {"tool": "bash", "input": {"command": "id -u"}},
        {"tool": "bash", "input": {"command": "rm -rf ."}},
        {"text": "All done."}
    ]);
    let si = StandIn::scripted(&turns);
    let (otlp, metrics) = (free_port(), free_port());
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "{}metrics: {{listen: 127.0.0.1:{metrics}}}\ntracing: {{otlp: 'http://127.0.0.1:{otlp}'}}\n",
            si.config()
        ),
    );
    h.local_role("code", |t| {
        t.replacen("key_store: airlock", "key_store: github", 1)
            .replace("    - cat\n", "    - cat\n    - id\n")
    });
    let ws = h.workspace("ws", h.uids[0]);
    let out = h.root.join("spans.jsonl");
    let _receiver = Receiver::start(otlp, &out);
    let _d = Airlockd::start(&h);
    let o = Airlockd::launch(&h, "code", "tess", &["--workspace", ws.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let run = run_id_of(&o);

    let deadline = Instant::now() + Duration::from_secs(30);
    let all = loop {
        let s = spans(&out);
        if s.iter()
            .any(|s| s["attributes"]["airlock.run"] == run.as_str())
        {
            break s;
        }
        assert!(Instant::now() < deadline, "no run span: {s:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let root = all
        .iter()
        .find(|s| s["attributes"]["airlock.run"] == run.as_str())
        .unwrap();
    let children: Vec<&Value> = all
        .iter()
        .filter(|s| s["parent_span_id"] == root["span_id"])
        .collect();
    let tools: Vec<&&Value> = children
        .iter()
        .filter(|s| s["name"] == "tools/call bash")
        .collect();
    let decisions: Vec<&Value> = tools
        .iter()
        .map(|s| &s["attributes"]["airlock.decision"])
        .collect();
    assert_eq!(decisions, vec!["allow", "deny"], "{children:?}");
    let chats: Vec<&&Value> = children
        .iter()
        .filter(|s| s["attributes"]["gen_ai.provider.name"] == "claude")
        .collect();
    // One model request per scripted turn at least (the agent may make more).
    assert!(chats.len() >= 3, "{children:?}");
    let (mut input, mut output) = (0, 0);
    for c in &chats {
        let a = &c["attributes"];
        let model = a["gen_ai.request.model"].as_str().unwrap();
        assert_eq!(c["name"], format!("chat {model}"));
        assert_eq!(c["trace_id"], root["trace_id"]);
        input += a["gen_ai.usage.input_tokens"].as_i64().unwrap();
        output += a["gen_ai.usage.output_tokens"].as_i64().unwrap();
    }
    assert!(input > 0 && output > 0, "{chats:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        !text.contains("rm -rf") && !text.contains(&si.key),
        "{text}"
    );

    // The same requests in the metrics, and their tokens.
    let (_, body) = get(metrics, "/metrics", None);
    let sum = |prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        sum("airlock_provider_requests_total{role=\"code\",provider=\"claude\""),
        chats.len() as f64,
        "{body}"
    );
    let tokens = |ty: &str| -> f64 {
        body.lines()
            .filter(|l| {
                l.starts_with("airlock_provider_tokens_total{role=\"code\",provider=\"claude\"")
                    && l.contains(&format!("type=\"{ty}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(tokens("input"), input as f64, "{body}");
    assert_eq!(tokens("output"), output as f64, "{body}");
    assert!(
        body.contains("airlock_bash_commands_total{role=\"code\",decision=\"deny\"} 1"),
        "{body}"
    );
}
