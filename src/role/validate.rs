//! Schema version 1 of `roles/<role>/role.yaml`, checked to the letter: every property, type,
//! pattern, enum, const, bound, required key, unknown key and conditional, plus the rules the
//! schema implies (L4 needs a judge and goals, board tools by kind, workflow roles omit `run`,
//! brief and goals stay inside the role's folder). Every problem is reported, not just the first.

use super::check::{key_seg, Ctx};
use super::grants;
use super::model::{ISSUE_ACTIONS, PULL_REQUEST_ACTIONS};
use crate::diag;
use crate::names;
use serde_yaml::Value;

const TOP_KEYS: &[&str] = &[
    "schema",
    "role",
    "level",
    "brief",
    "goals",
    "judge",
    "identity",
    "writes",
    "tools",
    "resources",
    "deny",
    "args",
    "budget",
    "digest",
    "floors",
    "kind",
    "run",
    "scopes",
];
const TOP_REQUIRED: &[&str] = &[
    "schema", "role", "level", "brief", "writes", "tools", "budget",
];
const LEVELS: &[&str] = &["L1", "L2", "L3", "L4"];

/// Validate a whole document; problems go into `c`.
pub fn document(c: &mut Ctx, doc: &Value) {
    let Some(top) = c.object(doc, "", TOP_KEYS, TOP_REQUIRED) else {
        return;
    };
    let get = |k: &str| top.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let mut level = None;
    let mut kind = "agent";
    for &(k, v) in &top {
        match k {
            "schema" => {
                let n = c.integer(v, "schema", None, None);
                if n.is_some_and(|n| n != 1) {
                    c.add("schema", "must be 1 (the only schema version there is)");
                }
            }
            "role" => {
                c.string_matching(
                    v,
                    "role",
                    names::is_role_name,
                    "a lowercase letter, then lowercase letters, digits and `-`",
                );
            }
            "level" => level = c.one_of(v, "level", LEVELS),
            "brief" | "goals" => {
                if let Some(s) = c.string(v, k) {
                    relative_file(c, k, s);
                }
            }
            "judge" => judge(c, v),
            "identity" => identity(c, v),
            "writes" => writes(c, v),
            "tools" => grants::tools(c, v),
            "resources" => grants::patterns(c, v, "resources", false),
            "deny" => grants::patterns(c, v, "deny", true),
            "args" => grants::args(c, v),
            "budget" => budget(c, v),
            "digest" => {
                c.one_of(v, "digest", &["friday", "monthly", "none"]);
            }
            "floors" => c.string_list(v, "floors"),
            "kind" => {
                if let Some(k) = c.one_of(v, "kind", &["agent", "workflow"]) {
                    kind = k;
                }
            }
            "run" => run(c, v),
            "scopes" => scopes(c, v),
            _ => {}
        }
    }

    if level == Some("L4") {
        for k in ["judge", "goals"] {
            if get(k).is_none() {
                c.add(k, "is required for a role at level L4");
            }
        }
        if let Some(Value::Mapping(j)) = get("judge") {
            if !j.contains_key("check") {
                c.add(
                    "judge.check",
                    "is required for a role at level L4: where the ratchet sees the judge last ran",
                );
            }
        }
    }

    let tools = get("tools");
    if kind == "workflow" {
        if get("run").is_some() {
            c.add(
                "run",
                "is not allowed for a workflow role (kind: workflow); it has its own hand-written workflow",
            );
        }
        for (path, _) in grants::tool_patterns(tools).filter(|(_, p)| names::could_match_board(p)) {
            c.add(
                &path,
                "could grant a board tool (board_*), which a workflow role may not have; workflow roles run no model and use no board",
            );
        }
    } else if matches!(tools, Some(Value::Mapping(_)))
        && !grants::tool_patterns(tools).any(|(_, p)| names::grants_board(p))
    {
        c.add(
            "tools",
            "grants no board tool; an agent role must grant at least one tool pattern starting with `board_` (e.g. `board_*`) in some connector",
        );
    }
}

