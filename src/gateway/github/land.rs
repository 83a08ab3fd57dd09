//! Whether a merge lands: at a level whose `land` is `after-human-approval`, the gateway
//! asks GitHub for the pull request (its head commit and author) and its reviews before
//! forwarding, and forwards only with a human's approval on the head commit
//! ([`crate::policy::github::human_approval`]); at `by-ratchet` a human's approval lands it
//! too, and without one the judge's recency would have to, which this gateway does not
//! check yet: refused as `judge-missing`.

use serde_json::Value;

use super::{get_json, Github};
use crate::policy::github::{human_approval, Review};
use crate::policy::levels::Landing;

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
/// approver and the head commit), or the rule and why not.
pub async fn gate(
    gh: &Github,
    repo: &str,
    number: Option<u64>,
) -> Result<String, (&'static str, String)> {
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
    let list = get_json(
        gh,
        &format!("/repos/{repo}/pulls/{number}/reviews?per_page=100"),
        token,
    )
    .await
    .ok_or_else(unread)?;
    match human_approval(&reviews(&list), &head, &author) {
        Ok(approver) => Ok(format!("approved by {approver} on {head}")),
        Err(why) if landing == Landing::ByRatchet => Err((
            "judge-missing",
            format!("{why}, and the judge's recency (by-ratchet) is not checked by this gateway yet; head {head}"),
        )),
        Err(why) => Err((rule, format!("{why}; head {head}"))),
    }
}
