//! Whether a merge lands: at a level whose `land` is `after-human-approval`, the gateway
//! asks GitHub for the pull request (its head commit and author) and its reviews before
//! forwarding, and forwards only with a human's approval on the head commit
//! ([`crate::policy::github::human_approval`]); at `by-ratchet` a human's approval lands it
//! too, and without one the judge of the role that opened the pull request must have run
//! within its `max_age_days` ([`crate::policy::ratchet`]): that role is the one of the run
//! that created the head branch, as the host's ledger says ([`Openers`]). Otherwise the
//! merge is refused as `judge-missing`.

use std::sync::Arc;

use serde_json::Value;

use super::{get_json, Github};
use crate::policy::github::{human_approval, Review};
use crate::policy::levels::Landing;
use crate::policy::ratchet;
use crate::role::model::{JudgeCheck, JudgeChecks};

/// The run that created a branch, by the host's ledger.
#[derive(Debug, Clone)]
pub struct Opener {
    pub run: String,
    pub role: String,
    /// That role's `judge.check` as the host has it now (empty: none).
    pub checks: Vec<JudgeCheck>,
}

/// Who created a pull request's head branch. Blocking (it reads the ledger).
pub trait Openers: Send + Sync {
    /// The newest run that created `branch` of `repo`, or none; an error when the ledger
    /// or the role cannot be read.
    fn opener(&self, repo: &str, branch: &str) -> Result<Option<Opener>, String>;
}

/// A role's judge checks, one or many.
pub fn checks_of(c: Option<&JudgeChecks>) -> Vec<JudgeCheck> {
    match c {
        Some(JudgeChecks::One(c)) => vec![c.clone()],
        Some(JudgeChecks::Many(v)) => v.clone(),
        None => Vec::new(),
    }
}

/// Reviews asked for a page, and pages read at most (past them the merge is refused).
const PER_PAGE: usize = 100;
const MAX_REVIEW_PAGES: u32 = 30;

