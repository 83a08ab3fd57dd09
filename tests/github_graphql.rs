//! GitHub's GraphQL writes through the GitHub route, for real: a workflow role's command
//! runs the real `gh` (Debian's) and `git` against `https://api.github.com` and
//! `https://github.com` through the run's gateway, in front of the stand-in GitHub whose
//! GraphQL is executed by graphql-core over a subset of GitHub's schema
//! (tests/agents/standin_graphql.py). Each mutation `gh` sends is resolved, decided,
//! counted and journaled; each refusal is printed by `gh` (or `git`) in its own words.

mod common;

use common::github::{StandInGithub, MCP_AGENT};
use common::*;
use serde_json::Value;

fn role(writes: u64) -> String {
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
  issues: [create, comment, label]
  pull_requests: [open, comment, review, label]
tools: {{}}
budget:
  runs_per_week: 100000
  minutes_per_run: 5
  github_writes_per_run: {writes}
"
    )
}

fn host(gh: &StandInGithub, writes: u64) -> Host {
    let h = Host::new(&[("gina", "ghprobe")], &gh.config());
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), role(writes)).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    h
}

fn results(out: &str) -> std::collections::BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("R "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// `x NAME CMD...` prints `R NAME ok` or `R NAME fail <what it printed>`; `q NAME DOC
/// VARS` posts a hand-written GraphQL document and prints GitHub's (or Airlock's) answer.
const SCRIPT: &str = r#"
set -u
export GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1 GH_CONFIG_DIR=$HOME/.gh
git config --global user.name agent && git config --global user.email agent@example.com
x() { n=$1; shift; if out=$("$@" 2>&1); then echo "R $n ok $(echo "$out" | tr '\n' ' ')"; else echo "R $n fail $(echo "$out" | tr '\n' ' ')"; fi; }
q() { echo "R $1 $(curl -s -H "Authorization: token $GH_TOKEN" -d "{\"query\":\"$2\",\"variables\":$3}" https://api.github.com/graphql)"; }
git clone -q https://github.com/example-org/example-repo.git repo && cd repo || exit 0
git checkout -q -b airlock/gh && echo more >> README.md && git commit -qam change
x push git push -q origin HEAD:refs/heads/airlock/gh
x push_main git push origin HEAD:main
R="-R example-org/example-repo"
x pr_create_main gh pr create $R --head main --base main --title T --body B
x pr_create_other_branch gh pr create $R --head someone-else --base main --title T --body B
x pr_create gh pr create $R --head airlock/gh --base main --title T --body B --draft
x issue_create gh issue create $R --title "An issue" --body "Its body"
x issue_comment gh issue comment 1 $R --body hi
x pr_comment gh pr comment 2 $R --body hi
x pr_edit gh pr edit 2 $R --title "New title"
x pr_label gh pr edit 2 $R --add-label bug
x pr_ready gh pr ready 2 $R
x pr_review gh pr review 2 $R --comment -b looks-fine
x pr_approve gh pr review 2 $R --approve
x issue_close gh issue close 1 $R
x other_repo gh issue comment 1 -R example-org/other --body hi
OTHER=$(curl -s -H "Authorization: token $GH_TOKEN" -d '{"query":"{ repository(owner: \"example-org\", name: \"other\") { issue(number: 1) { id } } }"}' https://api.github.com/graphql | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["repository"]["issue"]["id"])')
MINE=$(curl -s -H "Authorization: token $GH_TOKEN" -d '{"query":"{ repository(owner: \"example-org\", name: \"example-repo\") { issue(number: 1) { id } } }"}' https://api.github.com/graphql | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["repository"]["issue"]["id"])')
C='addComment(input: $input) { clientMutationId }'
q two "mutation A(\$input: AddCommentInput!) { $C } mutation B(\$input: AddCommentInput!) { $C }" "{\"input\":{\"subjectId\":\"$MINE\",\"body\":\"x\"}}"
q aliased "mutation(\$input: AddCommentInput!) { a: $C }" "{\"input\":{\"subjectId\":\"$MINE\",\"body\":\"x\"}}"
q inline "mutation { addComment(input: {subjectId: \\\"$OTHER\\\", body: \\\"x\\\"}) { clientMutationId } }" "{}"
q other_node "mutation(\$input: AddCommentInput!) { $C }" "{\"input\":{\"subjectId\":\"$OTHER\",\"body\":\"x\"}}"
q unknown_node "mutation(\$input: AddCommentInput!) { $C }" "{\"input\":{\"subjectId\":\"I_kwDOnosuchnode\",\"body\":\"x\"}}"
q unknown_field "mutation(\$input: DeleteIssueInput!) { deleteIssue(input: \$input) { clientMutationId } }" "{\"input\":{\"issueId\":\"$MINE\"}}"
echo "R dup $(curl -s -H "Authorization: token $GH_TOKEN" -d '{"query":"mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }","variables":{"input":{"subjectId":"'$MINE'","body":"a","body":"b"}}}' https://api.github.com/graphql)"
x last_write gh issue comment 1 $R --body second
x over_budget gh issue comment 1 $R --body third
"#;

#[test]
fn gh_commands_write_through_graphql_each_checked_counted_and_journaled() {
    require_journald();
    let gh = StandInGithub::start();
    // The push and nine mutations: the tenth is past the budget.
    let h = host(&gh, 10);
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", SCRIPT])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    for ok in [
        "push",
        "pr_create",
        "issue_create",
        "issue_comment",
        "pr_comment",
        "pr_edit",
        "pr_label",
        "pr_ready",
        "pr_review",
        "last_write",
    ] {
        assert!(get(ok).starts_with("ok"), "{ok}: {}\n{out}", get(ok));
    }
    assert!(
        get("pr_create").contains("https://github.com/example-org/example-repo/pull/2"),
        "{out}"
    );
    // Refused, the rule in gh's own output (GraphQL errors) or git's.
    for (k, rule) in [
        ("push_main", "(Airlock: push: default branch"),
        ("pr_create_main", "push: default branch"),
        ("pr_create_other_branch", "push: branch"),
        ("pr_approve", "classes: merge"),
        ("issue_close", "writes.issues"),
        ("other_repo", "writes.repos"),
        ("two", "one operation per document"),
        ("aliased", "no alias"),
        ("inline", "not an inline literal"),
        ("other_node", "writes.repos"),
        ("unknown_node", "node id GitHub does not know"),
        ("unknown_field", "not a GraphQL mutation Airlock knows"),
        ("dup", "unknown write"),
        ("over_budget", "budget.github_writes_per_run"),
    ] {
        let v = get(k);
        assert!(
            !v.starts_with("ok") && v.contains(rule),
            "{k} should be refused by {rule}: {v}\n{out}"
        );
    }

    // GitHub saw exactly the allowed mutations, in order.
    let mutations: Vec<String> = gh
        .requests()
        .iter()
        .filter(|q| q["graphql"]["type"] == "mutation")
        .map(|q| q["graphql"]["fields"][0].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        mutations,
        [
            "createPullRequest",
            "createIssue",
            "addComment",
            "addComment",
            "updatePullRequest",
            "addLabelsToLabelable",
            "markPullRequestReadyForReview",
            "addPullRequestReview",
            "addComment",
        ],
        "{out}"
    );
    // The gateway's own questions: the repository ids of writes.repos once (one query for
    // both), and each other id once (the run's cache, and the ids its own mutations
    // created, answer the rest).
    let reqs = gh.requests();
    let repo_ids = reqs
        .iter()
        .filter(|q| q["graphql"]["fields"] == serde_json::json!(["repository", "repository"]))
        .count();
    assert_eq!(repo_ids, 1, "the repository ids are learned once");
    let looked_up: Vec<String> = reqs
        .iter()
        .filter(|q| q["graphql"]["fields"] == serde_json::json!(["nodes"]))
        .filter_map(|q| serde_json::from_str::<Value>(q["body"].as_str()?).ok())
        .flat_map(|b| {
            b["variables"]["ids"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let distinct: std::collections::BTreeSet<&String> = looked_up.iter().collect();
    assert_eq!(
        distinct.len(),
        looked_up.len(),
        "an id asked twice: {looked_up:?}"
    );
    // The new pull request (its id from the answer, looked up once: what it is, where,
    // from which head), issue #1, the label, the other repository's issue, the unknown
    // id; the new issue is never named again, so never asked about.
    assert_eq!(looked_up.len(), 5, "{looked_up:?}");
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(gh.dir.path().join("graphql.json")).unwrap())
            .unwrap();
    let items = &state["repos"]["example-org/example-repo"]["items"];
    assert_eq!(items[1]["title"], "New title", "{items}");
    assert_eq!(items[1]["isDraft"], false);
    assert_eq!(items[1]["headRefName"], "airlock/gh");
    assert_eq!(items[2]["title"], "An issue");
    assert_eq!(
        items[0]["state"], "OPEN",
        "the refused close did not happen"
    );
    assert_eq!(
        state["repos"]["example-org/other"]["items"][0]["comments"],
        serde_json::json!([])
    );

    // The journal: one allowed github_write per mutation, named by its field.
    let run = run_id_of(&o);
    let ev = events(&run, "github_write", 20);
    let allowed = |endpoint: &str, action: &str| {
        ev.iter()
            .filter(|e| {
                e["AIRLOCK_ENDPOINT"] == endpoint
                    && e["AIRLOCK_ACTION"] == action
                    && e["AIRLOCK_DECISION"] == "allow"
            })
            .count()
    };
    assert_eq!(
        allowed("graphql createPullRequest", "pull_requests.open"),
        1,
        "{ev:?}"
    );
    assert_eq!(allowed("graphql createIssue", "issues.create"), 1);
    assert_eq!(allowed("graphql addComment", "issues.comment"), 2);
    assert_eq!(allowed("graphql addComment", "pull_requests.comment"), 1);
    assert_eq!(
        allowed("graphql updatePullRequest", "pull_requests.open"),
        1
    );
    assert_eq!(
        allowed("graphql addLabelsToLabelable", "pull_requests.label"),
        1
    );
    assert_eq!(
        allowed(
            "graphql markPullRequestReadyForReview",
            "pull_requests.open"
        ),
        1
    );
    assert_eq!(
        allowed("graphql addPullRequestReview", "pull_requests.review"),
        1
    );
    let over = ev
        .iter()
        .find(|e| e["AIRLOCK_RULE"] == "budget.github_writes_per_run")
        .expect("the write past the budget is journaled");
    assert_eq!(over["AIRLOCK_WRITES"], "10");
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    assert!(
        ledger.contains(
            r#""github":{"writes":10,"budget":10,"created":["example-org/example-repo:airlock/gh"]}"#
        ),
        "{ledger}"
    );
}

/// Editing a pull request this run did not open is refused, by REST and by GraphQL.
const NOT_MINE: &str = r#"
set -u
export GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1 GH_CONFIG_DIR=$HOME/.gh
x() { n=$1; shift; if out=$("$@" 2>&1); then echo "R $n ok $(echo "$out" | tr '\n' ' ')"; else echo "R $n fail $(echo "$out" | tr '\n' ' ')"; fi; }
x gql_edit gh pr edit 2 -R example-org/example-repo --title mine-now
echo "R rest_edit $(curl -s -X PATCH -H "Authorization: token $GH_TOKEN" -d '{"title":"mine-now"}' https://api.github.com/repos/example-org/example-repo/pulls/2)"
git config --global user.name agent && git config --global user.email agent@example.com
git clone -q https://github.com/example-org/example-repo.git repo && cd repo
git checkout -q -b airlock/rest && echo more >> README.md && git commit -qam change && git push -q origin HEAD:refs/heads/airlock/rest
echo "R rest_open_theirs $(curl -s -w ' %{http_code}' -H "Authorization: token $GH_TOKEN" -d '{"title":"t","head":"theirs","base":"main"}' https://api.github.com/repos/example-org/example-repo/pulls)"
echo "R rest_open_main $(curl -s -w ' %{http_code}' -H "Authorization: token $GH_TOKEN" -d '{"title":"t","head":"example-org:main","base":"main"}' https://api.github.com/repos/example-org/example-repo/pulls)"
echo "R rest_open_fork $(curl -s -w ' %{http_code}' -H "Authorization: token $GH_TOKEN" -d '{"title":"t","head":"octo-forker:airlock/rest","base":"main"}' https://api.github.com/repos/example-org/example-repo/pulls)"
echo "R rest_open $(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: token $GH_TOKEN" -d '{"title":"ours","head":"airlock/rest","base":"main"}' https://api.github.com/repos/example-org/example-repo/pulls)"
echo "R rest_own_edit $(curl -s -o /dev/null -w '%{http_code}' -X PATCH -H "Authorization: token $GH_TOKEN" -d '{"body":"edited"}' https://api.github.com/repos/example-org/example-repo/pulls/3)"
x gql_own_edit gh pr edit 3 -R example-org/example-repo --title ours-renamed
"#;

#[test]
fn a_pull_request_the_run_did_not_open_is_not_edited() {
    require_journald();
    let gh = StandInGithub::start();
    // Someone else's pull request, opened straight at the stand-in before the run.
    let seed = std::process::Command::new("git")
        .args(["branch", "theirs", "main"])
        .current_dir(gh.bare())
        .output()
        .unwrap();
    assert!(seed.status.success(), "{}", stderr(&seed));
    let token = gh.mint_token();
    let opened = gh.post(
        "/repos/example-org/example-repo/pulls",
        &token,
        r#"{"title":"theirs","head":"theirs","base":"main"}"#,
    );
    assert_eq!(opened["number"], 2, "{opened}");
    let h = host(&gh, 5);
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", NOT_MINE])
        .output()
        .unwrap();
    let out = stdout(&o);
    let r = results(&out);
    // Opening one by REST meets createPullRequest's rules: a person's branch, the default
    // branch and another owner's branch are refused as heads.
    for (k, rule) in [
        ("rest_open_theirs", "push: branch"),
        ("rest_open_main", "push: default branch"),
        ("rest_open_fork", "push: branch"),
    ] {
        let v = r.get(k).map(String::as_str).unwrap_or("missing");
        assert!(v.ends_with(" 403") && v.contains(rule), "{k}: {v}\n{out}");
    }
    for k in ["gql_edit", "rest_edit"] {
        let v = r.get(k).map(String::as_str).unwrap_or("missing");
        assert!(
            v.contains("only a pull request this run opened"),
            "{k}: {v}\n{out}\n{}",
            stderr(&o)
        );
    }
    let state = std::fs::read_to_string(gh.dir.path().join("graphql.json")).unwrap();
    assert!(!state.contains("mine-now"), "{state}");
    // Its own, opened by REST: edited by REST and by GraphQL (its node id from GitHub's
    // answer to the POST, then looked up).
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    assert_eq!(get("rest_open"), "201", "{out}");
    assert_eq!(get("rest_own_edit"), "201", "{out}");
    assert!(get("gql_own_edit").starts_with("ok"), "{out}");
    assert!(state.contains("ours-renamed"), "{state}");
}

/// A host whose merge gate (a workflow role of the merge-gate class) merges in
/// example-org/example-repo at `level` (its autonomy policy's default), with pull request
/// #2 (branch `feature`) opened by the human `octo-author` before the run.
fn gate_host(gh: &StandInGithub, level: &str) -> Host {
    gate_host_hiring(gh, level, &[])
}

/// As [`gate_host`], with more instances hired.
fn gate_host_hiring(gh: &StandInGithub, level: &str, more: &[(&str, &str)]) -> Host {
    let mut hires = vec![("mona", "merge-gate")];
    hires.extend_from_slice(more);
    let h = Host::new(&hires, &gh.config());
    let pol = h.root.join("policies");
    let cp = std::process::Command::new("cp")
        .arg("-r")
        .arg(std::path::Path::new(REPO).join("policies"))
        .arg(&pol)
        .output()
        .unwrap();
    assert!(cp.status.success(), "{}", stderr(&cp));
    let auto = pol.join("autonomy/example-org/example-repo.yaml");
    let text = std::fs::read_to_string(&auto).unwrap();
    assert!(text.contains("default: L2"), "{text}");
    std::fs::write(
        &auto,
        text.replace("default: L2", &format!("default: {level}")),
    )
    .unwrap();
    let cfg = std::fs::read_to_string(&h.cfg).unwrap();
    let cfg = cfg.replace(
        &format!("policies: {REPO}/policies"),
        &format!("policies: {}", pol.display()),
    );
    std::fs::write(&h.cfg, cfg).unwrap();
    let dir = h.root.join("roles.local/merge-gate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("role.yaml"),
        "schema: 1
role: merge-gate
level: L4
brief: brief.md
goals: goals.md
kind: workflow
judge:
  metric: the CI run of the pull request
  source: ci.yml on main
  pass: green
  check:
    repo: example-org/example-repo
    workflow: ci.yml
    branch: main
    max_age_days: 3
identity:
  board_name: airlock:merge-gate
  key_store: airlock
writes:
  repos: [example-org/example-repo]
  pull_requests: [merge, review, comment]
tools: {}
budget:
  runs_per_week: 100000
  minutes_per_run: 5
  github_writes_per_run: 3
",
    )
    .unwrap();
    std::fs::write(dir.join("brief.md"), "# Merge gate\n").unwrap();
    std::fs::write(dir.join("goals.md"), "# Goals\nLand what passed.\n").unwrap();
    let b = std::process::Command::new("git")
        .args(["branch", "feature", "main"])
        .current_dir(gh.bare())
        .output()
        .unwrap();
    assert!(b.status.success(), "{}", stderr(&b));
    let opened = gh.post(
        "/repos/example-org/example-repo/pulls",
        &gh.mint_token(),
        r#"{"title":"A change","head":"feature","base":"main","standin_author":"octo-author"}"#,
    );
    assert_eq!(opened["number"], 2, "{opened}");
    h
}

/// Merge pull request `$N` with `gh` and then by REST.
const MERGE: &str = r#"
export GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1 GH_CONFIG_DIR=$HOME/.gh
N=${N:-2}
if out=$(gh pr merge $N -R example-org/example-repo --merge 2>&1); then echo "R merge ok $out"; else echo "R merge fail $(echo "$out" | tr '\n' ' ')"; fi
echo "R rest $(curl -s -X PUT -H "Authorization: token $GH_TOKEN" -d '{}' https://api.github.com/repos/example-org/example-repo/pulls/$N/merge | tr '\n' ' ')"
"#;

fn merge_once(gh: &StandInGithub, h: &Host, reviews: Value) -> (String, String, String) {
    merge_pull(gh, h, 2, reviews)
}

fn merge_pull(gh: &StandInGithub, h: &Host, n: u64, reviews: Value) -> (String, String, String) {
    std::fs::write(
        gh.dir.path().join("reviews.json"),
        serde_json::json!({format!("example-org/example-repo#{n}"): reviews}).to_string(),
    )
    .unwrap();
    let script = format!("N={n}\n{MERGE}");
    let o = h
        .launch("merge-gate", "mona", &[], &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    (
        r.get("merge").cloned().unwrap_or_default(),
        r.get("rest").cloned().unwrap_or_default(),
        run_id_of(&o),
    )
}

fn head_of(gh: &StandInGithub, branch: &str) -> String {
    let o = std::process::Command::new("git")
        .args(["rev-parse", branch])
        .current_dir(gh.bare())
        .output()
        .unwrap();
    stdout(&o).trim().to_string()
}

fn merged(gh: &StandInGithub) -> bool {
    merged_pull(gh, 2)
}

fn merged_pull(gh: &StandInGithub, n: u64) -> bool {
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(gh.dir.path().join("graphql.json")).unwrap())
            .unwrap();
    state["repos"]["example-org/example-repo"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["number"] == n && i["state"] == "MERGED")
}

/// The run's journaled `mergePullRequest`, allowed: its reason.
fn merge_allowed(run: &str) -> String {
    let ev = events(run, "github_write", 1);
    let m = ev
        .iter()
        .find(|e| e["AIRLOCK_ENDPOINT"] == "graphql mergePullRequest")
        .unwrap_or_else(|| panic!("{ev:?}"));
    assert_eq!(m["AIRLOCK_DECISION"], "allow");
    m["AIRLOCK_REASON"].as_str().unwrap_or("").to_string()
}

#[test]
fn at_l3_a_merge_lands_only_after_a_humans_approval_of_the_head() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host(&gh, "L3");
    let head = head_of(&gh, "feature");
    let review = |login: &str, ty: &str, commit: &str| serde_json::json!({"user": {"login": login, "type": ty}, "state": "APPROVED", "commit_id": commit});
    for (reviews, why) in [
        (serde_json::json!([]), "no review approves"),
        (
            serde_json::json!([review("ci-helper[bot]", "Bot", &head)]),
            "bots or apps",
        ),
        (
            serde_json::json!([review("octo-author", "User", &head)]),
            "author",
        ),
        (
            serde_json::json!([review("octo-human", "User", &"1".repeat(40))]),
            "older commit",
        ),
    ] {
        let (g, rest, _) = merge_once(&gh, &h, reviews);
        for (client, said) in [("gh", &g), ("REST", &rest)] {
            assert!(
                said.contains("land: after-human-approval") && said.contains(why),
                "{client} should be refused ({why}): {said}"
            );
        }
        assert!(!merged(&gh), "a refused merge reached GitHub");
    }
    let (g, _, run) = merge_once(
        &gh,
        &h,
        serde_json::json!([review("octo-human", "User", &head)]),
    );
    assert!(g.starts_with("ok"), "{g}");
    assert!(merged(&gh));
    let reason = merge_allowed(&run);
    assert!(
        reason.contains(&format!("approved by octo-human on {head}")),
        "{reason}"
    );
}

/// GitHub's MCP `merge_pull_request` names no head commit, so the gateway cannot pin the
/// head the gate approved (a push meanwhile would land unreviewed; issue 41's second
/// attack): even with a person's approval of the head, the MCP merge is refused
/// (`land: head`, naming the merges that pin it) and nothing reaches GitHub.
#[test]
fn at_l3_the_mcp_merge_is_refused_since_it_cannot_name_the_head() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host(&gh, "L3");
    let head = head_of(&gh, "feature");
    std::fs::write(
        gh.dir.path().join("reviews.json"),
        serde_json::json!({"example-org/example-repo#2": [{"user": {"login": "octo-human", "type": "User"}, "state": "APPROVED", "commit_id": head}]}).to_string(),
    )
    .unwrap();
    // The merge-gate role as an agent holding GitHub's connector and its merge tool.
    let file = h.root.join("roles.local/merge-gate/role.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let agent = text
        .replace(
            "kind: workflow",
            "kind: agent\nrun:\n  model: claude-sonnet-4-5\n  mcp:\n    github: {via: airlock}",
        )
        .replace(
            "tools: {}",
            "tools:\n  board: [board_read]\n  github: [merge_pull_request]",
        );
    assert_ne!(agent, text);
    std::fs::write(&file, agent).unwrap();
    let calls = serde_json::json!([["merge_pull_request", {"owner": "example-org", "repo": "example-repo", "pullNumber": 2}]]);
    let o = h
        .launch(
            "merge-gate",
            "mona",
            &[],
            &["/usr/bin/python3", "-c", MCP_AGENT, &calls.to_string()],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let answer: Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["step"] == 0)
        .unwrap_or_else(|| panic!("no answer in {out}"));
    assert_eq!(answer["error"], true, "{answer}");
    let said = answer["text"].as_str().unwrap_or("");
    assert!(
        said.contains("land: head") && said.contains("gh pr merge"),
        "{said}"
    );
    assert!(!merged(&gh), "the MCP merge reached GitHub");
    let seen = gh.mcp_calls();
    assert!(seen.is_empty(), "the MCP merge reached GitHub: {seen:?}");
}

#[test]
fn at_l4_a_merge_without_a_human_needs_the_judge_which_is_refused_as_missing() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host(&gh, "L4");
    let (g, rest, _) = merge_once(&gh, &h, serde_json::json!([]));
    // Opened by a person from a branch no run created: no role's judge speaks for it.
    for said in [&g, &rest] {
        assert!(said.contains("judge-missing"), "{said}");
        assert!(
            said.contains("no run in this host's ledger created"),
            "{said}"
        );
    }
    assert!(!merged(&gh));
}

/// The ghprobe role with a CI judge: `ci.yml` on main within 3 days.
const JUDGED: &str = "judge:
  metric: tests that pass
  source: ci.yml on main
  pass: green
  check:
    repo: example-org/example-repo
    workflow: ci.yml
    branch: main
    max_age_days: 3
";

/// A run of the ghprobe role pushes a branch of its own and opens a pull request from it.
const OPEN: &str = r#"
export GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1 GH_CONFIG_DIR=$HOME/.gh
git config --global user.name agent && git config --global user.email agent@example.com
git clone -q https://github.com/example-org/example-repo.git repo && cd repo || exit 1
git checkout -q -b airlock/judged && echo judged >> README.md && git commit -qam judged
git push -q origin HEAD:refs/heads/airlock/judged || exit 1
gh pr create -R example-org/example-repo --head airlock/judged --base main --title J --body B
"#;

fn actions(gh: &StandInGithub, runs: Value) {
    std::fs::write(
        gh.dir.path().join("actions.json"),
        serde_json::json!({"example-org/example-repo/ci.yml": runs}).to_string(),
    )
    .unwrap();
}

fn days_ago(d: u64) -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - d * 86_400;
    let o = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{s}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    stdout(&o).trim().to_string()
}

#[test]
fn at_l4_a_merge_without_a_human_lands_when_the_openers_judge_ran_recently() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host_hiring(&gh, "L4", &[("gina", "ghprobe")]);
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), format!("{}{JUDGED}", role(5))).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", OPEN])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("/pull/3"), "{out}");
    let run = |id: u64, conclusion: &str, d: u64| serde_json::json!({"id": id, "status": "completed", "conclusion": conclusion, "head_branch": "main", "updated_at": days_ago(d)});
    // Its judge's last finished run is older than max_age_days (a cancelled one is newer).
    actions(
        &gh,
        serde_json::json!([run(70, "cancelled", 0), run(71, "success", 5)]),
    );
    let (g, rest, _) = merge_pull(&gh, &h, 3, serde_json::json!([]));
    for said in [&g, &rest] {
        assert!(said.contains("judge-missing"), "{said}");
        assert!(
            said.contains("the judge of role ghprobe has not run") && said.contains("run 71"),
            "{said}"
        );
    }
    assert!(!merged_pull(&gh, 3), "a refused merge reached GitHub");
    // It ran yesterday (a failure counts: the judge ran).
    actions(
        &gh,
        serde_json::json!([run(72, "failure", 1), run(71, "success", 5)]),
    );
    let (g, _, merge_run) = merge_pull(&gh, &h, 3, serde_json::json!([]));
    assert!(g.starts_with("ok"), "{g}");
    assert!(merged_pull(&gh, 3));
    let reason = merge_allowed(&merge_run);
    assert!(
        reason.contains("by-ratchet")
            && reason.contains("ci.yml run 72")
            && reason.contains("role ghprobe"),
        "{reason}"
    );
}

