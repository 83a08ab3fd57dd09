//! A fleet on one machine: two airlockd, each with its own state dir, socket and host_id,
//! sharing one real PostgreSQL (a throwaway cluster, tests/common/pg.rs). Fleet-wide
//! admission, the shared instance registry, fail-closed behaviour when the database is
//! away, and the refusals at start. Runs as root (jails, and the cluster's `postgres` user).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::pg::Postgres;
use serde_json::{json, Value};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn poll<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
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

fn try_request(sock: &Path, v: &Value) -> std::io::Result<Vec<Value>> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    s.write_all(format!("{v}\n").as_bytes())?;
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        out.push(serde_json::from_str(&line?).map_err(std::io::Error::other)?);
    }
    Ok(out)
}

/// The uids of one test's fleet: `tess` has `base`, the shared uid_range is above it.
fn uid_base() -> u32 {
    // 1880070000..1880077999: apart from every other suite's uids.
    1_880_070_000
        + (std::process::id() % 40) * 200
        + (NEXT.fetch_add(1, Ordering::SeqCst) % 10) * 20
}

/// One host of the fleet.
struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cfg: PathBuf,
    sock: PathBuf,
    child: Option<Child>,
    /// More environment for airlockd (libfaketime's, for a host whose clock is off).
    env: Vec<(String, String)>,
}

impl Node {
    /// A host named `host_id` on `pg`; `tess` (role code) is declared with uid `base`,
    /// `role_edit` may change the shipped code role (a copy), `extra` is more config.
    fn new(pg: &Postgres, host_id: &str, base: u32, store: Option<&str>, extra: &str) -> Node {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the fleet tests run as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let roles = root.join("roles");
        copy_dir(&repo.join("roles"), &roles);
        let role = roles.join("code/role.yaml");
        let text = std::fs::read_to_string(&role).unwrap();
        assert!(text.contains("runs_per_week: 20"));
        std::fs::write(&role, text.replace("runs_per_week: 20", "runs_per_week: 5")).unwrap();
        let store = match store {
            Some(s) => s.to_string(),
            None => format!(
                "store: {{postgres: \"{}\", host_id: {host_id}}}\n",
                pg.conninfo()
            ),
        };
        let cfg = root.join("airlock.yaml");
        std::fs::write(
            &cfg,
            format!(
                "roles: [{roles}]\npolicies: {policies}\nstate_dir: state\nsocket: {root}/airlockd.sock\nuid_range: {a}-{b}\ngrace_seconds: 2\nlimits: {{max_procs: 64}}\njournal_socket: {root}/no-journald.socket\n{store}{extra}instances:\n  tess: {{role: code, uid: {base}}}\n  max: {{role: code, uid: {max}}}\n",
                roles = roles.display(),
                policies = repo.join("policies").display(),
                root = root.display(),
                a = base + 2,
                b = base + 19,
                max = base + 1,
            ),
        )
        .unwrap();
        Node {
            sock: root.join("airlockd.sock"),
            _dir: dir,
            root,
            cfg,
            child: None,
            env: Vec::new(),
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.root.join("airlockd.err")).unwrap_or_default()
    }

