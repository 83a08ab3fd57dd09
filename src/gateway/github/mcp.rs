//! Airlock's GitHub MCP connector (`run.mcp.github: {via: airlock}`) under the GitHub
//! route's rules: its upstream gets the run's installation token, and each tool call the
//! role's tool grants let through is classified like a REST request (the tool names of
//! GitHub's MCP server) and, when it writes, decided and counted by the same checks
//! ([`super::Github::authorize`]). A tool this table does not know that is not a read by
//! its name (`get_*`, `list_*`, `search_*`) is refused: fail closed.

use std::time::Instant;

use serde_json::Value;

use super::Github;
use crate::policy::github::Action;

/// The connector name the GitHub route governs.
pub const CONNECTOR: &str = "github";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolKind {
    Read,
    Write {
        repo: String,
        actions: Vec<Action>,
        /// The branch it writes to, for the push rules.
        branch: Option<String>,
    },
    Unknown(&'static str),
}

fn s<'a>(args: &'a Value, k: &str) -> Option<&'a str> {
    args.get(k).and_then(Value::as_str)
}

/// What a tool call of GitHub's MCP server does.
pub fn classify(tool: &str, args: &Value) -> ToolKind {
    if ["get_", "list_", "search_"]
        .iter()
        .any(|p| tool.starts_with(p))
    {
        return ToolKind::Read;
    }
    let (Some(owner), Some(name)) = (s(args, "owner"), s(args, "repo")) else {
        return ToolKind::Unknown("a GitHub write names its repository (owner, repo)");
    };
    let Some(repo) = super::classify::repo_of(owner, name) else {
        return ToolKind::Unknown("the repository is not a plain OWNER/REPO");
    };
    let branch = s(args, "branch").map(str::to_string);
    let review = || super::classify::review_action(args.get("event"));
    use Action::*;
    let actions = match tool {
        "create_issue" => vec![Issue("create")],
        "add_issue_comment" => vec![Issue("comment")],
        "update_issue" => {
            let mut a = Vec::new();
            match s(args, "state") {
                Some("closed") => a.push(Issue("close")),
                Some("open") => a.push(Issue("reopen")),
                Some(_) => return ToolKind::Unknown("an issue's state is open or closed"),
                None => {}
            }
            if args.get("title").is_some() || args.get("body").is_some() {
                a.push(Issue("edit_body"));
            }
            if args.get("labels").is_some() {
                a.push(Issue("label"));
            }
            if args.get("assignees").is_some() {
                a.push(Issue("assign"));
            }
            let known = [
                "owner",
                "repo",
                "issue_number",
                "state",
                "state_reason",
                "title",
                "body",
                "labels",
                "assignees",
            ];
            let other = args
                .as_object()
                .is_some_and(|o| o.keys().any(|k| !known.contains(&k.as_str())));
            if a.is_empty() || other {
                return ToolKind::Unknown("an issue edit Airlock does not know");
            }
            a
        }
        "create_pull_request" => vec![PullRequest("open")],
        "merge_pull_request" => vec![PullRequest("merge")],
        "create_pull_request_review"
        | "create_and_submit_pull_request_review"
        | "submit_pending_pull_request_review" => vec![review()],
        "add_comment_to_pending_review" | "add_pull_request_review_comment" => {
            vec![PullRequest("review")]
        }
        "run_workflow" | "rerun_workflow_run" | "rerun_failed_jobs" => vec![Dispatch],
        "create_branch" => vec![Contents(None)],
        "create_or_update_file" | "delete_file" => match s(args, "path") {
            Some(p) => vec![Contents(Some(p.trim_start_matches('/').to_string()))],
            None => return ToolKind::Unknown("a file write names its path"),
        },
        "push_files" => {
            let Some(files) = args.get("files").and_then(Value::as_array) else {
                return ToolKind::Unknown("push_files names its files");
            };
            let mut a = Vec::new();
            for f in files {
                match f.get("path").and_then(Value::as_str) {
                    Some(p) => a.push(Contents(Some(p.trim_start_matches('/').to_string()))),
                    None => return ToolKind::Unknown("each pushed file names its path"),
                }
            }
            if a.is_empty() {
                return ToolKind::Unknown("push_files names its files");
            }
            a
        }
        _ => {
            return ToolKind::Unknown("not a GitHub tool Airlock knows; unknown writes are refused")
        }
    };
    if actions
        .iter()
        .any(|a| matches!(a, Contents(Some(p)) if p.contains(['%', '\\']) || p.split('/').any(|s| s.is_empty() || s == "." || s == "..")))
    {
        return ToolKind::Unknown("a file path is not plain");
    }
    ToolKind::Write {
        repo,
        actions,
        branch,
    }
}