/// A helper the run's scripts use: `g.py DOC VARS` posts a GraphQL document (its variables
/// a JSON text) and prints `STATUS BODY`; with a third argument, a dotted path, it prints
/// the value there instead.
const GQL_HELPER: &str = r#"
cat > "$HOME/g.py" <<'PY'
import json, os, subprocess, sys
body = json.dumps({"query": sys.argv[1], "variables": json.loads(sys.argv[2])})
out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "-H", "Authorization: token " + os.environ["GH_TOKEN"],
                      "--data-binary", "@-", "https://api.github.com/graphql"],
                     input=body.encode(), capture_output=True).stdout.decode()
text, _, code = out.rpartition("\n")
if len(sys.argv) > 3:
    v = json.loads(text)
    for k in sys.argv[3].split("."):
        v = v[k]
    print(v)
else:
    print(code, text.replace("\n", " "))
PY
g() { n=$1; shift; echo "R $n $(python3 "$HOME/g.py" "$@")"; }
export GH_PROMPT_DISABLED=1 GH_NO_UPDATE_NOTIFIER=1 NO_COLOR=1 GH_CONFIG_DIR=$HOME/.gh
x() { n=$1; shift; if out=$("$@" 2>&1); then echo "R $n ok $(echo "$out" | tr '\n' ' ')"; else echo "R $n fail $(echo "$out" | tr '\n' ' ')"; fi; }
id_of() { python3 "$HOME/g.py" "$1" '{}' "$2"; }
REPO=$(id_of '{ repository(owner: "example-org", name: "example-repo") { id } }' data.repository.id)
"#;