    fn spawn(&self) -> Child {
        Command::new(env!("CARGO_BIN_EXE_airlockd"))
            .arg("--config")
            .arg(&self.cfg)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.root.join("airlockd.err"))
                    .unwrap(),
            )
            .spawn()
            .unwrap()
    }

    fn start(&mut self) {
        let mut child = self.spawn();
        let ready = poll(30, || {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("airlockd exited early ({st}):\n{}", self.stderr());
            }
            let r = try_request(&self.sock, &json!({"v":1,"op":"status"})).ok()?;
            (r.first()?["ok"] == true).then_some(())
        });
        assert!(
            ready.is_some(),
            "airlockd never became ready:\n{}",
            self.stderr()
        );
        self.child = Some(child);
    }

    /// Start airlockd expecting it to refuse: its exit code and stderr.
    fn start_refused(&self) -> (i32, String) {
        let mut child = self.spawn();
        let st = poll(30, || child.try_wait().ok().flatten());
        let Some(st) = st else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "airlockd started, it should have refused:\n{}",
                self.stderr()
            );
        };
        (st.code().unwrap_or(-1), self.stderr())
    }

    fn req(&self, v: Value) -> Vec<Value> {
        try_request(&self.sock, &v).unwrap()
    }

    fn one(&self, v: Value) -> Value {
        let mut r = self.req(v);
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0)
    }

    /// A run mints its GitHub tokens at launch, and the App of [`HIRE_EXTRA`] is not a
    /// real one: the runs after the hires go without it.
    fn without_github(&self) {
        self.github(false);
    }

    fn github(&self, on: bool) {
        const APP: &str = "github: {app_id: 7, private_key: gh}\n";
        let text = std::fs::read_to_string(&self.cfg).unwrap();
        let new = if on {
            format!("{text}{APP}")
        } else {
            text.replace(APP, "")
        };
        assert_ne!(new, text);
        std::fs::write(&self.cfg, new).unwrap();
        assert_eq!(self.one(json!({"v":1,"op":"reload"}))["ok"], true);
    }

    fn launch(&self, instance: &str, argv: &[&str]) -> Vec<Value> {
        self.launch_as("code", instance, argv)
    }

    fn launch_as(&self, role: &str, instance: &str, argv: &[&str]) -> Vec<Value> {
        self.req(
            json!({"v":1,"op":"launch","role":role,"instance":instance,"command":argv,"wait":true}),
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if poll(30, || c.try_wait().ok().flatten()).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// A fleet handle opened by a test directly queues no fire (nothing there to replay).
fn no_pending() -> airlock::store::pending::Pending {
    airlock::store::pending::Pending::new(Path::new("/nonexistent/airlock-fleet-test"))
}

/// The exit frame of a `--wait` launch answer, or the refusal.
fn outcome(r: &[Value]) -> Result<i64, String> {
    if let Some(e) = r.first().filter(|l| l["ok"] == false) {
        return Err(e["error"]["message"].as_str().unwrap_or("").to_string());
    }
    let last = r.last().expect("an answer");
    last["data"]["exit_code"]
        .as_i64()
        .ok_or_else(|| format!("no exit frame: {r:?}"))
}

#[test]
fn twenty_launches_across_two_hosts_admit_exactly_the_weekly_budget() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    let results: Vec<Result<i64, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..20)
            .map(|i| {
                let n = if i % 2 == 0 { &a } else { &b };
                s.spawn(move || outcome(&n.launch("tess", &["/bin/true"])))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(admitted, 5, "{results:?}");
    for r in &results {
        match r {
            Ok(code) => assert_eq!(*code, 0, "{results:?}"),
            Err(m) => assert!(m.contains("runs_per_week"), "{m}"),
        }
    }
    // Both hosts took part, and the database holds the five runs.
    assert!(
        results.iter().step_by(2).any(|r| r.is_err())
            && results.iter().skip(1).step_by(2).any(|r| r.is_err())
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM airlock_runs WHERE instance = 'tess'"),
        "5"
    );
    assert_eq!(
        pg.psql("SELECT cardinality(admitted_ms) FROM airlock_admissions WHERE instance = 'tess'"),
        "5"
    );
    // The sixth is refused by the fleet, naming it: asked of the host that ran fewer of
    // the five, whose own ledger alone would still admit it.
    let on_a = results.iter().step_by(2).filter(|r| r.is_ok()).count();
    let fewer = if on_a <= 2 { &a } else { &b };
    let m = outcome(&fewer.launch("tess", &["/bin/true"])).unwrap_err();
    assert!(m.contains("runs_per_week") && m.contains("fleet"), "{m}");
}

/// The manual's SQL for a database role per host (docs/src/operating/fleet.md, read from the
/// manual so the two cannot drift), applied to a fleet's tables: another host's role inserts
/// no row under a host's id and its updates and deletes of that host's rows touch none,
/// while it writes its own.
#[test]
fn under_the_manuals_row_level_security_a_host_role_writes_only_its_own_rows() {
    let pg = Postgres::start();
    let mut a = Node::new(&pg, "node-a", uid_base(), None, "");
    a.start(); // the tables, and node-a in airlock_hosts
    stop(&mut a);
    let manual = std::fs::read_to_string("docs/src/operating/fleet.md").unwrap();
    let rls = manual
        .split("```sql")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("ENABLE ROW LEVEL SECURITY"))
        .expect("the manual's row-level security SQL");
    pg.psql("CREATE ROLE \"node-a\" LOGIN; CREATE ROLE \"node-b\" LOGIN");
    pg.psql("INSERT INTO airlock_ledger (host_id, seq, hash, line) VALUES ('node-a', 1000001, 'h', 'l')");
    pg.psql(rls);
    let b = |sql: &str| pg.psql_as("node-b", sql);
    // Its own rows: written (so a refusal below is the policy, not a missing grant).
    assert_eq!(
        b("INSERT INTO airlock_ledger (host_id, seq, hash, line) VALUES ('node-b', 1, 'h', 'l')"),
        Ok("INSERT 0 1".into())
    );
    let count = |verb: &str| format!("WITH w AS ({verb} RETURNING 1) SELECT count(*) FROM w");
    assert_eq!(
        b(&count(
            "UPDATE airlock_ledger SET line = 'm' WHERE host_id = 'node-b'"
        )),
        Ok("1".into())
    );
    // Another host's: refused, or no row touched.
    let e = b("INSERT INTO airlock_ledger (host_id, seq, hash, line) VALUES ('node-a', 1000002, 'h', 'l')")
        .expect_err("an insert under node-a's id");
    assert!(e.contains("row-level security"), "{e}");
    for sql in [
        "UPDATE airlock_ledger SET line = 'forged' WHERE host_id = 'node-a'",
        "UPDATE airlock_ledger SET host_id = 'node-b' WHERE host_id = 'node-a'",
        "DELETE FROM airlock_ledger WHERE host_id = 'node-a'",
        "UPDATE airlock_hosts SET host_id = host_id WHERE host_id = 'node-a'",
        "DELETE FROM airlock_hosts WHERE host_id = 'node-a'",
        "DELETE FROM airlock_ledger WHERE host_id = 'node-b'",
    ] {
        assert_eq!(b(&count(sql)), Ok("0".into()), "{sql}");
    }
    assert_eq!(
        pg.psql("SELECT line FROM airlock_ledger WHERE host_id = 'node-a' AND seq = 1000001"),
        "l"
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM airlock_hosts WHERE host_id = 'node-a'"),
        "1"
    );
}

/// What the web-researcher role's hire checks for (nothing is read before a run needs it):
/// its provider (no key: a local model server), its board connector and the GitHub App.
const HIRE_EXTRA: &str = "credentials:\n  gh: /etc/airlock/credentials/gh.pem\nproviders:\n  claude: {url: \"http://127.0.0.1:9\"}\nmcp_connectors:\n  board: {url: \"http://127.0.0.1:9/mcp\"}\ngithub: {app_id: 7, private_key: gh}\n";
const HIRED_ROLE: &str = "web-researcher";

#[test]
fn a_hire_on_one_host_is_seen_on_the_other_with_the_same_uid() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, HIRE_EXTRA);
    let mut b = Node::new(&pg, "node-b", base, None, HIRE_EXTRA);
    a.start();
    b.start();
    let r = a.one(json!({"v":1,"op":"hire","instance":"nova","role":HIRED_ROLE}));
    assert_eq!(r["ok"], true, "{r}");
    let uid = r["data"]["uid"].as_u64().unwrap();
    assert!((u64::from(base) + 2..=u64::from(base) + 19).contains(&uid));
    assert_eq!(
        pg.psql("SELECT uid || ' ' || hired_on FROM airlock_instances WHERE name = 'nova'"),
        format!("{uid} node-a")
    );
    // B lists it, with A's uid.
    let r = b.one(json!({"v":1,"op":"instances"}));
    let nova = r["data"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["instance"] == "nova")
        .cloned()
        .unwrap_or_else(|| panic!("nova not listed on B: {r}"));
    assert_eq!(nova["uid"].as_u64(), Some(uid), "{nova}");
    // The name is the fleet's: B cannot hire it again; a hire on B takes another uid.
    let r = b.one(json!({"v":1,"op":"hire","instance":"nova","role":HIRED_ROLE}));
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("taken"),
        "{r}"
    );
    let r = b.one(json!({"v":1,"op":"hire","instance":"orla","role":HIRED_ROLE}));
    assert_eq!(r["ok"], true, "{r}");
    assert_ne!(r["data"]["uid"].as_u64(), Some(uid), "{r}");
    // A run of it on B runs as that uid.
    b.without_github();
    let r = b.launch_as(
        HIRED_ROLE,
        "nova",
        &["/usr/bin/python3", "-c", "import os; print(os.getuid())"],
    );
    let out: String = r
        .iter()
        .filter(|l| l["data"]["frame"] == "output" && l["data"]["stream"] == "stdout")
        .filter_map(|l| l["data"]["data"].as_str())
        .collect();
    assert_eq!(outcome(&r), Ok(0), "{r:?}");
    assert_eq!(out.trim(), uid.to_string(), "{r:?}");
    // A fire on A is the fleet's: B refuses to launch it.
    let r = a.one(json!({"v":1,"op":"fire","instance":"nova"}));
    assert_eq!(r["ok"], true, "{r}");
    let m = outcome(&b.launch_as(HIRED_ROLE, "nova", &["/bin/true"])).unwrap_err();
    assert!(m.contains("fired"), "{m}");
}

