//! Whether a role's judge ran recently enough for the ratchet to land a change (`land:
//! by-ratchet`, seed 000's `judge.check`): decided here from what GitHub answered. Only
//! when the judge last ran is read, never what it measured. Pure.

use serde_json::Value;

use crate::calendar::{parse_utc_ms, utc};

const DAY_MS: u64 = 86_400_000;

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Whether `at` is within `max_age_days` of `now` (a time ahead of `now`, a skewed
/// clock, counts as now).
fn recent(at: u64, now: u64, max_age_days: u8) -> bool {
    now.saturating_sub(at) <= u64::from(max_age_days) * DAY_MS
}

/// A CI judge: the runs of `workflow` as GitHub's Actions API lists them
/// (`{"workflow_runs": [...]}`). It ran when a run on `branch` completed with success or
/// failure (skipped and cancelled do not count) within `max_age_days`. What ran, or why
/// not.
pub fn ci_ran(
    runs: &Value,
    workflow: &str,
    branch: &str,
    now: u64,
    max_age_days: u8,
) -> Result<String, String> {
    let last = runs
        .get("workflow_runs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| {
            s(r, "status") == "completed"
                && matches!(s(r, "conclusion"), "success" | "failure")
                && s(r, "head_branch") == branch
        })
        .filter_map(|r| Some((parse_utc_ms(s(r, "updated_at"))?, r)))
        .max_by_key(|(at, _)| *at);
    let Some((at, r)) = last else {
        return Err(format!(
            "{workflow} has no completed run (success or failure) on {branch}"
        ));
    };
    let id = r.get("id").and_then(Value::as_u64).unwrap_or(0);
    let what = format!(
        "{workflow} run {id} on {branch} completed ({}) at {} UTC",
        s(r, "conclusion"),
        utc(at)
    );
    if recent(at, now, max_age_days) {
        Ok(what)
    } else {
        Err(format!("{what}, more than {max_age_days} days ago"))
    }
}

/// The open issues (not pull requests) of GitHub's answer to an issues listing.
pub fn open_issues(list: &Value) -> Vec<(u64, String)> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter(|i| s(i, "state") == "open" && i.get("pull_request").is_none())
        .filter_map(|i| {
            let n = i.get("number").and_then(Value::as_u64)?;
            let by = i.get("user").map(|u| s(u, "login")).unwrap_or("");
            (!by.is_empty()).then(|| (n, by.to_string()))
        })
        .collect()
}

/// A report judge: the comments on issue `number`, opened by `opener` and labelled
/// `label`. It ran when `opener` commented within `max_age_days`.
pub fn report_ran(
    comments: &Value,
    number: u64,
    opener: &str,
    label: &str,
    now: u64,
    max_age_days: u8,
) -> Result<String, String> {
    let last = comments
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c.get("user")
                .is_some_and(|u| s(u, "login").eq_ignore_ascii_case(opener))
        })
        .filter_map(|c| parse_utc_ms(s(c, "created_at")))
        .max();
    match last {
        Some(at) if recent(at, now, max_age_days) => Ok(format!(
            "{opener} commented on #{number} ({label}) at {} UTC",
            utc(at)
        )),
        Some(at) => Err(format!(
            "{opener} last commented on #{number} ({label}) at {} UTC, more than {max_age_days} days ago",
            utc(at)
        )),
        None => Err(format!(
            "{opener}, who opened #{number} ({label}), has not commented on it within {max_age_days} days"
        )),
    }
}

/// How far back a report judge's comments are read: `since` for GitHub's comment listing.
pub fn since(now: u64, max_age_days: u8) -> String {
    let at = now.saturating_sub(u64::from(max_age_days) * DAY_MS);
    format!("{}Z", utc(at).replace(' ', "T"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_796_126_400_000; // 2026-12-01 12:00:00 UTC

    fn run(id: u64, conclusion: &str, at: &str) -> Value {
        json!({"id": id, "status": "completed", "conclusion": conclusion, "head_branch": "main", "updated_at": at})
    }

    #[test]
    fn a_ci_judge_ran_when_its_newest_finished_run_is_recent() {
        let runs = json!({"workflow_runs": [
            run(1, "success", "2026-11-20T00:00:00Z"),
            run(2, "failure", "2026-11-30T09:00:00Z"),
            run(3, "cancelled", "2026-12-01T11:00:00Z"),
            run(4, "skipped", "2026-12-01T11:00:00Z"),
            {"id": 5, "status": "in_progress", "conclusion": null, "head_branch": "main", "updated_at": "2026-12-01T11:30:00Z"},
            {"id": 6, "status": "completed", "conclusion": "success", "head_branch": "other", "updated_at": "2026-12-01T11:30:00Z"},
        ]});
        let ok = ci_ran(&runs, "ci.yml", "main", NOW, 3).unwrap();
        assert!(ok.contains("run 2") && ok.contains("failure"), "{ok}");
        let old = ci_ran(&runs, "ci.yml", "main", NOW, 1).unwrap_err();
        assert!(
            old.contains("run 2") && old.contains("more than 1 days"),
            "{old}"
        );
        let none = json!({"workflow_runs": [run(3, "cancelled", "2026-12-01T11:00:00Z")]});
        assert!(ci_ran(&none, "ci.yml", "main", NOW, 7)
            .unwrap_err()
            .contains("no completed run"));
        assert!(ci_ran(&json!({"message": "Not Found"}), "ci.yml", "main", NOW, 7).is_err());
        // A time GitHub would not write is no run.
        let odd = json!({"workflow_runs": [run(7, "success", "yesterday")]});
        assert!(ci_ran(&odd, "ci.yml", "main", NOW, 7).is_err());
    }

    #[test]
    fn a_report_judge_ran_when_the_issues_opener_commented_recently() {
        let issues = json!([
            {"number": 4, "state": "open", "user": {"login": "sims"}},
            {"number": 5, "state": "open", "user": {"login": "x"}, "pull_request": {}},
            {"number": 6, "state": "closed", "user": {"login": "sims"}},
        ]);
        assert_eq!(open_issues(&issues), vec![(4, "sims".to_string())]);
        let comments = json!([
            {"user": {"login": "someone"}, "created_at": "2026-12-01T10:00:00Z"},
            {"user": {"login": "sims"}, "created_at": "2026-11-29T10:00:00Z"},
        ]);
        assert!(report_ran(&comments, 4, "sims", "sim-coverage", NOW, 3).is_ok());
        let e = report_ran(&comments, 4, "sims", "sim-coverage", NOW, 1).unwrap_err();
        assert!(e.contains("more than 1 days"), "{e}");
        let e = report_ran(&json!([]), 4, "sims", "sim-coverage", NOW, 1).unwrap_err();
        assert!(e.contains("has not commented"), "{e}");
        assert_eq!(since(NOW, 3), "2026-11-28T12:00:00Z");
    }
}
