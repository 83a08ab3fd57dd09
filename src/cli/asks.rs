//! `airlockctl asks`, `allow ID [--for-run]`, and `deny ID` for an ask: a person answering
//! a request a run's role does not grant, while the run waits (its launcher or an admin).

use serde_json::Value;

use super::output::{self, out};
use super::remote::{self, Ctx, Failed};
use super::table::{self, clean};
use crate::control::protocol::{DecisionArgs, ErrorCode, Op};

/// `allow`/`deny` of an ask no one raised (or airlockd no longer holds).
pub const UNKNOWN: i32 = 3;
/// `allow`/`deny` of an ask already answered, expired or withdrawn with its run.
pub const ANSWERED: i32 = 4;

fn s(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .map(clean)
        .unwrap_or_else(|| "-".into())
}

pub fn list(ctx: &Ctx) -> i32 {
    let data = match ctx.call(Op::Asks) {
        Ok(d) => d,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data["asks"]);
    }
    let list = data["asks"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        eprintln!("no asks waiting");
        return output::OK;
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|a| {
            ["id", "run", "instance", "kind", "what", "rule"]
                .iter()
                .map(|k| s(a, k))
                .collect()
        })
        .collect();
    out!(
        "{}",
        table::render(&["ID", "RUN", "INSTANCE", "KIND", "WHAT", "RULE"], &rows)
    );
    output::OK
}

/// Answer ask `id`: `op` is `allow` or `deny`.
pub fn answer(ctx: &Ctx, op: Op) -> i32 {
    match ctx.request(&op) {
        Ok(data) => remote::confirm(ctx, &data, "answered"),
        Err(Failed::Refused(Some(e)))
            if matches!(e.code, ErrorCode::NotFound | ErrorCode::Refused) =>
        {
            eprintln!("airlockctl {}: {}", op.name(), clean(&e.message));
            if e.code == ErrorCode::NotFound {
                UNKNOWN
            } else {
                ANSWERED
            }
        }
        Err(f) => remote::report(&op, &f),
    }
}

pub fn allow(ctx: &Ctx, id: &str, for_run: bool) -> i32 {
    answer(
        ctx,
        Op::Allow {
            decision: DecisionArgs {
                id: Some(id.into()),
                for_run,
                ..DecisionArgs::default()
            },
        },
    )
}

/// Whether `deny ID` names an ask (`a-N`) rather than a decision (`d-N`).
pub fn is_ask_id(id: &str) -> bool {
    id.strip_prefix("a-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

pub fn deny(ctx: &Ctx, id: &str) -> i32 {
    answer(
        ctx,
        Op::Deny {
            decision: DecisionArgs {
                id: Some(id.into()),
                ..DecisionArgs::default()
            },
        },
    )
}