#[test]
fn with_the_database_away_launches_and_hires_are_refused_and_running_runs_go_on() {
    let mut pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, HIRE_EXTRA);
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    a.without_github();
    let sock = a.sock.clone();
    let running = std::thread::spawn(move || {
        outcome(&try_request(&sock, &json!({"v":1,"op":"launch","role":"code","instance":"tess","command":["/usr/bin/python3","-c","import time; time.sleep(3); print('done')"],"wait":true})).unwrap())
    });
    // The run is under way before the database goes.
    let mut last = Value::Null;
    let started = poll(60, || {
        last = a.one(json!({"v":1,"op":"ps"}));
        (last["data"]["runs"].as_array().map_or(0, |v| v.len()) == 1).then_some(())
    });
    if started.is_none() {
        panic!("the run never showed in ps ({last}): {:?}", running.join());
    }
    pg.stop();
    for n in [&a, &b] {
        let m = outcome(&n.launch("tess", &["/bin/true"])).unwrap_err();
        assert!(
            m.contains("fleet store") && m.contains("unavailable"),
            "{m}"
        );
    }
    a.github(true);
    let r = a.one(json!({"v":1,"op":"hire","instance":"nova","role":HIRED_ROLE}));
    assert_eq!(r["ok"], false, "{r}");
    let m = r["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("fleet store") && m.contains("unavailable"),
        "{m}"
    );
    assert_eq!(running.join().unwrap(), Ok(0));
    // Back: the host takes its lease again and launches resume.
    a.without_github();
    pg.restart();
    for n in [&a, &b] {
        let r = poll(30, || outcome(&n.launch("tess", &["/bin/true"])).ok());
        assert_eq!(r, Some(0), "{}", n.stderr());
    }
    // The run that closed while the database was away reached its table since.
    let caught_up = poll(10, || {
        let (local, rows) = mirrored(&pg, &a, "node-a");
        (local == rows).then_some(())
    });
    assert!(caught_up.is_some(), "{:?}", mirrored(&pg, &a, "node-a"));
}

#[test]
fn bad_stores_refuse_the_start_naming_the_key() {
    let pg = Postgres::start();
    let base = uid_base();
    // A conninfo key libpq does not have.
    let bad = format!(
        "store: {{postgres: \"{} dbnmae=airlock\", host_id: node-a}}\n",
        pg.conninfo()
    );
    let n = Node::new(&pg, "node-a", base, Some(&bad), "");
    let (code, err) = n.start_refused();
    assert_ne!(code, 0);
    assert!(
        err.contains("store.postgres") && err.contains("`dbnmae`"),
        "{err}"
    );
    // An inline password.
    let bad = format!(
        "store: {{postgres: \"{} password=hunter2\", host_id: node-a}}\n",
        pg.conninfo()
    );
    let (code, err) = Node::new(&pg, "node-a", base, Some(&bad), "").start_refused();
    assert_ne!(code, 0);
    assert!(
        err.contains("password_credential") && !err.contains("hunter2"),
        "{err}"
    );
    // A second live airlockd with the same host_id.
    let mut a = Node::new(&pg, "node-a", base, None, "");
    a.start();
    let (code, err) = Node::new(&pg, "node-a", base, None, "").start_refused();
    assert_ne!(code, 0);
    assert!(
        err.contains("store.host_id") && err.contains("node-a"),
        "{err}"
    );
    // Another host_id starts.
    let mut b = Node::new(&pg, "node-b", base, None, "");
    b.start();
    drop(b);
    drop(a);
    // A schema from a newer airlockd.
    pg.psql("INSERT INTO airlock_schema (version) VALUES (999)");
    let (code, err) = Node::new(&pg, "node-c", base, None, "").start_refused();
    assert_ne!(code, 0);
    assert!(
        err.contains("fleet store") && err.contains("newer"),
        "{err}"
    );
    // An unreachable database.
    let bad =
        "store: {postgres: \"host=/nonexistent dbname=airlock user=postgres\", host_id: node-d}\n";
    let (code, err) = Node::new(&pg, "node-d", base, Some(bad), "").start_refused();
    assert_ne!(code, 0);
    assert!(
        err.contains("fleet store") && err.contains("cannot connect"),
        "{err}"
    );
}

