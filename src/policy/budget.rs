//! Launch checks that are pure arithmetic: the rolling weekly run budget and the
//! concurrency cap. The numbers come from the ledger and the active table; no I/O here.

/// The rolling window of `budget.runs_per_week`.
pub const WEEK_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// Start of the rolling week that ends at `now_ms`.
pub fn window_start(now_ms: u64) -> u64 {
    now_ms.saturating_sub(WEEK_MS)
}

/// `used`: runs of the instance the ledger opened in the last seven days.
pub fn check_weekly(instance: &str, used: usize, runs_per_week: Option<u64>) -> Result<(), String> {
    match runs_per_week {
        Some(limit) if used as u64 >= limit => Err(format!(
            "budget.runs_per_week: instance `{instance}` has used {used} of its {limit} runs in the last 7 days (rolling window); a run becomes available when the oldest one is 7 days old, or raise budget.runs_per_week in the role"
        )),
        _ => Ok(()),
    }
}

pub fn check_concurrency(active: usize, max: usize) -> Result<(), String> {
    if active >= max {
        Err(format!(
            "max_concurrent_runs: {active} runs are active, the limit is {max}; wait for one to end or raise max_concurrent_runs in the config"
        ))
    } else {
        Ok(())
    }
}

/// The budgets in force, for the ledger's opening record: integers only (the ledger refuses
/// floats that may not round-trip).
pub fn budgets_json(
    role: &crate::role::Role,
    max_seconds: Option<u64>,
    deadline_s: u64,
) -> serde_json::Value {
    let b = &role.budget;
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Option<u64>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v.into());
        }
    };
    put("runs_per_week", b.runs_per_week);
    put("minutes_per_run", b.minutes_per_run);
    put("github_writes_per_run", b.github_writes_per_run);
    put(
        "spend_usd_cents",
        b.spend_usd
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| (v * 100.0).round() as u64),
    );
    put("max_seconds", max_seconds);
    put("deadline_s", Some(deadline_s));
    serde_json::Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weekly_budget_refuses_at_the_limit() {
        assert!(check_weekly("tess", 0, Some(2)).is_ok());
        assert!(check_weekly("tess", 1, Some(2)).is_ok());
        let e = check_weekly("tess", 2, Some(2)).unwrap_err();
        assert!(
            e.contains("runs_per_week") && e.contains("2 of its 2"),
            "{e}"
        );
        assert!(check_weekly("tess", 10_000, None).is_ok());
        assert!(check_weekly("tess", 0, Some(0)).is_err());
    }

    #[test]
    fn concurrency_cap() {
        assert!(check_concurrency(15, 16).is_ok());
        assert!(check_concurrency(16, 16)
            .unwrap_err()
            .contains("max_concurrent_runs"));
    }

    #[test]
    fn window_never_underflows() {
        assert_eq!(window_start(5), 0);
        assert_eq!(window_start(WEEK_MS + 9), 9);
    }
}