/// A write that passed, to be journaled with the upstream's answer.
pub struct Passed {
    /// The branch it makes (`create_branch`), the run's once the upstream made it.
    pub made: Option<String>,
    pub repo: String,
    pub name: String,
    pub rule: String,
    pub reason: String,
    pub started: Instant,
}

/// Check one tool call: `Ok(None)` for a read, `Ok(Some)` for a write that may go on
/// (counted), `Err` with the reason for a refusal (journaled).
pub async fn check(gh: &Github, tool: &str, args: &Value) -> Result<Option<Passed>, String> {
    let started = Instant::now();
    let endpoint = format!("mcp {}", crate::gateway::clip(tool, 64));
    match classify(tool, args) {
        ToolKind::Read => Ok(None),
        ToolKind::Unknown(why) => {
            let repo = match (s(args, "owner"), s(args, "repo")) {
                (Some(o), Some(r)) => crate::gateway::clip(&format!("{o}/{r}"), 200),
                _ => "-".into(),
            };
            gh.journal(
                &repo,
                "unknown",
                &endpoint,
                (false, "github: unknown write", why),
                403,
                started,
            );
            Err(format!("github: unknown write: {why}"))
        }
        ToolKind::Write {
            repo,
            actions,
            branch,
        } => {
            // A comment or a label given through a pull request's issue number is the pull
            // request's write, as on the REST issues API.
            let number = args.get("issue_number").and_then(Value::as_u64);
            let actions = match number.filter(|_| {
                actions
                    .iter()
                    .any(|a| matches!(a, Action::Issue("comment") | Action::Issue("label")))
            }) {
                None => actions,
                Some(n) => {
                    let name = super::write_name(&actions);
                    if let Err(d) = gh.decide(&repo, &actions, &name, &endpoint, started) {
                        return Err(format!("{}: {}", d.rule, d.reason));
                    }
                    match super::is_pull(gh, &repo, n).await {
                        None => {
                            let why = "GitHub could not be asked whether the issue is a pull request, so the write does not go on";
                            let rule = "github: unknown write";
                            gh.journal(&repo, &name, &endpoint, (false, rule, why), 403, started);
                            return Err(format!("{rule}: {why}"));
                        }
                        Some(false) => actions,
                        Some(true) => actions
                            .into_iter()
                            .map(|a| match a {
                                Action::Issue("comment") => Action::PullRequest("comment"),
                                Action::Issue("label") => Action::PullRequest("label"),
                                other => other,
                            })
                            .collect(),
                    }
                }
            };
            let name = super::write_name(&actions);
            // Committing files or making a branch: the push rules (a branch named, not the
            // default one, and one this run made, unless this makes it).
            let making = tool == "create_branch";
            if making
                || actions
                    .iter()
                    .any(|a| matches!(a, Action::Contents(Some(_))))
            {
                if let Err(d) = gh.decide(&repo, &actions, &name, &endpoint, started) {
                    return Err(format!("{}: {}", d.rule, d.reason));
                }
                if let Err((rule, why)) = gh.branch_rules(&repo, branch.as_deref(), making).await {
                    gh.journal(&repo, &name, &endpoint, (false, rule, &why), 403, started);
                    return Err(format!("{rule}: {why}"));
                }
            }
            if tool == "create_pull_request" {
                if let Err(d) = gh.decide(&repo, &actions, &name, &endpoint, started) {
                    return Err(format!("{}: {}", d.rule, d.reason));
                }
                if let Err((rule, why)) = super::open_head_rules(gh, &repo, s(args, "head")).await {
                    let why = format!("head: {why}");
                    gh.journal(&repo, &name, &endpoint, (false, rule, &why), 403, started);
                    return Err(format!("{rule}: {why}"));
                }
            }
            if actions.contains(&Action::PullRequest("merge")) {
                if let Err(d) = gh.decide(&repo, &actions, &name, &endpoint, started) {
                    return Err(format!("{}: {}", d.rule, d.reason));
                }
                let number = args.get("pullNumber").and_then(Value::as_u64);
                match super::land::gate(gh, &repo, number).await {
                    // GitHub's MCP merge tool names no head commit, so a push between the
                    // gate's read and the merge would land a head nobody approved or
                    // judged: refused, pointing at the paths the gateway pins (REST `sha`,
                    // GraphQL `expectedHeadOid`, which `gh pr merge` sends).
                    Ok(_) => {
                        let rule = "land: head";
                        let why = "merge_pull_request names no head commit, so the head the gate decided on cannot be pinned: merge with `gh pr merge` or the REST or GraphQL merge, which name it";
                        gh.journal(&repo, &name, &endpoint, (false, rule, why), 403, started);
                        return Err(format!("{rule}: {why}"));
                    }
                    Err((rule, why)) => {
                        gh.journal(&repo, &name, &endpoint, (false, rule, &why), 403, started);
                        return Err(format!("{rule}: {why}"));
                    }
                }
            }
            // An issue's number may be a pull request's: editing it edits the pull request,
            // allowed only on one this run opened (as REST `PATCH .../issues/N`).
            if tool == "update_issue"
                && actions.iter().any(|a| {
                    matches!(
                        a,
                        Action::Issue("close")
                            | Action::Issue("reopen")
                            | Action::Issue("edit_body")
                    )
                })
            {
                if let Err(d) = gh.decide(&repo, &actions, &name, &endpoint, started) {
                    return Err(format!("{}: {}", d.rule, d.reason));
                }
                let why = match args.get("issue_number").and_then(Value::as_u64) {
                    None => Some("update_issue names its issue_number"),
                    Some(n) => super::issue_is_anothers_pull(gh, &repo, n).await,
                };
                if let Some(why) = why {
                    let rule = "pull_requests.open";
                    gh.journal(&repo, &name, &endpoint, (false, rule, why), 403, started);
                    return Err(format!("{rule}: {why}"));
                }
            }
            match gh.authorize(&repo, &actions, &name, &endpoint, started) {
                Ok(d) => Ok(Some(Passed {
                    made: branch.filter(|_| making),
                    repo,
                    name,
                    rule: d.rule,
                    reason: d.reason,
                    started,
                })),
                Err(d) => Err(format!("{}: {}", d.rule, d.reason)),
            }
        }
    }
}