/// The admission statement itself under more concurrency than two daemons make: four
/// hosts' stores, 64 admissions of one instance at once (16 connections), 7 allowed.
#[test]
fn the_admission_statement_never_over_admits() {
    use airlock::store::{Fleet, StoreConf, StoreError};
    let pg = Postgres::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results: Vec<Result<(), StoreError>> = rt.block_on(async {
        let mut fleets = Vec::new();
        for h in ["h1", "h2", "h3", "h4"] {
            let conf = StoreConf {
                conninfo: airlock::store::conf::parse_conninfo(&pg.conninfo()).unwrap(),
                host_id: h.into(),
                password_credential: None,
            };
            fleets.push(std::sync::Arc::new(
                Fleet::open(
                    &conf,
                    None,
                    tokio::sync::mpsc::unbounded_channel().0,
                    no_pending(),
                    airlock::store::signing::HostKey::generate().unwrap().0,
                )
                .await
                .unwrap(),
            ));
        }
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let f = fleets[i % 4].clone();
                tokio::spawn(async move { f.admit("tess", &format!("run{i}"), Some(7)).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 7, "{results:?}");
    assert!(results.iter().all(|r| match r {
        Ok(()) => true,
        Err(StoreError::Refused(m)) => m.contains("runs_per_week"),
        Err(_) => false,
    }));
    assert_eq!(pg.psql("SELECT count(*) FROM airlock_runs"), "7");
    // A week later (the stamps aged by a week: the window is the database's clock) the
    // window has moved on: admitted again.
    pg.psql(&format!(
        "UPDATE airlock_admissions SET admitted_ms = array(SELECT t - {} - 1 FROM unnest(admitted_ms) AS t)",
        airlock::policy::budget::WEEK_MS
    ));
    let again = rt.block_on(async {
        let conf = StoreConf {
            conninfo: airlock::store::conf::parse_conninfo(&pg.conninfo()).unwrap(),
            host_id: "h5".into(),
            password_credential: None,
        };
        Fleet::open(
            &conf,
            None,
            tokio::sync::mpsc::unbounded_channel().0,
            no_pending(),
            airlock::store::signing::HostKey::generate().unwrap().0,
        )
        .await
        .unwrap()
        .admit("tess", "late", Some(7))
        .await
    });
    assert_eq!(again, Ok(()));
    assert_eq!(
        pg.psql("SELECT cardinality(admitted_ms) FROM airlock_admissions WHERE instance = 'tess'"),
        "1"
    );
}

/// Start a long run of `instance` on `n` in a thread; wait until `ps` lists it.
fn long_run(n: &Node, instance: &str) -> std::thread::JoinHandle<(Result<i64, String>, Instant)> {
    let sock = n.sock.clone();
    let inst = instance.to_string();
    let h = std::thread::spawn(move || {
        let r = try_request(&sock, &json!({"v":1,"op":"launch","role":"code","instance":inst,"command":["/bin/sleep","60"],"wait":true})).unwrap();
        (outcome(&r), Instant::now())
    });
    assert!(poll(20, || {
        let r = n.one(json!({"v":1,"op":"ps"}));
        r["data"]["runs"]
            .as_array()
            .is_some_and(|v| v.iter().any(|x| x["instance"] == instance))
            .then_some(())
    })
    .is_some());
    h
}

#[test]
fn a_fire_on_one_host_stops_the_run_on_the_other() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    let run = long_run(&b, "tess");
    let fired_at = Instant::now();
    let r = a.one(json!({"v":1,"op":"fire","instance":"tess"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["fleet"], "recorded", "{r}");
    let replied = fired_at.elapsed();
    // B logs the fire once its runs of the instance are told to stop and their leases
    // are revoked: that is within a second (notified, not polled).
    let log = b.root.join("state/journal/airlockd.journal");
    let stopped = poll(5, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("was fired on another host of the fleet; 1 active run(s) stopped")
            .then(|| fired_at.elapsed())
    })
    .unwrap_or_else(|| panic!("B never stopped its run:\n{}", b.stderr()));
    let (out, ended) = run.join().unwrap();
    let took = ended.duration_since(fired_at);
    eprintln!("fire on A: answered after {replied:?}, B's run stopped and its leases revoked after {stopped:?}, B's run closed after {took:?}");
    assert!(out.is_ok(), "{out:?}");
    assert!(stopped < Duration::from_millis(1000), "{stopped:?}");
    let m = outcome(&b.launch("tess", &["/bin/true"])).unwrap_err();
    assert!(m.contains("fired"), "{m}");
    // A fire whose notification no host got (recorded straight in the table): found on
    // B's next heartbeat, within 5 s.
    let run = long_run(&b, "max");
    let fired_at = Instant::now();
    pg.psql("INSERT INTO airlock_fires (instance, fired_on, fired_by_uid, fired_at_ms) VALUES ('max', 'node-x', 0, 0)");
    let (_, ended) = run.join().unwrap();
    let took = ended.duration_since(fired_at);
    eprintln!("fire without a notification to the end of B's run: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let r = b.one(json!({"v":1,"op":"instances"}));
    let max = r["data"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["instance"] == "max")
        .cloned()
        .unwrap();
    assert_eq!(max["fired"], true, "{max}");
}

/// The records of `n`'s ledger file, and how many the fleet store mirrors of them.
fn mirrored(pg: &Postgres, n: &Node, host: &str) -> (usize, usize) {
    let local = airlock::supervisor::ledger::records(&n.root.join("state/ledger.jsonl"))
        .unwrap()
        .len();
    let rows: usize = pg
        .psql(&format!(
            "SELECT count(*) FROM airlock_ledger WHERE host_id = '{host}'"
        ))
        .parse()
        .unwrap();
    (local, rows)
}

fn verify_fleet(n: &Node) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&n.cfg)
        .args(["verify-ledger", "--fleet"])
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn every_hosts_ledger_is_mirrored_and_verify_ledger_fleet_checks_them() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    assert_eq!(outcome(&a.launch("tess", &["/bin/true"])), Ok(0));
    assert_eq!(outcome(&b.launch("tess", &["/bin/true"])), Ok(0));
    let max = b.launch("max", &["/bin/true"]);
    assert_eq!(outcome(&max), Ok(0));
    let max_run = run_of(&max);
    for (n, h) in [(&a, "node-a"), (&b, "node-b")] {
        let caught_up = poll(10, || {
            let (local, rows) = mirrored(&pg, n, h);
            (local > 0 && local == rows).then_some(())
        });
        assert!(caught_up.is_some(), "{h}: {:?}", mirrored(&pg, n, h));
    }
    let (code, out) = verify_fleet(&b);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("host node-a: ") && out.contains("host node-b: ") && out.contains("intact"),
        "{out}"
    );
    // Host A shows B's run from the store, with its host.
    let (code, out) = show(&a, &max_run, false);
    assert_eq!(code, 0, "{out}");
    for want in ["node-b", "max", "exited"] {
        assert!(out.contains(want), "{want}: {out}");
    }
    let (code, out) = show(&a, &max_run, true);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}"));
    assert_eq!((code, v["host_id"].as_str()), (0, Some("node-b")), "{out}");
    assert_eq!(v["run"]["instance"], "max", "{out}");
    let (code, out) = show(&a, "r-20260101-00000000", false);
    assert!(code == 1 && out.contains("no run"), "{code}: {out}");
    // One row edited by hand: named, host and record.
    let seq = pg.psql(
        "SELECT min(seq) FROM airlock_ledger WHERE host_id = 'node-b' AND line LIKE '%\"max\"%'",
    );
    pg.psql(&format!("UPDATE airlock_ledger SET line = replace(line, '\"max\"', '\"mux\"') WHERE host_id = 'node-b' AND seq = {seq}"));
    let (code, out) = verify_fleet(&a);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("host node-b: BROKEN at record {seq}")),
        "{out}"
    );
    assert!(
        out.contains("host node-a: ") && out.contains("intact"),
        "{out}"
    );
    // `show` checks the records it reads too: the edited one is named, not shown.
    let (code, out) = show(&a, &max_run, false);
    assert!(
        code == 1 && out.contains("host node-b") && out.contains("fails its check"),
        "{code}: {out}"
    );
}

/// The run id of a launch answer.
fn run_of(r: &[Value]) -> String {
    r.iter()
        .find_map(|f| f["data"]["run"].as_str())
        .unwrap_or_else(|| panic!("no run id: {r:?}"))
        .to_string()
}

