//! Decisions for real (seed 003): airlockd started with its own config, state and socket;
//! hires, fires and changes raised by people (and by a chief's run through its gateway),
//! approved against their digest by the right person, frozen role revisions, expiry, and
//! every step in the ledger's hash chain.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use airlock::supervisor::ledger;
use serde_json::{json, Value};

mod common;
use common::poll;

static NEXT: AtomicU32 = AtomicU32::new(0);

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cfg: PathBuf,
    state: PathBuf,
    sock: PathBuf,
    roles: PathBuf,
    /// First of ten uids of this test: +0..+1 instances, +2..+6 the uid range, +7..+9 peers.
    base: u32,
    child: Option<Child>,
}

impl Env {
    fn new(extra: &str) -> Env {
        common::require_root();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let roles = root.join("roles");
        copy_dir(&repo.join("roles"), &roles);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        // 1880060000..1880069999: apart from every other suite's uids.
        let base = 1_880_060_000 + (std::process::id() % 50) * 200 + (n % 20) * 10;
        let cfg = root.join("airlock.yaml");
        std::fs::write(
            &cfg,
            format!(
                "roles: [{roles}]\npolicies: {policies}\nstate_dir: state\nsocket: {root}/airlockd.sock\nuid_range: {a}-{b}\ngrace_seconds: 2\nlimits: {{max_procs: 64}}\njournal_socket: {root}/no-journald.socket\n{extra}instances:\n  tess: {{role: code, uid: {base}}}\n",
                roles = roles.display(),
                policies = repo.join("policies").display(),
                root = root.display(),
                a = base + 2,
                b = base + 6,
            ),
        )
        .unwrap();
        Env {
            state: root.join("state"),
            sock: root.join("airlockd.sock"),
            _dir: dir,
            root,
            cfg,
            roles,
            base,
            child: None,
        }
    }