/// Journal a write that went on, with whether the upstream took it.
pub fn passed(gh: &Github, tool: &str, p: &Passed, ok: bool) {
    if let Some(b) = p.made.as_deref().filter(|_| ok) {
        gh.record_created(&p.repo, b);
    }
    let endpoint = format!("mcp {}", crate::gateway::clip(tool, 64));
    gh.journal(
        &p.repo,
        &p.name,
        &endpoint,
        (true, &p.rule, &p.reason),
        if ok { 200 } else { 502 },
        p.started,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tools_are_classified_like_their_rest_endpoints() {
        let a = json!({"owner": "o", "repo": "r", "issue_number": 1, "body": "x"});
        assert_eq!(classify("get_issue", &a), ToolKind::Read);
        assert_eq!(
            classify("add_issue_comment", &a),
            ToolKind::Write {
                repo: "o/r".into(),
                actions: vec![Action::Issue("comment")],
                branch: None
            }
        );
        let m = json!({"owner": "o", "repo": "r", "pullNumber": 2});
        assert!(
            matches!(classify("merge_pull_request", &m), ToolKind::Write { actions, .. } if actions == vec![Action::PullRequest("merge")])
        );
        let p = json!({"owner": "o", "repo": "r", "branch": "b", "files": [{"path": ".github/workflows/x.yml", "content": ""}]});
        assert!(
            matches!(classify("push_files", &p), ToolKind::Write { branch: Some(b), actions, .. } if b == "b" && actions == vec![Action::Contents(Some(".github/workflows/x.yml".into()))])
        );
        for (t, a) in [
            (
                "push_files",
                json!({"owner": "o", "repo": "r", "branch": "b", "files": [{"path": ".github%2Fworkflows%2Fx.yml", "content": ""}]}),
            ),
            ("delete_repository", json!({"owner": "o", "repo": "r"})),
            ("fork_repository", json!({"owner": "o", "repo": "r"})),
            ("add_issue_comment", json!({"owner": "o"})),
            ("add_issue_comment", json!({"owner": "..", "repo": "r"})),
            (
                "update_issue",
                json!({"owner": "o", "repo": "r", "milestone": 1}),
            ),
            (
                "create_or_update_file",
                json!({"owner": "o", "repo": "r", "path": "a/../b"}),
            ),
        ] {
            assert!(matches!(classify(t, &a), ToolKind::Unknown(_)), "{t} {a}");
        }
    }
}