/// `brief` and `goals`: a relative path to a file inside the role's folder. Whether it exists
/// and stays inside after symlinks is checked when the folder is loaded.
fn relative_file(c: &mut Ctx, path: &str, s: &str) {
    let p = std::path::Path::new(s);
    if s.is_empty() || s.contains('\0') {
        c.add(
            path,
            "must be a non-empty relative path to a file in the role's folder",
        );
    } else if p.is_absolute() {
        c.add(
            path,
            "must be a relative path to a file in the role's folder, not an absolute path",
        );
    } else if p
        .components()
        .any(|x| matches!(x, std::path::Component::ParentDir))
    {
        c.add(
            path,
            "must stay inside the role's folder; `..` is not allowed",
        );
    } else if s.ends_with('/')
        || !p
            .components()
            .any(|x| matches!(x, std::path::Component::Normal(_)))
    {
        c.add(path, "must name a file in the role's folder, not a folder");
    }
}

fn judge(c: &mut Ctx, v: &Value) {
    let Some(entries) = c.object(
        v,
        "judge",
        &["metric", "source", "pass", "check"],
        &["metric", "source", "pass"],
    ) else {
        return;
    };
    for (k, val) in entries {
        let p = diag::key("judge", k);
        if k == "check" {
            match val {
                Value::Sequence(items) if items.is_empty() => c.add(
                    &p,
                    "is an empty list; give one check, or a list of at least one",
                ),
                Value::Sequence(items) => {
                    for (i, it) in items.iter().enumerate() {
                        judge_check(c, it, &diag::index(&p, i));
                    }
                }
                Value::Mapping(_) => judge_check(c, val, &p),
                _ => c.add(
                    &p,
                    "must be one check (a mapping) or a non-empty list of checks",
                ),
            }
        } else {
            c.string(val, &p);
        }
    }
}

fn judge_check(c: &mut Ctx, v: &Value, path: &str) {
    let Some(entries) = c.object(
        v,
        path,
        &["repo", "workflow", "branch", "issue_label", "max_age_days"],
        &["repo", "max_age_days"],
    ) else {
        return;
    };
    let has = |k: &str| entries.iter().any(|(n, _)| *n == k);
    for &(k, val) in &entries {
        let p = diag::key(path, k);
        match k {
            "repo" => {
                c.string_matching(
                    val,
                    &p,
                    names::is_judge_repo,
                    "`owner/name` (letters, digits and `-` for the owner; letters, digits, `.`, `_`, `-` for the name)",
                );
            }
            "workflow" => {
                c.string_matching(
                    val,
                    &p,
                    names::is_workflow_file,
                    "a workflow file name ending in `.yml` or `.yaml` (letters, digits, `.`, `_`, `-`)",
                );
            }
            "branch" => {
                c.one_of(val, &p, &["main"]);
            }
            "issue_label" => {
                c.string(val, &p);
            }
            "max_age_days" => {
                c.integer(val, &p, Some(1), Some(7));
            }
            _ => {}
        }
    }
    let ci = has("workflow") || has("branch");
    let report = has("issue_label");
    if ci && report {
        c.add(
            path,
            "is both a CI judge (workflow, branch) and a report judge (issue_label); a check is exactly one of them",
        );
    } else if ci && !(has("workflow") && has("branch")) {
        c.add(
            path,
            "is a CI judge missing `workflow` or `branch`; a CI judge names both",
        );
    } else if !ci && !report {
        c.add(
            path,
            "names no judge; give `workflow` and `branch` (a CI judge) or `issue_label` (a report judge)",
        );
    }
}