/// A `STATUS BODY` line the helper printed: the status and the JSON answer.
fn answer(line: &str) -> (String, Value) {
    let (code, body) = line.split_once(' ').unwrap_or((line, ""));
    (
        code.to_string(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// Mutations whose selection set holds an alias, a fragment or a directive, anywhere: each
/// answered `200` with `errors` (type FORBIDDEN) naming the rule, none forwarded.
const SHAPES: &str = r#"
MINE=$(id_of '{ repository(owner: "example-org", name: "example-repo") { issue(number: 1) { id } } }' data.repository.issue.id)
CI='mutation($input: CreateIssueInput!) { createIssue(input: $input)'
AC='mutation($input: AddCommentInput!) { addComment(input: $input)'
NEW="{\"input\":{\"repositoryId\":\"$REPO\",\"title\":\"$MINE\"}}"
COM="{\"input\":{\"subjectId\":\"$MINE\",\"body\":\"x\"}}"
g alias_nested "$CI { issue { id: title } } }" "$NEW"
g alias_deeper "$CI { issue { repository { nameWithOwner: name } } } }" "$NEW"
g alias_typename "$CI { issue { __typename id: __typename } } }" "$NEW"
g inline_fragment "$CI { issue { ... on Issue { id } } } }" "$NEW"
g bare_inline_fragment "$CI { issue { ... { id } } } }" "$NEW"
g interface_fragment "$AC { commentEdge { node { ... on Node { id } } } } }" "$COM"
g subject_fragment "$AC { subject { ... on Issue { id } } } }" "$COM"
g named_fragment "$AC { subject { ...S } } } fragment S on Issue { id }" "$COM"
g directive_nested "$CI { issue { id @include(if: true) } } }" "$NEW"
g directive_skip "$CI { issue { title @skip(if: true) id } } }" "$NEW"
g directive_on_object "$AC { commentEdge @include(if: true) { node { id } } } }" "$COM"
g plain "$AC { commentEdge { node { id } } subject { __typename id } } }" "$COM"
"#;

#[test]
fn a_mutation_with_an_alias_fragment_or_directive_at_any_depth_is_refused_in_graphqls_words() {
    require_journald();
    let gh = StandInGithub::start();
    let h = host(&gh, 5);
    let script = format!("set -u\n{GQL_HELPER}{SHAPES}");
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    for (k, rule) in [
        ("alias_nested", "no alias"),
        ("alias_deeper", "no alias"),
        ("alias_typename", "no alias"),
        ("inline_fragment", "no fragment"),
        ("bare_inline_fragment", "no fragment"),
        ("interface_fragment", "no fragment"),
        ("subject_fragment", "no fragment"),
        ("named_fragment", "no fragment"),
        ("directive_nested", "no directive"),
        ("directive_skip", "no directive"),
        ("directive_on_object", "no directive"),
    ] {
        let line = r.get(k).map(String::as_str).unwrap_or("missing");
        let (code, v) = answer(line);
        assert_eq!(code, "200", "{k}: {line}\n{out}");
        let e = &v["errors"][0];
        assert_eq!(e["extensions"]["type"], "FORBIDDEN", "{k}: {line}");
        assert_eq!(e["type"], "FORBIDDEN", "{k}: {line}");
        let msg = e["message"].as_str().unwrap_or("");
        assert!(
            msg.contains("github: unknown write") && msg.contains(rule),
            "{k} should name {rule}: {line}"
        );
        assert!(v["data"].is_null(), "{k}: {line}");
    }
    // The plain shape goes on.
    let (code, v) = answer(r.get("plain").map(String::as_str).unwrap_or("missing"));
    assert_eq!(code, "200");
    assert!(v["errors"].is_null(), "{v}");
    assert!(v["data"]["addComment"]["commentEdge"]["node"]["id"].is_string());
    // GitHub saw one mutation: the plain one.
    let mutations = gh
        .requests()
        .iter()
        .filter(|q| q["graphql"]["type"] == "mutation")
        .count();
    assert_eq!(mutations, 1, "{:?}", gh.requests());
    let ev = events(&run_id_of(&o), "github_write", 12);
    assert_eq!(
        ev.iter()
            .filter(
                |e| e["AIRLOCK_RULE"] == "github: unknown write" && e["AIRLOCK_DECISION"] == "deny"
            )
            .count(),
        11,
        "{ev:?}"
    );
}

/// The first poisoning, from an agent's jail (an agent runs no other program, so raw
/// GraphQL from Python): an issue whose answer carries another repository's issue id as
/// its `id`, then a comment on that issue.
const POISON_ISSUE: &str = r#"
import json, os, urllib.request
def gql(doc, variables=None):
    body = json.dumps({"query": doc, "variables": variables or {}}).encode()
    req = urllib.request.Request("https://api.github.com/graphql", data=body, headers={
        "Authorization": "token " + os.environ["GH_TOKEN"], "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return [r.status, json.loads(r.read())]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
repo = gql('{ repository(owner: "example-org", name: "example-repo") { id } }')[1]["data"]["repository"]["id"]
other = gql('{ repository(owner: "example-org", name: "other") { issue(number: 1) { id } } }')[1]["data"]["repository"]["issue"]["id"]
out = {}
out["poison"] = gql("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { id: title } } }",
                    {"input": {"repositoryId": repo, "title": other}})
out["comment"] = gql("mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }",
                     {"input": {"subjectId": other, "body": "poisoned"}})
print(json.dumps(out))
"#;

#[test]
fn an_issue_answer_the_run_shaped_does_not_make_another_repositorys_issue_writable() {
    require_journald();
    let gh = StandInGithub::start();
    // example-org/other: in run.clone (so the installation token reaches it), not in
    // writes.repos.
    let other = gh.dir.path().join("repos/example-org/other.git");
    let c = std::process::Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(gh.bare())
        .arg(&other)
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", stderr(&c));
    let text = role(5)
        .replace("kind: workflow", "kind: agent")
        .replace("tools: {}", "tools: {board: [board_read]}")
        + "run:\n  model: claude-sonnet-4-5\n  clone: [example-org/other]\n";
    let h = Host::new(&[("gina", "ghprobe")], &gh.config());
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), text).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    let o = h
        .launch(
            "ghprobe",
            "gina",
            &[],
            &["/usr/bin/python3", "-c", POISON_ISSUE],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("{out}"));
    let comment = &v["comment"];
    assert_eq!(comment[0], 200, "{v}");
    let msg = comment[1]["errors"][0]["message"].as_str().unwrap_or("");
    assert!(msg.contains("writes.repos"), "{v}");
    // The stand-in writes its state after each mutation it runs: none ran, or one did.
    let state: Value = std::fs::read_to_string(gh.dir.path().join("graphql.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_else(
            |_| serde_json::json!({"repos": {"example-org/other": {"items": [{"comments": []}]}}}),
        );
    assert_eq!(
        state["repos"]["example-org/other"]["items"][0]["comments"],
        serde_json::json!([]),
        "a comment reached another repository's issue"
    );
    assert!(
        !gh.requests()
            .iter()
            .any(|q| q["graphql"]["type"] == "mutation"),
        "a mutation was forwarded: {:?}",
        gh.requests()
    );
    let ev = events(&run_id_of(&o), "github_write", 2);
    assert!(
        !ev.iter()
            .any(|e| e["AIRLOCK_ENDPOINT"] == "graphql addComment"
                && e["AIRLOCK_DECISION"] == "allow"),
        "{ev:?}"
    );
}

/// The second poisoning, with `gh`: a pull request whose answer carries a person's pull
/// request's id and URL, then `gh pr edit` and a REST edit of that pull request.
const POISON_PR: &str = r#"
git config --global user.name agent && git config --global user.email agent@example.com
git clone -q https://github.com/example-org/example-repo.git repo && cd repo || exit 1
git checkout -q -b airlock/poison && echo more >> README.md && git commit -qam change
x push git push -q origin HEAD:refs/heads/airlock/poison
THEIRS=$(id_of '{ repository(owner: "example-org", name: "example-repo") { pullRequest(number: 2) { id } } }' data.repository.pullRequest.id)
g poison_pr 'mutation($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id: body url: title } } }' "{\"input\":{\"repositoryId\":\"$REPO\",\"headRefName\":\"airlock/poison\",\"baseRefName\":\"main\",\"title\":\"https://github.com/example-org/example-repo/pull/2\",\"body\":\"$THEIRS\"}}"
x gql_edit gh pr edit 2 -R example-org/example-repo --title mine-now
echo "R rest_edit $(curl -s -X PATCH -H "Authorization: token $GH_TOKEN" -d '{"title":"mine-now"}' https://api.github.com/repos/example-org/example-repo/pulls/2)"
"#;

#[test]
fn a_pull_request_answer_the_run_shaped_does_not_make_a_persons_pull_request_its_own() {
    require_journald();
    let gh = StandInGithub::start();
    // A person's pull request, #2, opened before the run.
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
    let h = host(&gh, 10);
    let script = format!("set -u\n{GQL_HELPER}{POISON_PR}");
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    assert!(get("push").starts_with("ok"), "{out}");
    for k in ["gql_edit", "rest_edit"] {
        assert!(
            get(k).contains("only a pull request this run opened"),
            "{k}: {}\n{out}",
            get(k)
        );
    }
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(gh.dir.path().join("graphql.json")).unwrap())
            .unwrap();
    assert_eq!(
        state["repos"]["example-org/example-repo"]["items"][1]["title"], "theirs",
        "the person's pull request was edited"
    );
    assert!(
        !gh.requests().iter().any(|q| q["method"] == "PATCH"),
        "{:?}",
        gh.requests()
    );
    let ev = events(&run_id_of(&o), "github_write", 3);
    assert!(
        !ev.iter().any(|e| e["AIRLOCK_DECISION"] == "allow"
            && (e["AIRLOCK_ENDPOINT"] == "graphql updatePullRequest"
                || e["AIRLOCK_ENDPOINT"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("PATCH")))),
        "{ev:?}"
    );
}

/// At L3, a merge gate that may also open pull requests: one whose answer carries the
/// unreviewed #2's id and the approved #3's URL, then `gh pr merge 2`.
const POISON_MERGE: &str = r#"
git config --global user.name agent && git config --global user.email agent@example.com
git clone -q https://github.com/example-org/example-repo.git repo && cd repo || exit 1
git checkout -q -b airlock/poison && echo more >> README.md && git commit -qam change
x push git push -q origin HEAD:refs/heads/airlock/poison
P2=$(id_of '{ repository(owner: "example-org", name: "example-repo") { pullRequest(number: 2) { id } } }' data.repository.pullRequest.id)
g poison_pr 'mutation($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id: body url: title } } }' "{\"input\":{\"repositoryId\":\"$REPO\",\"headRefName\":\"airlock/poison\",\"baseRefName\":\"main\",\"title\":\"https://github.com/example-org/example-repo/pull/3\",\"body\":\"$P2\"}}"
x merge gh pr merge 2 -R example-org/example-repo --merge
"#;

#[test]
fn at_l3_the_merge_gate_reads_the_reviews_of_the_pull_request_the_merge_names() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host(&gh, "L3");
    let role_file = h.root.join("roles.local/merge-gate/role.yaml");
    let text = std::fs::read_to_string(&role_file).unwrap();
    let text = text
        .replace(
            "pull_requests: [merge, review, comment]",
            "pull_requests: [open, merge, review, comment]",
        )
        .replace("github_writes_per_run: 3", "github_writes_per_run: 6");
    std::fs::write(&role_file, text).unwrap();
    // #3, approved by a person on its head; #2 (opened by gate_host) has no review.
    let b = std::process::Command::new("git")
        .args(["branch", "approved", "main"])
        .current_dir(gh.bare())
        .output()
        .unwrap();
    assert!(b.status.success(), "{}", stderr(&b));
    let opened = gh.post(
        "/repos/example-org/example-repo/pulls",
        &gh.mint_token(),
        r#"{"title":"Approved","head":"approved","base":"main","standin_author":"octo-author"}"#,
    );
    assert_eq!(opened["number"], 3, "{opened}");
    let head = head_of(&gh, "approved");
    std::fs::write(
        gh.dir.path().join("reviews.json"),
        serde_json::json!({"example-org/example-repo#3": [{"user": {"login": "octo-human", "type": "User"}, "state": "APPROVED", "commit_id": head}]}).to_string(),
    )
    .unwrap();
    let script = format!("set -u\n{GQL_HELPER}{POISON_MERGE}");
    let o = h
        .launch("merge-gate", "mona", &[], &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let r = results(&out);
    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("missing");
    assert!(get("push").starts_with("ok"), "{out}");
    let m = get("merge");
    assert!(
        !m.starts_with("ok")
            && m.contains("land: after-human-approval")
            && m.contains("no review approves"),
        "the merge of #2 should be refused on #2's reviews: {m}\n{out}"
    );
    assert!(!merged_pull(&gh, 2), "the unreviewed pull request landed");
    assert!(!merged_pull(&gh, 3));
}

/// Issue 41's second attack from inside a jail: an agent (tests/agents/github_attack.py)
/// with writes to example-org/example-repo and run.clone covering example-org/other sends
/// raw requests through its gateway: GraphQL batches, persisted-query bodies,
/// operationName, comments ended at other line terminators, string escapes, variables
/// typed differently or twinned by escapes, ids of other types (an IssueComment, a
/// PullRequestReview, a repository) as subjects, GraphQL by GET, form, gzip and other
/// paths, and REST paths encoded, dotted or absolute, approvals and merges, method
/// overrides, and `PATCH /issues/N` of a person's pull request's number. Every write is
/// refused; GitHub sees the two writes the role may make and nothing else.
#[test]
fn a_second_attack_from_inside_the_jail_finds_every_write_refused() {
    require_journald();
    let gh = StandInGithub::start();
    let other = gh.dir.path().join("repos/example-org/other.git");
    let c = std::process::Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(gh.bare())
        .arg(&other)
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", stderr(&c));
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
    let text = role(30)
        .replace("kind: workflow", "kind: agent")
        .replace("tools: {}", "tools: {board: [board_read]}")
        .replace(
            "issues: [create, comment, label]",
            "issues: [create, comment, label, close, reopen, edit_body]",
        )
        + "run:\n  model: claude-sonnet-4-5\n  clone: [example-org/other]\n";
    let h = Host::new(&[("gina", "ghprobe")], &gh.config());
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), text).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    let probe = include_str!("agents/github_attack.py");
    let before = gh.requests().len();
    let o = h
        .launch("ghprobe", "gina", &[], &["/usr/bin/python3", "-c", probe])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("{out}"));
    eprintln!("{}", serde_json::to_string_pretty(&v).unwrap());
    // Queries whose every reader here reads no mutation: forwarded as reads or refused,
    // never executed as a write (checked below against what GitHub ran).
    let reads = [
        "g_string_escape_quote",
        "g_string_backslash_quote",
        "g_unicode_brace_escape",
        "g_comment_nel",
        "g_comment_ls",
        "g_comment_ff",
        "g_comment_nul",
        "g_persisted_beside_a_query",
    ];
    let obj = v.as_object().unwrap();
    assert!(obj.len() > 60, "{v}");
    for (k, a) in obj {
        if reads.contains(&k.as_str()) {
            continue;
        }
        let status = a[0].as_u64().unwrap_or(0);
        let body = &a[1];
        let refused = match status {
            200 => {
                body["data"].is_null()
                    && body["errors"][0]["type"] == "FORBIDDEN"
                    && body["errors"][0]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("Airlock refused"))
            }
            401 | 403 => true,
            // hyper's own refusal of a request target it cannot read.
            400 => k == "r_backslash",
            _ => false,
        };
        assert!(refused, "{k} was not refused: {a}");
    }
    // A person's pull request, by its issue number: refused as an edit of a pull request
    // the run did not open.
    for k in ["r_issue_patch_closes_pr", "r_issue_patch_retitles_pr"] {
        let m = v[k][1]["message"].as_str().unwrap_or("");
        assert!(
            m.contains("pull_requests.open") && m.contains("is a pull request"),
            "{k}: {}",
            v[k]
        );
    }
    // GitHub ran the two writes of the setup and no other; nothing reached the other
    // repository or the person's pull request.
    let reqs = gh.requests().split_off(before);
    // A persisted query's id and extensions beside a query are not passed on: GitHub reads
    // the document the gateway read.
    let persisted: Vec<&Value> = reqs
        .iter()
        .filter(|q| q["graphql"]["fields"] == serde_json::json!(["viewer"]))
        .filter(|q| {
            let b = q["body"].as_str().unwrap_or("");
            b.contains("persistedQuery") || b.contains("documentId")
        })
        .collect();
    assert!(persisted.is_empty(), "{persisted:?}");
    let mutations: Vec<&Value> = reqs
        .iter()
        .filter(|q| q["graphql"]["type"] == "mutation")
        .collect();
    assert_eq!(mutations.len(), 2, "{mutations:?}");
    for q in &reqs {
        let (m, p) = (
            q["method"].as_str().unwrap_or(""),
            q["path"].as_str().unwrap_or(""),
        );
        assert!(
            m == "GET"
                || p == "/graphql"
                || p.ends_with("/git-upload-pack")
                || p.starts_with("/app/")
                || p == "/installation/token",
            "a write reached GitHub: {q}"
        );
    }
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(gh.dir.path().join("graphql.json")).unwrap())
            .unwrap();
    let theirs = &state["repos"]["example-org/example-repo"]["items"][1];
    assert_eq!(theirs["title"], "theirs", "{theirs}");
    assert_eq!(theirs["state"], "OPEN", "{theirs}");
    assert_eq!(
        state["repos"]["example-org/other"]["items"][0]["comments"],
        serde_json::json!([]),
        "a comment reached another repository's issue"
    );
    let ev = events(&run_id_of(&o), "github_write", 20);
    let denied = |rule: &str| {
        ev.iter()
            .filter(|e| e["AIRLOCK_DECISION"] == "deny" && e["AIRLOCK_RULE"] == rule)
            .count()
    };
    assert!(denied("pull_requests.open") >= 4, "{ev:?}");
    assert!(denied("writes.repos") >= 1, "{ev:?}");
    assert!(denied("github: node id") >= 4, "{ev:?}");
}

