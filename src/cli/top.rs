//! `airlockctl top`: the running runs with what they have done so far (age, CPU, memory,
//! tool calls, spend, writes, the last decision), refreshed in place on a terminal, printed
//! once with `--once` (or when stdout is not a terminal) or as JSON with `--json`. `ps`
//! shows the same columns through [`live_cells`].

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use super::output;
use super::remote::{self, Ctx};
use super::table::{self, clean};
use crate::cli::output::out;
use crate::control::protocol::{Op, RunInfo};
use crate::metrics::live::LiveInfo;
use crate::supervisor::ledger::now_ms;

/// How often the live view refreshes.
const REFRESH: Duration = Duration::from_secs(2);

/// The headers of the live columns, after each command's own.
pub const LIVE_HEADERS: [&str; 6] = ["CPU", "MEM", "CALLS", "SPEND", "WRITES", "LAST DECISION"];

/// The live columns of one run (`-` for what is not known: a run read without airlockd,
/// a host without cgroup v2).
pub fn live_cells(live: Option<&LiveInfo>) -> Vec<String> {
    let Some(l) = live else {
        return vec!["-".into(); LIVE_HEADERS.len()];
    };
    vec![
        l.cpu_usec
            .map(|u| format!("{:.1}s", u as f64 / 1e6))
            .unwrap_or_else(|| "-".into()),
        l.memory_bytes.map(mib).unwrap_or_else(|| "-".into()),
        if l.refused > 0 {
            format!("{} ({} refused)", l.tool_calls, l.refused)
        } else {
            l.tool_calls.to_string()
        },
        crate::policy::prices::usd(l.spend_micro_usd),
        l.writes.to_string(),
        l.last_decision
            .as_deref()
            .map(clean)
            .unwrap_or_else(|| "-".into()),
    ]
}

fn mib(b: u64) -> String {
    format!("{:.1}M", b as f64 / (1024.0 * 1024.0))
}

/// The table `top` prints. `cpu_pct`: per run, the share of a CPU since the last refresh.
pub fn render(runs: &[RunInfo], now: u64, cpu_pct: &BTreeMap<String, f64>) -> String {
    let mut headers = vec!["RUN", "ROLE", "INSTANCE", "AGE"];
    headers.extend(LIVE_HEADERS);
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let mut row = vec![
                clean(&r.run),
                clean(&r.role),
                clean(&r.instance),
                table::duration(now.saturating_sub(r.started_at)),
            ];
            let mut live = live_cells(r.live.as_ref());
            if let Some(p) = cpu_pct.get(&r.run) {
                live[0] = format!("{} {p:.0}%", live[0]);
            }
            row.extend(live);
            row
        })
        .collect();
    table::render(&headers, &rows)
}

fn fetch(ctx: &Ctx) -> Result<(serde_json::Value, Vec<RunInfo>), i32> {
    let data = ctx.call(Op::Ps)?;
    let runs = remote::field(&data, "runs")?;
    Ok((data, runs))
}

pub fn top(ctx: &Ctx, once: bool) -> i32 {
    let (data, runs) = match fetch(ctx) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    if once || !std::io::stdout().is_terminal() {
        if runs.is_empty() {
            eprintln!("no active runs");
        } else {
            out!("{}", render(&runs, now_ms(), &BTreeMap::new()));
        }
        return output::OK;
    }
    let mut runs = runs;
    let mut last: BTreeMap<String, (u64, Instant)> = BTreeMap::new();
    loop {
        let now = Instant::now();
        let mut pct = BTreeMap::new();
        let mut seen = BTreeMap::new();
        for r in &runs {
            if let Some(cpu) = r.live.as_ref().and_then(|l| l.cpu_usec) {
                if let Some((before, at)) = last.get(&r.run) {
                    let wall = now.duration_since(*at).as_micros() as f64;
                    if wall > 0.0 {
                        pct.insert(
                            r.run.clone(),
                            cpu.saturating_sub(*before) as f64 * 100.0 / wall,
                        );
                    }
                }
                seen.insert(r.run.clone(), (cpu, now));
            }
        }
        last = seen;
        // Home and clear, then the view: refreshed in place.
        let body = if runs.is_empty() {
            "no active runs\n".to_string()
        } else {
            render(&runs, now_ms(), &pct)
        };
        out!(
            "\x1b[H\x1b[2J{} UTC, {} active (every {} s; Ctrl-C to quit)\n\n{body}",
            table::utc(now_ms()),
            runs.len(),
            REFRESH.as_secs()
        );
        std::thread::sleep(REFRESH);
        runs = match fetch(ctx) {
            Ok((_, r)) => r,
            Err(code) => return code,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_columns() {
        assert_eq!(live_cells(None), vec!["-"; 6]);
        let l = LiveInfo {
            tool_calls: 5,
            refused: 3,
            spend_micro_usd: 12_500,
            writes: 1,
            last_decision: Some("airlock/bash deny by default\u{1b}[2J".into()),
            cpu_usec: Some(1_500_000),
            memory_bytes: Some(3 * 1024 * 1024),
        };
        assert_eq!(
            live_cells(Some(&l)),
            vec![
                "1.5s",
                "3.0M",
                "5 (3 refused)",
                "$0.012500",
                "1",
                "airlock/bash deny by default\\u{1b}[2J"
            ]
        );
    }
}
