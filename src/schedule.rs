//! `run.schedule`: a 5-field cron expression in UTC, translated to systemd `OnCalendar=`
//! lines for the timers `airlockctl timers` writes.
//!
//! Each field is expanded to the exact set of values it names, then rendered as a systemd
//! list. Expanding avoids the places where cron and systemd disagree on steps and ranges.
//! Cron's one odd rule is kept: when both day-of-month and day-of-week are restricted, a
//! day matches if EITHER does, which systemd expresses as two `OnCalendar=` lines.

use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minutes: BTreeSet<u32>,
    hours: BTreeSet<u32>,
    days: Option<BTreeSet<u32>>,
    months: BTreeSet<u32>,
    weekdays: Option<BTreeSet<u32>>,
}

/// Each field: its name, its range, and the names cron allows for its values (the first
/// three letters, any case: `jan`..`dec`, `sun`..`sat`).
const FIELDS: [(&str, u32, u32, &[&str]); 5] = [
    ("minute", 0, 59, &[]),
    ("hour", 0, 23, &[]),
    ("day of month", 1, 31, &[]),
    ("month", 1, 12, &MONTH_NAMES),
    ("day of week", 0, 7, &WEEKDAY_NAMES),
];

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

const WEEKDAY_NAMES: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// Parse a 5-field cron expression. The error names the field, never quotes the text.
pub fn parse(expr: &str) -> Result<Schedule, String> {
    let parts: Vec<&str> = expr.split_ascii_whitespace().collect();
    if parts.len() != 5 {
        return Err(
            "must be a 5-field cron expression: minute hour day-of-month month day-of-week (UTC)"
                .into(),
        );
    }
    let mut sets = Vec::with_capacity(5);
    for (part, (name, lo, hi, names)) in parts.iter().zip(FIELDS) {
        sets.push(field(part, lo, hi, names).map_err(|why| format!("{name} field: {why}"))?);
    }
    let restricted = |i: usize| parts[i] != "*";
    let mut weekdays: BTreeSet<u32> = sets[4].iter().map(|d| d % 7).collect();
    if weekdays.len() == 7 {
        weekdays = BTreeSet::new();
    }
    Ok(Schedule {
        minutes: sets[0].clone(),
        hours: sets[1].clone(),
        days: restricted(2).then(|| sets[2].clone()),
        months: sets[3].clone(),
        weekdays: (restricted(4) && !weekdays.is_empty()).then_some(weekdays),
    })
}

fn field(text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<BTreeSet<u32>, String> {
    // A name is its number: months count from 1 (`jan`), days from 0 (`sun`).
    let value = |t: &str| match names.iter().position(|n| n.eq_ignore_ascii_case(t)) {
        Some(i) => Ok(lo + i as u32),
        None => number(t, !names.is_empty()),
    };
    let mut out = BTreeSet::new();
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(number(s, false)?)),
            None => (item, None),
        };
        let (start, end) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let n = value(range)?;
            // `5/15` means from 5 to the end of the field, every 15.
            (n, if step.is_some() { hi } else { n })
        };
        if start < lo || end > hi || start > end {
            return Err(format!("values must be within {lo}-{hi}, low to high"));
        }
        let step = step.unwrap_or(1);
        if step == 0 {
            return Err("a step must be at least 1".into());
        }
        out.extend((start..=end).step_by(step as usize));
    }
    Ok(out)
}

fn number(text: &str, named: bool) -> Result<u32, String> {
    if text.is_empty() || text.len() > 2 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(if named {
            "use numbers or three-letter names (jan, mon), `*`, lists `a,b`, ranges `a-b` and steps `/n`"
        } else {
            "use numbers, `*`, lists `a,b`, ranges `a-b` and steps `/n`"
        }
        .into());
    }
    text.parse().map_err(|_| "not a number".to_string())
}