/// At L3, the merge lands only the head the gate read an approval of: the run opens a pull
/// request from its own branch, a person approves its head H1 (a commit whose dates the run
/// fixes, so the test knows its id), the run asks for the merge and, while the gate waits
/// for GitHub's reviews (a slow GitHub: 5 s), pushes H2 to the branch. The merge GitHub
/// runs carries `expectedHeadOid` H1 (GitHub refuses it once the head moved), so H2 never
/// lands unreviewed.
const RACE: &str = r#"
git config --global user.name agent && git config --global user.email agent@example.com
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
git clone -q https://github.com/example-org/example-repo.git repo && cd repo || exit 1
git checkout -q -b airlock/race && echo approved > race.txt && git add race.txt && git commit -qm approved
echo "R h1 $(git rev-parse HEAD)"
x push git push -q origin HEAD:refs/heads/airlock/race
x open gh pr create -R example-org/example-repo --head airlock/race --base main --title Race --body B
(gh pr merge 3 -R example-org/example-repo --merge > "$HOME/merge.out" 2>&1; echo $? > "$HOME/merge.rc") &
sleep 2
echo unreviewed > race.txt && git commit -qam unreviewed
echo "R h2 $(git rev-parse HEAD)"
x push2 git push -q origin HEAD:refs/heads/airlock/race
wait
echo "R merge $(cat "$HOME/merge.rc") $(tr '\n' ' ' < "$HOME/merge.out")"
"#;

