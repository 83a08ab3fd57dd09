//! Egress for builds, with the real clients and real registry servers: the host grants a
//! role named destination lists (`egress.destinations`, `egress.grants`), and the role's
//! commands (`cargo`, `pip`, `npm`, through the run's bash tool) reach those registries
//! and nothing else. Each registry runs at a public-looking address in a network namespace
//! of the test's own (tests/common/netns.rs), with a certificate from a CA of the test's
//! own: a tunnelled destination's `ca_file` goes into the run's CA bundle (the run is the
//! TLS client); a terminated one's is what airlockd verifies the registry with, and the
//! run trusts the run's own CA for it instead.

mod common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use common::netns::{dns_stub, test_ca, NetNs};
use common::*;
use serde_json::{json, Value};

fn field(r: &Value, k: &str) -> String {
    r[k].as_str().unwrap_or_default().to_string()
}

/// The programs a run's commands find on the jail's PATH.
fn require_jail_program(name: &str) {
    assert!(
        ["/usr/local/bin", "/usr/bin"]
            .iter()
            .any(|d| Path::new(d).join(name).is_file()),
        "{name} is not on the jail's PATH (/usr/local/bin:/usr/bin:/bin): run scripts/install-deps.sh"
    );
}

/// The roles of these tests: the shipped ones, whose bash lists also take the build
/// commands used here.
fn build_roles(h: &Host) {
    for role in ["code", "test-engineer"] {
        h.local_role(role, |t| {
            t.replace(
                "    - cargo build\n",
                "    - cargo build\n    - cargo vendor\n    - python3 -m pip install\n    - npm install\n",
            )
        });
    }
}

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