fn identity(c: &mut Ctx, v: &Value) {
    let Some(entries) = c.object(
        v,
        "identity",
        &["github_login", "app_id", "board_name", "key_store"],
        &[],
    ) else {
        return;
    };
    for (k, val) in entries {
        let p = diag::key("identity", k);
        match k {
            "app_id" => {
                c.integer(val, &p, Some(1), None);
            }
            "key_store" => {
                c.string_matching(
                    val,
                    &p,
                    names::is_key_store,
                    "`github`, `airlock`, `ssm:/<prefix>` or `local:~/<path>` (paths of letters, digits, `/`, `_`, `.`, `-`)",
                );
            }
            _ => {
                c.string(val, &p);
            }
        }
    }
}

fn writes(c: &mut Ctx, v: &Value) {
    let Some(entries) = c.object(
        v,
        "writes",
        &[
            "repos",
            "issues",
            "pull_requests",
            "board",
            "workflows",
            "reads",
            "dispatch",
        ],
        &[],
    ) else {
        return;
    };
    for (k, val) in entries {
        let p = diag::key("writes", k);
        match k {
            "repos" => repo_list(c, val, &p),
            "issues" => c.enum_list(val, &p, &ISSUE_ACTIONS, false),
            "pull_requests" => c.enum_list(val, &p, &PULL_REQUEST_ACTIONS, false),
            "board" => c.string_list(val, &p),
            "reads" => c.enum_list(val, &p, &["actions"], false),
            _ => {
                c.boolean(val, &p);
            }
        }
    }
}

fn repo_list(c: &mut Ctx, v: &Value, path: &str) {
    c.list_of(v, path, |c, it, p| {
        c.string_matching(
            it,
            p,
            names::is_repo,
            "`owner/name` (letters, digits and `-` for the owner; lowercase letters, digits, `.` and `-` for the name)",
        );
    });
}

fn budget(c: &mut Ctx, v: &Value) {
    let Some(entries) = c.object(
        v,
        "budget",
        &[
            "runs_per_week",
            "minutes_per_run",
            "github_writes_per_run",
            "spend_usd",
        ],
        &[],
    ) else {
        return;
    };
    for (k, val) in entries {
        let p = diag::key("budget", k);
        match k {
            "spend_usd" => {
                c.number(val, &p, Some(0.0));
            }
            "github_writes_per_run" => {
                c.integer(val, &p, Some(0), None);
            }
            // Not bounded by the schema; Airlock runs are bounded to a week so a deadline
            // always fits the jail's clock arithmetic.
            "minutes_per_run" => {
                c.integer(val, &p, Some(1), Some(MAX_MINUTES_PER_RUN));
            }
            _ => {
                c.integer(val, &p, Some(1), None);
            }
        }
    }
}

/// `run.bash`: a list of prefixes, each one that can match a command. A prefix the bash
/// lexer refuses, whose program is not a bare name or is a wrapper, or whose words trip a
/// built-in argument guard would be a grant that never allows anything; it is refused at
/// its key path (`run.bash[3]`) without repeating its text. The built-in guards are always
/// in force (an operator's guard file only adds to them), so this holds under any policy.
fn bash_prefixes(c: &mut Ctx, v: &Value, path: &str) {
    c.string_list(v, path);
    let Value::Sequence(items) = v else {
        return;
    };
    let guards = crate::shell::guards::ArgGuards::builtin();
    for (i, item) in items.iter().enumerate() {
        if let Some(why) = item
            .as_str()
            .and_then(|p| crate::shell::dead_prefix(p, &guards))
        {
            c.add(&diag::index(path, i), why);
        }
    }
}

/// A week: the longest run Airlock accepts.
pub const MAX_MINUTES_PER_RUN: i128 = 7 * 24 * 60;

