//! One clock for the fleet: admission windows, run leases and the `unsupervised` judgement
//! are the database's time (`statement_timestamp()` in the statements, see `store::pg`),
//! never a host's. A host whose own clock is far from the database's still refuses to
//! admit: its ledger's times (a run's start, its end, the local budget check) would be
//! wrong, and the operator should hear of it at the launch, not in an audit.

/// The most a host's clock may differ from the database's for it to admit a run (30 s:
/// far above NTP's error and a round trip, far below anything that moves a weekly window).
pub const MAX_CLOCK_SKEW_MS: u64 = 30_000;

/// Whether this host's clock agrees with the database's: `db_ms` is the database's time
/// read in a statement this host sent at `before_ms` and got back at `after_ms` (its own
/// clock). `Err` says which way and how far, for the refusal.
pub fn check(db_ms: i64, before_ms: u64, after_ms: u64) -> Result<(), String> {
    let (lo, hi) = (
        before_ms.min(after_ms) as i128,
        before_ms.max(after_ms) as i128,
    );
    let db = i128::from(db_ms);
    let bound = i128::from(MAX_CLOCK_SKEW_MS);
    // Positive: this host is ahead. The round trip counts in the host's favour.
    let ahead = if lo - db > bound {
        lo - db
    } else if db - hi > bound {
        -(db - hi)
    } else {
        return Ok(());
    };
    Err(format!(
        "this host's clock is {} {} the fleet store's database clock (more than the {} s allowed, store::skew::MAX_CLOCK_SKEW_MS); the fleet's admissions, budgets and run leases follow the database's clock, and this host's ledger would record wrong times: set this host's time right (NTP, timedatectl) and launch again",
        span(ahead.unsigned_abs()),
        if ahead > 0 { "ahead of" } else { "behind" },
        MAX_CLOCK_SKEW_MS / 1000
    ))
}

/// `ms` as a person reads it: seconds, minutes, hours or days.
fn span(ms: u128) -> String {
    let s = ms / 1000;
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} minutes", s / 60),
        7200..=172_799 => format!("{} hours", s / 3600),
        _ => format!("{:.1} days", s as f64 / 86_400.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_bound_is_fine() {
        assert!(check(1_000_000, 1_000_000, 1_000_010).is_ok());
        assert!(check(1_000_000, 1_029_000, 1_031_000).is_ok());
        assert!(check(1_030_000, 1_000_000, 1_000_100).is_ok());
    }

    #[test]
    fn ahead_and_behind_are_named_with_how_far() {
        let day = 86_400_000u64;
        let e = check(1_000_000, 1_000_000 + 8 * day, 1_000_000 + 8 * day).unwrap_err();
        assert!(e.contains("8.0 days ahead of"), "{e}");
        let e = check(1_000_000 + 45_000, 1_000_000, 1_000_000).unwrap_err();
        assert!(e.contains("45 s behind"), "{e}");
        assert!(check(i64::MIN, u64::MAX, u64::MAX).is_err());
    }
}