/// Render a set as a systemd calendar list, joining runs into `a..b`; a whole field is `*`.
fn list(values: &BTreeSet<u32>, width: usize, full: u32) -> String {
    if values.len() == full as usize {
        return "*".into();
    }
    let mut out: Vec<String> = Vec::new();
    let v: Vec<u32> = values.iter().copied().collect();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if j > i + 1 {
            out.push(format!("{:0w$}..{:0w$}", v[i], v[j], w = width));
        } else {
            out.extend(v[i..=j].iter().map(|x| format!("{x:0width$}")));
        }
        i = j + 1;
    }
    out.join(",")
}

impl Schedule {
    /// The `OnCalendar=` values (one, or two for cron's day-of-month OR day-of-week rule).
    pub fn on_calendar(&self) -> Vec<String> {
        let time = format!(
            "{}:{}:00",
            list(&self.hours, 2, 24),
            list(&self.minutes, 2, 60)
        );
        let month = list(&self.months, 2, 12);
        let date = |days: Option<&BTreeSet<u32>>| {
            let d = days.map(|d| list(d, 2, 31)).unwrap_or_else(|| "*".into());
            format!("*-{month}-{d}")
        };
        let weekday = |w: &BTreeSet<u32>| {
            w.iter()
                .map(|d| WEEKDAY_NAMES[*d as usize % 7])
                .collect::<Vec<_>>()
                .join(",")
        };
        match (&self.days, &self.weekdays) {
            (Some(d), Some(w)) => vec![
                format!("{} {time} UTC", date(Some(d))),
                format!("{} {} {time} UTC", weekday(w), date(None)),
            ],
            (None, Some(w)) => vec![format!("{} {} {time} UTC", weekday(w), date(None))],
            (days, None) => vec![format!("{} {time} UTC", date(days.as_ref()))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cal(expr: &str) -> Vec<String> {
        parse(expr).expect("parses").on_calendar()
    }

    #[test]
    fn translates_common_schedules() {
        assert_eq!(cal("0 6 * * *"), ["*-*-* 06:00:00 UTC"]);
        assert_eq!(cal("*/15 * * * *"), ["*-*-* *:00,15,30,45:00 UTC"]);
        assert_eq!(
            cal("30 9 * * 1-5"),
            ["Mon,Tue,Wed,Thu,Fri *-*-* 09:30:00 UTC"]
        );
        assert_eq!(cal("0 0 1 */3 *"), ["*-01,04,07,10-01 00:00:00 UTC"]);
        assert_eq!(cal("0 12 * * 0,7"), ["Sun *-*-* 12:00:00 UTC"]);
        assert_eq!(cal("5/20 1-3 * * *"), ["*-*-* 01..03:05,25,45:00 UTC"]);
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        assert_eq!(
            cal("0 8 13 * 5"),
            ["*-*-13 08:00:00 UTC", "Fri *-*-* 08:00:00 UTC"]
        );
    }

    #[test]
    fn refuses_what_it_cannot_translate() {
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 8",
            "*/0 * * * *",
            "5-1 * * * *",
            "@daily",
            "0 6 * * monday",
            "0 6 * * jan",
            "0 6 * mon *",
            "0 6 * * fri-mon",
            "0 mon * * *",
            "a b c d e",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        let err = parse("0 6 * * xyz").expect_err("not a name");
        assert!(err.contains("day of week"), "{err}");
        assert!(!err.contains("xyz"), "{err}");
    }

    #[test]
    fn names_of_days_and_months_are_their_numbers() {
        assert_eq!(cal("0 6 * * mon"), cal("0 6 * * 1"));
        assert_eq!(cal("0 6 * * MON-FRI"), cal("0 6 * * 1-5"));
        assert_eq!(cal("0 6 * * sun,Sat"), cal("0 6 * * 0,6"));
        assert_eq!(cal("0 6 1 jan,Jul *"), cal("0 6 1 1,7 *"));
        assert_eq!(cal("0 6 * mar-may/2 *"), cal("0 6 * 3-5/2 *"));
        assert_eq!(cal("0 6 * * mon"), vec!["Mon *-*-* 06:00:00 UTC"]);
    }
}
