//! `airlockctl hire NAME --role ROLE`, `fire NAME` and `instances`: who may run, as which
//! role and uid.

use super::output;
use super::remote::{self, Ctx};
use super::table::{self, clean};
use crate::cli::output::out;
use crate::control::protocol::{InstanceInfo, Op};

pub fn hire(ctx: &Ctx, name: &str, role: &str, reason: Option<&str>) -> i32 {
    let op = Op::Hire {
        instance: name.into(),
        role: role.into(),
        decision: reason.map(|r| crate::control::protocol::DecisionArgs {
            reason: Some(r.to_string()),
            ..Default::default()
        }),
    };
    match ctx.call(op) {
        Ok(data) => {
            if let Some(code) = super::decisions::pending(ctx, &data) {
                return code;
            }
            let uid = data
                .get("uid")
                .and_then(|u| u.as_u64())
                .map(|u| format!(" (uid {u})"))
                .unwrap_or_default();
            let role = data.get("role").and_then(|r| r.as_str()).unwrap_or(role);
            let mut msg = format!("hired {} as {}{uid}", clean(name), clean(role));
            let lines: Vec<String> = data
                .get("credentials")
                .and_then(|c| c.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_str()).map(clean).collect())
                .unwrap_or_default();
            if lines.is_empty() {
                msg.push_str("; its runs use no credential");
            } else {
                msg.push_str("; credentials its runs use:");
                for l in lines {
                    msg.push_str(&format!("\n  {l}"));
                }
            }
            let egress: Vec<String> = data
                .get("egress")
                .and_then(|c| c.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_str()).map(clean).collect())
                .unwrap_or_default();
            if !egress.is_empty() {
                msg.push_str("\negress destinations its runs reach (airlockd's egress.grants):");
                for l in egress {
                    msg.push_str(&format!("\n  {l}"));
                }
            }
            if let Some(env) = data.get("environment").filter(|e| !e.is_null()) {
                msg.push_str(&format!(
                    "\nenvironment: its commands run in image `{}` ({})",
                    clean(env["image"].as_str().unwrap_or("?")),
                    clean(env["granted_by"].as_str().unwrap_or("environments"))
                ));
            }
            remote::confirm(ctx, &data, &msg)
        }
        Err(code) => code,
    }
}

pub fn fire(ctx: &Ctx, name: &str) -> i32 {
    match ctx.call(Op::Fire {
        instance: name.into(),
        decision: None,
    }) {
        Ok(data) => {
            if let Some(code) = super::decisions::pending(ctx, &data) {
                return code;
            }
            let ids = |k: &str| -> Vec<String> {
                data.get(k)
                    .and_then(|v| v.as_array())
                    .map(|a| a.iter().filter_map(|x| x.as_str()).map(clean).collect())
                    .unwrap_or_default()
            };
            let list = |v: Vec<String>| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.join(", ")
                }
            };
            let runs = data
                .get("stopped_runs")
                .and_then(|n| n.as_u64())
                .unwrap_or(0);
            let mut msg = format!(
                "fired {}: {runs} active run(s) stopped; leases revoked: {}; revocation pending: {}",
                clean(name),
                list(ids("revoked")),
                list(ids("pending"))
            );
            if let Some(e) = data.get("revocation_error").and_then(|e| e.as_str()) {
                msg.push_str(&format!(
                    "; not yet revoked ({}): airlockd's next start revokes the rest",
                    clean(e)
                ));
            }
            // Said plainly when the other hosts do not know yet, with an exit code of its own.
            match data.get("fleet").and_then(|f| f.as_str()) {
                Some("pending") => {
                    msg = format!(
                        "fired here; the fleet will be told when the store is back ({msg})"
                    );
                    let code = remote::confirm(ctx, &data, &msg);
                    if code == output::OK {
                        output::FLEET_PENDING
                    } else {
                        code
                    }
                }
                Some("lost") => {
                    let why = data
                        .get("fleet_error")
                        .and_then(|e| e.as_str())
                        .unwrap_or("");
                    eprintln!(
                        "airlockctl: fired here only: the fleet store does not have it and it could not be queued ({}); fire it again once the store is back",
                        clean(why)
                    );
                    output::ERROR
                }
                _ => remote::confirm(ctx, &data, &msg),
            }
        }
        Err(code) => code,
    }
}

/// `2 active, 1 revoke-pending`, or `-`.
fn leases(i: &InstanceInfo) -> String {
    use crate::credentials::leases::LeaseState;
    let n = |s: LeaseState| i.leases.iter().filter(|l| l.state == s).count();
    let parts: Vec<String> = [LeaseState::Active, LeaseState::RevokePending]
        .into_iter()
        .filter(|s| n(*s) > 0)
        .map(|s| format!("{} {}", n(s), s.as_str()))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

pub fn list(ctx: &Ctx) -> i32 {
    let data = match ctx.call(Op::Instances) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let all: Vec<InstanceInfo> = match remote::field(&data, "instances") {
        Ok(i) => i,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    if all.is_empty() {
        eprintln!("no instances hired; `airlockctl hire NAME --role ROLE` hires one");
        return output::OK;
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|i| {
            vec![
                clean(&i.instance),
                clean(&i.role),
                // 0: not allocated yet (a config instance gets its uid on its first run).
                match i.uid {
                    0 => "-".into(),
                    uid => uid.to_string(),
                },
                clean(&i.source),
                if i.fired { "fired" } else { "hired" }.into(),
                i.active_runs.to_string(),
                leases(i),
            ]
        })
        .collect();
    out!(
        "{}",
        table::render(
            &["INSTANCE", "ROLE", "UID", "SOURCE", "STATE", "RUNS", "LEASES"],
            &rows
        )
    );
    output::OK
}
