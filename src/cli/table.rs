//! Human output for the daemon subcommands: aligned columns, UTC times, durations, and text
//! made safe for a terminal (daemon answers may carry names an agent influenced).

use std::fmt::Write as _;

/// Print `rows` under `headers`, columns separated by two spaces; the last column is not
/// padded so lines carry no trailing blanks.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                let w = widths.get(i).copied().unwrap_or(0);
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `key: value` lines with the keys aligned.
pub fn render_pairs(pairs: &[(&str, String)]) -> String {
    let w = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (k, v) in pairs {
        let key = format!("{k}:");
        let _ = writeln!(out, "{key:<w$} {v}");
    }
    out
}

/// Control characters (C0, DEL, C1) and bidirectional overrides become `\u{NN}` so nothing
/// a peer sends can move the cursor or rewrite an operator's terminal.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        // Fields are one line: newline and tab are escaped here too.
        if c.is_control() || crate::terminal::unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn utc(ms: u64) -> String {
    crate::calendar::utc(ms)
}

/// A duration in whole seconds as `1h02m03s`, `4m05s` or `6s`.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m{sec:02}s"),
        (h, min, sec) => format!("{h}h{min:02}m{sec:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_times_and_durations() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_767_225_599_000), "2025-12-31 23:59:59");
        assert_eq!(duration(999), "0s");
        assert_eq!(duration(65_000), "1m05s");
        assert_eq!(duration(3_723_000), "1h02m03s");
    }

    #[test]
    fn aligns_columns_and_cleans_text() {
        let out = render(
            &["RUN", "STATE"],
            &[
                vec!["r-1".into(), "running".into()],
                vec!["r-22222".into(), "exited".into()],
            ],
        );
        assert_eq!(out, "RUN      STATE\nr-1      running\nr-22222  exited\n");
        assert_eq!(clean("a\x1b[2Jb\n"), "a\\u{1b}[2Jb\\u{a}");
    }
}