/// `airlockctl show RUN` with `n`'s config: exit code, stdout and stderr.
fn show(n: &Node, run: &str, json: bool) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
    c.arg("--config").arg(&n.cfg);
    if json {
        c.arg("--json");
    }
    let o = c.args(["show", run]).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn fleet_runs(n: &Node) -> Vec<Value> {
    let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&n.cfg)
        .args(["--json", "runs", "--fleet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["runs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_crashed_hosts_runs_are_reclaimed_as_unsupervised_by_another() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    let _run = long_run(&a, "tess");
    let ps = a.one(json!({"v":1,"op":"ps"}));
    let run = ps["data"]["runs"][0]["run"].as_str().unwrap().to_string();
    let state = |n: &Node| {
        fleet_runs(n)
            .iter()
            .find(|r| r["run"] == run.as_str())
            .map(|r| {
                (
                    r["host_id"].as_str().unwrap().to_string(),
                    r["state"].as_str().unwrap().to_string(),
                )
            })
    };
    assert_eq!(state(&b), Some(("node-a".into(), "active".into())));
    // Renewed while A lives.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(state(&b), Some(("node-a".into(), "active".into())));
    let mut child = a.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let reclaimed = poll(20, || {
        (state(&b)? == ("node-a".into(), "unsupervised".into())).then_some(())
    });
    assert!(reclaimed.is_some(), "{:?}", state(&b));
    let (code, out) = show(&b, &run, false);
    assert!(
        code == 0 && out.contains("node-a") && out.contains("unsupervised"),
        "{code}: {out}"
    );
    let log = std::fs::read_to_string(b.root.join("state/journal/airlockd.journal")).unwrap();
    assert!(
        log.contains(&format!("run {run} of host node-a is unsupervised")),
        "{log}"
    );
    // A comes back under the same host_id (its host lease died with it), aborts the
    // orphan, and its closing record ends the run's lease in the table.
    a.start();
    let closed = poll(20, || (state(&b)?.1 == "closed").then_some(()));
    assert!(
        closed.is_some(),
        "{:?}\n{}\n{}",
        state(&b),
        pg.psql("SELECT run, host_id, state, expires_ms, closed_ms FROM airlock_runs"),
        pg.psql("SELECT host_id, seq, substr(line, 1, 120) FROM airlock_ledger")
    );
}

fn summary(mut ms: Vec<f64>) -> String {
    ms.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "n={} mean={:.2}ms p50={:.2}ms p99={:.2}ms",
        ms.len(),
        ms.iter().sum::<f64>() / ms.len() as f64,
        at(0.5),
        at(0.99)
    )
}