/// The reviews GitHub lists for a pull request.
fn reviews(v: &Value) -> Vec<Review> {
    let s = |r: &Value, k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|r| Review {
                    login: r.get("user").map(|u| s(u, "login")).unwrap_or_default(),
                    account: r.get("user").map(|u| s(u, "type")).unwrap_or_default(),
                    state: s(r, "state"),
                    commit: s(r, "commit_id"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the merge of pull request `number` of `repo` may go on: what to journal (the
/// approver and the head commit) and the head commit the decision was made on (the merge
/// GitHub is asked for must name it, or a push meanwhile would land unreviewed), or the
/// rule and why not.
pub async fn gate(
    gh: &Github,
    repo: &str,
    number: Option<u64>,
) -> Result<(String, String), (&'static str, String)> {
    let landing = gh.plan.policy.landing(repo);
    if landing == Landing::Never {
        return Err(("land: never", "no change lands at this level".into()));
    }
    let rule = "land: after-human-approval";
    let number = number.ok_or((rule, "the pull request's number is not known".to_string()))?;
    let token = gh.token_for(Some(repo)).cloned();
    let unread = || {
        (
            rule,
            "GitHub could not be asked for the pull request and its reviews, so the merge does not go on"
                .to_string(),
        )
    };
    let pull = get_json(gh, &format!("/repos/{repo}/pulls/{number}"), token.clone())
        .await
        .ok_or_else(unread)?;
    let head = pull
        .get("head")
        .and_then(|h| h.get("sha"))
        .and_then(Value::as_str)
        .ok_or_else(unread)?
        .to_string();
    let author = pull
        .get("user")
        .and_then(|u| u.get("login"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    // Every page: GitHub lists reviews oldest first, so a person's later change of mind
    // may be past the first hundred.
    let mut all = Vec::new();
    for page in 1..=MAX_REVIEW_PAGES {
        let got = get_json(
            gh,
            &format!("/repos/{repo}/pulls/{number}/reviews?per_page={PER_PAGE}&page={page}"),
            token.clone(),
        )
        .await
        .ok_or_else(unread)?;
        let items = got.as_array().cloned().ok_or_else(unread)?;
        let last = items.len() < PER_PAGE;
        all.extend(items);
        if last {
            break;
        }
        if page == MAX_REVIEW_PAGES {
            return Err((
                rule,
                format!(
                    "the pull request has more than {} reviews, more than the gate reads",
                    PER_PAGE * MAX_REVIEW_PAGES as usize
                ),
            ));
        }
    }
    let list = Value::Array(all);
    match human_approval(&reviews(&list), &head, &author) {
        Ok(approver) => Ok((format!("approved by {approver} on {head}"), head)),
        Err(why) if landing == Landing::ByRatchet => match judged(gh, repo, &pull).await {
            Ok(ran) => Ok((format!("by-ratchet: {ran}; head {head}"), head)),
            Err(e) => Err(("judge-missing", format!("{why}, and {e}; head {head}"))),
        },
        Err(why) => Err((rule, format!("{why}; head {head}"))),
    }
}

/// `body` (a JSON object, or none) with `key` naming `head`: the head commit the gate
/// decided on, so GitHub merges only that (its answer is an error once the branch moved).
/// `Err` when the run's own value names another commit.
pub fn pin_head(body: Option<&Value>, key: &str, head: &str) -> Result<Value, String> {
    let mut v = match body {
        Some(Value::Object(o)) => Value::Object(o.clone()),
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(_) => return Err("the merge's body is not a JSON object".into()),
    };
    let o = v
        .as_object_mut()
        .ok_or("the merge's body is not a JSON object")?;
    match o.get(key) {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.eq_ignore_ascii_case(head) => {}
        Some(_) => {
            return Err(format!(
            "the merge names another head commit ({key}) than {head}, the one the gate decided on"
        ))
        }
    }
    o.insert(key.to_string(), Value::String(head.to_string()));
    Ok(v)
}

/// Whether the judge of the role that opened `pull` (of `repo`) ran within its
/// `max_age_days`, every check of it: what ran, or why it did not.
async fn judged(gh: &Github, repo: &str, pull: &Value) -> Result<String, String> {
    let head = pull.get("head");
    let branch = head
        .and_then(|h| h.get("ref"))
        .and_then(Value::as_str)
        .ok_or("the pull request's head branch is not known")?
        .to_string();
    let from = head
        .and_then(|h| h.get("repo"))
        .and_then(|r| r.get("full_name"))
        .and_then(Value::as_str);
    match from {
        Some(f) if f.eq_ignore_ascii_case(repo) => {}
        Some(_) => {
            return Err(
                "its head branch is in another repository, which no run here created".into(),
            )
        }
        // GitHub answers a deleted fork's head repository as null: a branch of that name
        // here says nothing of who wrote its commits.
        None => return Err(
            "its head branch's repository is not named (a deleted fork), so no run here created it"
                .into(),
        ),
    }
    let openers: Arc<dyn Openers> = gh
        .plan
        .openers
        .clone()
        .ok_or("this gateway has no ledger to find who opened it")?;
    let (r, b) = (repo.to_string(), branch.clone());
    let found = tokio::task::spawn_blocking(move || openers.opener(&r, &b))
        .await
        .map_err(|_| "the ledger could not be read".to_string())??;
    let o = found.ok_or_else(|| {
        format!("no run in this host's ledger created its head branch {branch}, so no role's judge speaks for it")
    })?;
    if o.checks.is_empty() {
        return Err(format!(
            "role {} (run {}, which created {branch}) has no judge.check",
            o.role, o.run
        ));
    }
    let mut ran = Vec::new();
    for c in &o.checks {
        let got = check(gh, c)
            .await
            .map_err(|e| format!("the judge of role {} has not run: {e}", o.role))?;
        ran.push(got);
    }
    Ok(format!(
        "the judge of role {} (run {} created {branch}) ran: {}",
        o.role,
        o.run,
        ran.join("; ")
    ))
}

/// One judge check, read from GitHub with the token of its repository's owner.
async fn check(gh: &Github, c: &JudgeCheck) -> Result<String, String> {
    let now = crate::clock::now_ms();
    let token = gh
        .token_for(Some(&c.repo))
        .cloned()
        .ok_or_else(|| format!("{} is not a repository this run's tokens can read", c.repo))?;
    let unread = |what: &str| format!("{what} of {} could not be read from GitHub", c.repo);
    match (&c.workflow, &c.branch, &c.issue_label) {
        (Some(wf), Some(branch), _) => {
            let path = format!(
                "/repos/{}/actions/workflows/{}/runs?branch={}&status=completed&per_page=100",
                c.repo,
                query(wf),
                query(branch)
            );
            // A workflow file that does not exist has never run (GitHub answers 404).
            let runs = get_json(gh, &path, Some(token)).await.ok_or_else(|| {
                unread(&format!(
                    "the runs of {wf} (a workflow that does not exist has never run)"
                ))
            })?;
            ratchet::ci_ran(&runs, wf, branch, now, c.max_age_days)
        }
        (_, _, Some(label)) => {
            let path = format!(
                "/repos/{}/issues?labels={}&state=open&per_page=100",
                c.repo,
                query(label)
            );
            let list = get_json(gh, &path, Some(token.clone()))
                .await
                .ok_or_else(|| unread("the open issues"))?;
            let issues = ratchet::open_issues(&list);
            if issues.is_empty() {
                return Err(format!("{} has no open issue labelled {label}", c.repo));
            }
            let mut why = String::new();
            for (n, opener) in issues {
                let path = format!(
                    "/repos/{}/issues/{n}/comments?since={}&per_page=100",
                    c.repo,
                    ratchet::since(now, c.max_age_days)
                );
                let comments = get_json(gh, &path, Some(token.clone()))
                    .await
                    .ok_or_else(|| unread(&format!("the comments on #{n}")))?;
                match ratchet::report_ran(&comments, n, &opener, label, now, c.max_age_days) {
                    Ok(ran) => return Ok(ran),
                    Err(e) => why = e,
                }
            }
            Err(why)
        }
        _ => Err("the check names neither a workflow and branch nor an issue label".into()),
    }
}

/// A query-string value, percent-encoded (RFC 3986 unreserved characters kept).
fn query(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod pin_tests {
    use super::pin_head;
    use serde_json::json;

    #[test]
    fn a_merge_names_the_head_the_gate_decided_on_or_is_refused() {
        let h = "a".repeat(40);
        assert_eq!(
            pin_head(Some(&json!({})), "sha", &h).unwrap(),
            json!({"sha": h})
        );
        assert_eq!(pin_head(None, "sha", &h).unwrap(), json!({"sha": h}));
        assert_eq!(
            pin_head(
                Some(&json!({"pullRequestId": "PR_1", "expectedHeadOid": h.to_uppercase()})),
                "expectedHeadOid",
                &h
            )
            .unwrap(),
            json!({"pullRequestId": "PR_1", "expectedHeadOid": h})
        );
        assert!(pin_head(Some(&json!({"sha": "b".repeat(40)})), "sha", &h).is_err());
        assert!(pin_head(Some(&json!({"sha": 1})), "sha", &h).is_err());
        assert!(pin_head(Some(&json!([])), "sha", &h).is_err());
    }
}
