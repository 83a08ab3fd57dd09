//! The GitHub route, for real: standalone runs of a workflow role whose command (on the
//! command side, where programs may start) drives `curl`, `gh api` and `git` at
//! `https://api.github.com` and `https://github.com` through the run's gateway, in front
//! of a stand-in GitHub (tests/agents/standin_github.py) that verifies the App JWT, mints
//! installation tokens, serves git over smart HTTP with the real `git http-backend`, and
//! logs every request.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::github::{StandInGithub, MCP_AGENT};
use common::*;
use serde_json::Value;

/// A workflow role (its command runs on the command side) whose GitHub identity Airlock
/// holds: it may comment on and label issues, and open, comment on and review pull
/// requests in example-org/example-repo (L2 by its autonomy policy) and
/// example-org/scratch (no policy: L1).
fn role(writes: u64) -> String {
    role_with(writes, "")
}

fn role_with(writes: u64, tail: &str) -> String {
    format!(
        "schema: 1
role: ghprobe
level: L3
brief: brief.md
kind: workflow
identity:
  board_name: airlock:ghprobe
  key_store: airlock
writes:
  repos: [example-org/example-repo, example-org/scratch]
  issues: [comment, label]
  pull_requests: [open, comment, review]
tools: {{}}
budget:
  runs_per_week: 100000
  minutes_per_run: 5
  github_writes_per_run: {writes}
{tail}"
    )
}

fn host(gh: &StandInGithub, writes: u64) -> Host {
    host_with(gh, &role(writes))
}

fn host_with(gh: &StandInGithub, role_text: &str) -> Host {
    let h = Host::new(&[("gina", "ghprobe")], &gh.config());
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), role_text).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    h
}