/// `cargo test --test fleet bench_admission -- --ignored --nocapture`: admission through
/// PostgreSQL (the statement alone, one host and two at once) and whole launches through
/// airlockd with the file store and with PostgreSQL, one host and two.
#[test]
#[ignore]
fn bench_admission() {
    use airlock::store::{Fleet, StoreConf};
    let pg = Postgres::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let open = |h: &str| {
        let conf = StoreConf {
            conninfo: airlock::store::conf::parse_conninfo(&pg.conninfo()).unwrap(),
            host_id: h.into(),
            password_credential: None,
        };
        std::sync::Arc::new(
            rt.block_on(Fleet::open(
                &conf,
                None,
                tokio::sync::mpsc::unbounded_channel().0,
                no_pending(),
                airlock::store::signing::HostKey::generate().unwrap().0,
            ))
            .unwrap(),
        )
    };
    let (f1, f2) = (open("b1"), open("b2"));
    let n = 1000;
    let one = |f: std::sync::Arc<Fleet>, tag: &'static str| async move {
        let mut lat = Vec::new();
        for i in 0..n {
            let t = Instant::now();
            f.admit("bench", &format!("{tag}{i}"), None).await.unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        lat
    };
    let t = Instant::now();
    let lat = rt.block_on(one(f1.clone(), "a"));
    eprintln!(
        "BENCH admission statement, 1 host: {} ({:.0}/s)",
        summary(lat),
        n as f64 / t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let (l1, l2) = rt.block_on(async { tokio::join!(one(f1.clone(), "b"), one(f2.clone(), "c")) });
    eprintln!(
        "BENCH admission statement, 2 hosts at once: {} ({:.0}/s together)",
        summary([l1, l2].concat()),
        (2 * n) as f64 / t.elapsed().as_secs_f64()
    );
    // Whole launches (`--wait` of /bin/true): the file store, then PostgreSQL.
    let launches = 20;
    let base = uid_base();
    let timed = |nodes: &[&Node], inst: &str| {
        let t = Instant::now();
        let lat: Vec<f64> = std::thread::scope(|s| {
            let hs: Vec<_> = nodes
                .iter()
                .map(|n| {
                    s.spawn(move || {
                        (0..launches)
                            .map(|_| {
                                let t = Instant::now();
                                assert_eq!(outcome(&n.launch(inst, &["/bin/true"])), Ok(0));
                                t.elapsed().as_secs_f64() * 1000.0
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let rate = lat.len() as f64 / t.elapsed().as_secs_f64();
        format!("{} ({rate:.1} launches/s)", summary(lat))
    };
    // The nodes' code role has runs_per_week 5: raised for the benchmark. Some(""): no
    // `store:`, the file store.
    let mut fa = Node::new(&pg, "f-a", base, Some(""), "");
    std::fs::write(
        fa.root.join("roles/code/role.yaml"),
        std::fs::read_to_string(fa.root.join("roles/code/role.yaml"))
            .unwrap()
            .replace("runs_per_week: 5", "runs_per_week: 10000"),
    )
    .unwrap();
    fa.start();
    eprintln!(
        "BENCH launch, file store, 1 host: {}",
        timed(&[&fa], "tess")
    );
    drop(fa);
    let base2 = uid_base();
    let mut pa = Node::new(&pg, "p-a", base2, None, "");
    let mut pb = Node::new(&pg, "p-b", base2, None, "");
    for n in [&pa, &pb] {
        let p = n.root.join("roles/code/role.yaml");
        std::fs::write(
            &p,
            std::fs::read_to_string(&p)
                .unwrap()
                .replace("runs_per_week: 5", "runs_per_week: 10000"),
        )
        .unwrap();
    }
    pa.start();
    pb.start();
    eprintln!(
        "BENCH launch, PostgreSQL, 1 host: {}",
        timed(&[&pa], "tess")
    );
    eprintln!(
        "BENCH launch, PostgreSQL, 2 hosts at once: {}",
        timed(&[&pa, &pb], "max")
    );
    drop(pb);
    let base3 = uid_base();
    let mut fb = Node::new(&pg, "f-b", base3, Some(""), "");
    let mut fc = Node::new(&pg, "f-c", base3 + 100, Some(""), "");
    for n in [&fb, &fc] {
        let p = n.root.join("roles/code/role.yaml");
        std::fs::write(
            &p,
            std::fs::read_to_string(&p)
                .unwrap()
                .replace("runs_per_week: 5", "runs_per_week: 10000"),
        )
        .unwrap();
    }
    fb.start();
    fc.start();
    eprintln!(
        "BENCH launch, file store, 2 hosts at once: {}",
        timed(&[&fb, &fc], "tess")
    );
}

/// `airlockctl ARGS` against `n`: exit code, stdout and stderr.
fn ctl(n: &Node, args: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&n.cfg)
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// The fires the store has, by instance.
fn store_fires(pg: &Postgres) -> String {
    pg.psql("SELECT coalesce(string_agg(instance, ',' ORDER BY instance), '') FROM airlock_fires")
}

fn pending_fires(n: &Node) -> Vec<Value> {
    let s = n.one(json!({"v":1,"op":"status"}));
    s["data"]["fleet"]["pending_fires"]
        .as_array()
        .unwrap_or_else(|| panic!("status has no fleet.pending_fires: {s}"))
        .clone()
}

#[test]
fn a_fire_while_the_store_is_away_is_queued_said_so_and_reaches_the_fleet_later() {
    let mut pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    // Replayed on reconnect: B's run of tess stops once the store is back.
    let run = long_run(&b, "tess");
    pg.stop();
    let (code, out) = ctl(&a, &["fire", "tess"]);
    assert_eq!(code, 4, "fire with the store away: {out}");
    assert!(
        out.contains("fired here; the fleet will be told when the store is back"),
        "{out}"
    );
    assert_eq!(pending_fires(&a), vec![json!("tess")]);
    let (code, out) = ctl(&a, &["status"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("pending fleet writes") && out.contains("tess"),
        "{out}"
    );
    let back = Instant::now();
    pg.restart();
    let told = poll(20, || (store_fires(&pg) == "tess").then_some(()));
    assert!(
        told.is_some(),
        "the queued fire never reached the store:\n{}",
        a.stderr()
    );
    let (out, ended) = run.join().unwrap();
    eprintln!(
        "queued fire: B's run ended {:?} after the store came back",
        ended.duration_since(back)
    );
    assert!(out.is_ok(), "{out:?}");
    assert!(ended.duration_since(back) < Duration::from_secs(20));
    assert!(poll(10, || pending_fires(&a).is_empty().then_some(())).is_some());
    let m = outcome(&b.launch("tess", &["/bin/true"])).unwrap_err();
    assert!(m.contains("fired"), "{m}");
    // Replayed at start: fired while the store is away, then airlockd stops before it is
    // back; its next start sends the fire before it serves anything.
    let run = long_run(&b, "max");
    pg.stop();
    let (code, out) = ctl(&a, &["fire", "max"]);
    assert_eq!(code, 4, "{out}");
    drop(a.child.take().map(|mut c| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        c.wait()
    }));
    pg.restart();
    a.start();
    assert_eq!(store_fires(&pg), "max,tess", "{}", a.stderr());
    let (out, _) = run.join().unwrap();
    assert!(out.is_ok(), "{out:?}");
    assert!(pending_fires(&a).is_empty());
}

/// The longest a `status` took on any of `nodes` while `busy` ran, polled every 50 ms (a
/// host that does not answer within 10 s counts as 10 s).
fn slowest_status(nodes: &[&Node], busy: impl FnOnce()) -> Duration {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let pollers: Vec<_> = nodes
            .iter()
            .map(|n| {
                let (sock, stop) = (n.sock.clone(), &stop);
                s.spawn(move || {
                    let mut worst = Duration::ZERO;
                    while !stop.load(Ordering::SeqCst) {
                        let t = Instant::now();
                        let answered = (|| {
                            let mut c = UnixStream::connect(&sock).ok()?;
                            c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
                            c.write_all(b"{\"v\":1,\"op\":\"status\"}\n").ok()?;
                            let mut line = String::new();
                            BufReader::new(c).read_line(&mut line).ok()?;
                            line.contains("\"ok\":true").then_some(())
                        })();
                        let took = if answered.is_some() {
                            t.elapsed()
                        } else {
                            Duration::from_secs(10)
                        };
                        worst = worst.max(took);
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    worst
                })
            })
            .collect();
        busy();
        stop.store(true, Ordering::SeqCst);
        pollers
            .into_iter()
            .map(|p| p.join().unwrap())
            .max()
            .unwrap_or_default()
    })
}

#[test]
fn fire_against_launch_with_the_store_slowed_never_freezes_a_host() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    // Instances of A alone, one per round (a fire is for good); uids from uid_range.
    let rounds = 6;
    let mut cfg = std::fs::read_to_string(&a.cfg).unwrap();
    for i in 0..rounds {
        cfg.push_str(&format!("  r{i}: {{role: code}}\n"));
    }
    std::fs::write(&a.cfg, cfg).unwrap();
    a.start();
    b.start();
    let mut worst = Duration::ZERO;
    for i in 0..rounds {
        let inst = format!("r{i}");
        let launch_first = i % 2 == 0;
        let mut launched = None;
        let slowest = slowest_status(&[&a, &b], || {
            std::thread::scope(|s| {
                // The store slowed: admissions wait on a table lock held for 2.5 s.
                s.spawn(|| {
                    pg.psql("BEGIN; LOCK TABLE airlock_admissions IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(2.5); COMMIT;")
                });
                std::thread::sleep(Duration::from_millis(300));
                let fire = || {
                    let r = a.one(json!({"v":1,"op":"fire","instance":inst}));
                    assert_eq!(r["ok"], true, "{r}");
                };
                if !launch_first {
                    fire();
                }
                let l = s.spawn(|| outcome(&a.launch(&inst, &["/bin/sleep", "30"])));
                if launch_first {
                    // The launch is waiting on its admission by now.
                    std::thread::sleep(Duration::from_millis(500));
                    fire();
                }
                launched = Some(l.join().unwrap());
            })
        });
        eprintln!(
            "round {i} ({}): slowest status {slowest:?}, launch {launched:?}",
            if launch_first {
                "launch, then fire"
            } else {
                "fire, then launch"
            }
        );
        worst = worst.max(slowest);
        let m = launched.unwrap().unwrap_err();
        assert!(m.contains("fired"), "round {i}: {m}");
    }
    assert!(
        worst < Duration::from_secs(1),
        "a host answered status only after {worst:?}"
    );
    // Nothing of A's stayed admitted and running in the fleet.
    assert_eq!(
        pg.psql("SELECT count(*) FROM airlock_runs WHERE state = 'active'"),
        "0"
    );
}

#[test]
fn a_run_admitted_but_never_started_is_closed_as_aborted_at_the_next_start() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    a.start();
    assert_eq!(outcome(&a.launch("tess", &["/bin/true"])), Ok(0));
    // What a launch killed between the fleet's admission and its opening record leaves: an
    // admitted lease of A's with no record in A's ledger.
    pg.psql("INSERT INTO airlock_runs (run, host_id, instance, admitted_ms, expires_ms) VALUES ('r-ghost', 'node-a', 'tess', 1, 1)");
    drop(a.child.take().map(|mut c| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        c.wait()
    }));
    a.start();
    assert_eq!(
        pg.psql("SELECT state FROM airlock_runs WHERE run = 'r-ghost'"),
        "aborted"
    );
    // The run that did start is closed by its own record, not aborted.
    assert!(poll(10, || (pg.psql(
        "SELECT count(*) FROM airlock_runs WHERE state = 'closed' AND host_id = 'node-a'"
    ) == "1")
        .then_some(()))
    .is_some());
    assert_eq!(
        pg.psql("SELECT count(*) FROM airlock_runs WHERE state = 'aborted'"),
        "1"
    );
}

/// Debian's libfaketime (scripts/install-deps.sh: `faketime`), in the multiarch directory.
fn libfaketime() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("faketime/libfaketime.so.1")))
        .find(|p| p.exists())
        .expect("no libfaketime.so.1: scripts/install-deps.sh installs Debian's faketime")
}

#[test]
fn a_host_whose_clock_runs_ahead_cannot_admit_and_moves_no_one_elses_window() {
    let libfaketime = libfaketime();
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    // B's clock eight days ahead (the whole process: wall clock and what it reads of it).
    b.env = vec![
        ("LD_PRELOAD".into(), libfaketime.display().to_string()),
        ("FAKETIME".into(), "+8d".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    a.start();
    b.start();
    // A healthy run of A's, for longer than a run lease, while B beats.
    let long = long_run(&a, "max");
    let run = a.one(json!({"v":1,"op":"ps"}))["data"]["runs"][0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    for _ in 0..2 {
        assert_eq!(outcome(&a.launch("tess", &["/bin/true"])), Ok(0));
    }
    let stamps = || {
        pg.psql("SELECT array_to_string(admitted_ms, ',') FROM airlock_admissions WHERE instance = 'tess'")
    };
    let before = stamps();
    // B is refused every time, naming the clocks and how far apart they are.
    for _ in 0..6 {
        let m = outcome(&b.launch("tess", &["/bin/true"])).unwrap_err();
        assert!(
            m.contains("clock") && m.contains("ahead") && m.contains("days"),
            "{m}"
        );
    }
    assert_eq!(stamps(), before, "B moved tess's admissions");
    // A's window is its own: three more runs, then the budget refuses the sixth.
    for _ in 0..3 {
        assert_eq!(outcome(&a.launch("tess", &["/bin/true"])), Ok(0));
    }
    let m = outcome(&a.launch("tess", &["/bin/true"])).unwrap_err();
    assert!(m.contains("runs_per_week"), "{m}");
    // Every admission stamp is the database's time, not B's.
    let db_now: i64 = pg
        .psql("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint")
        .parse()
        .unwrap();
    for t in stamps().split(',') {
        let t: i64 = t.parse().unwrap();
        assert!((db_now - 120_000..=db_now).contains(&t), "{t} vs {db_now}");
    }
    // B's heartbeats, eight days ahead, never found A's run expired.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        pg.psql(&format!(
            "SELECT state FROM airlock_runs WHERE run = '{run}'"
        )),
        "active"
    );
    let log =
        std::fs::read_to_string(b.root.join("state/journal/airlockd.journal")).unwrap_or_default();
    assert!(!log.contains("unsupervised"), "{log}");
    let r = a.one(json!({"v":1,"op":"fire","instance":"max"}));
    assert_eq!(r["ok"], true, "{r}");
    let _ = long.join();
}

/// Stop `n`'s airlockd (SIGTERM) and wait for it.
fn stop(n: &mut Node) {
    if let Some(mut c) = n.child.take() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = c.wait();
    }
}

/// The highest `seq` the store mirrors of `host` (0: none).
fn mirror_head(pg: &Postgres, host: &str) -> i64 {
    pg.psql(&format!(
        "SELECT coalesce(max(seq), 0) FROM airlock_ledger WHERE host_id = '{host}'"
    ))
    .parse()
    .unwrap()
}

#[test]
fn a_cut_or_holed_mirror_is_named_by_verify_and_refilled_by_its_host() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    for _ in 0..3 {
        assert_eq!(outcome(&a.launch("tess", &["/bin/true"])), Ok(0));
    }
    assert_eq!(outcome(&b.launch("max", &["/bin/true"])), Ok(0));
    for (n, h) in [(&a, "node-a"), (&b, "node-b")] {
        let caught_up = poll(10, || {
            let (local, rows) = mirrored(&pg, n, h);
            (local > 0 && local == rows).then_some(())
        });
        assert!(caught_up.is_some(), "{h}: {:?}", mirrored(&pg, n, h));
    }
    stop(&mut a);
    stop(&mut b);
    let (code, out) = verify_fleet(&a);
    assert_eq!(code, 0, "{out}");
    // A's tail (its last three rows) and a middle row deleted; all of B's.
    let head = mirror_head(&pg, "node-a");
    assert!(head >= 6, "{head}");
    pg.psql(&format!(
        "DELETE FROM airlock_ledger WHERE host_id = 'node-a' AND (seq > {} OR seq = 3)",
        head - 2
    ));
    pg.psql("DELETE FROM airlock_ledger WHERE host_id = 'node-b'");
    let (code, out) = verify_fleet(&a);
    assert_eq!(code, 1, "{out}");
    for want in [
        "host node-a: MISSING ROWS at record 3".to_string(),
        format!("host node-a: CUT at record {}", head - 1),
        format!("reported writing up to record {head}"),
        "host node-b: MISSING at record 1".to_string(),
    ] {
        assert!(out.contains(&want), "{want}:\n{out}");
    }
    // Each host puts its rows back from its own file once it is up.
    let t = Instant::now();
    a.start();
    b.start();
    let healed = poll(20, || (verify_fleet(&a).0 == 0).then_some(()));
    assert!(healed.is_some(), "{}", verify_fleet(&a).1);
    eprintln!(
        "mirror refilled at start: {:?} from starting both hosts",
        t.elapsed()
    );
    for (n, h) in [(&a, "node-a"), (&b, "node-b")] {
        let (local, rows) = mirrored(&pg, n, h);
        assert!(rows > 0 && rows <= local, "{h}: {local} {rows}");
    }
    // While it runs too: a middle row and the tail deleted behind the writer's back.
    let head = mirror_head(&pg, "node-a");
    pg.psql(&format!(
        "DELETE FROM airlock_ledger WHERE host_id = 'node-a' AND (seq > {} OR seq = 2)",
        head - 2
    ));
    let t = Instant::now();
    let refilled = poll(30, || {
        let (local, rows) = mirrored(&pg, &a, "node-a");
        (rows == local && verify_fleet(&a).0 == 0).then_some(())
    });
    assert!(refilled.is_some(), "{}", verify_fleet(&a).1);
    eprintln!("mirror refilled while running: {:?}", t.elapsed());
    // Rows of a host the fleet has never seen are named, not trusted.
    pg.psql(
        "INSERT INTO airlock_ledger (host_id, seq, hash, line) VALUES ('node-x', 1, 'x', '{}')",
    );
    let (code, out) = verify_fleet(&a);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("host node-x: UNKNOWN HOST"), "{out}");
}