    fn start(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlockd"))
            .arg("--config")
            .arg(&self.cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.root.join("airlockd.err")).unwrap())
            .spawn()
            .unwrap();
        let ready = poll(30, || {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("airlockd exited early ({st}):\n{}", self.stderr());
            }
            let r = request(&self.sock, &json!({"v":1,"op":"status"})).ok()?;
            (r.first()?["ok"] == true).then_some(())
        });
        assert!(
            ready.is_some(),
            "airlockd never became ready:\n{}",
            self.stderr()
        );
        self.child = Some(child);
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.root.join("airlockd.err")).unwrap_or_default()
    }

    fn one(&self, v: Value) -> Value {
        let mut r = request(&self.sock, &v).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0)
    }

    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlockctl"))
            .arg("--config")
            .arg(&self.cfg)
            .args(args)
            .output()
            .unwrap()
    }

    fn ctl_json(&self, args: &[&str]) -> Value {
        let o = self.ctl(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn ledger(&self) -> PathBuf {
        self.state.join("ledger.jsonl")
    }

    fn steps(&self) -> Vec<ledger::DecisionStep> {
        ledger::records(&self.ledger())
            .unwrap()
            .into_iter()
            .filter_map(|r| match r.event {
                ledger::LedgerEvent::Decision(s) => Some(s),
                _ => None,
            })
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for u in self.base..self.base + 7 {
            for pid in airlock::supervisor::process::pids_of_uid(u) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

fn request(sock: &Path, v: &Value) -> std::io::Result<Vec<Value>> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    s.write_all(format!("{v}\n").as_bytes())?;
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        out.push(serde_json::from_str(&line?).map_err(std::io::Error::other)?);
    }
    Ok(out)
}

/// A request from a thread whose credentials are another uid's and groups' (they are
/// per-thread in the kernel), so airlockd sees that peer.
fn request_as(sock: &Path, uid: u32, groups: &[u32], v: Value) -> Value {
    let sock = sock.to_path_buf();
    let groups = groups.to_vec();
    std::thread::spawn(move || {
        // SAFETY: raw credential syscalls on this thread only; it never runs as root again.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()),
                0
            );
            assert_eq!(libc::syscall(libc::SYS_setresgid, uid, uid, uid), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
        }
        request(&sock, &v).unwrap().remove(0)
    })
    .join()
    .unwrap()
}

fn stdout_of(r: &[Value]) -> String {
    r.iter()
        .filter(|f| f["data"]["frame"] == "output" && f["data"]["stream"] == "stdout")
        .map(|f| f["data"]["data"].as_str().unwrap().to_string())
        .collect()
}

/// A person's hire is a decision raised and approved at once; the instance runs its frozen
/// revision; an edited template leaves it there and `instances` says so; a change to the
/// template is a decision of its own; every step is on the ledger, which verifies, and an
/// edited decision record fails it.
#[test]
fn a_persons_hire_freezes_the_role_and_every_step_is_on_the_ledger() {
    let mut env = Env::new("");
    env.start();
    let r = env.one(
        json!({"v":1,"op":"hire","instance":"hi","role":"hello","decision":{"reason":"smoke"}}),
    );
    assert_eq!(r["ok"], true, "{r}");
    let d = &r["data"]["decision"];
    assert_eq!(d["state"], "approved", "{r}");
    assert_eq!(d["op"], "hire");
    assert_eq!(d["raised_by"], "uid 0");
    assert_eq!(d["resolved_by"], "uid 0");
    assert_eq!(d["digest"].as_str().unwrap().len(), 64);
    let mut keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "credential_lines",
            "digest",
            "expires_at",
            "flagged",
            "id",
            "name",
            "op",
            "raised_by",
            "reason",
            "resolved_by",
            "role",
            "state"
        ]
    );
    let sha = r["data"]["role_sha256"].as_str().unwrap().to_string();
    assert_eq!(r["data"]["rev"], 1);

    // The template changes after the hire: the instance runs its frozen copy.
    let wf = env.roles.join("hello/workflow.sh");
    let text = std::fs::read_to_string(&wf).unwrap();
    std::fs::write(
        &wf,
        text.replace("echo \"hello: done\"", "echo \"EDITED TEMPLATE\""),
    )
    .unwrap();
    assert_eq!(env.one(json!({"v":1,"op":"reload"}))["ok"], true);
    let list = env.ctl_json(&["instances", "--json"]);
    let hi = list["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["instance"] == "hi")
        .unwrap()
        .clone();
    assert_eq!(hi["role_sha256"], sha.as_str(), "{hi}");
    assert_eq!(hi["rev"], 1);
    assert_eq!(hi["template_changed"], true, "{hi}");
    let diff = env.ctl(&["role", "diff", "hi"]);
    let diff_text = String::from_utf8_lossy(&diff.stdout);
    assert!(
        diff_text.contains("+echo \"EDITED TEMPLATE\""),
        "{diff_text}"
    );

    let r = request(
        &env.sock,
        &json!({"v":1,"op":"launch","role":"hello","instance":"hi","command":[],"wait":true}),
    )
    .unwrap();
    let out = stdout_of(&r);
    assert!(
        out.ends_with("hello: done\n") && !out.contains("EDITED"),
        "{out}\n{r:?}"
    );
    let run = r[0]["data"]["run"].as_str().unwrap().to_string();
    let opened = ledger::records(&env.ledger())
        .unwrap()
        .into_iter()
        .find_map(|x| match x.event {
            ledger::LedgerEvent::RunOpened(o) if o.run == run => Some(o),
            _ => None,
        });
    let opened = opened.unwrap();
    assert_eq!(
        (opened.role_sha256.as_deref(), opened.rev),
        (Some(sha.as_str()), Some(1))
    );
    let show = env.ctl(&["show", &run]);
    assert!(
        String::from_utf8_lossy(&show.stdout).contains(&format!("1 ({sha})")),
        "{show:?}"
    );

    // Moving it to the template is a decision too: revision 2, and its next run has it.
    let c = env.ctl(&["change", "hi", "--to-template"]);
    assert!(c.status.success(), "{c:?}");
    let r = request(
        &env.sock,
        &json!({"v":1,"op":"launch","role":"hello","instance":"hi","command":[],"wait":true}),
    )
    .unwrap();
    assert!(stdout_of(&r).contains("EDITED TEMPLATE"), "{r:?}");
    let list = env.ctl_json(&["instances", "--json"]);
    let hi = list["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["instance"] == "hi")
        .unwrap()
        .clone();
    assert_eq!(
        (hi["rev"].as_u64(), hi["template_changed"].as_bool()),
        (Some(2), Some(false)),
        "{hi}"
    );

    // A person's fire is a decision too.
    let f = env.ctl(&["fire", "hi"]);
    assert!(f.status.success(), "{f:?}");
    let steps: Vec<(String, String)> = env.steps().into_iter().map(|s| (s.step, s.op)).collect();
    let want: Vec<(String, String)> = [
        ("raise", "hire"),
        ("approve", "hire"),
        ("hire", "hire"),
        ("raise", "change"),
        ("approve", "change"),
        ("change", "change"),
        ("raise", "fire"),
        ("approve", "fire"),
        ("fire", "fire"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(steps, want);
    // A fired instance's name is retired: hiring it again is refused, naming why, and
    // raises nothing (the counts below and the trail stay as they are).
    let again = env.ctl(&["hire", "hi", "--role", "hello"]);
    assert!(!again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("names are never reused"),
        "{again:?}"
    );
    assert_eq!(env.steps().len(), want.len());
    let all = env.ctl_json(&["decisions", "--all", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");
    assert!(env
        .ctl_json(&["decisions", "--json"])
        .as_array()
        .unwrap()
        .is_empty());

    // The chain holds; an edited decision record breaks it.
    let v = env.ctl(&["verify-ledger"]);
    assert!(v.status.success(), "{v:?}");
    let text = std::fs::read_to_string(env.ledger()).unwrap();
    let edited = text.replacen("\"step\":\"approve\"", "\"step\":\"deny\"", 1);
    assert_ne!(edited, text);
    let copy = env.root.join("edited.jsonl");
    std::fs::write(&copy, edited).unwrap();
    let v = env.ctl(&["verify-ledger", "--ledger", copy.to_str().unwrap()]);
    assert!(!v.status.success(), "{v:?}");
}

/// An admin who is not an owner raises a hire with credential lines: it waits. An approver
/// who is not an owner is refused, a short or wrong digest is refused, an owner approves,
/// a resolved decision is never resolved again, and `expire_after` expires what waits.
#[test]
fn approvers_owners_digests_and_expiry() {
    let probe = Env::new("");
    let (person, admin, approvers) = (probe.base + 7, probe.base + 8, probe.base + 9);
    drop(probe);
    let mut env = Env::new(&format!(
        "admin_group: {admin}\nsocket_group: {admin}\ndecisions: {{approvers: {approvers}, owners: airlock-owner-none, expire_after: 3s}}\nproviders:\n  claude: {{url: \"http://127.0.0.1:9\"}}\nmcp_connectors:\n  board: {{url: \"http://127.0.0.1:9/mcp\"}}\n  github: {{url: \"http://127.0.0.1:9/mcp\"}}\n"
    ));
    // Drop the GitHub App from the code role's needs: an inline copy is not needed, the
    // copy of the roles is ours to edit.
    let f = env.roles.join("code/role.yaml");
    let t = std::fs::read_to_string(&f).unwrap();
    std::fs::write(&f, t.replace("key_store: airlock", "key_store: github")).unwrap();
    env.start();
    let groups = [admin, approvers];
    let r = request_as(
        &env.sock,
        person,
        &groups,
        json!({"v":1,"op":"hire","instance":"nova","role":"code"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["state"], "pending", "{r}");
    let d = r["data"]["decision"].clone();
    let (id, digest) = (
        d["id"].as_str().unwrap().to_string(),
        d["digest"].as_str().unwrap().to_string(),
    );
    assert!(!d["credential_lines"].as_array().unwrap().is_empty(), "{d}");
    let pending = env.ctl_json(&["decisions", "--json"]);
    assert_eq!(pending[0]["id"], id.as_str(), "{pending}");
    assert_eq!(pending[0]["state"], "pending");

    let approve = |who: u32, digest: &str| {
        request_as(
            &env.sock,
            who,
            &groups,
            json!({"v":1,"op":"approve","decision":{"id": id, "digest": digest}}),
        )
    };
    let r = approve(person, &digest);
    assert_eq!(r["error"]["code"], "refused", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only an owner"),
        "{r}"
    );
    let short = env.ctl(&["approve", &id, "--digest", &digest[..12]]);
    assert!(!short.status.success());
    assert!(
        String::from_utf8_lossy(&short.stderr).contains("64 hex"),
        "{short:?}"
    );
    let wrong = env.ctl(&["approve", &id, "--digest", &"0".repeat(64)]);
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("current digest"),
        "{wrong:?}"
    );
    let ok = env.ctl(&["approve", &id, "--digest", &digest]);
    assert!(ok.status.success(), "{ok:?}");
    let again = env.ctl(&["approve", &id, "--digest", &digest]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("approved already"),
        "{again:?}"
    );
    let shown = env.ctl_json(&["decision", "show", &id, "--json"]);
    assert_eq!(
        (shown["state"].as_str(), shown["resolved_by"].as_str()),
        (Some("approved"), Some("uid 0"))
    );
    assert!(shown["role_files"]["role.yaml"]
        .as_str()
        .unwrap()
        .contains("role: code"));

    // A name in use is refused, naming what.
    let r = request_as(
        &env.sock,
        person,
        &groups,
        json!({"v":1,"op":"hire","instance":"nova","role":"code"}),
    );
    assert!(
        r["error"]["message"].as_str().unwrap().contains("taken"),
        "{r}"
    );

    // What waits expires.
    let r = request_as(
        &env.sock,
        person,
        &groups,
        json!({"v":1,"op":"hire","instance":"vega","role":"code"}),
    );
    let late = r["data"]["decision"]["id"].as_str().unwrap().to_string();
    let late_digest = r["data"]["decision"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    std::thread::sleep(Duration::from_secs(4));
    let all = env.ctl_json(&["decisions", "--all", "--json"]);
    let v = all
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == late.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        (v["state"].as_str(), v["resolved_by"].as_str()),
        (Some("expired"), Some("airlockd")),
        "{v}"
    );
    let r = env.ctl(&["approve", &late, "--digest", &late_digest]);
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("expired"),
        "{r:?}"
    );
    let steps: Vec<String> = env.steps().into_iter().map(|s| s.step).collect();
    assert_eq!(steps, ["raise", "approve", "hire", "raise", "expire"]);
    assert!(env.ctl(&["verify-ledger"]).status.success());
}

/// A chief's run (a `-- CMD` agent speaking MCP to its gateway) asks for a hire of an
/// inline role with one grant above its own: pending, that grant flagged; an approver who
/// is not an owner and a wrong digest are refused, an owner approves, the new instance's
/// run records its frozen revision. An invalid inline role is refused naming the key; a
/// non-chief's `hire_request` is refused whatever it asks.
#[test]
fn a_chief_asks_and_a_person_decides() {
    let probe = Env::new("");
    let (person, admin, approvers) = (probe.base + 7, probe.base + 8, probe.base + 9);
    drop(probe);
    let mut env = Env::new(&format!(
        "admin_group: {admin}\nsocket_group: {admin}\ndecisions: {{approvers: {approvers}}}\nproviders:\n  claude: {{url: \"http://127.0.0.1:9\"}}\nmcp_connectors:\n  board: {{url: \"http://127.0.0.1:9/mcp\"}}\n  github: {{url: \"http://127.0.0.1:9/mcp\"}}\n"
    ));
    let f = env.roles.join("code/role.yaml");
    let t = std::fs::read_to_string(&f).unwrap();
    std::fs::write(&f, t.replace("key_store: airlock", "key_store: github")).unwrap();
    env.start();
    let r = env.one(json!({"v":1,"op":"hire","instance":"boss","role":"chief"}));
    assert_eq!(r["ok"], true, "{r}");

    let helper = "schema: 1\nrole: helper\nlevel: L1\nbrief: brief.md\nkind: workflow\nwrites: {}\ntools: {}\nbudget: {runs_per_week: 500, minutes_per_run: 1, github_writes_per_run: 0, spend_usd: 0}\ndigest: none\nfloors: [never writes outside its workspace]\n";
    let argv = common::mcp_agent(&json!([
        {"list": "tools"},
        {"call": "hire_request", "args": {"name": "nova", "reason": "more hands",
            "role": {"inline": {"role_yaml": helper, "brief": "# Helper\nHelps.\n"}}}},
        {"call": "hire_request", "args": {"name": "vega", "reason": "x",
            "role": {"inline": {"role_yaml": format!("{helper}colour: blue\n"), "brief": "b"}}}},
        // The helper's runs use no credential: naming one is refused, naming the entry.
        {"call": "hire_request", "args": {"name": "lyra", "reason": "x", "credentials": ["github"],
            "role": {"inline": {"role_yaml": helper, "brief": "# Helper\nHelps.\n"}}}},
    ]));
    let r = request(
        &env.sock,
        &json!({"v":1,"op":"launch","role":"chief","instance":"boss","command":argv,"wait":true}),
    )
    .unwrap();
    let lines: Vec<Value> = stdout_of(&r)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let tools = common::step(&lines, 0)["tools"].clone();
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "hire_request"),
        "{tools}"
    );
    let asked = common::step(&lines, 1);
    assert_eq!(asked["isError"], false, "{asked}");
    let s = &asked["structured"];
    assert_eq!(s["state"], "pending", "{s}");
    assert_eq!(s["flagged"], json!(["budget.runs_per_week: 500"]), "{s}");
    let (id, digest) = (
        s["decision"].as_str().unwrap().to_string(),
        s["digest"].as_str().unwrap().to_string(),
    );
    let bad = common::step(&lines, 2);
    assert_eq!(bad["isError"], true, "{bad}");
    let text = bad["text"].as_str().unwrap();
    assert!(text.contains("colour") && !text.contains("blue"), "{text}");
    let named = common::step(&lines, 3);
    assert_eq!(named["isError"], true, "{named}");
    let text = named["text"].as_str().unwrap();
    assert!(
        text.contains("credentials[0]") && text.contains("they use: none"),
        "{text}"
    );

    let pending = env.ctl_json(&["decisions", "--json"]);
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    assert_eq!(pending[0]["raised_by"], "instance boss");
    assert_eq!(pending[0]["flagged"], json!(["budget.runs_per_week: 500"]));
    let r = request_as(
        &env.sock,
        person,
        &[admin, approvers],
        json!({"v":1,"op":"approve","decision":{"id": id, "digest": digest}}),
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only an owner"),
        "{r}"
    );
    let wrong = env.ctl(&["approve", &id, "--digest", &"a".repeat(64)]);
    assert!(!wrong.status.success());
    let ok = env.ctl_json(&["approve", &id, "--digest", &digest, "--json"]);
    let sha = ok["role_sha256"].as_str().unwrap().to_string();
    let r = request(&env.sock, &json!({"v":1,"op":"launch","role":"helper","instance":"nova","command":["/usr/bin/python3","-c","print('helping')"],"wait":true})).unwrap();
    assert_eq!(stdout_of(&r), "helping\n", "{r:?}");
    let run = r[0]["data"]["run"].as_str().unwrap().to_string();
    let opened = ledger::records(&env.ledger())
        .unwrap()
        .into_iter()
        .find_map(|x| match x.event {
            ledger::LedgerEvent::RunOpened(o) if o.run == run => Some(o),
            _ => None,
        });
    assert_eq!(opened.unwrap().role_sha256.as_deref(), Some(sha.as_str()));

    // The chief follows up: the state of its request, and a withdrawal of a new one.
    let argv = common::mcp_agent(&json!([
        {"call": "decision_status", "args": {"decision": id}},
        {"call": "hire_request", "args": {"name": "orion", "role": {"template": "hello"}, "reason": "later"}},
        {"call": "withdraw_request", "args": {"decision": "d-3"}},
        {"call": "withdraw_request", "args": {"decision": "d-3"}},
    ]));
    let r = request(
        &env.sock,
        &json!({"v":1,"op":"launch","role":"chief","instance":"boss","command":argv,"wait":true}),
    )
    .unwrap();
    let lines: Vec<Value> = stdout_of(&r)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        common::step(&lines, 0)["structured"]["state"],
        "approved",
        "{lines:?}"
    );
    assert_eq!(
        common::step(&lines, 1)["structured"]["decision"],
        "d-3",
        "{lines:?}"
    );
    assert_eq!(
        common::step(&lines, 2)["structured"]["state"],
        "withdrawn",
        "{lines:?}"
    );
    let again = common::step(&lines, 3);
    assert_eq!(again["isError"], true, "{again}");
    assert!(
        again["text"]
            .as_str()
            .unwrap()
            .contains("withdrawn already"),
        "{again}"
    );
    let all = env.ctl_json(&["decisions", "--all", "--json"]);
    let orion = all
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "orion")
        .unwrap()
        .clone();
    assert_eq!(
        (orion["state"].as_str(), orion["resolved_by"].as_str()),
        (Some("withdrawn"), Some("instance boss")),
        "{orion}"
    );

    // tess (role code) is no chief: its hire_request is refused, and no decision is raised.
    let argv = common::mcp_agent(&json!([
        {"call": "hire_request", "args": {"name": "rex", "role": {"template": "hello"}, "reason": "x"}},
    ]));
    let r = request(
        &env.sock,
        &json!({"v":1,"op":"launch","role":"code","instance":"tess","command":argv,"wait":true}),
    )
    .unwrap();
    let lines: Vec<Value> = stdout_of(&r)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let refused = common::step(&lines, 0);
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused["text"].as_str().unwrap().contains("hire"),
        "{refused}"
    );
    assert_eq!(
        env.ctl_json(&["decisions", "--all", "--json"])
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(env.ctl(&["verify-ledger"]).status.success());
}

/// Issue 45: `launch --standalone` of a hired instance runs its frozen revision, as airlockd
/// does, and records it; never `roles/` as it is now.
#[test]
fn a_standalone_launch_runs_the_instances_frozen_revision() {
    let mut env = Env::new("");
    env.start();
    let r = env.one(json!({"v":1,"op":"hire","instance":"hi","role":"hello"}));
    assert_eq!(r["ok"], true, "{r}");
    let sha = r["data"]["role_sha256"].as_str().unwrap().to_string();
    let wf = env.roles.join("hello/workflow.sh");
    let text = std::fs::read_to_string(&wf).unwrap();
    std::fs::write(
        &wf,
        text.replace("echo \"hello: done\"", "echo \"EDITED TEMPLATE\""),
    )
    .unwrap();
    // No daemon: the launch supervises the run itself.
    if let Some(mut c) = env.child.take() {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let o = env.ctl(&[
        "launch",
        "hello",
        "--instance",
        "hi",
        "--standalone",
        "--wait",
    ]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && out.ends_with("hello: done\n") && !out.contains("EDITED"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let opened = ledger::records(&env.ledger())
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|x| match x.event {
            ledger::LedgerEvent::RunOpened(o) if o.instance == "hi" => Some(o),
            _ => None,
        })
        .expect("the standalone run's opening record");
    assert_eq!(
        (opened.role_sha256.as_deref(), opened.rev),
        (Some(sha.as_str()), Some(1))
    );
    // A launch naming another role than the one it was hired for is refused.
    let o = env.ctl(&[
        "launch",
        "code",
        "--instance",
        "hi",
        "--standalone",
        "--wait",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("hired for role hello"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Issue 45: a change decision that only narrows reaches the instance's live run at its next
/// gateway call: a bash prefix allowed at the run's first call is refused at its second,
/// once the change removing it is approved between the two; `show` says so.
#[test]
fn a_narrowing_change_reaches_a_live_run_at_its_next_call() {
    let mut env = Env::new("providers:\n  claude: {url: \"http://127.0.0.1:9\"}\nmcp_connectors:\n  board: {url: \"http://127.0.0.1:9/mcp\"}\n  github: {url: \"http://127.0.0.1:9/mcp\"}\n");
    let f = env.roles.join("code/role.yaml");
    let t = std::fs::read_to_string(&f).unwrap();
    let t = t
        .replace("key_store: airlock", "key_store: github")
        .replace(
            "  clone:\n    - example-org/example-repo\n",
            "  clone: []\n",
        )
        .replace("  bash:\n", "  bash:\n    - id\n    - uname\n");
    std::fs::write(&f, &t).unwrap();
    env.start();
    let ws = env.root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The agent: `id -u`, then it says so and waits for the word to go on, then `id -u`.
    let argv = common::mcp_agent(&json!([
        {"call": "bash", "args": {"command": "id -u"}},
        {"js": "fs.writeFileSync(process.cwd() + '/first-done', ''); while (!fs.existsSync(process.cwd() + '/go')) { await new Promise((r) => setTimeout(r, 100)); } return 1;"},
        {"call": "bash", "args": {"command": "id -u"}},
    ]));
    let sock = env.sock.clone();
    let wsd = ws.display().to_string();
    let agent = std::thread::spawn(move || {
        request(
            &sock,
            &json!({"v":1,"op":"launch","role":"code","instance":"tess","workspace":wsd,"command":argv,"wait":true}),
        )
        .unwrap()
    });
    let first = poll(60, || ws.join("first-done").exists().then_some(()));
    if first.is_none() {
        std::fs::write(ws.join("go"), "").unwrap();
        panic!("the agent never made its first call: {:?}", agent.join());
    }
    // The template drops `id`: a change that only narrows, approved while the run lives.
    std::fs::write(&f, t.replace("    - id\n", "")).unwrap();
    assert_eq!(env.one(json!({"v":1,"op":"reload"}))["ok"], true);
    let r = env.one(json!({"v":1,"op":"change","instance":"tess"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["decision"]["state"], "approved", "{r}");
    assert_eq!(r["data"]["rev"], 2, "{r}");
    let narrowed = r["data"]["narrowed_runs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(narrowed.len(), 1, "{r}");
    let run = narrowed[0].as_str().unwrap().to_string();
    let show = env.ctl(&["show", &run]);
    let text = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(text.contains("(narrowed live to rev 2)"), "{text}");
    std::fs::write(ws.join("go"), "").unwrap();
    let frames = agent.join().unwrap();
    let lines: Vec<Value> = stdout_of(&frames)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let before = common::step(&lines, 0);
    assert_eq!(before["isError"], false, "{before}");
    let after = common::step(&lines, 2);
    assert_eq!(after["isError"], true, "{after}");
    // Once the run has ended, show tells where the instance is now.
    let show = env.ctl(&["show", &run]);
    let text = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(text.contains("(instance now at rev 2)"), "{text}");
}