#[test]
fn at_l3_a_push_while_the_gate_reads_the_reviews_does_not_land_unreviewed() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host(&gh, "L3");
    let role_file = h.root.join("roles.local/merge-gate/role.yaml");
    let text = std::fs::read_to_string(&role_file).unwrap();
    let text = text
        .replace(
            "pull_requests: [merge, review, comment]",
            "pull_requests: [open, merge, review, comment]",
        )
        .replace("github_writes_per_run: 3", "github_writes_per_run: 8");
    std::fs::write(&role_file, text).unwrap();
    // H1 as the run will make it: the same parent, tree, names and dates.
    let scratch = tempfile::tempdir().unwrap();
    let c = std::process::Command::new("git")
        .args(["clone", "-q"])
        .arg(gh.bare())
        .arg(scratch.path().join("r"))
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", stderr(&c));
    let r = scratch.path().join("r");
    std::fs::write(r.join("race.txt"), "approved\n").unwrap();
    let sh = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=agent",
                "-c",
                "user.email=agent@example.com",
            ])
            .args(args)
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .current_dir(&r)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).trim().to_string()
    };
    sh(&["add", "race.txt"]);
    sh(&["commit", "-qm", "approved"]);
    let h1 = sh(&["rev-parse", "HEAD"]);
    std::fs::write(
        gh.dir.path().join("reviews.json"),
        serde_json::json!({"example-org/example-repo#3": [{"user": {"login": "octo-human", "type": "User"}, "state": "APPROVED", "commit_id": h1}]}).to_string(),
    )
    .unwrap();
    std::fs::write(gh.dir.path().join("slow_reviews"), "5").unwrap();
    let script = format!("set -u\n{GQL_HELPER}{RACE}");
    let o = h
        .launch("merge-gate", "mona", &[], &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let res = results(&out);
    let get = |k: &str| res.get(k).map(String::as_str).unwrap_or("missing");
    assert_eq!(get("h1"), h1, "the run's H1 is not the test's: {out}");
    assert!(get("push").starts_with("ok"), "{out}");
    assert!(get("open").starts_with("ok"), "{out}");
    assert!(get("push2").starts_with("ok"), "{out}");
    let h2 = get("h2").to_string();
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(gh.dir.path().join("graphql.json")).unwrap())
            .unwrap();
    let pr = state["repos"]["example-org/example-repo"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["number"] == 3)
        .cloned()
        .unwrap_or_default();
    eprintln!("merge: {}\npull: {pr}", get("merge"));
    assert!(
        !(pr["state"] == "MERGED" && pr["mergedOid"] == h2.as_str()),
        "the unreviewed head {h2} landed: {pr}\n{out}"
    );
    // The merge GitHub was asked for names the head the gate read the approval of.
    let merges: Vec<Value> = gh
        .requests()
        .into_iter()
        .filter(|q| q["graphql"]["fields"] == serde_json::json!(["mergePullRequest"]))
        .collect();
    assert_eq!(merges.len(), 1, "{merges:?}");
    assert!(
        merges[0]["body"]
            .as_str()
            .is_some_and(|b| b.contains(&format!("\"expectedHeadOid\":\"{h1}\""))),
        "{merges:?}"
    );
}