#[test]
fn an_admission_closed_as_aborted_gives_its_run_back_to_the_budget() {
    use airlock::store::{Fleet, StoreConf, StoreError};
    let pg = Postgres::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conf = StoreConf {
            conninfo: airlock::store::conf::parse_conninfo(&pg.conninfo()).unwrap(),
            host_id: "h1".into(),
            password_credential: None,
        };
        let f = Fleet::open(
            &conf,
            None,
            tokio::sync::mpsc::unbounded_channel().0,
            no_pending(),
            airlock::store::signing::HostKey::generate().unwrap().0,
        )
        .await
        .unwrap();
        f.admit("tess", "r1", Some(2)).await.unwrap();
        f.admit("tess", "r2", Some(2)).await.unwrap();
        assert!(matches!(
            f.admit("tess", "r3", Some(2)).await,
            Err(StoreError::Refused(m)) if m.contains("runs_per_week")
        ));
        // r1 never started: aborted, and its run is the budget's again (once: a second
        // abort of it gives back nothing more).
        f.abandon("r1").await.unwrap();
        f.abandon("r1").await.unwrap();
        f.admit("tess", "r4", Some(2)).await.unwrap();
        assert!(f.admit("tess", "r5", Some(2)).await.is_err());
    });
    assert_eq!(
        pg.psql("SELECT string_agg(run || ':' || state, ',' ORDER BY run) FROM airlock_runs"),
        "r1:aborted,r2:active,r4:active"
    );
}

