//! `airlockctl decisions`, `decision show`, `approve`, `deny`, `change` and `role diff`: a
//! person deciding what the chief (or another person) asked (seed 003). Through airlockd,
//! which checks the digest and the person's right from the kernel's peer credentials.

use serde_json::Value;

use super::output::{self, out};
use super::remote::{self, Ctx};
use super::table::{self, clean};
use crate::control::protocol::{DecisionArgs, Op};

fn args(id: Option<&str>) -> DecisionArgs {
    DecisionArgs {
        id: id.map(str::to_string),
        ..DecisionArgs::default()
    }
}

fn strs(v: &Value, k: &str) -> Vec<String> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(clean).collect())
        .unwrap_or_default()
}

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(x)) => clean(x),
        Some(Value::Null) | None => "-".into(),
        Some(x) => x.to_string(),
    }
}

pub fn list(ctx: &Ctx, all: bool) -> i32 {
    let data = match ctx.call(Op::Decisions {
        decision: DecisionArgs {
            all,
            ..DecisionArgs::default()
        },
    }) {
        Ok(d) => d,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data["decisions"]);
    }
    let list = data["decisions"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        eprintln!("no {}decisions", if all { "" } else { "pending " });
        return output::OK;
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|d| {
            vec![
                s(d, "id"),
                s(d, "op"),
                s(d, "state"),
                s(d, "name"),
                s(d, "role"),
                s(d, "raised_by"),
                strs(d, "flagged").len().to_string(),
                strs(d, "credential_lines").len().to_string(),
            ]
        })
        .collect();
    out!(
        "{}",
        table::render(
            &[
                "ID",
                "OP",
                "STATE",
                "NAME",
                "ROLE",
                "RAISED BY",
                "FLAGGED",
                "CREDENTIALS"
            ],
            &rows
        )
    );
    output::OK
}

pub fn show(ctx: &Ctx, id: &str) -> i32 {
    let data = match ctx.call(Op::DecisionShow {
        decision: args(Some(id)),
    }) {
        Ok(d) => d,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    let mut text = table::render_pairs(&[
        ("decision", s(&data, "id")),
        ("op", s(&data, "op")),
        ("state", s(&data, "state")),
        ("name", s(&data, "name")),
        (
            "role",
            format!("{} ({})", s(&data, "role"), s(&data, "source")),
        ),
        ("role sha256", s(&data, "role_sha256")),
        ("raised by", s(&data, "raised_by")),
        ("reason", s(&data, "reason")),
        ("expires at (ms)", s(&data, "expires_at")),
        ("resolved by", s(&data, "resolved_by")),
        ("digest", s(&data, "digest")),
    ]);
    for (title, k) in [
        (
            "flagged (above the raiser's own grants; an owner approves)",
            "flagged",
        ),
        ("credential lines (an owner approves)", "credential_lines"),
    ] {
        let lines = strs(&data, k);
        text.push_str(&format!(
            "\n{title}: {}\n",
            if lines.is_empty() { "none" } else { "" }
        ));
        for l in lines {
            text.push_str(&format!("  ! {l}\n"));
        }
    }
    if let Some(files) = data.get("role_files").and_then(Value::as_object) {
        for (name, body) in files {
            text.push_str(&format!(
                "\n--- {} ---\n{}\n",
                clean(name),
                body.as_str().map(clean).unwrap_or_default()
            ));
        }
    }
    let diff = s(&data, "template_diff");
    if diff != "-" && !diff.is_empty() {
        text.push_str(&format!(
            "\ndifference from the template as it is now:\n{diff}"
        ));
    }
    out!("{text}");
    output::OK
}

pub fn approve(ctx: &Ctx, id: &str, digest: &str) -> i32 {
    let op = Op::Approve {
        decision: DecisionArgs {
            id: Some(id.into()),
            digest: Some(digest.into()),
            ..DecisionArgs::default()
        },
    };
    match ctx.call(op) {
        Ok(data) => {
            let msg = format!(
                "approved decision {}: {} {}{}",
                clean(id),
                s(&data["decision"], "op"),
                s(&data["decision"], "name"),
                data.get("rev")
                    .map(|r| format!(" (role revision {r}, {})", s(&data, "role_sha256")))
                    .unwrap_or_default()
            );
            remote::confirm(ctx, &data, &msg)
        }
        Err(code) => code,
    }
}

pub fn deny(ctx: &Ctx, id: &str, reason: Option<&str>) -> i32 {
    let op = Op::Deny {
        decision: DecisionArgs {
            id: Some(id.into()),
            reason: reason.map(str::to_string),
            ..DecisionArgs::default()
        },
    };
    match ctx.call(op) {
        Ok(data) => remote::confirm(ctx, &data, &format!("denied decision {}", clean(id))),
        Err(code) => code,
    }
}

/// What a person's hire, fire or change answered when it could not be approved at once.
pub fn pending(ctx: &Ctx, data: &Value) -> Option<i32> {
    (data.get("state").and_then(Value::as_str) == Some("pending"))
        .then(|| remote::confirm(ctx, data, &s(data, "message")))
}

pub fn change(ctx: &Ctx, name: &str) -> i32 {
    match ctx.call(Op::Change {
        instance: name.into(),
        decision: None,
    }) {
        Ok(data) => pending(ctx, &data).unwrap_or_else(|| {
            let msg = format!(
                "changed {} to its template: role revision {} ({}); its next launch runs it",
                clean(name),
                s(&data, "rev"),
                s(&data, "role_sha256")
            );
            remote::confirm(ctx, &data, &msg)
        }),
        Err(code) => code,
    }
}

pub fn role_diff(ctx: &Ctx, name: &str) -> i32 {
    let data = match ctx.call(Op::RoleDiff {
        instance: name.into(),
    }) {
        Ok(d) => d,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&data);
    }
    if data["template_changed"] == true {
        out!(
            "{} runs role {} revision {}; its template changed since (`airlockctl change {} --to-template` applies it):\n{}",
            clean(name),
            s(&data, "role"),
            s(&data, "rev"),
            clean(name),
            s(&data, "diff")
        );
    } else {
        out!(
            "{} runs role {} revision {}, the same as its template",
            clean(name),
            s(&data, "role"),
            s(&data, "rev")
        );
    }
    output::OK
}
