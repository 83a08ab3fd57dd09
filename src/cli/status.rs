//! `airlockctl status` and `reload`.

use super::output;
use super::remote::{self, Ctx, Failed};
use super::table::{self, clean};
use crate::cli::output::out;
use crate::control::client::ClientError;
use crate::control::protocol::{Op, StatusInfo};

/// `status` when airlockd is not running (systemctl's code for an inactive unit).
pub const NOT_RUNNING: i32 = 3;

pub fn status(ctx: &Ctx) -> i32 {
    let op = Op::Status;
    let data = match ctx.request(&op) {
        Ok(d) => d,
        Err(Failed::Unreachable(ClientError::NotRunning { socket })) => {
            eprintln!(
                "airlockd is not running (nothing listens on {}); start it with `systemctl start airlockd`",
                socket.display()
            );
            return NOT_RUNNING;
        }
        Err(f) => return remote::report(&op, &f),
    };
    let s: StatusInfo = match remote::whole(&data) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    let mut pairs = vec![
        ("airlockd", clean(&s.version)),
        ("pid", s.pid.to_string()),
        (
            "state",
            if s.draining { "draining" } else { "running" }.into(),
        ),
        (
            "active runs",
            format!("{} of at most {}", s.active_runs, s.max_concurrent_runs),
        ),
        ("roles", s.roles.to_string()),
        ("loaded", format!("{} UTC", table::utc(s.loaded_at))),
        ("ledger records", s.ledger_records.to_string()),
        ("warm jails", warm_line(&s.warm)),
    ];
    if let Some(f) = &s.fleet {
        pairs.push(("fleet host", clean(&f.host_id)));
        let fires = if f.pending_fires.is_empty() {
            "none".to_string()
        } else {
            let names: Vec<String> = f.pending_fires.iter().map(|n| clean(n)).collect();
            format!(
                "fire of {} (the other hosts do not know yet)",
                names.join(", ")
            )
        };
        pairs.push(("pending fleet writes", fires));
        pairs.push((
            "ledger not yet mirrored",
            format!("{} record(s)", f.unmirrored_records),
        ));
    }
    out!("{}", table::render_pairs(&pairs));
    output::OK
}

/// `2 (code 1, review 1)`, the shared jail counted as `any role`.
fn warm_line(w: &crate::control::protocol::WarmStatus) -> String {
    let mut parts: Vec<String> = w
        .roles
        .iter()
        .map(|(r, n)| format!("{} {n}", clean(r)))
        .collect();
    if w.shared > 0 {
        parts.push(format!("any role {}", w.shared));
    }
    let total = w.shared + w.roles.values().sum::<usize>();
    if parts.is_empty() {
        "0".to_string()
    } else {
        format!("{total} ({})", parts.join(", "))
    }
}

/// Reload roles, policies and config; airlockd keeps the old set when the new one is invalid.
pub fn reload(ctx: &Ctx) -> i32 {
    match ctx.call(Op::Reload) {
        Ok(data) => remote::confirm(ctx, &data, "reloaded roles, policies and config"),
        Err(code) => code,
    }
}