#[test]
fn rows_rewritten_with_a_valid_chain_but_not_the_hosts_signature_fail_verify() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, "");
    let mut b = Node::new(&pg, "node-b", base, None, "");
    a.start();
    b.start();
    assert_eq!(outcome(&a.launch("tess", &["/bin/true"])), Ok(0));
    assert_eq!(outcome(&b.launch("max", &["/bin/true"])), Ok(0));
    assert_eq!(outcome(&b.launch("max", &["/bin/true"])), Ok(0));
    for (n, h) in [(&a, "node-a"), (&b, "node-b")] {
        let caught_up = poll(10, || {
            let (local, rows) = mirrored(&pg, n, h);
            (local > 0 && local == rows).then_some(())
        });
        assert!(caught_up.is_some(), "{h}: {:?}", mirrored(&pg, n, h));
    }
    stop(&mut a);
    stop(&mut b);
    // Each host's key: made at its first start, 0600, registered in the store.
    let key = a.root.join("state/fleet/host-key.pk8");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(
        pg.psql(
            "SELECT count(DISTINCT public_key) FROM airlock_hosts WHERE public_key IS NOT NULL"
        ),
        "2"
    );
    let (code, out) = verify_fleet(&a);
    assert_eq!(code, 0, "{out}");
    // node-b's whole chain (a valid hash chain, its lines carry no host) written as
    // node-a's, and node-a's report moved to match: only the signatures give it away.
    pg.psql("DELETE FROM airlock_ledger WHERE host_id = 'node-a'");
    pg.psql("INSERT INTO airlock_ledger (host_id, seq, hash, line, sig) SELECT 'node-a', seq, hash, line, sig FROM airlock_ledger WHERE host_id = 'node-b'");
    pg.psql("UPDATE airlock_hosts a SET mirrored_seq = b.mirrored_seq, mirrored_head = b.mirrored_head FROM airlock_hosts b WHERE a.host_id = 'node-a' AND b.host_id = 'node-b'");
    let (code, out) = verify_fleet(&a);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("host node-a: BAD SIGNATURE at record 1"),
        "{out}"
    );
    assert!(
        out.contains("host node-b: ") && out.contains("intact"),
        "{out}"
    );
    // A row with its signature stripped is named too.
    pg.psql("UPDATE airlock_ledger SET sig = NULL WHERE host_id = 'node-b' AND seq = 2");
    let (_, out) = verify_fleet(&a);
    assert!(out.contains("host node-b: UNSIGNED at record 2"), "{out}");
    // A host_id registered with another key is refused at start, naming why.
    std::fs::remove_file(&key).unwrap();
    let (code, err) = a.start_refused();
    assert_ne!(code, 0);
    assert!(
        err.contains("node-a") && err.contains("another signing key"),
        "{err}"
    );
}

/// The decision steps of `host`'s mirrored ledger about instance `name`, in order.
fn mirrored_steps(pg: &Postgres, host: &str, name: &str) -> Vec<String> {
    pg.psql(&format!(
        "SELECT line FROM airlock_ledger WHERE host_id = '{host}' ORDER BY seq"
    ))
    .lines()
    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    .filter(|v| v["event"]["kind"] == "decision" && v["event"]["name"] == name)
    .filter_map(|v| v["event"]["step"].as_str().map(String::from))
    .collect()
}

/// Issue 45: a decision's trail reaches the fleet store with the ledger's mirror, and the
/// frozen revision an approval pins is the fleet's: another host runs that revision, not
/// its own roles/ as they are now.
#[test]
fn a_decisions_trail_and_frozen_revision_reach_every_host() {
    let pg = Postgres::start();
    let base = uid_base();
    let mut a = Node::new(&pg, "node-a", base, None, HIRE_EXTRA);
    let mut b = Node::new(&pg, "node-b", base, None, HIRE_EXTRA);
    a.start();
    b.start();
    // A person's hire on A: a decision raised and approved at once (root is an owner).
    let r = a.one(json!({"v":1,"op":"hire","instance":"nova","role":HIRED_ROLE}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["decision"]["state"], "approved", "{r}");
    let sha = r["data"]["role_sha256"].as_str().unwrap().to_string();
    let steps = poll(15, || {
        let s = mirrored_steps(&pg, "node-a", "nova");
        (s.len() >= 3).then_some(s)
    });
    assert_eq!(
        steps,
        Some(vec!["raise".into(), "approve".into(), "hire".into()]),
        "the decision's records in the store"
    );
    // B's template of the role differs from what A froze; B runs A's frozen revision.
    let role = b.root.join("roles").join(HIRED_ROLE).join("role.yaml");
    let text = std::fs::read_to_string(&role).unwrap();
    std::fs::write(&role, format!("{text}# edited on node-b after the hire\n")).unwrap();
    b.without_github(); // reloads B with its edited template
    let r = b.launch_as(HIRED_ROLE, "nova", &["/bin/true"]);
    assert_eq!(outcome(&r), Ok(0), "{r:?}");
    let run = run_of(&r);
    let (code, out) = show(&b, &run, true);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{code}: {out}"));
    assert_eq!(
        v["run"]["role_sha256"].as_str(),
        Some(sha.as_str()),
        "{out}"
    );
    assert_eq!(v["run"]["rev"], 1, "{out}");
    // A fire decided on A: its steps reach the store too, and verify-ledger --fleet holds.
    let r = a.one(json!({"v":1,"op":"fire","instance":"nova"}));
    assert_eq!(r["ok"], true, "{r}");
    let steps = poll(15, || {
        let s = mirrored_steps(&pg, "node-a", "nova");
        (s.len() >= 6).then_some(s)
    });
    assert_eq!(
        steps.as_deref().map(|s| &s[3..]),
        Some(&["raise".to_string(), "approve".into(), "fire".into()][..])
    );
    let (code, out) = verify_fleet(&b);
    assert_eq!(code, 0, "{out}");
}
