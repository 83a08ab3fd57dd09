//! `airlockctl ps`, `runs`, `show RUN` and `stop RUN`: runs as airlockd reports them (live
//! runs, and the ledger's history).

use super::output;
use super::remote::{self, Ctx};
use super::table::{self, clean};
use crate::control::protocol::{Op, RunInfo};
use crate::supervisor::ledger::now_ms;

/// Active runs.
pub fn ps(ctx: &Ctx) -> i32 {
    list(ctx, Op::Ps, "no active runs")
}

/// The newest runs the ledger records, active or closed.
pub fn runs(ctx: &Ctx, last: Option<u32>) -> i32 {
    list(ctx, Op::Runs { last }, "no runs recorded")
}

fn list(ctx: &Ctx, op: Op, empty: &str) -> i32 {
    let data = match ctx.call(op) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let runs: Vec<RunInfo> = match remote::field(&data, "runs") {
        Ok(r) => r,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    if runs.is_empty() {
        eprintln!("{empty}");
        return output::OK;
    }
    if data.get("more").and_then(|m| m.as_bool()) == Some(true) {
        eprintln!(
            "(the newest {} runs; older ones: `airlockctl runs --last N`, or the ledger itself)",
            runs.len()
        );
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = runs.iter().map(|r| row(r, now)).collect();
    print!(
        "{}",
        table::render(
            &[
                "RUN",
                "ROLE",
                "INSTANCE",
                "STATE",
                "STARTED (UTC)",
                "TIME",
                "EXIT"
            ],
            &rows
        )
    );
    output::OK
}

fn row(r: &RunInfo, now: u64) -> Vec<String> {
    vec![
        clean(&r.run),
        clean(&r.role),
        clean(&r.instance),
        clean(&r.state),
        table::utc(r.started_at),
        table::duration(r.ended_at.unwrap_or(now).saturating_sub(r.started_at)),
        exit(r),
    ]
}

fn exit(r: &RunInfo) -> String {
    match (r.exit_code, r.signal) {
        (_, Some(sig)) => format!("signal {sig}"),
        (Some(code), None) => code.to_string(),
        (None, None) => "-".into(),
    }
}

/// One run in detail.
pub fn show(ctx: &Ctx, run: &str) -> i32 {
    let data = match ctx.call(Op::Show { run: run.into() }) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let info: RunInfo = match remote::field(&data, "run") {
        Ok(r) => r,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    let now = now_ms();
    let mut pairs = vec![
        ("run", clean(&info.run)),
        ("role", clean(&info.role)),
        ("instance", clean(&info.instance)),
        ("uid", info.uid.to_string()),
        ("launched by uid", info.launched_by_uid.to_string()),
        ("state", clean(&info.state)),
        ("started", format!("{} UTC", table::utc(info.started_at))),
    ];
    if let Some(end) = info.ended_at {
        pairs.push(("ended", format!("{} UTC", table::utc(end))));
    }
    pairs.push((
        "time",
        table::duration(info.ended_at.unwrap_or(now).saturating_sub(info.started_at)),
    ));
    pairs.push((
        "deadline",
        match info.deadline_s {
            0 => "none".into(),
            s => table::duration(s.saturating_mul(1000)),
        },
    ));
    pairs.push(("exit", exit(&info)));
    if let Some(reason) = &info.reason {
        pairs.push(("reason", clean(reason)));
    }
    print!("{}", table::render_pairs(&pairs));
    output::OK
}

/// Ask airlockd to stop a run (SIGTERM, grace period, then kill).
pub fn stop(ctx: &Ctx, run: &str) -> i32 {
    match ctx.call(Op::Stop { run: run.into() }) {
        Ok(data) => remote::confirm(
            ctx,
            &data,
            &format!(
                "stopping run {}; `airlockctl show {}` tells how it ended",
                clean(run),
                clean(run)
            ),
        ),
        Err(code) => code,
    }
}