/// A run of `role` as `instance` in `workspace`, its probe lines, its egress records.
fn run(
    h: &Host,
    role: &str,
    instance: &str,
    workspace: &Path,
    probes: &Value,
    records: usize,
) -> (String, Vec<Value>, Vec<Value>) {
    let argv = probe_agent(probes);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let ws = workspace.to_str().unwrap();
    let o = h
        .launch(role, instance, &["--workspace", ws], &argv)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    assert_eq!(
        lines.len(),
        probes.as_array().map(Vec::len).unwrap_or(0),
        "one line per probe:\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    let id = run_id_of(&o);
    let recs = events(&id, "egress", records);
    (id, lines, recs)
}

fn tls_files_server(net: &mut NetNs, root: &Path, cert: &Path, key: &Path) {
    let mut c = net.exec("python3");
    c.arg(Path::new(REPO).join("tests/registries/tls_files.py"))
        .arg(net.public.to_string())
        .arg(cert)
        .arg(key)
        .arg(root);
    net.serve(c, "the sparse registry's file server");
}

/// A workspace for `uid` holding a crate that depends on `tinydep` from the registry the
/// project's .cargo/config.toml names (the sparse one at `index`).
fn crate_workspace(h: &Host, name: &str, uid: u32, index: &str) -> PathBuf {
    let w = h.root.join(name);
    std::fs::create_dir_all(w.join("src")).unwrap();
    std::fs::create_dir_all(w.join(".cargo")).unwrap();
    std::fs::write(
        w.join("Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\ntinydep = { version = \"0.1\", registry = \"mirror\" }\n",
    )
    .unwrap();
    std::fs::write(w.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        w.join(".cargo/config.toml"),
        format!("[registries.mirror]\nindex = \"{index}\"\n"),
    )
    .unwrap();
    chown_tree(&w, uid);
    w
}

fn assert_no_grant(recs: &[Value], host: &str) {
    let r = recs
        .iter()
        .find(|r| field(r, "AIRLOCK_EGRESS_HOST") == host)
        .unwrap_or_else(|| panic!("no record for {host}: {recs:#?}"));
    assert_eq!(field(r, "AIRLOCK_DECISION"), "deny", "{r:#}");
    assert_eq!(field(r, "AIRLOCK_RULE"), "egress: no grant", "{r:#}");
}

#[test]
fn cargo_vendors_from_a_granted_sparse_registry_through_a_tunnel() {
    require_journald();
    require_jail_program("cargo");
    let mut net = NetNs::new();
    let (ca, cert, key) = test_ca(
        net.dir.path(),
        &["index.crates.example", "static.crates.example"],
    );
    let root = net.path("registry");
    let o = std::process::Command::new("python3")
        .arg(Path::new(REPO).join("tests/registries/sparse_registry.py"))
        .arg(&root)
        .args(["static.crates.example", "index.crates.example"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let index = stdout(&o).trim().to_string();
    tls_files_server(&mut net, &root, &cert, &key);
    let dns = dns_stub(vec![
        ("index.crates.example", net.public),
        ("static.crates.example", net.public),
        ("unlisted.example", net.public),
        ("inside.crates.example", Ipv4Addr::new(10, 9, 8, 7)),
    ]);
    let extra = format!(
        "egress:\n  nameservers: ['{dns}']\n  destinations:\n    crates: {{hosts: [index.crates.example, '*.crates.example'], ca_file: {}}}\n  grants:\n    code: [crates]\n",
        ca.display()
    );
    let h = Host::new(&[("tess", "code"), ("tina", "test-engineer")], &extra);
    build_roles(&h);

    // Granted: the real cargo resolves and downloads the tree through tunnels.
    let ws = crate_workspace(&h, "ws-tess", h.uids[0], &index);
    let probes = json!([
        {"mcp_bash": "cargo vendor", "timeout": 240},
        {"connect": "unlisted.example:443"},
        {"connect": "inside.crates.example:443"},
        {"connect": "index.crates.example:8443"},
    ]);
    let (_, lines, recs) = run(&h, "code", "tess", &ws, &probes, 5);
    let vendored = &lines[0];
    assert_eq!(vendored["exit_code"], 0, "{vendored}");
    for c in ["tinydep", "tinyleaf"] {
        assert!(
            ws.join("vendor").join(c).join("src/lib.rs").is_file(),
            "{c} was not vendored: {vendored}"
        );
    }
    let allowed: Vec<&Value> = recs
        .iter()
        .filter(|r| field(r, "AIRLOCK_DECISION") == "allow")
        .collect();
    for host in ["index.crates.example", "static.crates.example"] {
        let r = allowed
            .iter()
            .find(|r| field(r, "AIRLOCK_EGRESS_HOST") == host)
            .unwrap_or_else(|| panic!("no allowed tunnel to {host}: {recs:#?}"));
        assert_eq!(
            field(r, "AIRLOCK_RULE"),
            "egress.destinations.crates",
            "{r:#}"
        );
        assert_eq!(field(r, "AIRLOCK_EGRESS_METHOD"), "CONNECT", "{r:#}");
        assert_eq!(
            field(r, "AIRLOCK_EGRESS_ADDR"),
            net.public.to_string(),
            "{r:#}"
        );
    }
    assert_eq!(lines[1]["status"], 403, "{}", lines[1]);
    assert_no_grant(&recs, "unlisted.example");
    // Every address rule still applies to a granted name.
    assert_eq!(lines[2]["status"], 403, "{}", lines[2]);
    let r = recs
        .iter()
        .find(|r| field(r, "AIRLOCK_EGRESS_HOST") == "inside.crates.example")
        .unwrap();
    assert_eq!(field(r, "AIRLOCK_RULE"), "address: private", "{r:#}");
    assert_eq!(lines[3]["status"], 403, "{}", lines[3]);

    // Not granted: the same build reaches nothing, and the refusal names its rule.
    let ws = crate_workspace(&h, "ws-tina", h.uids[1], &index);
    let probes = json!([{"mcp_bash": "cargo vendor", "timeout": 120}]);
    let (_, lines, recs) = run(&h, "test-engineer", "tina", &ws, &probes, 1);
    assert_ne!(lines[0]["exit_code"], 0, "{}", lines[0]);
    assert!(!ws.join("vendor/tinydep").exists());
    assert_no_grant(&recs, "index.crates.example");
}
