//! `airlockctl ps`, `runs`, `show RUN` and `stop RUN`: runs as airlockd reports them (live
//! runs, and the ledger's history), or as the files tell when airlockd is not running.

use crate::cli::output::out;
use std::path::Path;

use super::remote::{self, Ctx, Failed};
use super::table::{self, clean};
use super::{offline, output};
use crate::control::client::ClientError;
use crate::control::protocol::{ErrorCode, Op, RunInfo};
use crate::supervisor::ledger::now_ms;
use serde_json::Value;

/// Active runs.
pub fn ps(ctx: &Ctx) -> i32 {
    list(ctx, Op::Ps, "no active runs")
}

/// The newest runs the ledger records, active or closed.
pub fn runs(ctx: &Ctx, last: Option<u32>) -> i32 {
    list(ctx, Op::Runs { last }, "no runs recorded")
}

fn list(ctx: &Ctx, op: Op, empty: &str) -> i32 {
    // `ps` shows what its runs have done so far (airlockd knows; the files do not).
    let live = matches!(op, Op::Ps);
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
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let mut row = row(r, now);
            if live {
                row.extend(super::top::live_cells(r.live.as_ref()));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "RUN",
        "ROLE",
        "INSTANCE",
        "STATE",
        "STARTED (UTC)",
        "TIME",
        "EXIT",
    ];
    if live {
        headers.extend(super::top::LIVE_HEADERS);
    }
    out!("{}", table::render(&headers, &rows));
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
    let op = Op::Show { run: run.into() };
    let data = match ctx.request(&op) {
        Ok(d) => d,
        // Another host's run: the fleet store has it, when there is one.
        Err(Failed::Refused(Some(e))) if e.code == ErrorCode::NotFound => {
            match super::fleet::show(ctx, run) {
                Ok(Some(d)) => d,
                Ok(None) => return remote::report(&op, &Failed::Refused(Some(e))),
                Err(code) => return code,
            }
        }
        Err(f) => return remote::report(&op, &f),
    };
    let info: RunInfo = match remote::field(&data, "run") {
        Ok(r) => r,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    let now = now_ms();
    let mut pairs = vec![("run", clean(&info.run))];
    if let Some(host) = data.get("host_id").and_then(Value::as_str) {
        pairs.push(("host", clean(host)));
    }
    pairs.extend([
        ("role", clean(&info.role)),
        ("instance", clean(&info.instance)),
        ("uid", info.uid.to_string()),
        ("launched by uid", info.launched_by_uid.to_string()),
        ("state", clean(&info.state)),
        ("started", format!("{} UTC", table::utc(info.started_at))),
    ]);
    if let (Some(sha), Some(rev)) = (&info.role_sha256, info.rev) {
        // Where the instance is now, when a change moved it since this run started.
        let now = data.get("instance_rev").and_then(Value::as_u64);
        let narrowed = data.get("narrowed_to").and_then(Value::as_u64);
        let note = match (narrowed, now) {
            (Some(n), _) => format!(" (narrowed live to rev {n})"),
            (None, Some(n)) => format!(" (instance now at rev {n})"),
            _ => String::new(),
        };
        pairs.push(("role revision", format!("{rev} ({}){note}", clean(sha))));
    }
    if let Some(name) = &info.image {
        let digest = info.image_digest.as_deref().unwrap_or("?");
        pairs.push(("image", format!("{} ({})", clean(name), clean(digest))));
    }
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
    if let Some(c) = &info.calls {
        pairs.push((
            "tool calls",
            format!("{} allowed, {} refused", c.allowed, c.refused),
        ));
        if let Some(n) = c.bash {
            pairs.push(("bash commands", format!("{n} run")));
        }
        if let Some(a) = &c.asks {
            pairs.push((
                "asks",
                format!(
                    "{} asked: {} allowed, {} denied, {} unanswered",
                    a.asked, a.allowed, a.denied, a.unanswered
                ),
            ));
        }
    }
    if let Some(s) = &info.spend {
        use crate::policy::prices::usd;
        pairs.push((
            "model requests",
            format!("{} forwarded, {} refused", s.requests, s.refused),
        ));
        if let (Some(n), Some(m)) = (s.turns, s.max_turns) {
            pairs.push(("turns", format!("{n} of {m} (run.max_turns)")));
        }
        pairs.push((
            "spend",
            format!(
                "{} of {} (budget.spend_usd)",
                usd(s.micro_usd),
                usd(s.budget_micro_usd)
            ),
        ));
    }
    if let Some(g) = &info.github {
        pairs.push((
            "github writes",
            format!(
                "{} of {} (budget.github_writes_per_run)",
                g.writes, g.budget
            ),
        ));
    }
    if let Some(e) = &info.egress {
        pairs.push((
            "egress",
            format!(
                "{} allowed, {} refused; {} bytes up, {} down",
                e.allowed, e.refused, e.bytes_up, e.bytes_down
            ),
        ));
    }
    for l in &info.leases {
        pairs.push((
            "lease",
            format!(
                "{} {}: {}",
                clean(&l.id),
                l.state.as_str(),
                clean(&l.grants)
            ),
        ));
    }
    if let Some(why) = &info.leases_unreadable {
        pairs.push((
            "leases",
            format!(
                "unreadable ({}); the ledger's lease records still tell",
                clean(why)
            ),
        ));
    }
    out!("{}", table::render_pairs(&pairs));
    output::OK
}

/// Ask airlockd to stop a run (SIGTERM, grace period, then kill). A run airlockd does not
/// supervise is told apart: not in the ledger, ended, or supervised by a standalone launch.
pub fn stop(ctx: &Ctx, run: &str) -> i32 {
    let op = Op::Stop { run: run.into() };
    match ctx.request(&op) {
        Ok(data) => remote::confirm(
            ctx,
            &data,
            &format!(
                "stopping run {}; `airlockctl show {}` tells how it ended",
                clean(run),
                clean(run)
            ),
        ),
        Err(Failed::Refused(Some(e))) if e.code == ErrorCode::NotFound => {
            match ctx.request(&Op::Show { run: run.into() }) {
                Ok(data) => match remote::field::<RunInfo>(&data, "run") {
                    Ok(info) => not_active(&info, None),
                    Err(code) => code,
                },
                Err(f) => remote::report(&op, &f),
            }
        }
        Err(Failed::Unreachable(ClientError::NotRunning { socket })) => {
            stop_offline(ctx, run, &socket)
        }
        Err(f) => remote::report(&op, &f),
    }
}

/// `stop` without airlockd: nothing can be stopped, but the message says why and what to do.
fn stop_offline(ctx: &Ctx, run: &str, socket: &Path) -> i32 {
    let Ok(cfg) = ctx.load_config() else {
        return remote::not_running("stop", socket, "");
    };
    match offline::find(&cfg, run) {
        Ok(None) => remote::no_such_run("stop", run),
        Ok(Some(info)) => not_active(&info, offline::supervisor_of(&cfg, run)),
        // The ledger cannot be read here: airlockd is what can tell.
        Err(_) => remote::not_running("stop", socket, ""),
    }
}

/// A run in the ledger that airlockd cannot stop. `standalone`: who holds it, when known.
fn not_active(info: &RunInfo, standalone: Option<(bool, Option<u32>)>) -> i32 {
    let run = clean(&info.run);
    if info.ended_at.is_some() {
        eprintln!(
            "airlockctl stop: run {run} is not active: it ended ({}); `airlockctl show {run}` tells how",
            clean(&info.state)
        );
        return output::NO;
    }
    match standalone {
        Some((true, pid)) => {
            let pid = pid.map(|p| p.to_string()).unwrap_or_else(|| "PID".into());
            eprintln!("airlockctl stop: airlockd is not running, and run {run} is supervised by `airlockctl launch --standalone` (pid {pid}): stop it there with Ctrl-C, or `kill -INT {pid}`");
            output::ERROR
        }
        _ if info.state == offline::UNSUPERVISED => {
            eprintln!("airlockctl stop: airlockd is not running, and run {run} has no supervisor left (it died, and the run with it): nothing to stop; the next start of airlockd (`systemctl start airlockd`), or the next standalone launch, closes its record as aborted");
            output::NO
        }
        _ => {
            eprintln!("airlockctl stop: airlockd does not supervise run {run} (a standalone launch does): stop it there with Ctrl-C");
            output::ERROR
        }
    }
}
