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
    // As many records as the closing record counts (journald may index them late).
    let shown = h.ctl(&["show", &id, "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let e = &shown["run"]["egress"];
    let total = e["allowed"].as_u64().unwrap_or(0) + e["refused"].as_u64().unwrap_or(0);
    let recs = events(&id, "egress", (total as usize).max(records));
    assert!(recs.len() >= records, "{recs:#?}");
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

/// The records of requests on a terminated destination (they carry a path).
fn requests<'a>(recs: &'a [Value], host: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| {
            field(r, "AIRLOCK_EGRESS_HOST") == host && !field(r, "AIRLOCK_EGRESS_PATH").is_empty()
        })
        .collect()
}

fn request<'a>(recs: &'a [Value], host: &str, method: &str, path: &str) -> &'a Value {
    requests(recs, host)
        .into_iter()
        .find(|r| {
            field(r, "AIRLOCK_EGRESS_METHOD") == method && field(r, "AIRLOCK_EGRESS_PATH") == path
        })
        .unwrap_or_else(|| panic!("no record of {method} {host}{path}: {recs:#?}"))
}

/// The closing record counts what the journal has (`show --json`, from the ledger).
fn assert_counts(h: &Host, run: &str, recs: &[Value]) {
    let shown = h.ctl(&["show", run, "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let allowed = recs
        .iter()
        .filter(|r| field(r, "AIRLOCK_DECISION") == "allow")
        .count() as u64;
    let e = &shown["run"]["egress"];
    assert_eq!(e["allowed"], allowed, "{shown}");
    assert_eq!(e["refused"], recs.len() as u64 - allowed, "{shown}");
}

#[test]
fn pip_installs_from_pypiserver_through_a_checked_destination() {
    require_journald();
    let mut net = NetNs::new();
    let (ca, cert, key) = test_ca(net.dir.path(), &["pypi.example"]);
    let packages = net.path("packages");
    let o = std::process::Command::new("python3")
        .arg(Path::new(REPO).join("tests/registries/wheel.py"))
        .arg(&packages)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        Path::new("/usr/local/lib/airlock-test/pypiserver/pypiserver").is_dir(),
        "pypiserver is missing: run scripts/install-deps.sh"
    );
    let mut c = net.exec("/usr/bin/python3");
    c.arg(Path::new(REPO).join("tests/registries/pypi_tls.py"))
        .arg(net.public.to_string())
        .arg(&cert)
        .arg(&key)
        .arg(&packages);
    net.serve(c, "pypiserver");
    let dns = dns_stub(vec![("pypi.example", net.public)]);
    // airlockd verifies the registry with the test's CA; the run trusts the run's own.
    let extra = format!(
        "egress:\n  nameservers: ['{dns}']\n  destinations:\n    pypi: {{hosts: [pypi.example, files.pypi.example], methods: [GET, HEAD], ca_file: {}}}\n  grants:\n    code: [pypi]\n",
        ca.display()
    );
    let h = Host::new(&[("tess", "code"), ("tina", "test-engineer")], &extra);
    build_roles(&h);
    let ws = h.workspace("ws-tess", h.uids[0]);
    let site = ws.join("site");
    let pip = format!(
        "python3 -m pip install --disable-pip-version-check --no-cache-dir --index-url https://pypi.example/simple/ --target {} tinywheel",
        site.display()
    );
    let probes = json!([
        {"mcp_bash": pip, "timeout": 240},
        // An upload (pypiserver takes POST /): outside the destination's methods.
        {"url": "https://pypi.example/", "method": "POST", "data": ":action=file_upload"},
        // A request whose Host names another host than the tunnel's.
        {"url": "https://pypi.example/simple/", "headers": {"Host": "other.example"}},
        // Plain HTTP to a checked destination: never (its rules need TLS).
        {"url": "http://pypi.example/simple/"},
        // The TLS server name must be the CONNECT host: refused before any answer.
        {"connect": "pypi.example:443", "sni": "evil.example"},
        {"mcp_bash": "cat /proc/self/environ"},
    ]);
    let (run_id, lines, recs) = run(&h, "code", "tess", &ws, &probes, 6);
    assert_eq!(lines[0]["exit_code"], 0, "{}", lines[0]);
    assert!(site.join("tinywheel/__init__.py").is_file(), "{}", lines[0]);

    let page = request(&recs, "pypi.example", "GET", "/simple/tinywheel/");
    assert_eq!(field(page, "AIRLOCK_DECISION"), "allow", "{page:#}");
    assert_eq!(
        field(page, "AIRLOCK_RULE"),
        "egress.destinations.pypi",
        "{page:#}"
    );
    assert_eq!(field(page, "AIRLOCK_STATUS"), "200", "{page:#}");
    assert_eq!(
        field(page, "AIRLOCK_EGRESS_ADDR"),
        net.public.to_string(),
        "{page:#}"
    );
    let wheel = requests(&recs, "pypi.example")
        .into_iter()
        .find(|r| field(r, "AIRLOCK_EGRESS_PATH").ends_with(".whl"))
        .unwrap_or_else(|| panic!("no wheel download: {recs:#?}"));
    assert_eq!(field(wheel, "AIRLOCK_STATUS"), "200", "{wheel:#}");
    assert!(
        field(wheel, "AIRLOCK_BYTES_DOWN").parse::<u64>().unwrap() > 500,
        "{wheel:#}"
    );

    assert_eq!(lines[1]["status"], 403, "{}", lines[1]);
    let post = request(&recs, "pypi.example", "POST", "/");
    assert_eq!(field(post, "AIRLOCK_DECISION"), "deny", "{post:#}");
    assert_eq!(
        field(post, "AIRLOCK_RULE"),
        "egress.destinations.pypi.methods",
        "{post:#}"
    );
    assert_eq!(lines[2]["status"], 403, "{}", lines[2]);
    let other = request(&recs, "pypi.example", "GET", "/simple/");
    assert_eq!(
        field(other, "AIRLOCK_RULE"),
        "egress.destinations.pypi.hosts",
        "{other:#}"
    );
    assert_eq!(lines[3]["status"], 403, "{}", lines[3]);
    let plain = recs
        .iter()
        .find(|r| field(r, "AIRLOCK_EGRESS_PORT") == "80")
        .unwrap_or_else(|| panic!("{recs:#?}"));
    assert_eq!(
        field(plain, "AIRLOCK_RULE"),
        "egress.destinations.pypi",
        "{plain:#}"
    );
    assert!(lines[4].get("tls_error").is_some(), "{}", lines[4]);
    assert!(
        recs.iter()
            .any(|r| field(r, "AIRLOCK_RULE") == "egress: tls server name"),
        "{recs:#?}"
    );
    // The usual clients' CA variables name the run's bundle.
    let environ = lines[5]["stdout"].as_str().unwrap_or_default();
    for v in [
        "PIP_CERT=/etc/airlock/ca-bundle.pem",
        "CARGO_HTTP_CAINFO=/etc/airlock/ca-bundle.pem",
        "NPM_CONFIG_CAFILE=/etc/airlock/ca-bundle.pem",
        "NODE_EXTRA_CA_CERTS=/etc/airlock/run-ca.pem",
    ] {
        assert!(environ.split('\0').any(|e| e == v), "no {v}: {environ:?}");
    }
    assert_counts(&h, &run_id, &recs);

    // Not granted: refused at the CONNECT.
    let ws = h.workspace("ws-tina", h.uids[1]);
    let pip = pip.replace("ws-tess", "ws-tina");
    let probes = json!([{"mcp_bash": pip.replace("--index-url", "--retries 0 --index-url"), "timeout": 120}]);
    let (_, lines, recs) = run(&h, "test-engineer", "tina", &ws, &probes, 1);
    assert_ne!(lines[0]["exit_code"], 0, "{}", lines[0]);
    assert_no_grant(&recs, "pypi.example");
}

/// verdaccio in `net`, answering for `host` over TLS, every package behind a token.
fn verdaccio(net: &mut NetNs, cert: &Path, key: &Path) {
    let bin = Path::new(TEST_NPM).join("verdaccio/node_modules/verdaccio/bin/verdaccio");
    assert!(
        bin.is_file(),
        "verdaccio is missing: run scripts/install-deps.sh"
    );
    let dir = net.path("verdaccio");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = std::fs::read_to_string(Path::new(REPO).join("tests/registries/verdaccio.yaml.in"))
        .unwrap()
        .replace("@DIR@", dir.to_str().unwrap())
        .replace("@ADDR@", &net.public.to_string())
        .replace("@KEY@", key.to_str().unwrap())
        .replace("@CERT@", cert.to_str().unwrap());
    std::fs::write(dir.join("config.yaml"), cfg).unwrap();
    let child = net
        .exec("node")
        .arg(&bin)
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start verdaccio in the test's namespace");
    net.keep(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let addr = std::net::SocketAddr::from((net.public, 443));
    while std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "verdaccio did not start listening"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn npm_installs_from_a_token_only_registry_with_the_hosts_credential() {
    require_journald();
    require_jail_program("npm");
    let mut net = NetNs::new();
    let host = "npm.corp.example";
    let (ca, cert, key) = test_ca(net.dir.path(), &[host]);
    verdaccio(&mut net, &cert, &key);
    let o = std::process::Command::new("python3")
        .arg(Path::new(REPO).join("tests/registries/npm_publish.py"))
        .arg(net.public.to_string())
        .arg(host)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let published: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let token = published["token"].as_str().unwrap().to_string();
    // The registry takes no anonymous read: what the run gets is the host's token's doing.
    assert!(
        [401, 403].contains(&published["anonymous_status"].as_u64().unwrap()),
        "{published}"
    );
    let cred = net.path("corp-npm.token");
    std::fs::write(&cred, format!("{token}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dns = dns_stub(vec![(host, net.public)]);
    let extra = format!(
        "credentials:\n  corp-npm-token: {}\negress:\n  nameservers: ['{dns}']\n  destinations:\n    corp-npm: {{hosts: [{host}], methods: [GET, HEAD], credential: corp-npm-token, header: Authorization, ca_file: {}}}\n  grants:\n    code: [corp-npm]\n",
        cred.display(),
        ca.display()
    );
    let h = Host::new(&[("tess", "code"), ("tina", "test-engineer")], &extra);
    build_roles(&h);
    let ws = h.workspace("ws-tess", h.uids[0]);
    let npm = format!("npm install --no-audit --no-fund --registry https://{host}/ tinypkg");
    let probes = json!([
        {"mcp_bash": npm, "timeout": 240},
        // A publish: outside the destination's methods, refused before the token is added.
        {"url": format!("https://{host}/tinypkg"), "method": "PUT", "data": "{}"},
        // The run's own Authorization never reaches the registry: the host's replaces it.
        {"url": format!("https://{host}/tinypkg"), "headers": {"Authorization": "Bearer not-the-token"}},
        {"mcp_bash": "cat /proc/self/environ"},
    ]);
    let (run_id, lines, recs) = run(&h, "code", "tess", &ws, &probes, 4);
    assert_eq!(lines[0]["exit_code"], 0, "{}", lines[0]);
    let installed = ws.join("node_modules/tinypkg/index.js");
    assert!(installed.is_file(), "{}", lines[0]);
    let meta = request(&recs, host, "GET", "/tinypkg");
    assert_eq!(field(meta, "AIRLOCK_DECISION"), "allow", "{meta:#}");
    assert_eq!(
        field(meta, "AIRLOCK_RULE"),
        "egress.destinations.corp-npm",
        "{meta:#}"
    );
    assert_eq!(field(meta, "AIRLOCK_STATUS"), "200", "{meta:#}");
    let tgz = request(&recs, host, "GET", "/tinypkg/-/tinypkg-1.0.0.tgz");
    assert_eq!(field(tgz, "AIRLOCK_STATUS"), "200", "{tgz:#}");
    assert_eq!(lines[1]["status"], 403, "{}", lines[1]);
    let put = request(&recs, host, "PUT", "/tinypkg");
    assert_eq!(
        field(put, "AIRLOCK_RULE"),
        "egress.destinations.corp-npm.methods",
        "{put:#}"
    );
    assert_eq!(lines[2]["status"], 200, "{}", lines[2]);
    // The token is the gateway's alone: not in the jail, not in the journal.
    let environ = lines[3]["stdout"].as_str().unwrap_or_default();
    assert!(!environ.contains(&token), "the token reached the jail");
    assert!(
        !journal_text(&run_id).contains(&token),
        "the token reached the journal"
    );
    assert_counts(&h, &run_id, &recs);

    // Not granted: nothing.
    let ws = h.workspace("ws-tina", h.uids[1]);
    let npm = format!(
        "npm install --no-audit --no-fund --fetch-retries 0 --registry https://{host}/ tinypkg"
    );
    let probes = json!([{"mcp_bash": npm, "timeout": 120}]);
    let (_, lines, recs) = run(&h, "test-engineer", "tina", &ws, &probes, 1);
    assert_ne!(lines[0]["exit_code"], 0, "{}", lines[0]);
    assert_no_grant(&recs, host);
}

#[test]
fn explain_hire_and_check_show_what_the_host_grants() {
    let extra = "egress:\n  destinations:\n    crates: {hosts: [index.crates.example, '*.crates.example']}\n    npm: {hosts: [registry.npm.example], methods: [GET, HEAD], paths: ['/*']}\n  grants:\n    code: [crates, npm]\n    review: [crates]\n    probe: [npm]\n";
    let h = Host::new(&[("tess", "code")], extra);
    let ctl = |args: &[&str]| {
        let o = h.ctl(args);
        (o.status.code(), stdout(&o), stderr(&o))
    };
    let (code, out, err) = ctl(&["explain", "code"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(
            "egress      the destinations below only (run.tools grants no WebFetch or WebSearch)"
        ),
        "{out}"
    );
    assert!(
        out.contains("  crates: index.crates.example, *.crates.example on 443; tunnel (egress.grants.code[0] crates)"),
        "{out}"
    );
    assert!(
        out.contains("  npm: registry.npm.example on 443; methods GET, HEAD; paths /*; each request checked (egress.grants.code[1] npm)"),
        "{out}"
    );
    let (_, out, _) = ctl(&["explain", "code", "--json"]);
    let j: Value = serde_json::from_str(&out).unwrap();
    let d = &j["egress"]["destinations"];
    assert_eq!(d[1]["from"], "egress.grants.code[1] npm", "{d}");
    assert_eq!(d[1]["terminated"], true, "{d}");
    assert_eq!(
        d[0]["hosts"],
        json!(["index.crates.example", "*.crates.example"]),
        "{d}"
    );
    // A role with no grant: as before.
    let (_, out, _) = ctl(&["explain", "test-engineer"]);
    assert!(
        out.contains("egress      nothing (run.tools grants no WebFetch"),
        "{out}"
    );

    let check = |args: &[&str]| {
        let mut a = vec!["check"];
        a.extend_from_slice(args);
        let (code, out, err) = ctl(&a);
        assert!(err.is_empty() || code == Some(2), "{err}");
        (code, out)
    };
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["code", "egress", "static.crates.example"],
            0,
            "rule   egress.destinations.crates",
        ),
        (
            &[
                "code",
                "egress",
                "index.crates.example:443",
                "GET",
                "/config.json",
            ],
            0,
            "a tunnel",
        ),
        (
            &["code", "egress", "index.crates.example:8443"],
            1,
            "rule   egress.destinations.crates",
        ),
        (
            &["code", "egress", "a.b.crates.example"],
            1,
            "rule   egress: no grant",
        ),
        (
            &["code", "egress", "registry.npm.example"],
            0,
            "rule   egress.destinations.npm",
        ),
        (
            &[
                "code",
                "egress",
                "registry.npm.example",
                "GET",
                "/left-pad?x=1",
            ],
            0,
            "granted by egress.grants.code[1]",
        ),
        (
            &["code", "egress", "registry.npm.example", "PUT", "/left-pad"],
            1,
            "rule   egress.destinations.npm.methods",
        ),
        (
            &["test-engineer", "egress", "index.crates.example"],
            1,
            "rule   egress: no grant",
        ),
        // By class: review's grant.
        (
            &["review", "egress", "index.crates.example"],
            0,
            "rule   egress.destinations.crates",
        ),
    ];
    for (args, want, text) in cases {
        let (code, out) = check(args);
        assert_eq!(code, Some(*want), "{args:?}: {out}");
        assert!(out.contains(text), "{args:?}: {out}");
    }
    let (code, _) = check(&["code", "egress", "bad host:443"]);
    assert_eq!(code, Some(2));
    let (code, _) = check(&["code", "egress", "registry.npm.example", "GET"]);
    assert_eq!(code, Some(2));

    // hire lists what the new instance's runs reach, and where from (a role that needs
    // no credential, so this host can hire it).
    write_probe_role(&h.root.join("roles.local"));
    let probe = h.root.join("roles.local/probe/role.yaml");
    let text = std::fs::read_to_string(&probe).unwrap();
    std::fs::write(
        &probe,
        text.replace("key_store: airlock", "key_store: github"),
    )
    .unwrap();
    let _d = Airlockd::start(&h);
    let (code, out, err) = ctl(&["hire", "rhea", "--role", "probe"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("egress destinations its runs reach (airlockd's egress.grants):\n  npm: registry.npm.example on 443; methods GET, HEAD; paths /*; each request checked (egress.grants.probe[0] npm)"),
        "{out}"
    );
}

const ECHO_HOST: &str = "echo.corp.example";
const ECHO_TOKEN: &str = "corpTok3n-0123456789abcdefXYZ";

/// The hostile registry (tests/registries/echo_registry.py) in `net`, checked with the
/// host's token added; a role `code` granted it. The host, and where the registry logs
/// each request it gets.
fn echo_registry(net: &mut NetNs, passthrough: bool) -> (Host, PathBuf) {
    let (ca, cert, key) = test_ca(net.dir.path(), &[ECHO_HOST]);
    let log = net.path("echo-requests.jsonl");
    let mut c = net.exec("python3");
    c.arg(Path::new(REPO).join("tests/registries/echo_registry.py"))
        .arg(net.public.to_string())
        .arg(&cert)
        .arg(&key)
        .arg(&log);
    net.serve(c, "the echoing registry");
    let cred = net.path("echo.token");
    std::fs::write(&cred, format!("{ECHO_TOKEN}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dns = dns_stub(vec![(ECHO_HOST, net.public)]);
    let extra = format!(
        "credentials:\n  echo-token: {}\negress:\n  nameservers: ['{dns}']\n  destinations:\n    echo: {{hosts: [{ECHO_HOST}], methods: [GET, HEAD], paths: ['/echo/*', '/pkg/*'], credential: echo-token, ca_file: {}{}}}\n  grants:\n    code: [echo]\n",
        cred.display(),
        ca.display(),
        if passthrough { ", passthrough_body: true" } else { "" },
    );
    let h = Host::new(&[("tess", "code")], &extra);
    (h, log)
}

/// The registry's log: each request it got.
fn echo_log(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Whether `text` holds the token in any spelling the gateway withholds, or lower-cased
/// (as a header name carries it).
fn holds_token(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains(&ECHO_TOKEN.to_ascii_lowercase())
        || airlock::gateway::withhold::forms(ECHO_TOKEN)
            .iter()
            .any(|f| text.contains(&*String::from_utf8_lossy(f)))
}

/// A raw HTTP/1.1 answer with its chunked body joined (the head, and the trailers as sent).
fn dechunked(raw: &str) -> String {
    let Some((head, mut rest)) = raw.split_once("\r\n\r\n") else {
        return raw.to_string();
    };
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return raw.to_string();
    }
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            return format!("{head}\r\n\r\n{body}{after}");
        }
        body.push_str(&after[..n.min(after.len())]);
        rest = after.get(n + 2..).unwrap_or_default();
    }
    format!("{head}\r\n\r\n{body}")
}

fn raw_get(path: &str, method: &str, extra: &str) -> Value {
    json!({"https_raw": ECHO_HOST, "request": format!(
        "{method} {path} HTTP/1.1\r\nHost: {ECHO_HOST}\r\n{extra}Connection: close\r\n\r\n"
    )})
}

#[test]
fn a_registry_that_echoes_the_hosts_credential_hands_the_run_none_of_it() {
    require_journald();
    let mut net = NetNs::new();
    let (h, log) = echo_registry(&mut net, false);
    let ws = h.workspace("ws-tess", h.uids[0]);
    let url = |p: &str| format!("https://{ECHO_HOST}{p}");
    let gz = json!({"Accept-Encoding": "gzip"});
    let probes = json!([
        {"url": url("/echo/header")},
        {"url": url("/echo/body")},
        {"url": url("/echo/chunked")},
        {"url": url("/echo/gzip"), "headers": gz},
        {"url": url("/echo/deflate"), "headers": {"Accept-Encoding": "deflate"}},
        // What a second look tried: raw bytes, as a client that reads all of them would.
        raw_get("/echo/chunked", "GET", "TE: trailers\r\n"),
        raw_get("/echo/early", "GET", ""),
        raw_get("/echo/header", "HEAD", ""),
        raw_get("/echo/b64", "GET", ""),
        raw_get("/echo/reason", "GET", ""),
        raw_get("/echo/br", "GET", "Accept-Encoding: br\r\n"),
        raw_get("/echo/gzip", "GET", "Accept-Encoding: gzip, zstd\r\n"),
        // A Range cut in two would hand over the token in halves, each too short to match.
        raw_get("/echo/body", "GET", "Range: bytes=0-24\r\n"),
        raw_get("/echo/body", "GET", "Range: bytes=25-\r\n"),
        raw_get("/echo/te-gzip", "GET", ""),
        raw_get("/echo/stacked", "GET", "Accept-Encoding: gzip\r\n"),
        raw_get("/echo/zstd", "GET", ""),
        raw_get("/echo/b64-gzip", "GET", "Accept-Encoding: gzip\r\n"),
        raw_get("/echo/chunk-ext", "GET", ""),
    ]);
    let (run_id, lines, recs) = run(
        &h,
        "code",
        "tess",
        &ws,
        &probes,
        probes.as_array().unwrap().len(),
    );
    // The registry did get the token, and did hand it back.
    let got = echo_log(&log);
    assert!(
        got.iter()
            .any(|r| r["headers"]["authorization"] == format!("Bearer {ECHO_TOKEN}")),
        "{got:#?}"
    );
    for l in &lines {
        assert!(
            !holds_token(&l.to_string()),
            "the token reached the run: {l}"
        );
    }
    let body = |i: usize| lines[i]["body"].as_str().unwrap_or_default().to_string();
    let head = |i: usize| lines[i]["head"].as_str().unwrap_or_default().to_string();
    let raw = |i: usize| dechunked(lines[i]["raw"].as_str().unwrap_or_default());
    const MARK: &str = "[withheld by Airlock]";
    assert_eq!(lines[0]["status"], 200, "{}", lines[0]);
    assert!(
        head(0).contains(&format!("x-echo: Bearer {MARK}")),
        "{}",
        lines[0]
    );
    assert!(
        !head(0).to_ascii_lowercase().contains("x-t-"),
        "{}",
        lines[0]
    );
    assert_eq!(body(0), "ok\n");
    assert!(
        body(1).contains(&format!("\"you_sent\": \"Bearer {MARK}\"")),
        "{}",
        lines[1]
    );
    assert_eq!(body(2), format!("start Bearer {MARK} middle {MARK} end\n"));
    let twice = format!("compressed Bearer {MARK} twice {MARK}\n").repeat(3);
    for i in [3, 4] {
        assert_eq!(body(i), twice, "{}", lines[i]);
        // Forwarded decoded: no coding left for the client to undo.
        assert!(
            !head(i).to_ascii_lowercase().contains("content-encoding"),
            "{}",
            lines[i]
        );
    }
    assert!(
        raw(5).contains(&format!("Bearer {MARK} middle {MARK}")),
        "{}",
        lines[5]
    );
    assert!(
        !raw(5).contains("X-Trailer-Echo:"),
        "no trailer goes on: {}",
        lines[5]
    );
    assert!(raw(6).contains("after the hints"), "{}", lines[6]);
    assert!(
        !raw(6).contains(" 103 "),
        "no informational answer goes on: {}",
        lines[6]
    );
    assert!(
        raw(7).contains(&format!("x-echo: Bearer {MARK}")),
        "{}",
        lines[7]
    );
    assert!(raw(8).matches(MARK).count() >= 10, "{}", lines[8]);
    assert!(raw(9).starts_with("HTTP/1.1 200 OK\r\n"), "{}", lines[9]);
    assert!(raw(10).contains(&twice), "{}", lines[10]);
    assert!(raw(11).contains(&twice), "{}", lines[11]);
    // No Range goes on: the whole answer comes back, withheld from.
    for i in [12, 13] {
        assert!(raw(i).starts_with("HTTP/1.1 200 OK\r\n"), "{}", lines[i]);
        assert!(raw(i).contains(&format!("Bearer {MARK}")), "{}", lines[i]);
    }
    assert!(
        got.iter().all(|r| r["headers"].get("range").is_none()),
        "{got:#?}"
    );
    // A transfer coding or a content coding the gateway does not read: nothing goes on.
    for i in [14, 15, 16] {
        assert!(raw(i).starts_with("HTTP/1.1 502 "), "{}", lines[i]);
        assert!(raw(i).contains("refused by egress: answer"), "{}", lines[i]);
    }
    assert!(raw(17).matches(MARK).count() >= 10, "{}", lines[17]);
    assert!(raw(18).contains("\r\n\r\next"), "{}", lines[18]);
    // The registry was asked only for codings the gateway reads.
    let asked: Vec<&Value> = got.iter().filter(|r| r["path"] == "/echo/gzip").collect();
    assert!(
        asked
            .iter()
            .all(|r| r["headers"]["accept-encoding"] == "gzip"),
        "{asked:#?}"
    );
    // Each withholding is journaled, by route and endpoint; the token never is.
    let w = events(&run_id, "withheld", 10);
    let at = |e: &str| {
        w.iter()
            .find(|r| field(r, "AIRLOCK_ENDPOINT") == e)
            .unwrap_or_else(|| panic!("no withheld record for {e}: {w:#?}"))
    };
    for r in &w {
        assert_eq!(
            field(r, "AIRLOCK_ROUTE"),
            format!("egress {ECHO_HOST}"),
            "{r:#}"
        );
    }
    let header = at("GET /echo/header");
    assert_eq!(field(header, "AIRLOCK_WITHHELD_HEADERS"), "4", "{header:#}");
    assert_eq!(field(header, "AIRLOCK_WITHHELD_BODY"), "0", "{header:#}");
    assert_eq!(field(at("GET /echo/body"), "AIRLOCK_WITHHELD_BODY"), "1");
    assert_eq!(field(at("GET /echo/gzip"), "AIRLOCK_WITHHELD_BODY"), "6");
    assert!(
        !holds_token(&journal_text(&run_id)),
        "the token reached the journal"
    );
    let page = request(&recs, ECHO_HOST, "GET", "/echo/body");
    assert_eq!(field(page, "AIRLOCK_DECISION"), "allow", "{page:#}");
}

#[test]
fn method_overrides_and_encoded_dot_segments_never_reach_a_checked_destination() {
    require_journald();
    let mut net = NetNs::new();
    let (h, log) = echo_registry(&mut net, false);
    let ws = h.workspace("ws-tess", h.uids[0]);
    let url = |p: &str| format!("https://{ECHO_HOST}{p}");
    let probes = json!([
        {"url": url("/echo/x"), "headers": {"X-HTTP-Method-Override": "DELETE"}},
        {"url": url("/echo/x"), "headers": {"X-Method-Override": "PUT"}},
        {"url": url("/echo/x"), "headers": {"X-HTTP-Method": "DELETE"}},
        {"url": url("/echo/x?_method=DELETE")},
        {"url": url("/pkg/%252e%252e/admin")},
        {"url": url("/pkg/..%252fadmin")},
        {"url": url("/pkg/left-pad")},
    ]);
    let (_, lines, recs) = run(&h, "code", "tess", &ws, &probes, 7);
    for (i, l) in lines.iter().take(6).enumerate() {
        assert_eq!(l["status"], 403, "{i}: {l}");
    }
    for l in &lines[..4] {
        assert!(
            body_of(l).contains("refused by egress.destinations.echo.methods:"),
            "{l}"
        );
    }
    for i in [4, 5] {
        assert!(
            body_of(&lines[i]).contains("refused by egress.destinations.echo.paths:"),
            "{}",
            lines[i]
        );
    }
    assert_eq!(lines[6]["status"], 200, "{}", lines[6]);
    let r = request(&recs, ECHO_HOST, "GET", "/pkg/%252e%252e/admin");
    assert_eq!(field(r, "AIRLOCK_DECISION"), "deny", "{r:#}");
    assert_eq!(
        field(r, "AIRLOCK_RULE"),
        "egress.destinations.echo.paths",
        "{r:#}"
    );
    // The registry saw only the plain request.
    let got = echo_log(&log);
    let paths: Vec<&str> = got.iter().filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(paths, ["/pkg/left-pad"], "{got:#?}");
}

fn body_of(l: &Value) -> String {
    l["body"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_passthrough_body_destination_still_has_its_headers_checked() {
    require_journald();
    let mut net = NetNs::new();
    let (h, _log) = echo_registry(&mut net, true);
    let ws = h.workspace("ws-tess", h.uids[0]);
    let url = |p: &str| format!("https://{ECHO_HOST}{p}");
    let probes = json!([
        {"url": url("/echo/header")},
        {"url": url("/echo/gzip"), "headers": {"Accept-Encoding": "gzip"}},
    ]);
    let (run_id, lines, _) = run(&h, "code", "tess", &ws, &probes, 2);
    let head = lines[0]["head"].as_str().unwrap_or_default();
    assert!(!holds_token(head), "{}", lines[0]);
    assert!(
        head.contains("x-echo: Bearer [withheld by Airlock]"),
        "{}",
        lines[0]
    );
    // The host's word: the body goes on as it came, coding and all (the probe decodes it).
    let gz = &lines[1];
    assert!(
        gz["head"]
            .as_str()
            .unwrap_or_default()
            .contains("content-encoding: gzip"),
        "{gz}"
    );
    assert!(
        gz["body"].as_str().unwrap_or_default().contains(ECHO_TOKEN),
        "{gz}"
    );
    let w = events(&run_id, "withheld", 1);
    assert_eq!(
        field(&w[0], "AIRLOCK_ENDPOINT"),
        "GET /echo/header",
        "{w:#?}"
    );
    assert_eq!(field(&w[0], "AIRLOCK_WITHHELD_HEADERS"), "4", "{w:#?}");
}