/// At L4, a person's pull request from a fork since deleted (GitHub answers its head's
/// repository as null) whose head branch has the name of a branch a run here created is
/// not that run's: the ratchet finds no opener for it (judge-missing), and it does not
/// land without a human even though the judge of the run's role ran yesterday.
#[test]
fn at_l4_a_deleted_forks_pull_request_named_like_a_runs_branch_is_not_the_runs() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host_hiring(&gh, "L4", &[("gina", "ghprobe")]);
    let dir = h.root.join("roles.local/ghprobe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), format!("{}{JUDGED}", role(5))).unwrap();
    std::fs::write(dir.join("brief.md"), "# GitHub probe\n").unwrap();
    let o = h
        .launch("ghprobe", "gina", &[], &["/bin/sh", "-c", OPEN])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("/pull/3"), "{out}");
    let opened = gh.post(
        "/repos/example-org/example-repo/pulls",
        &gh.mint_token(),
        r#"{"title":"from a fork","head":"airlock/judged","base":"main","standin_author":"octo-forker","standin_fork_deleted":true}"#,
    );
    assert_eq!(opened["number"], 4, "{opened}");
    let run = |id: u64, conclusion: &str, d: u64| serde_json::json!({"id": id, "status": "completed", "conclusion": conclusion, "head_branch": "main", "updated_at": days_ago(d)});
    actions(&gh, serde_json::json!([run(72, "success", 1)]));
    let (g, rest, _) = merge_pull(&gh, &h, 4, serde_json::json!([]));
    for said in [&g, &rest] {
        assert!(
            said.contains("judge-missing") && said.contains("repository"),
            "{said}"
        );
    }
    assert!(
        !merged_pull(&gh, 4),
        "the fork's pull request landed by the run's judge"
    );
    // The run's own pull request still lands by its judge.
    let (g, _, _) = merge_pull(&gh, &h, 3, serde_json::json!([]));
    assert!(g.starts_with("ok"), "{g}");
}

/// At L3, the gate reads every page of a pull request's reviews: a person's approval of
/// the head, 120 comments of others, then the same person's change request (GitHub lists
/// reviews oldest first, 100 a page at most). Read to the last page, the person changed
/// their mind and the merge is refused; read to the first, it would land.
#[test]
fn at_l3_the_merge_gate_reads_every_page_of_the_reviews() {
    require_journald();
    let gh = StandInGithub::start();
    let h = gate_host(&gh, "L3");
    let head = head_of(&gh, "feature");
    let review = |login: &str, state: &str| serde_json::json!({"user": {"login": login, "type": "User"}, "state": state, "commit_id": head});
    let mut reviews = vec![review("octo-human", "APPROVED")];
    reviews.extend((0..120).map(|i| review(&format!("octo-{i}"), "COMMENTED")));
    reviews.push(review("octo-human", "CHANGES_REQUESTED"));
    let (g, rest, _) = merge_once(&gh, &h, Value::Array(reviews));
    for said in [&g, &rest] {
        assert!(
            said.contains("land: after-human-approval") && said.contains("no review approves"),
            "the approval its author took back on page 2 landed the merge: {said}"
        );
    }
    assert!(!merged(&gh), "a refused merge reached GitHub");
}