fn run(c: &mut Ctx, v: &Value) {
    let Some(entries) = c.object(
        v,
        "run",
        &[
            "schedule",
            "model",
            "provider",
            "max_turns",
            "clone",
            "bash",
            "tools",
            "mcp",
        ],
        &["model"],
    ) else {
        return;
    };
    for (k, val) in entries {
        let p = diag::key("run", k);
        match k {
            "schedule" => {
                match c.string(val, &p) {
                    Some("") => c.add(
                        &p,
                        "is empty; give a 5-field cron line (UTC) or leave the key out",
                    ),
                    // Airlock turns the schedule into a systemd timer; refuse what it
                    // cannot translate exactly.
                    Some(s) => {
                        if let Err(why) = crate::schedule::parse(s) {
                            c.add(&p, why);
                        }
                    }
                    None => {}
                }
            }
            "model" => {
                c.string(val, &p);
            }
            "provider" => {
                c.one_of(val, &p, &["claude", "codex"]);
            }
            "max_turns" => {
                c.integer(val, &p, Some(1), None);
            }
            "clone" => repo_list(c, val, &p),
            "bash" => bash_prefixes(c, val, &p),
            "tools" => c.enum_list(val, &p, &["WebFetch", "WebSearch", "Agent"], true),
            "mcp" => mcp(c, val, &p),
            _ => {}
        }
    }
}

/// What is wrong with a direct connector's `url` or `header`, if anything; never repeating
/// the value (a URL with a password in it holds a secret).
fn direct_field_problem(field: &str, text: &str) -> Option<&'static str> {
    use crate::urls::{has_userinfo, parse_http_url};
    match field {
        "url" if has_userinfo(text) => Some(
            "must not carry a user or password (not repeated here): the bearer comes from the host's credentials ROLE_<ROLE>_<CONNECTOR>_TOKEN",
        ),
        "url" => match parse_http_url(text) {
            Some(u) if u.https || u.is_loopback() => None,
            Some(_) => Some("plain http goes only to this host: a bearer must not cross a network in clear; use https://"),
            None => Some("must be https://HOST[:PORT]/PATH (or http:// to this host), without query or fragment"),
        },
        "header" if hyper::header::HeaderName::from_bytes(text.as_bytes()).is_err() => {
            Some("must be an HTTP header name (letters, digits and -)")
        }
        _ => None,
    }
}

/// `run.mcp`: connector -> `{via: airlock}` or `{url, header?}`, nothing else.
fn mcp(c: &mut Ctx, v: &Value, path: &str) {
    let Some(entries) = c.mapping(v, path) else {
        return;
    };
    const SHAPES: &str =
        "each connector is either `{via: airlock}` (through Airlock's gateway) or `{url, header}` (direct; header optional)";
    for (n, k, val) in entries {
        let ok = names::is_connector(k);
        let p = key_seg(path, k, n, ok);
        if !ok {
            c.add(
                &p,
                "is not a valid connector name; use 1 to 40 lowercase letters, digits and `-`, starting with a letter or digit",
            );
        }
        let Value::Mapping(m) = val else {
            c.add(&p, format!("must be a mapping; {SHAPES}"));
            continue;
        };
        if m.contains_key("via") {
            if let Some(fields) = c.object(val, &p, &["via"], &["via"]) {
                for (_, via) in fields {
                    if !matches!(via, Value::String(s) if s == "airlock") {
                        c.add(&diag::key(&p, "via"), "must be `airlock`, the only gateway");
                    }
                }
            }
        } else if m.contains_key("url") {
            if let Some(fields) = c.object(val, &p, &["url", "header"], &["url"]) {
                for (f, x) in fields {
                    let at = diag::key(&p, f);
                    let Some(text) = c.string(x, &at) else {
                        continue;
                    };
                    if let Some(why) = direct_field_problem(f, text) {
                        c.add(&at, why);
                    }
                }
            }
        } else {
            c.add(&p, format!("has neither `via` nor `url`; {SHAPES}"));
        }
    }
}

fn scopes(c: &mut Ctx, v: &Value) {
    let Some(entries) = c.object(
        v,
        "scopes",
        &["capcom", "board", "houston", "agents", "ops"],
        &[],
    ) else {
        return;
    };
    for (k, val) in entries {
        let allowed: &[&str] = match k {
            "capcom" | "board" => &["read", "write"],
            "agents" => &["sync"],
            _ => &["read"],
        };
        c.enum_list(val, &diag::key("scopes", k), allowed, false);
    }
}