/// Lines `NAME VALUE` the script printed.
fn results(out: &str) -> std::collections::BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("R "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

const API_SCRIPT: &str = r#"
api=https://api.github.com
R=example-org/example-repo
c() { curl -s -o /dev/null -w "%{http_code}" -H "Authorization: token $GH_TOKEN" "$@"; }
g() { curl -s -H "Authorization: token $GH_TOKEN" "$@" | grep -q '"errors":\[{"message":"Airlock refused' && echo refused || echo passed; }
echo "R read $(c $api/repos/$R)"
echo "R comment $(c -X POST -d '{"body":"hi"}' $api/repos/$R/issues/1/comments)"
echo "R other_repo $(c -X POST -d '{"body":"hi"}' $api/repos/example-org/other/issues/1/comments)"
echo "R close $(c -X PATCH -d '{"state":"closed"}' $api/repos/$R/issues/1)"
echo "R merge $(c -X PUT -d '{}' $api/repos/$R/pulls/2/merge)"
echo "R approve $(c -X POST -d '{"event":"APPROVE"}' $api/repos/$R/pulls/2/reviews)"
echo "R level $(c -X POST -d '{"labels":["x"]}' $api/repos/example-org/scratch/issues/1/labels)"
echo "R unknown $(c -X POST -d '{}' $api/repos/$R/hooks)"
echo "R mutation $(g -X POST -d '{"query":"mutation { addComment(input:{}) { clientMutationId } }"}' $api/graphql)"
echo "R hidden_mutation $(g -X POST -d '{"query":"query { a(x: \"\"\" \" \"\"\") } mutation M { addComment(input:{}) { clientMutationId } }","operationName":"M"}' $api/graphql)"
echo "R graphql_get $(g "$api/graphql?query=mutation%7Bx%7D")"
echo "R method_override $(c -X POST -H 'X-HTTP-Method-Override: DELETE' -d '{"body":"hi"}' $api/repos/$R/issues/1/comments)"
echo "R form_body $(c -X POST -d 'body=hi&_x=1' $api/repos/$R/issues/1/comments)"
echo "R contents_no_branch $(c -X PUT -d '{"message":"m","content":"eA=="}' $api/repos/$R/contents/README.md)"
echo "R contents_default $(c -X PUT -d '{"message":"m","content":"eA==","branch":"main"}' $api/repos/$R/contents/README.md)"
echo "R contents_not_ours $(c -X PUT -d '{"message":"m","content":"eA==","branch":"someone-else"}' $api/repos/$R/contents/README.md)"
echo "R graphql_read $(c -X POST -d '{"query":"{ viewer { login } }"}' $api/graphql)"
echo "R bad_token $(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: token airlock-run-00' $api/repos/$R)"
if gh api repos/$R/issues/1/comments -f body=via-gh --silent; then echo "R gh_write ok"; else echo "R gh_write fail"; fi
echo "R gh_read $(gh api repos/$R --jq .default_branch)"
echo "R label $(c -X POST -d '{"labels":["x"]}' $api/repos/$R/issues/1/labels)"
echo "R over_budget $(c -X POST -d '{"body":"hi"}' $api/repos/$R/issues/1/comments)"
echo "R read_after $(c $api/repos/$R)"
echo "R env_has_real $(env | grep -c ghs_standin)"
"#;

#[test]
fn api_writes_are_checked_counted_journaled_and_the_token_revoked_at_run_end() {
    require_journald();
    let gh = StandInGithub::start();
    let h = host(&gh, 3);
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", API_SCRIPT])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let run = run_id_of(&o);
    let r = results(&out);
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    assert_eq!(get("read"), "200", "{out}");
    assert_eq!(
        get("comment"),
        "201",
        "an allowed write is forwarded: {out}"
    );
    for refused in [
        "other_repo",
        "close",
        "merge",
        "approve",
        "level",
        "unknown",
        "method_override",
        "form_body",
        "contents_no_branch",
        "contents_default",
        "contents_not_ours",
    ] {
        assert_eq!(get(refused), "403", "{refused}: {out}");
    }
    // GraphQL refusals are GraphQL's own answer: errors naming the rule.
    for refused in ["mutation", "hidden_mutation", "graphql_get"] {
        assert_eq!(get(refused), "refused", "{refused}: {out}");
    }
    // A GraphQL query is a read: forwarded (the stand-in executes it), and it is the only
    // GraphQL request GitHub saw.
    assert_eq!(get("graphql_read"), "200", "{out}");
    let graphql: Vec<Value> = gh
        .requests()
        .into_iter()
        .filter(|q| {
            q["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/graphql"))
        })
        .collect();
    assert_eq!(graphql.len(), 1, "{graphql:?}");
    assert_eq!(get("bad_token"), "401");
    assert_eq!(
        get("gh_write"),
        "ok",
        "gh api writes through the gateway: {out}\n{}",
        stderr(&o)
    );
    assert_eq!(get("gh_read"), "main");
    assert_eq!(get("label"), "201");
    assert_eq!(
        get("over_budget"),
        "403",
        "the write past the budget is refused"
    );
    assert_eq!(get("read_after"), "200", "reads go on past the budget");
    assert_eq!(get("env_has_real"), "0");

    // What the stand-in saw: one token minted, narrowed; the writes forwarded with it;
    // nothing refused reached it; the DELETE at the run's end.
    let reqs = gh.requests();
    let minted: Vec<&Value> = reqs.iter().filter(|q| q["token"].is_string()).collect();
    assert_eq!(minted.len(), 1, "{reqs:?}");
    let asked = &minted[0]["request"];
    assert_eq!(
        asked["repositories"],
        serde_json::json!(["example-repo", "scratch"])
    );
    assert_eq!(asked["permissions"]["issues"], "write");
    assert_eq!(asked["permissions"]["pull_requests"], "write");
    assert!(asked["permissions"].get("workflows").is_none());
    let token = gh.tokens()[0].clone();
    let writes: Vec<&Value> = reqs
        .iter()
        .filter(|q| q["method"] != "GET" && q["cred"] == "token" && q["deleted"].is_null())
        // Not the GraphQL reads, nor the clones' fetches (git-upload-pack is a POST).
        .filter(|q| q["path"] != "/graphql" && q["git"] != true)
        .collect();
    assert_eq!(writes.len(), 3, "exactly the allowed writes: {writes:?}");
    for w in &writes {
        assert_eq!(
            w["auth"],
            format!("token {token}"),
            "forwarded with the minted token"
        );
        assert!(w["path"]
            .as_str()
            .unwrap()
            .starts_with("/repos/example-org/example-repo/"));
    }
    let deleted: Vec<&Value> = reqs.iter().filter(|q| q["deleted"] == true).collect();
    assert_eq!(
        deleted.len(),
        1,
        "revoked at GitHub at the run's end: {reqs:?}"
    );
    assert_eq!(deleted[0]["auth"], format!("token {token}"));

    // The journal: each write and refusal, with its rule and the running count.
    let ev = events(&run, "github_write", 18);
    let by_action = |a: &str, d: &str| {
        ev.iter()
            .filter(|e| e["AIRLOCK_ACTION"] == a && e["AIRLOCK_DECISION"] == d)
            .count()
    };
    assert_eq!(by_action("issues.comment", "allow"), 2, "{ev:?}");
    assert_eq!(by_action("issues.label", "allow"), 1);
    let rule_of = |a: &str| {
        ev.iter()
            .find(|e| e["AIRLOCK_ACTION"] == a && e["AIRLOCK_DECISION"] == "deny")
            .map(|e| e["AIRLOCK_RULE"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert_eq!(rule_of("issues.close"), "writes.issues");
    assert_eq!(rule_of("pull_requests.merge"), "writes.pull_requests");
    assert_eq!(rule_of("pull_requests.review (approve)"), "classes: merge");
    assert_eq!(rule_of("unknown"), "github: unknown write");
    assert!(rule_of("issues.label").contains("effective L1"), "{ev:?}");
    // Contents writes meet the push rules: a branch named, not the default, the run's own.
    let contents: Vec<&str> = ev
        .iter()
        .filter(|e| e["AIRLOCK_ACTION"] == "contents" && e["AIRLOCK_DECISION"] == "deny")
        .map(|e| e["AIRLOCK_RULE"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        contents,
        ["push: branch", "push: default branch", "push: branch"],
        "{ev:?}"
    );
    let over = ev
        .iter()
        .find(|e| e["AIRLOCK_RULE"] == "budget.github_writes_per_run")
        .expect("the refused write past the budget is journaled");
    assert_eq!(over["AIRLOCK_WRITES"], "3");
    assert!(ev
        .iter()
        .any(|e| e["AIRLOCK_REPO"] == "example-org/other" && e["AIRLOCK_RULE"] == "writes.repos"));

    // The ledger's closing record has the write count; the lease was revoked.
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    let closed: Value = ledger
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["event"].clone())
        .find(|v| v["kind"] == "run_closed" && v["run"] == run.as_str())
        .unwrap_or_else(|| panic!("no closing record in {ledger}"));
    assert_eq!(
        closed["github"],
        serde_json::json!({"writes": 3, "budget": 3})
    );
    // `show` (here without airlockd, from the ledger) says so to the operator.
    let shown = h.show(&run);
    assert!(
        shown.lines().any(|l| l.starts_with("github writes")
            && l.ends_with("3 of 3 (budget.github_writes_per_run)")),
        "{shown}"
    );
    assert!(ledger.contains(&format!("run/{run}/github/1")));
    let revoked: Vec<Value> = ledger
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["event"].clone())
        .filter(|v| v["kind"] == "lease_revoked" && v["lease"] == format!("run/{run}/github/1"))
        .collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["state"], "revoked");

    // The real token is nowhere but airlockd's memory and the stand-in.
    for (what, text) in [
        ("journal", journal_text(&run)),
        ("ledger", ledger),
        ("run output", format!("{out}{}", stderr(&o))),
    ] {
        assert!(!text.contains(&token), "the real token is in the {what}");
    }
    let leases = std::fs::read_to_string(h.state.join(format!("leases/done/{run}.json"))).unwrap();
    assert!(!leases.contains(&token));
}

#[test]
fn a_failed_revocation_is_pending_never_done() {
    require_journald();
    let gh = StandInGithub::start();
    std::fs::write(gh.dir.path().join("fail_delete"), "").unwrap();
    let h = host(&gh, 3);
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run = run_id_of(&o);
    let reqs = gh.requests();
    assert!(
        reqs.iter().any(|q| q["deleted"] == false),
        "the DELETE was tried: {reqs:?}"
    );
    let leases = std::fs::read_to_string(h.state.join(format!("leases/{run}.json")))
        .expect("a lease not revoked stays in the open folder");
    let l: Value = serde_json::from_str(&leases).unwrap();
    assert_eq!(l[0]["state"], "revoke_pending", "{l}");
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    assert!(ledger.contains(r#""state":"revoke-pending""#), "{ledger}");
    assert!(
        !ledger.contains(r#""state":"revoked""#),
        "never reported done: {ledger}"
    );
    assert!(!h.state.join(format!("leases/done/{run}.json")).exists());
}

const GIT_SCRIPT: &str = r#"
set -u
git config --global user.name agent && git config --global user.email agent@example.com
git clone -q https://github.com/example-org/example-repo.git repo && echo "R clone ok" || echo "R clone fail"
cd repo || exit 0
p() { if git push -q "$@" 2>/dev/null; then echo ok; else echo refused; fi; }
echo "more" >> README.md && git commit -qam change
echo "R push_main $(p origin HEAD:main)"
echo "R push_tag $(git tag v1 && p origin v1)"
echo "R push_new $(p origin HEAD:refs/heads/airlock/one)"
echo "more" >> README.md && git commit -qam again
echo "R push_ff $(p origin HEAD:refs/heads/airlock/one)"
git reset -q --hard HEAD~2 && echo "x" > other.txt && git add other.txt && git commit -qm divergent
echo "R push_force $(p -f origin HEAD:refs/heads/airlock/one)"
echo "R push_delete $(p origin :refs/heads/airlock/one)"
git checkout -q -b wf origin/main && echo "x" >> .github/workflows/ci.yml && git commit -qam wf
echo "R push_workflow $(p origin HEAD:refs/heads/airlock/wf)"
git checkout -q -b auth origin/main && mkdir -p src/auth && echo x > src/auth/a.rs && git add -A && git commit -qm auth
echo "R push_level $(p origin HEAD:refs/heads/airlock/auth)"
git fetch -q origin && echo "R fetch ok" || echo "R fetch fail"
"#;

#[test]
fn git_clone_and_push_go_through_the_gateway_with_the_push_checks() {
    require_journald();
    let gh = StandInGithub::start();
    let h = host(&gh, 10);
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", GIT_SCRIPT])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    assert_eq!(get("clone"), "ok", "{out}\n{}", stderr(&o));
    assert_eq!(get("push_main"), "refused", "{out}");
    assert_eq!(get("push_tag"), "refused");
    assert_eq!(get("push_new"), "ok", "{out}");
    assert_eq!(get("push_ff"), "ok", "{out}");
    assert_eq!(get("push_force"), "refused");
    assert_eq!(get("push_delete"), "refused");
    assert_eq!(get("push_workflow"), "refused", "no writes.workflows");
    assert_eq!(get("push_level"), "refused", "src/auth/** is L1 there");
    assert_eq!(get("fetch"), "ok");
    // The stand-in's repository has the two pushes and nothing else.
    let refs = Command::new("git")
        .args(["for-each-ref", "--format=%(refname)"])
        .current_dir(gh.bare())
        .output()
        .unwrap();
    let refs = stdout(&refs);
    assert_eq!(
        refs.lines().collect::<Vec<_>>(),
        ["refs/heads/airlock/one", "refs/heads/main"]
    );
    let run = run_id_of(&o);
    let ev = events(&run, "github_write", 8);
    let rules: Vec<&str> = ev
        .iter()
        .filter(|e| e["AIRLOCK_ACTION"] == "push")
        .map(|e| e["AIRLOCK_RULE"].as_str().unwrap_or(""))
        .collect();
    for rule in [
        "push: default branch",
        "push: tag",
        "push: force",
        "push: delete",
    ] {
        assert!(rules.contains(&rule), "{rule} in {rules:?}");
    }
    let allowed = ev
        .iter()
        .filter(|e| e["AIRLOCK_ACTION"] == "push" && e["AIRLOCK_DECISION"] == "allow")
        .count();
    assert_eq!(allowed, 2, "each push is one write");
}

/// One request to airlockd's control socket: its answer lines.
fn control(sock: &Path, v: &Value) -> Vec<Value> {
    use std::io::{BufRead, BufReader, Write};
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(format!("{v}\n").as_bytes()).unwrap();
    BufReader::new(s)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// Keeps calling GitHub through the grace period of a stop (SIGTERM ignored).
const LOOP_SCRIPT: &str = r#"
trap '' TERM
while true; do
  curl -s -o /dev/null -H "Authorization: token $GH_TOKEN" https://api.github.com/repos/example-org/example-repo
  sleep 0.1
done
"#;

struct Daemon(std::process::Child);

/// airlockd on a host with the stand-in GitHub and the probe role: the host, its socket.
fn daemon(gh: &StandInGithub) -> (Host, PathBuf, tempfile::TempDir, Daemon) {
    daemon_with(gh, "")
}

/// [`daemon`], with `extra` config lines (a fleet store).
fn daemon_with(gh: &StandInGithub, extra: &str) -> (Host, PathBuf, tempfile::TempDir, Daemon) {
    let sockdir = tempfile::tempdir().unwrap();
    let h = Host::new(
        &[("gina", "ghprobe")],
        &format!("{}grace_seconds: 3\n{extra}", gh.config()),
    );
    // The host's own socket (its config names it).
    let sock = h.root.join("airlockd.sock");
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), role(3)).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    let d = Daemon(
        Command::new(env!("CARGO_BIN_EXE_airlockd"))
            .arg("--config")
            .arg(&h.cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let status = serde_json::json!({"v": 1, "op": "status"});
    assert!(
        poll(30, || std::os::unix::net::UnixStream::connect(&sock)
            .ok()
            .map(|_| control(&sock, &status))
            .filter(|r| r.first().is_some_and(|l| l["ok"] == true)))
        .is_some(),
        "airlockd did not start"
    );
    (h, sock, sockdir, d)
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_fire_revokes_the_token_at_github_and_the_run_token_is_refused_at_once() {
    require_journald();
    let gh = StandInGithub::start();
    let (h, sock, _sockdir, _d) = daemon(&gh);
    let launched = control(
        &sock,
        &serde_json::json!({"v": 1, "op": "launch", "role": "ghprobe", "instance": "gina",
            "command": ["/bin/sh", "-c", LOOP_SCRIPT]}),
    );
    let run = launched[0]["data"]["run"]
        .as_str()
        .unwrap_or_else(|| panic!("{launched:?}"))
        .to_string();
    let reads = || {
        gh.requests()
            .iter()
            // The run's own reads, not airlockd's clones at launch.
            .filter(|q| q["method"] == "GET" && q["cred"] == "token" && q["git"] != true)
            .count()
    };
    assert!(
        poll(20, || (reads() >= 2).then_some(())).is_some(),
        "the run never reached GitHub"
    );
    let fired = control(
        &sock,
        &serde_json::json!({"v": 1, "op": "fire", "instance": "gina"}),
    );
    let lease = format!("run/{run}/github/1");
    assert_eq!(fired[0]["ok"], true, "{fired:?}");
    assert_eq!(
        fired[0]["data"]["revoked"],
        serde_json::json!([lease]),
        "{fired:?}"
    );
    assert_eq!(fired[0]["data"]["pending"], serde_json::json!([]));
    // GitHub saw the DELETE with the run's token by the time the fire was answered.
    let token = gh.tokens()[0].clone();
    let deleted = gh
        .requests()
        .iter()
        .any(|q| q["deleted"] == true && q["auth"] == format!("token {token}"));
    assert!(deleted, "{:?}", gh.requests());
    let after = reads();
    // Through the stop's grace period the run keeps calling: the gateway refuses its
    // token, and nothing more reaches GitHub.
    let refused = poll(10, || {
        let ev = events(&run, "github_write", 1);
        ev.iter()
            .any(|e| {
                e["AIRLOCK_RULE"] == "lease"
                    && e["MESSAGE"].as_str().unwrap_or("").contains("revoked")
            })
            .then_some(())
    });
    assert!(refused.is_some(), "no refused call after the fire");
    assert_eq!(reads(), after, "a request reached GitHub after the fire");
    let leases = poll(20, || {
        std::fs::read_to_string(h.state.join(format!("leases/done/{run}.json"))).ok()
    })
    .expect("the lease is done");
    assert!(
        leases.contains("\"revoked\"") && leases.contains("fired"),
        "{leases}"
    );
}

/// Two hosts of a fleet (one PostgreSQL, tests/common/pg.rs): a fire on A reaches B's run
/// of the instance, and B revokes its GitHub token at GitHub within a second.
#[test]
fn a_fire_on_another_host_of_the_fleet_revokes_the_token_at_github_within_a_second() {
    require_journald();
    let gh = StandInGithub::start();
    let pg = common::pg::Postgres::start();
    let store = |id: &str| {
        format!(
            "store: {{postgres: \"{}\", host_id: {id}}}\n",
            pg.conninfo()
        )
    };
    let (_ha, sock_a, _sa, _da) = daemon_with(&gh, &store("gh-a"));
    let (hb, sock_b, _sb, _db) = daemon_with(&gh, &store("gh-b"));
    let launched = control(
        &sock_b,
        &serde_json::json!({"v": 1, "op": "launch", "role": "ghprobe", "instance": "gina",
            "command": ["/bin/sh", "-c", LOOP_SCRIPT]}),
    );
    let run = launched[0]["data"]["run"]
        .as_str()
        .unwrap_or_else(|| panic!("{launched:?}"))
        .to_string();
    assert!(
        poll(20, || gh
            .requests()
            .iter()
            .any(|q| q["method"] == "GET" && q["cred"] == "token")
            .then_some(()))
        .is_some(),
        "the run never reached GitHub"
    );
    let token = gh.tokens()[0].clone();
    let t = Instant::now();
    let fired = control(
        &sock_a,
        &serde_json::json!({"v": 1, "op": "fire", "instance": "gina"}),
    );
    assert_eq!(fired[0]["ok"], true, "{fired:?}");
    let deleted = poll(5, || {
        gh.requests()
            .iter()
            .any(|q| q["deleted"] == true && q["auth"] == format!("token {token}"))
            .then(|| t.elapsed())
    })
    .unwrap_or_else(|| panic!("B never revoked its token: {:?}", gh.requests()));
    eprintln!("fire on A to the DELETE of B's token at GitHub: {deleted:?}");
    assert!(deleted < Duration::from_secs(1), "{deleted:?}");
    let leases = poll(20, || {
        std::fs::read_to_string(hb.state.join(format!("leases/done/{run}.json"))).ok()
    })
    .expect("the lease is done");
    assert!(
        leases.contains("\"revoked\"") && leases.contains("fired on another host"),
        "{leases}"
    );
}

/// Reads what the launch put in the workspace (the agent side reads files; it starts no
/// program).
const CLONE_CHECK: &str = r#"
import json, os
r = "repos/example-repo"
print(json.dumps({
    "readme": open(os.path.join(r, "README.md")).read(),
    "config": open(os.path.join(r, ".git/config")).read(),
    "owner": os.stat(os.path.join(r, "README.md")).st_uid,
    "me": os.getuid(),
}))
"#;

#[test]
fn run_clone_repositories_are_in_the_workspace_at_launch_with_origin_through_the_gateway() {
    require_journald();
    let gh = StandInGithub::start();
    let text = role_with(
        3,
        "run:\n  model: claude-sonnet-4-5\n  clone: [example-org/example-repo]\n",
    )
    .replace("kind: workflow", "kind: agent")
    .replace("tools: {}", "tools: {board: [board_read]}");
    let h = host_with(&gh, &text);
    let o = h
        .launch(
            "ghprobe",
            "gina",
            &[],
            &["/usr/bin/python3", "-c", CLONE_CHECK],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["readme"], "hello\n");
    assert_eq!(v["owner"], v["me"], "the clone is the instance's");
    let config = v["config"].as_str().unwrap();
    assert!(
        config.contains("url = https://github.com/example-org/example-repo.git"),
        "{config}"
    );
    let tokens = gh.tokens();
    assert!(
        !config.contains(&tokens[0]),
        "no token in the clone's config"
    );
    assert!(gh
        .requests()
        .iter()
        .any(|q| q["git"] == true && q["path"].as_str().unwrap_or("").contains("git-upload-pack")));
}

/// Seed 000: `run.clone` absent means `writes.repos`; an empty `run.clone` means none.
#[test]
fn without_run_clone_the_runs_workspace_holds_its_writes_repos_and_with_an_empty_one_none() {
    require_journald();
    let gh = StandInGithub::start();
    let listing =
        "import os; print(sorted(os.listdir('repos')) if os.path.isdir('repos') else 'none')";
    for (tail, want) in [
        (
            "run:\n  model: claude-sonnet-4-5\n",
            "['example-repo', 'scratch']",
        ),
        ("run:\n  model: claude-sonnet-4-5\n  clone: []\n", "none"),
    ] {
        let text = role_with(3, tail)
            .replace("kind: workflow", "kind: agent")
            .replace("tools: {}", "tools: {board: [board_read]}");
        let h = host_with(&gh, &text);
        let o = h
            .launch("ghprobe", "gina", &[], &["/usr/bin/python3", "-c", listing])
            .output()
            .unwrap();
        let out = stdout(&o);
        assert!(o.status.success(), "{out}\n{}", stderr(&o));
        assert_eq!(out.trim(), want, "{tail}");
    }
}

#[test]
fn airlockd_retries_a_pending_revocation_until_github_confirms_it() {
    require_journald();
    let gh = StandInGithub::start();
    std::fs::write(gh.dir.path().join("fail_delete"), "").unwrap();
    let (h, sock, _sockdir, _d) = daemon(&gh);
    let launched = control(
        &sock,
        &serde_json::json!({"v": 1, "op": "launch", "role": "ghprobe", "instance": "gina",
            "command": ["/bin/true"], "wait": true}),
    );
    let run = launched[0]["data"]["run"].as_str().unwrap().to_string();
    let open = h.state.join(format!("leases/{run}.json"));
    let pending = poll(20, || {
        std::fs::read_to_string(&open)
            .ok()
            .filter(|t| t.contains("revoke_pending"))
    });
    assert!(
        pending.is_some(),
        "the failed DELETE leaves the lease pending"
    );
    // GitHub answers again: the next retry revokes it, once.
    std::fs::remove_file(gh.dir.path().join("fail_delete")).unwrap();
    let done = h.state.join(format!("leases/done/{run}.json"));
    let text = poll(40, || std::fs::read_to_string(&done).ok()).expect("revoked on a retry");
    assert!(
        text.contains("\"revoked\"") && text.contains("retried"),
        "{text}"
    );
    assert!(!open.exists());
    assert!(gh.requests().iter().any(|q| q["deleted"] == true));
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    let states: Vec<String> = ledger
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["event"].clone())
        .filter(|v| v["kind"] == "lease_revoked")
        .map(|v| v["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(states, ["revoke-pending", "revoked"]);
}

#[test]
fn the_github_connector_uses_the_run_token_and_the_same_write_checks() {
    require_journald();
    let gh = StandInGithub::start();
    let h = Host::new(&[("gina", "ghprobe")], &gh.config());
    let text = role_with(
        2,
        "run:\n  model: claude-sonnet-4-5\n  mcp:\n    github: {via: airlock}\n",
    )
    .replace("kind: workflow", "kind: agent")
    .replace(
        "tools: {}",
        "tools:\n  board: [board_read]\n  github: [get_issue, add_issue_comment, create_issue, push_files, fork_repository]",
    );
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), text).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    let r = |repo: &str| serde_json::json!({"owner": "example-org", "repo": repo, "issue_number": 1, "body": "x"});
    let calls = serde_json::json!([
        ["get_issue", r("example-repo")],
        ["add_issue_comment", r("example-repo")],
        ["add_issue_comment", r("other")],
        ["create_issue", r("example-repo")],
        ["fork_repository", r("example-repo")],
        ["push_files", {"owner": "example-org", "repo": "example-repo", "branch": "main",
            "files": [{"path": "README.md", "content": "x"}], "message": "m"}],
        ["push_files", {"owner": "example-org", "repo": "example-repo", "branch": "airlock/x",
            "files": [{"path": ".github/workflows/ci.yml", "content": "x"}], "message": "m"}],
        ["add_issue_comment", r("example-repo")],
        ["add_issue_comment", r("example-repo")],
    ]);
    let o = h
        .launch(
            "ghprobe",
            "gina",
            &[],
            &["/usr/bin/python3", "-c", MCP_AGENT, &calls.to_string()],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let lines = agent_lines(&o);
    let refused = |i: usize| step(&lines, i)["error"] == true;
    assert!(!refused(0) && !refused(1), "{lines:?}");
    for (i, rule) in [
        (2, "writes.repos"),
        (3, "writes.issues"),
        (4, "unknown write"),
        (5, "default branch"),
        (6, "writes.workflows"),
        (8, "budget.github_writes_per_run"),
    ] {
        assert!(refused(i), "step {i}: {lines:?}");
        let t = step(&lines, i)["text"].as_str().unwrap();
        assert!(t.contains(rule), "step {i}: {t}");
    }
    assert!(!refused(7), "the second write is within the budget of 2");
    // Upstream: only what passed, each with the run's installation token.
    let token = gh.tokens()[0].clone();
    let seen = gh.mcp_calls();
    let names: Vec<&str> = seen.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["get_issue", "add_issue_comment", "add_issue_comment"]
    );
    assert!(seen.iter().all(|c| c["auth"] == format!("Bearer {token}")));
    let run = run_id_of(&o);
    let ev = events(&run, "github_write", 8);
    assert_eq!(
        ev.iter()
            .filter(|e| e["AIRLOCK_DECISION"] == "allow"
                && e["AIRLOCK_ENDPOINT"] == "mcp add_issue_comment")
            .count(),
        2,
        "{ev:?}"
    );
    assert!(!journal_text(&run).contains(&token));
}

/// Issue 41's second attack, the connector's way: GitHub's MCP `update_issue` given a
/// person's pull request's number (every pull request is an issue; GitHub closes or
/// retitles the pull request) is refused as an edit of a pull request the run did not
/// open; the same tool on an issue goes on.
#[test]
fn the_github_connector_edits_no_pull_request_through_its_issue_number() {
    require_journald();
    let gh = StandInGithub::start();
    let seed = std::process::Command::new("git")
        .args(["branch", "theirs", "main"])
        .current_dir(gh.bare())
        .output()
        .unwrap();
    assert!(seed.status.success(), "{}", stderr(&seed));
    let opened = gh.post(
        "/repos/example-org/example-repo/pulls",
        &gh.mint_token(),
        r#"{"title":"theirs","head":"theirs","base":"main","standin_author":"octo-human"}"#,
    );
    assert_eq!(opened["number"], 2, "{opened}");
    let h = Host::new(&[("gina", "ghprobe")], &gh.config());
    let text = role_with(
        4,
        "run:\n  model: claude-sonnet-4-5\n  mcp:\n    github: {via: airlock}\n",
    )
    .replace("kind: workflow", "kind: agent")
    .replace(
        "issues: [comment, label]",
        "issues: [comment, label, close, edit_body]",
    )
    .replace(
        "pull_requests: [open, comment, review]",
        "pull_requests: [open, review]",
    )
    .replace(
        "tools: {}",
        "tools:\n  board: [board_read]\n  github: [update_issue, add_issue_comment, create_pull_request]",
    );
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), text).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    let edit = |n: u64, k: &str, v: &str| serde_json::json!({"owner": "example-org", "repo": "example-repo", "issue_number": n, k: v});
    let calls = serde_json::json!([
        ["update_issue", edit(2, "state", "closed")],
        ["update_issue", edit(2, "title", "mine-now")],
        ["update_issue", edit(1, "state", "closed")],
        ["add_issue_comment", edit(2, "body", "hi")],
        ["add_issue_comment", edit(1, "body", "hi")],
        ["create_pull_request", {"owner": "example-org", "repo": "example-repo", "title": "t", "head": "theirs", "base": "main"}],
        ["create_pull_request", {"owner": "example-org", "repo": "example-repo", "title": "t", "head": "main", "base": "main"}],
    ]);
    let o = h
        .launch(
            "ghprobe",
            "gina",
            &[],
            &["/usr/bin/python3", "-c", MCP_AGENT, &calls.to_string()],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let lines = agent_lines(&o);
    for i in [0, 1] {
        let s = step(&lines, i);
        assert_eq!(s["error"], true, "step {i}: {lines:?}");
        let t = s["text"].as_str().unwrap_or("");
        assert!(
            t.contains("pull_requests.open") && t.contains("is a pull request"),
            "step {i}: {t}"
        );
    }
    assert_eq!(step(&lines, 2)["error"], false, "{lines:?}");
    // A comment through #2's issue number is the pull request's: this role has none.
    let c = step(&lines, 3);
    assert_eq!(c["error"], true, "{lines:?}");
    assert!(
        c["text"]
            .as_str()
            .unwrap_or("")
            .contains("writes.pull_requests"),
        "{c}"
    );
    assert_eq!(step(&lines, 4)["error"], false, "{lines:?}");
    // A pull request opened through the connector meets createPullRequest's rules: its
    // head a branch this run created, never the default branch.
    for (i, rule) in [(5, "push: branch"), (6, "push: default branch")] {
        let c = step(&lines, i);
        assert_eq!(c["error"], true, "{lines:?}");
        assert!(c["text"].as_str().unwrap_or("").contains(rule), "{c}");
    }
    let seen = gh.mcp_calls();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter().all(|c| c["arguments"]["issue_number"] == 1),
        "{seen:?}"
    );
}

/// Issue 41's second attack: a comment or a label given through a pull request's issue
/// number is the pull request's write. A role with `issues: [comment, label]` and no
/// comment or label of pull requests comments and labels issue #1, and is refused both on
/// #2, a person's pull request (`writes.pull_requests`), which GitHub never hears of.
#[test]
fn a_pull_requests_issue_number_is_written_as_the_pull_request() {
    require_journald();
    let gh = StandInGithub::start();
    let seed = std::process::Command::new("git")
        .args(["branch", "theirs", "main"])
        .current_dir(gh.bare())
        .output()
        .unwrap();
    assert!(seed.status.success(), "{}", stderr(&seed));
    let opened = gh.post(
        "/repos/example-org/example-repo/pulls",
        &gh.mint_token(),
        r#"{"title":"theirs","head":"theirs","base":"main","standin_author":"octo-human"}"#,
    );
    assert_eq!(opened["number"], 2, "{opened}");
    let h = host_with(
        &gh,
        &role_with(5, "").replace(
            "pull_requests: [open, comment, review]",
            "pull_requests: [open]",
        ),
    );
    let script = r#"
api=https://api.github.com/repos/example-org/example-repo
c() { curl -s -w " %{http_code}" -H "Authorization: token $GH_TOKEN" "$@" | tr '\n' ' '; }
echo "R issue_comment $(c -X POST -d '{"body":"hi"}' $api/issues/1/comments)"
echo "R issue_label $(c -X POST -d '{"labels":["bug"]}' $api/issues/1/labels)"
echo "R pull_comment $(c -X POST -d '{"body":"hi"}' $api/issues/2/comments)"
echo "R pull_label $(c -X POST -d '{"labels":["bug"]}' $api/issues/2/labels)"
"#;
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    for k in ["issue_comment", "issue_label"] {
        assert!(get(k).ends_with(" 201"), "{k}: {}\n{out}", get(k));
    }
    for k in ["pull_comment", "pull_label"] {
        assert!(
            get(k).ends_with(" 403") && get(k).contains("writes.pull_requests"),
            "{k}: {}\n{out}",
            get(k)
        );
    }
    assert!(
        !gh.requests()
            .iter()
            .any(|q| q["method"] == "POST"
                && q["path"].as_str().unwrap_or("").contains("/issues/2/")),
        "{:?}",
        gh.requests()
    );
}

const FILTER_SCRIPT: &str = r#"
api=https://api.github.com
R=example-org/example-repo
c() { curl -s -o /dev/null -w "%{http_code}" -H "Authorization: token $GH_TOKEN" "$@"; }
g() { curl -s -H "Authorization: token $GH_TOKEN" "$@" | grep -q '"errors":\[{"message":"Airlock refused' && echo refused || echo passed; }
echo "R gzip_label_rest $(c -X POST -H 'Content-Encoding: gzip' -d '{"body":"labelled gzip"}' $api/repos/$R/issues/1/comments)"
echo "R gzip_label_graphql $(g -X POST -H 'Content-Encoding: gzip' -d '{"query":"{ viewer { login } }"}' $api/graphql)"
echo "R gzip_real $(printf '{"body":"gz"}' | gzip | c -X POST -H 'Content-Encoding: gzip' --data-binary @- $api/repos/$R/issues/1/comments)"
echo "R deflate_get $(c -H 'Content-Encoding: deflate' $api/repos/$R)"
echo "R twins $(c -X POST -d '{"body":"checked","Body":"unchecked"}' $api/repos/$R/issues/1/comments)"
echo "R twins_graphql $(g -X POST -d '{"query":"{ viewer { login } }","Query":"mutation { x }"}' $api/graphql)"
echo "R loose $(c -X POST -H 'Content-Type: text/plain' -d '{ "body" : "h\u0069" }' $api/repos/$R/issues/1/comments)"
curl -s -D echo.h -o echo.b -H "Authorization: token $GH_TOKEN" $api/repos/$R/airlock-echo
echo "R echo_status $(head -1 echo.h | cut -d' ' -f2)"
echo "R echo_leaks $(cat echo.h echo.b | grep -c ghs_standin)"
echo "R echo_marks $(cat echo.h echo.b | grep -o 'withheld by Airlock' | wc -l)"
"#;

#[test]
fn api_bodies_go_on_as_read_and_unencoded_and_echoed_tokens_are_withheld() {
    require_journald();
    let gh = StandInGithub::start();
    let h = host(&gh, 5);
    let ws = h.workspace("ws", h.uids[0]);
    let o = h
        .launch(
            "ghprobe",
            "gina",
            &["--workspace", ws.to_str().unwrap()],
            &[
                "/bin/sh",
                "-c",
                &format!("cd {} && {FILTER_SCRIPT}", ws.display()),
            ],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let run = run_id_of(&o);
    let r = results(&out);
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    for k in ["gzip_label_rest", "gzip_real", "deflate_get", "twins"] {
        assert_eq!(get(k), "403", "{k}: {out}");
    }
    for k in ["gzip_label_graphql", "twins_graphql"] {
        assert_eq!(get(k), "refused", "{k}: {out}");
    }
    assert_eq!(get("loose"), "201", "{out}");
    assert_eq!(get("echo_status"), "200", "{out}");
    assert_eq!(get("echo_leaks"), "0", "the token reached the run: {out}");
    assert_eq!(
        get("echo_marks"),
        "2",
        "withheld in the header and the body: {out}"
    );

    // GitHub saw one write, and the body it saw is the one the gateway read.
    let reqs = gh.requests();
    let writes: Vec<&Value> = reqs
        .iter()
        .filter(|q| q["method"] == "POST" && q["cred"] == "token")
        .collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["body"], r#"{"body":"hi"}"#);
    assert!(writes[0]["content_encoding"].is_null());
    let w = events(&run, "withheld", 1);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0]["AIRLOCK_ROUTE"], "github api");
    assert_eq!(w[0]["AIRLOCK_WITHHELD_HEADERS"], "1");
    assert_eq!(w[0]["AIRLOCK_WITHHELD_BODY"], "1");
    let refused = events(&run, "github_write", 6);
    assert!(refused.len() >= 6, "each refusal journaled: {refused:?}");
}

const ACTIONS_SCRIPT: &str = r#"
api=https://api.github.com
R=example-org/example-repo
c() { curl -s -o /dev/null -w "%{http_code}" -H "Authorization: token $GH_TOKEN" "$@"; }
echo "R runs $(c $api/repos/$R/actions/runs)"
echo "R dispatch $(c -X POST -d '{"ref":"main"}' $api/repos/$R/actions/workflows/ci.yml/dispatches)"
"#;

/// `writes.reads`, `writes.dispatch` and `writes.workflows` are held twice: by the token
/// airlockd mints (its permissions, which GitHub itself holds the run to) and by the
/// gateway, which forwards a workflow dispatch only for a role with `writes.dispatch`.
#[test]
fn writes_reads_dispatch_and_workflows_shape_the_token_and_a_dispatch_needs_writes_dispatch() {
    require_journald();
    for (extra, dispatch, actions, workflows) in [
        ("  reads: [actions]\n", "403", "read", false),
        (
            "  dispatch: true\n  workflows: true\n",
            "201",
            "write",
            true,
        ),
    ] {
        let gh = StandInGithub::start();
        let prs = "  pull_requests: [open, comment, review]\n";
        let text = role(5).replace(prs, &format!("{prs}{extra}"));
        let h = host_with(&gh, &text);
        let o = h
            .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", ACTIONS_SCRIPT])
            .output()
            .unwrap();
        let out = stdout(&o);
        assert!(o.status.success(), "{out}\n{}", stderr(&o));
        let r = results(&out);
        let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
        assert_eq!(get("runs"), "200", "{extra}: {out}");
        assert_eq!(get("dispatch"), dispatch, "{extra}: {out}");

        let reqs = gh.requests();
        let minted: Vec<&Value> = reqs.iter().filter(|q| q["token"].is_string()).collect();
        assert_eq!(minted.len(), 1, "{reqs:?}");
        let perms = &minted[0]["request"]["permissions"];
        assert_eq!(perms["actions"], actions, "{extra}: {perms}");
        assert_eq!(
            perms.get("workflows").is_some(),
            workflows,
            "{extra}: {perms}"
        );
        let dispatched = reqs
            .iter()
            .filter(|q| q["method"] == "POST")
            .filter(|q| {
                q["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/dispatches"))
            })
            .count();
        assert_eq!(dispatched, usize::from(dispatch == "201"), "{reqs:?}");

        let run = run_id_of(&o);
        let ev = events(&run, "github_write", 1);
        let d: Vec<(&str, &str)> = ev
            .iter()
            .filter(|e| e["AIRLOCK_ACTION"] == "dispatch")
            .map(|e| {
                (
                    e["AIRLOCK_DECISION"].as_str().unwrap_or(""),
                    e["AIRLOCK_RULE"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(d.len(), 1, "{ev:?}");
        if dispatch == "403" {
            assert_eq!(d[0], ("deny", "writes.dispatch"), "{ev:?}");
        } else {
            assert_eq!(d[0].0, "allow", "{ev:?}");
        }
    }
}

/// `identity.key_store` other than `airlock` (the role's own App keeps its key elsewhere):
/// Airlock grants the role nothing on GitHub. No token is minted, the jail holds none, and
/// GitHub is not intercepted: a request to it is egress like any other, refused for a role
/// without the public web, and the stand-in GitHub sees nothing.
#[test]
fn a_role_whose_key_store_is_not_airlock_gets_no_github_token_and_no_github_route() {
    require_journald();
    let gh = StandInGithub::start();
    let text = role(5).replace("  key_store: airlock\n", "  key_store: github\n");
    let h = host_with(&gh, &text);
    let script = r#"
echo "R token ${GH_TOKEN:-none}"
echo "R read $(curl -s -o /dev/null -w "%{http_code}" https://api.github.com/repos/example-org/example-repo)"
"#;
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.get("token").map(String::as_str), Some("none"), "{out}");
    let read = r.get("read").map(String::as_str).unwrap_or("missing");
    assert!(read != "200" && read != "missing", "{out}");
    assert!(gh.requests().is_empty(), "{:?}", gh.requests());
    let run = run_id_of(&o);
    let ev = events(&run, "egress", 1);
    assert!(
        ev.iter().any(
            |e| e["AIRLOCK_EGRESS_HOST"] == "api.github.com" && e["AIRLOCK_DECISION"] == "deny"
        ),
        "{ev:?}"
    );
}
