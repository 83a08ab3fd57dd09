//! Invalid role files: one broken rule each, mutated from one valid base document. Each case
//! must be refused, name the key path, say what is allowed, and never echo the value planted
//! as the offence (a secret marker).

use airlock::diag::Problem;
use airlock::role::{load_role_dir, parse_role, Kind, Level};
use serde_yaml::Value;
use std::collections::HashSet;
use std::path::Path;

const SECRET: &str = "zz-SECRET-MARKER-77";
/// A key shaped like a credential (a GitHub token): an unknown key like this is named by
/// its position, never repeated.
const SECRET_KEY: &str = "ghp_zzSECRETKEYMARKER0123456789abcdefghij";

const BASE: &str = r#"
schema: 1
role: scout
level: L3
brief: brief.md
identity:
  github_login: airlock-bot
  board_name: "mcp:scout"
  key_store: airlock
writes:
  repos: [acme/widgets]
  issues: [create, comment]
  pull_requests: [open]
  board: [general]
  workflows: false
  reads: [actions]
  dispatch: false
tools:
  board: ["board_*"]
  github: [get_issue, "list_*"]
resources:
  docs: ["https://docs.example.com/*", "file:*"]
deny:
  github: [delete_repo, "secret://*"]
args:
  github:
    get_issue:
      owner: {enum: [acme], maxLength: 40}
      number: {min: 1, max: 100000}
      ref: {pattern: "[a-z0-9-]+"}
budget:
  runs_per_week: 7
  minutes_per_run: 30
  github_writes_per_run: 10
  spend_usd: 2.5
digest: friday
floors: [never merges its own PR]
kind: agent
run:
  schedule: "0 6 * * 1"
  model: claude-sonnet
  provider: claude
  max_turns: 50
  clone: [acme/widgets]
  bash: [git log, gh api]
  tools: [WebFetch]
  mcp:
    board: {via: airlock}
    github: {url: "https://mcp.example.com", header: X-Token}
scopes:
  board: [read, write]
  capcom: [read]
  houston: [read]
  agents: [sync]
  ops: [read]
"#;

const DEL: &str = "<delete>";

fn base() -> Value {
    serde_yaml::from_str(BASE).unwrap()
}

/// Set (or with `DEL` remove) a dotted path; numeric segments index lists.
fn set(doc: &mut Value, path: &str, yaml: &str) {
    let segs: Vec<&str> = path.split('.').collect();
    let (last, parents) = segs.split_last().unwrap();
    let mut cur = doc;
    for s in parents {
        cur = match cur {
            Value::Sequence(items) => &mut items[s.parse::<usize>().unwrap()],
            Value::Mapping(m) => m
                .entry(Value::String((*s).to_string()))
                .or_insert_with(|| Value::Mapping(Default::default())),
            _ => panic!("cannot descend into {s}"),
        };
    }
    match cur {
        Value::Mapping(m) if yaml == DEL => {
            m.remove(*last).unwrap();
        }
        Value::Mapping(m) => {
            m.insert(
                Value::String((*last).to_string()),
                serde_yaml::from_str(yaml).unwrap(),
            );
        }
        Value::Sequence(items) => {
            items[last.parse::<usize>().unwrap()] = serde_yaml::from_str(yaml).unwrap()
        }
        _ => panic!("cannot set {path}"),
    }
}

fn mutate(edits: &[(&str, &str)]) -> String {
    let mut d = base();
    for (p, v) in edits {
        set(&mut d, p, v);
    }
    serde_yaml::to_string(&d).unwrap()
}

struct Case {
    name: &'static str,
    text: String,
    path: &'static str,
    allowed: &'static str,
    /// Planted in the document as the offending value; must never be echoed.
    secret: Option<&'static str>,
}

fn case(
    name: &'static str,
    edits: &[(&str, &str)],
    path: &'static str,
    allowed: &'static str,
    secret: Option<&'static str>,
) -> Case {
    Case {
        name,
        text: mutate(edits),
        path,
        allowed,
        secret,
    }
}

fn raw(
    name: &'static str,
    text: String,
    path: &'static str,
    allowed: &'static str,
    secret: Option<&'static str>,
) -> Case {
    Case {
        name,
        text,
        path,
        allowed,
        secret,
    }
}

const S: Option<&str> = Some(SECRET);
const K: Option<&str> = Some(SECRET_KEY);

fn cases() -> Vec<Case> {
    let s = SECRET;
    let k = SECRET_KEY;
    let q = |v: &str| format!("\"{v}\"");
    let l = |v: &str| format!("[\"{v}\"]");
    let workflow_base: &[(&str, &str)] = &[("kind", "workflow"), ("run", DEL), ("scopes", DEL)];
    let with_wf = |extra: &[(&'static str, &'static str)]| {
        let mut v = workflow_base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    let l4: Vec<(&str, String)> = vec![
        ("level", "L4".into()),
        ("goals", "goals.md".into()),
        (
            "judge",
            "{metric: coverage, source: ci, pass: '>= 80'}".into(),
        ),
        (
            "judge.check",
            "{repo: acme/widgets, workflow: ci.yml, branch: main, max_age_days: 3}".into(),
        ),
    ];
    let l4_with = |extra: &[(&'static str, String)]| -> String {
        let mut d = base();
        for (p, v) in l4.iter().chain(extra.iter()) {
            set(&mut d, p, v);
        }
        serde_yaml::to_string(&d).unwrap()
    };
    let rule = |r: &str| format!("{{{r}}}");
    let arg = "args.github.get_issue.owner";
    let mut v = vec![
        // Top level.
        case(
            "schema missing",
            &[("schema", DEL)],
            "schema",
            "required",
            None,
        ),
        case(
            "schema not 1",
            &[("schema", "424242")],
            "schema",
            "must be 1",
            Some("424242"),
        ),
        case(
            "schema quoted",
            &[("schema", &q(s))],
            "schema",
            "integer",
            S,
        ),
        case(
            "schema fraction",
            &[("schema", "1.5")],
            "schema",
            "integer",
            None,
        ),
        case(
            "role pattern",
            &[("role", &q(&format!("Scout_{s}")))],
            "role",
            "lowercase letter",
            S,
        ),
        case("role missing", &[("role", DEL)], "role", "required", None),
        case(
            "role not string",
            &[("role", "424242")],
            "role",
            "a string",
            Some("424242"),
        ),
        case(
            "level enum",
            &[("level", &q(s))],
            "level",
            "L1, L2, L3, L4",
            S,
        ),
        case("level null", &[("level", "~")], "level", "a string", None),
        case(
            "brief not string",
            &[("brief", "424242")],
            "brief",
            "a string",
            Some("424242"),
        ),
        case(
            "brief absolute",
            &[("brief", &q(&format!("/etc/{s}")))],
            "brief",
            "relative path",
            S,
        ),
        case(
            "brief dotdot",
            &[("brief", &q(&format!("../{s}/brief.md")))],
            "brief",
            "inside the role's folder",
            S,
        ),
        case(
            "brief folder",
            &[("brief", &q(&format!("{s}/")))],
            "brief",
            "not a folder",
            S,
        ),
        case(
            "goals empty",
            &[("goals", "''")],
            "goals",
            "non-empty relative path",
            None,
        ),
        case(
            "goals dotdot",
            &[("goals", &q(&format!("a/../../{s}")))],
            "goals",
            "inside the role's folder",
            S,
        ),
        case(
            "unknown top key",
            &[(k, "1")],
            "<key #17>",
            "allowed keys are: schema, role",
            K,
        ),
        case(
            "writes missing",
            &[("writes", DEL)],
            "writes",
            "required",
            None,
        ),
        case(
            "tools missing",
            &[("tools", DEL)],
            "tools",
            "required",
            None,
        ),
        case(
            "budget missing",
            &[("budget", DEL)],
            "budget",
            "required",
            None,
        ),
        case(
            "digest enum",
            &[("digest", &q(s))],
            "digest",
            "friday, monthly, none",
            S,
        ),
        case(
            "floors not list",
            &[("floors", &q(s))],
            "floors",
            "must be a list",
            S,
        ),
        case(
            "floors item not string",
            &[("floors", "[424242]")],
            "floors[0]",
            "a string",
            Some("424242"),
        ),
        case(
            "kind enum",
            &[("kind", &q(s))],
            "kind",
            "agent, workflow",
            S,
        ),
        // writes
        case(
            "writes repo pattern",
            &[("writes.repos", &l(&format!("acme/W{s}")))],
            "writes.repos[0]",
            "`owner/name`",
            S,
        ),
        case(
            "writes repo no slash",
            &[("writes.repos", &l(s))],
            "writes.repos[0]",
            "`owner/name`",
            S,
        ),
        case(
            "writes issues enum",
            &[("writes.issues", &l(s))],
            "writes.issues[0]",
            "create, label, edit_body",
            S,
        ),
        case(
            "writes prs enum",
            &[("writes.pull_requests", &l(s))],
            "writes.pull_requests[0]",
            "open, merge, review",
            S,
        ),
        case(
            "writes workflows bool",
            &[("writes.workflows", &q(s))],
            "writes.workflows",
            "a boolean",
            S,
        ),
        case(
            "writes dispatch int",
            &[("writes.dispatch", "1")],
            "writes.dispatch",
            "a boolean",
            None,
        ),
        case(
            "writes reads enum",
            &[("writes.reads", &l(s))],
            "writes.reads[0]",
            "actions",
            S,
        ),
        case(
            "writes board item",
            &[("writes.board", "[424242]")],
            "writes.board[0]",
            "a string",
            Some("424242"),
        ),
        case(
            "writes unknown key",
            &[(&format!("writes.{k}"), "1")],
            "writes.<key #8>",
            "allowed keys are: repos",
            K,
        ),
        case(
            "writes not mapping",
            &[("writes", &l(s))],
            "writes",
            "a mapping",
            S,
        ),
        // identity
        case(
            "identity app_id zero",
            &[("identity.app_id", "0")],
            "identity.app_id",
            "at least 1",
            None,
        ),
        case(
            "identity app_id fraction",
            &[("identity.app_id", "1.5")],
            "identity.app_id",
            "an integer",
            None,
        ),
        case(
            "identity app_id quoted",
            &[("identity.app_id", &q("424242"))],
            "identity.app_id",
            "an integer",
            Some("424242"),
        ),
        case(
            "identity key_store",
            &[("identity.key_store", &q(&format!("vault:{s}")))],
            "identity.key_store",
            "`ssm:/<prefix>`",
            S,
        ),
        case(
            "identity key_store space",
            &[("identity.key_store", &q(&format!("ssm:/a {s}")))],
            "identity.key_store",
            "`local:~/<path>`",
            S,
        ),
        case(
            "identity login list",
            &[("identity.github_login", &l(s))],
            "identity.github_login",
            "a string",
            S,
        ),
        case(
            "identity board_name list",
            &[("identity.board_name", &l(s))],
            "identity.board_name",
            "a string",
            S,
        ),
        case(
            "identity unknown key",
            &[(&format!("identity.{k}"), "1")],
            "identity.<key #4>",
            "allowed keys are: github_login",
            K,
        ),
        // tools
        case(
            "tools connector name",
            &[(&format!("tools.GitHub_{s}"), "[\"board_x\"]")],
            "tools.<key #3>",
            "lowercase letters, digits and `-`",
            S,
        ),
        case(
            "tools star inside",
            &[("tools.github", &l(&format!("{s}*x")))],
            "tools.github[0]",
            "optionally ending in one `*`",
            S,
        ),
        case(
            "tools space",
            &[("tools.github", &l(&format!("a {s}")))],
            "tools.github[0]",
            "MCP tool-name characters",
            S,
        ),
        case(
            "tools empty pattern",
            &[("tools.github", "['']")],
            "tools.github[0]",
            "MCP tool-name characters",
            None,
        ),
        case(
            "tools not list",
            &[("tools.github", &q(s))],
            "tools.github",
            "a list",
            S,
        ),
        case(
            "tools not mapping",
            &[("tools", &l(s))],
            "tools",
            "a mapping",
            S,
        ),
        case(
            "agent without board",
            &[("tools.board", DEL)],
            "tools",
            "starting with `board_`",
            None,
        ),
        case(
            "workflow with board tool",
            &with_wf(&[]),
            "tools.board[0]",
            "workflow role may not have",
            None,
        ),
        case(
            "workflow with star",
            &with_wf(&[("tools.board", DEL), ("tools.github", "['*']")]),
            "tools.github[0]",
            "workflow role may not have",
            None,
        ),
        case(
            "workflow with b star",
            &with_wf(&[("tools.board", DEL), ("tools.github", "['b*']")]),
            "tools.github[0]",
            "workflow role may not have",
            None,
        ),
        case(
            "workflow with run",
            &[("kind", "workflow"), ("tools.board", DEL)],
            "run",
            "workflow role",
            None,
        ),
        // resources and deny
        case(
            "resources star inside",
            &[("resources.docs", &l(&format!("https://x/{s}*")))],
            "resources.docs[0]",
            "a prefix ending in `/*`",
            S,
        ),
        case(
            "resources space",
            &[("resources.docs", &l(&format!("https://x/ {s}")))],
            "resources.docs[0]",
            "printable ASCII",
            S,
        ),
        case(
            "resources non-ascii",
            &[("resources.docs", &l(&format!("https://x/é{s}")))],
            "resources.docs[0]",
            "printable ASCII",
            S,
        ),
        case(
            "resources empty",
            &[("resources.docs", "['']")],
            "resources.docs[0]",
            "an exact URI",
            None,
        ),
        case(
            "resources bad scheme",
            &[("resources.docs", &l(&format!("9{s}:*")))],
            "resources.docs[0]",
            "`<scheme>:*`",
            S,
        ),
        case(
            "resources connector",
            &[(&format!("resources.{s}_X"), "['*']")],
            "resources.<key #2>",
            "lowercase letters",
            S,
        ),
        case(
            "resources connector too long",
            &[(&format!("resources.{}", "a".repeat(41)), "['*']")],
            "resources.<key #2>",
            "1 to 40",
            None,
        ),
        case(
            "deny bad pattern",
            &[("deny.github", &l(&format!("a*{s}")))],
            "deny.github[0]",
            "a tool pattern",
            S,
        ),
        case(
            "deny connector",
            &[(&format!("deny.{s}_X"), "['*']")],
            "deny.<key #2>",
            "lowercase letters",
            S,
        ),
        case(
            "deny item not string",
            &[("deny.github", "[424242]")],
            "deny.github[0]",
            "a string",
            Some("424242"),
        ),
        // args
        case(
            "args connector",
            &[(&format!("args.{s}_X"), "{}")],
            "args.<key #2>",
            "lowercase letters",
            S,
        ),
        case(
            "args tool name",
            &[(&format!("args.github.a {s}"), "{}")],
            "args.github.<key #2>",
            "1 to 128 MCP tool-name characters",
            S,
        ),
        case(
            "args tool proto",
            &[("args.github.__proto__", "{}")],
            "args.github.<key #2>",
            "never `__proto__`",
            None,
        ),
        case(
            "args param proto",
            &[("args.github.get_issue.__proto__", "{}")],
            "args.github.get_issue.<key #4>",
            "`__proto__`",
            None,
        ),
        case(
            "args rule unknown key",
            &[(&format!("{arg}.{k}"), "1")],
            "args.github.get_issue.owner.<key #3>",
            "allowed keys are: enum, const",
            K,
        ),
        case(
            "args enum empty",
            &[(&format!("{arg}.enum"), "[]")],
            "args.github.get_issue.owner.enum",
            "at least one",
            None,
        ),
        case(
            "args enum nested",
            &[(&format!("{arg}.enum"), &format!("[[{s}]]"))],
            "args.github.get_issue.owner.enum[0]",
            "a string, a number or a boolean",
            S,
        ),
        case(
            "args enum null",
            &[(&format!("{arg}.enum"), "[~]")],
            "args.github.get_issue.owner.enum[0]",
            "a string, a number or a boolean",
            None,
        ),
        case(
            "args const map",
            &[(&format!("{arg}.const"), &rule(&format!("{s}: 1")))],
            "args.github.get_issue.owner.const",
            "a string, a number or a boolean",
            S,
        ),
        case(
            "args min string",
            &[(&format!("{arg}.min"), &q(s))],
            "args.github.get_issue.owner.min",
            "a number",
            S,
        ),
        case(
            "args max infinite",
            &[(&format!("{arg}.max"), ".inf")],
            "args.github.get_issue.owner.max",
            "finite number",
            None,
        ),
        case(
            "args maxLength negative",
            &[(&format!("{arg}.maxLength"), "-424242")],
            "args.github.get_issue.owner.maxLength",
            "at least 0",
            Some("424242"),
        ),
        case(
            "args maxLength fraction",
            &[(&format!("{arg}.maxLength"), "2.5")],
            "args.github.get_issue.owner.maxLength",
            "an integer",
            None,
        ),
        case(
            "args pattern quantified group",
            &[(&format!("{arg}.pattern"), &q(&format!("({s})+")))],
            "args.github.get_issue.owner.pattern",
            "quantified group",
            S,
        ),
        case(
            "args pattern lookaround",
            &[(&format!("{arg}.pattern"), &q(&format!("(?={s})a")))],
            "args.github.get_issue.owner.pattern",
            "no backreference, lookaround",
            S,
        ),
        case(
            "args pattern invalid",
            &[(&format!("{arg}.pattern"), &q(&format!("[{s}")))],
            "args.github.get_issue.owner.pattern",
            "short anchored regular expression",
            S,
        ),
        case(
            "args min above max",
            &[("args.github.get_issue.number.min", "424242")],
            "args.github.get_issue.number",
            "`min` must be at most `max`",
            Some("424242"),
        ),
        case(
            "args rule not mapping",
            &[(arg, &q(s))],
            "args.github.get_issue.owner",
            "a mapping",
            S,
        ),
        case(
            "args tool not mapping",
            &[("args.github.get_issue", &l(s))],
            "args.github.get_issue",
            "a mapping",
            S,
        ),
        // budget
        case(
            "budget runs zero",
            &[("budget.runs_per_week", "0")],
            "budget.runs_per_week",
            "at least 1",
            None,
        ),
        case(
            "budget minutes quoted",
            &[("budget.minutes_per_run", &q("424242"))],
            "budget.minutes_per_run",
            "an integer",
            Some("424242"),
        ),
        case(
            "budget writes negative",
            &[("budget.github_writes_per_run", "-424242")],
            "budget.github_writes_per_run",
            "at least 0",
            Some("424242"),
        ),
        case(
            "budget spend negative",
            &[("budget.spend_usd", "-0.5")],
            "budget.spend_usd",
            "at least 0",
            None,
        ),
        case(
            "budget spend nan",
            &[("budget.spend_usd", ".nan")],
            "budget.spend_usd",
            "finite number",
            None,
        ),
        case(
            "budget spend bool",
            &[("budget.spend_usd", "true")],
            "budget.spend_usd",
            "a number",
            None,
        ),
        case(
            "budget unknown key",
            &[(&format!("budget.{k}"), "1")],
            "budget.<key #5>",
            "allowed keys are: runs_per_week",
            K,
        ),
        // run
        case(
            "budget minutes_per_run over a week",
            &[("budget.minutes_per_run", "10081")],
            "budget.minutes_per_run",
            "an integer from 1 to 10080",
            None,
        ),
        case(
            "run model missing",
            &[("run.model", DEL)],
            "run.model",
            "required",
            None,
        ),
        case(
            "run schedule empty",
            &[("run.schedule", "''")],
            "run.schedule",
            "5-field cron",
            None,
        ),
        case(
            "run schedule not cron",
            &[("run.schedule", &q(s))],
            "run.schedule",
            "5-field cron",
            S,
        ),
        case(
            "run schedule names no weekday",
            &[("run.schedule", "'0 6 * * mond'")],
            "run.schedule",
            "day of week field",
            None,
        ),
        case(
            "run provider enum",
            &[("run.provider", &q(s))],
            "run.provider",
            "claude, codex",
            S,
        ),
        case(
            "run max_turns zero",
            &[("run.max_turns", "0")],
            "run.max_turns",
            "at least 1",
            None,
        ),
        case(
            "run clone pattern",
            &[("run.clone", &l(s))],
            "run.clone[0]",
            "`owner/name`",
            S,
        ),
        case(
            "run tools repeat",
            &[("run.tools", "[WebFetch, WebFetch]")],
            "run.tools[1]",
            "listed once",
            None,
        ),
        case(
            "run tools enum",
            &[("run.tools", &l(s))],
            "run.tools[0]",
            "WebFetch, WebSearch, Agent",
            S,
        ),
        case(
            "run bash item",
            &[("run.bash", "[424242]")],
            "run.bash[0]",
            "a string",
            Some("424242"),
        ),
        case(
            "run unknown key",
            &[(&format!("run.{k}"), "1")],
            "run.<key #9>",
            "allowed keys are: schedule, model",
            K,
        ),
        case(
            "mcp via not airlock",
            &[("run.mcp.board.via", &q(s))],
            "run.mcp.board.via",
            "must be `airlock`",
            S,
        ),
        case(
            "mcp direct extra key",
            &[(&format!("run.mcp.github.{k}"), "1")],
            "run.mcp.github.<key #3>",
            "allowed keys are: url, header",
            K,
        ),
        case(
            "mcp neither",
            &[("run.mcp.github", &rule(&format!("header: {s}")))],
            "run.mcp.github",
            "`{via: airlock}`",
            S,
        ),
        case(
            "mcp both",
            &[("run.mcp.board.url", &q(s))],
            "run.mcp.board.url",
            "allowed keys are: via",
            S,
        ),
        case(
            "mcp connector",
            &[(&format!("run.mcp.{s}_X"), "{via: airlock}")],
            "run.mcp.<key #3>",
            "lowercase letters",
            S,
        ),
        case(
            "mcp not mapping",
            &[("run.mcp.github", &q(s))],
            "run.mcp.github",
            "`{url, header}`",
            S,
        ),
        case(
            "mcp url with a password",
            &[(
                "run.mcp.github.url",
                &q(&format!("https://bot:{s}@mcp.example/mcp")),
            )],
            "run.mcp.github.url",
            "must not carry a user or password",
            S,
        ),
        case(
            "mcp url plain http elsewhere",
            &[("run.mcp.github.url", &q(&format!("http://mcp.example/{s}")))],
            "run.mcp.github.url",
            "plain http goes only to this host",
            S,
        ),
        case(
            "mcp header not a header name",
            &[("run.mcp.github.header", &q(&format!("{s} x")))],
            "run.mcp.github.header",
            "an HTTP header name",
            S,
        ),
        case(
            "mcp url not string",
            &[("run.mcp.github.url", "424242")],
            "run.mcp.github.url",
            "a string",
            Some("424242"),
        ),
        // scopes
        case(
            "scopes capcom enum",
            &[("scopes.capcom", &l(s))],
            "scopes.capcom[0]",
            "read, write",
            S,
        ),
        case(
            "scopes houston write",
            &[("scopes.houston", "[write]")],
            "scopes.houston[0]",
            "read",
            None,
        ),
        case(
            "scopes agents enum",
            &[("scopes.agents", "[read]")],
            "scopes.agents[0]",
            "sync",
            None,
        ),
        case(
            "scopes unknown family",
            &[("scopes.sending", "[read]")],
            "scopes.sending",
            "allowed keys are: capcom",
            None,
        ),
    ];
    // L4 and judge.
    let l4_cases: Vec<Case> = vec![
        raw("L4 without judge", l4_with(&[("judge", DEL.into())]), "judge", "required for a role at level L4", None),
        raw("L4 without goals", l4_with(&[("goals", DEL.into())]), "goals", "required for a role at level L4", None),
        raw("L4 without check", l4_with(&[("judge.check", DEL.into())]), "judge.check", "required for a role at level L4", None),
        raw("judge metric missing", l4_with(&[("judge.metric", DEL.into())]), "judge.metric", "required", None),
        raw("judge unknown key", l4_with(&[(Box::leak(format!("judge.{k}").into_boxed_str()), "1".into())]), "judge.<key #5>", "allowed keys are: metric, source", K),
        raw("check both kinds", l4_with(&[("judge.check.issue_label", q(s))]), "judge.check", "exactly one of them", S),
        raw("check neither kind", l4_with(&[("judge.check.workflow", DEL.into()), ("judge.check.branch", DEL.into())]), "judge.check", "`issue_label` (a report judge)", None),
        raw("check workflow without branch", l4_with(&[("judge.check.branch", DEL.into())]), "judge.check", "names both", None),
        raw("check max age high", l4_with(&[("judge.check.max_age_days", "8".into())]), "judge.check.max_age_days", "from 1 to 7", None),
        raw("check max age zero", l4_with(&[("judge.check.max_age_days", "0".into())]), "judge.check.max_age_days", "from 1 to 7", None),
        raw("check max age missing", l4_with(&[("judge.check.max_age_days", DEL.into())]), "judge.check.max_age_days", "required", None),
        raw("check branch enum", l4_with(&[("judge.check.branch", q(s))]), "judge.check.branch", "main", S),
        raw("check workflow pattern", l4_with(&[("judge.check.workflow", q(&format!("{s}.txt")))]), "judge.check.workflow", "ending in `.yml` or `.yaml`", S),
        raw("check repo pattern", l4_with(&[("judge.check.repo", q(s))]), "judge.check.repo", "`owner/name`", S),
        raw("check empty list", l4_with(&[("judge.check", "[]".into())]), "judge.check", "a list of at least one", None),
        raw("check list item", l4_with(&[("judge.check", format!("[{{repo: a/b, issue_label: x, max_age_days: 1}}, {{repo: a/b, max_age_days: 1, workflow: c.yml, branch: main, issue_label: {s}}}]"))]), "judge.check[1]", "exactly one of them", S),
        raw("check not mapping", l4_with(&[("judge.check", q(s))]), "judge.check", "a non-empty list of checks", S),
    ];
    v.extend(l4_cases);
    // Text-level: things a value tree cannot hold.
    let text = |t: &str| format!("{}{t}", BASE);
    v.extend(vec![
        raw(
            "duplicate top key",
            text(&format!("level: {s}\n")),
            "level",
            "each key may appear once",
            S,
        ),
        raw(
            "duplicate connector",
            BASE.replace(
                "  github: [get_issue, \"list_*\"]\n",
                &format!("  github: [get_issue]\n  github: [\"{s}\"]\n"),
            ),
            "tools.github",
            "each key may appear once",
            S,
        ),
        raw(
            "anchor and alias",
            BASE.replace("  board: [general]", &format!("  board: &b [\"{s}\"]"))
                .replace("floors: [never merges its own PR]", "floors: *b"),
            "writes.board",
            "anchors and aliases are not allowed",
            S,
        ),
        raw(
            "tag",
            BASE.replace("brief: brief.md", &format!("brief: !secret \"{s}\"")),
            "brief",
            "tags are not allowed",
            S,
        ),
        raw(
            "integer key",
            text("1: x\n"),
            "<key #17>",
            "keys must be strings",
            None,
        ),
        raw(
            "two documents",
            format!("{BASE}---\nrole: {s}\n"),
            "(file)",
            "a role file is one document",
            S,
        ),
        raw(
            "syntax error",
            format!("{BASE}extra: [\"{s}\"\n"),
            "(file)",
            "is not valid YAML (line",
            S,
        ),
        raw(
            "root is a list",
            format!("- {s}\n"),
            "(file)",
            "must be a mapping",
            S,
        ),
        raw(
            "empty file",
            String::new(),
            "(file)",
            "must be a mapping",
            None,
        ),
        raw(
            "complex key",
            format!("? [\"{s}\"]\n: 1\n"),
            "<key #1>",
            "keys in a role file are strings",
            S,
        ),
    ]);
    v
}

fn rendered(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("{p}\n")).collect()
}

#[test]
fn every_invalid_case_is_refused_precisely_and_without_the_value() {
    let cases = cases();
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    let mut names = HashSet::new();
    let mut texts = HashSet::new();
    let mut failures = Vec::new();
    for c in &cases {
        assert!(names.insert(c.name), "duplicate case name {}", c.name);
        assert!(
            texts.insert(c.text.clone()),
            "case {} repeats another document",
            c.name
        );
        if let Some(secret) = c.secret {
            assert!(
                c.text.contains(secret),
                "case {} did not plant its secret",
                c.name
            );
        }
        let file = Path::new("roles/scout/role.yaml");
        let problems = match parse_role(file, &c.text) {
            Ok(_) => {
                failures.push(format!("{}: accepted", c.name));
                continue;
            }
            Err(p) => p,
        };
        let out = rendered(&problems);
        if !problems
            .iter()
            .any(|p| p.path == c.path && p.message.contains(c.allowed))
        {
            failures.push(format!(
                "{}: wanted path `{}` with `{}`, got:\n{out}",
                c.name, c.path, c.allowed
            ));
        }
        for secret in [Some(SECRET), c.secret].into_iter().flatten() {
            if out.contains(secret) {
                failures.push(format!("{}: echoed the value:\n{out}", c.name));
            }
        }
        assert!(problems.iter().all(|p| p.file == file));
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} invalid cases checked", cases.len());
}

/// An unknown key is named when it is a plain identifier and withheld (named by position)
/// only when it is not one or is shaped like a credential.
#[test]
fn unknown_keys_are_named_unless_they_look_like_secrets() {
    let sk = "sk-ant-zzSECRETKEYMARKER0123456789";
    let cases: &[(&str, &str, &str)] = &[
        // (mutated path, value, expected problem path)
        ("colour", "1", "colour"),
        ("Max-Minutes", "1", "Max-Minutes"),
        ("_private", "1", "_private"),
        ("writes.repo", "[acme/widgets]", "writes.repo"),
        ("identity.login", "x", "identity.login"),
        ("budget.max_minutes", "1", "budget.max_minutes"),
        ("run.timeout", "1", "run.timeout"),
        ("run.mcp.board.header", "X-Token", "run.mcp.board.header"),
        (
            "args.github.get_issue.owner.minLength",
            "1",
            "args.github.get_issue.owner.minLength",
        ),
        ("scopes.sending", "[read]", "scopes.sending"),
        // Secret-shaped keys, and keys that are not identifiers, by position.
        (SECRET_KEY, "1", "<key #17>"),
        (sk, "1", "<key #17>"),
        (&*format!("budget.{sk}"), "1", "budget.<key #5>"),
        ("a b", "1", "<key #17>"),
        ("1abc", "1", "<key #17>"),
        ("x/y", "1", "<key #17>"),
    ];
    let mut failures = Vec::new();
    for (path, value, want) in cases {
        let text = mutate(&[(path, value)]);
        let file = Path::new("roles/scout/role.yaml");
        match parse_role(file, &text) {
            Ok(_) => failures.push(format!("{path}: accepted")),
            Err(problems) => {
                let out = rendered(&problems);
                if !problems
                    .iter()
                    .any(|p| p.path == *want && p.message.contains("is not a known key"))
                {
                    failures.push(format!("{path}: wanted `{want}`, got:\n{out}"));
                }
                for secret in [SECRET_KEY, sk] {
                    if out.contains(secret) {
                        failures.push(format!("{path}: echoed a secret-shaped key:\n{out}"));
                    }
                }
            }
        }
    }
    // A duplicated unknown key is named the same way by the YAML pre-scan.
    let dup = format!("{BASE}colour: 1\ncolour: 2\n");
    match parse_role(Path::new("r.yaml"), &dup) {
        Ok(_) => failures.push("duplicate: accepted".into()),
        Err(p) => {
            if !p
                .iter()
                .any(|p| p.path == "colour" && p.message.contains("more than once"))
            {
                failures.push(format!("duplicate: got {}", rendered(&p)));
            }
        }
    }
    let dup = format!("{BASE}{SECRET_KEY}: 1\n{SECRET_KEY}: 2\n");
    match parse_role(Path::new("r.yaml"), &dup) {
        Ok(_) => failures.push("secret duplicate: accepted".into()),
        Err(p) => {
            if rendered(&p).contains(SECRET_KEY) {
                failures.push(format!("secret duplicate echoed: {}", rendered(&p)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A `run.bash` prefix that can never match a command is a problem at its key path, with
/// the construct named and the prefix text never repeated.
#[test]
fn dead_bash_prefixes_are_refused_at_their_key_path() {
    let s = SECRET;
    let cases: Vec<(String, &str, &str)> = vec![
        // (run.bash list, expected path, message fragment)
        (
            format!("[git log, 'git log; {s}']"),
            "run.bash[1]",
            "command separator",
        ),
        (format!("[ls, 'git log | {s}']"), "run.bash[1]", "pipe"),
        (format!("['ls > {s}']"), "run.bash[0]", "redirection"),
        (format!("['ls && {s}']"), "run.bash[0]", "control operator"),
        (
            format!("['cat $HOME{s}']"),
            "run.bash[0]",
            "parameter expansion",
        ),
        (
            format!("['ls $({s})']"),
            "run.bash[0]",
            "command substitution",
        ),
        (format!("['ls {s}*']"), "run.bash[0]", "glob"),
        (format!("['ls ~/{s}']"), "run.bash[0]", "tilde"),
        (
            format!("['ls {{a,{s}}}']"),
            "run.bash[0]",
            "brace expansion",
        ),
        (format!("['git log # {s}']"), "run.bash[0]", "comment"),
        (
            format!("[\"git log 'u{s}\"]"),
            "run.bash[0]",
            "unterminated quote",
        ),
        (
            format!("['FOO={s} ls']"),
            "run.bash[0]",
            "environment assignment",
        ),
        (
            format!("[ls, cat, '/usr/bin/{s} log']"),
            "run.bash[2]",
            "bare command name",
        ),
        (format!("['./{s}']"), "run.bash[0]", "bare command name"),
        (
            format!("[\"'git log' {s}\"]"),
            "run.bash[0]",
            "bare command name",
        ),
        ("[ls, '']".to_string(), "run.bash[1]", "empty"),
        // Wrappers and words the built-in argument guards refuse in every command.
        (
            "[ls, sudo ls]".to_string(),
            "run.bash[1]",
            "runs other commands",
        ),
        ("[env]".to_string(), "run.bash[0]", "runs other commands"),
        (
            format!("['git -c {s} log']"),
            "run.bash[0]",
            "argument guards refuse",
        ),
        (
            "['cargo +nightly test']".to_string(),
            "run.bash[0]",
            "argument guards refuse",
        ),
        (
            "['find . -exec']".to_string(),
            "run.bash[0]",
            "argument guards refuse",
        ),
        ("['   ']".to_string(), "run.bash[0]", "empty"),
    ];
    let mut failures = Vec::new();
    for (list, want, fragment) in &cases {
        let text = mutate(&[("run.bash", list)]);
        match parse_role(Path::new("roles/scout/role.yaml"), &text) {
            Ok(_) => failures.push(format!("{list}: accepted")),
            Err(problems) => {
                let out = rendered(&problems);
                if !problems.iter().any(|p| {
                    p.path == *want
                        && p.message.contains(fragment)
                        && p.message.contains("can never match a command")
                }) {
                    failures.push(format!(
                        "{list}: wanted `{want}` with `{fragment}`, got:\n{out}"
                    ));
                }
                if out.contains(s) {
                    failures.push(format!("{list}: echoed the prefix:\n{out}"));
                }
            }
        }
    }
    // Prefixes that can match stay valid, however they are quoted or punctuated.
    for list in [
        "[git log, \"'gh' pr view\", \"cargo test\"]",
        "[git diff HEAD~1, git log --format=%h~%s, cargo test -- --nocapture]",
        "['git log @{u}', git show HEAD^]",
    ] {
        let text = mutate(&[("run.bash", list)]);
        if let Err(p) = parse_role(Path::new("r.yaml"), &text) {
            failures.push(format!("{list}: refused:\n{}", rendered(&p)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn base_document_is_valid() {
    let (role, doc) = parse_role(Path::new("r.yaml"), BASE).expect("base is valid");
    assert_eq!(role.role, "scout");
    assert_eq!(role.level, Level::L3);
    assert_eq!(role.kind, Kind::Agent);
    assert_eq!(role.tools["board"], vec!["board_*"]);
    assert_eq!(role.budget.minutes_per_run, Some(30));
    assert!(doc.is_mapping());
}

#[test]
fn minimal_agent_role_is_valid() {
    let text = "schema: 1\nrole: min\nlevel: L1\nbrief: brief.md\nwrites: {}\ntools: {board: [board_post]}\nbudget: {}\n";
    let (role, _) = parse_role(Path::new("r.yaml"), text).expect("valid");
    assert_eq!(role.kind, Kind::Agent);
    assert!(role.run.is_none());
}

#[test]
fn l4_role_with_both_judge_kinds_is_valid() {
    let mut d = base();
    set(&mut d, "level", "L4");
    set(&mut d, "goals", "goals.md");
    set(
        &mut d,
        "judge",
        "{metric: coverage, source: ci, pass: '>= 80', check: [{repo: acme/widgets, workflow: ci.yaml, branch: main, max_age_days: 7}, {repo: acme/sims, issue_label: sim-coverage, max_age_days: 1}]}",
    );
    let text = serde_yaml::to_string(&d).unwrap();
    let (role, _) = parse_role(Path::new("r.yaml"), &text).expect("valid");
    assert_eq!(role.level, Level::L4);
    assert!(role.judge.is_some() && role.goals.is_some());
}

#[test]
fn workflow_role_is_valid() {
    let text = "schema: 1\nrole: nightly\nlevel: L2\nbrief: docs/brief.md\nkind: workflow\nwrites: {repos: [acme/site], workflows: true}\ntools: {github: [get_issue, 'list_*']}\nbudget: {runs_per_week: 7}\n";
    let (role, _) = parse_role(Path::new("r.yaml"), text).expect("valid");
    assert_eq!(role.kind, Kind::Workflow);
}

#[test]
fn several_problems_are_all_reported_at_once() {
    let text = mutate(&[
        ("schema", "2"),
        ("level", "L9"),
        ("budget.runs_per_week", "0"),
        ("tools.github", "['a*b']"),
        ("run.provider", "gpt"),
        ("scopes.ops", "[write]"),
    ]);
    let problems = parse_role(Path::new("r.yaml"), &text).unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "schema",
        "level",
        "budget.runs_per_week",
        "tools.github[0]",
        "run.provider",
        "scopes.ops[0]",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
}

// load_role_dir: the folder on disk.

fn role_dir(name: &str, yaml: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("role.yaml"), yaml).unwrap();
    (root, dir)
}

fn minimal(role: &str, brief: &str) -> String {
    format!("schema: 1\nrole: {role}\nlevel: L1\nbrief: \"{brief}\"\nwrites: {{}}\ntools: {{board: ['board_*']}}\nbudget: {{}}\n")
}

#[test]
fn load_role_dir_reads_brief_and_goals() {
    let text = format!("{}goals: goals.md\n", minimal("scout", "brief.md"));
    let (_root, dir) = role_dir("scout", &text);
    std::fs::write(dir.join("brief.md"), "Read the board.").unwrap();
    std::fs::write(dir.join("goals.md"), "Ship.").unwrap();
    let loaded = load_role_dir(&dir).expect("loads");
    assert_eq!(loaded.brief_text, "Read the board.");
    assert_eq!(loaded.goals_text.as_deref(), Some("Ship."));
    assert_eq!(loaded.role.role, "scout");
    assert_eq!(loaded.file, dir.join("role.yaml"));
}

fn dir_problems(dir: &Path) -> Vec<Problem> {
    load_role_dir(dir).expect_err("refused")
}

#[test]
fn load_role_dir_refuses_missing_brief() {
    let (_root, dir) = role_dir("scout", &minimal("scout", "brief.md"));
    let p = dir_problems(&dir);
    assert!(
        p.iter()
            .any(|p| p.path == "brief" && p.message.contains("does not exist")),
        "{p:?}"
    );
}

#[test]
fn load_role_dir_refuses_brief_escaping_with_dotdot() {
    let (root, dir) = role_dir("scout", &minimal("scout", "../outside.md"));
    std::fs::write(root.path().join("outside.md"), SECRET).unwrap();
    let p = dir_problems(&dir);
    assert!(
        p.iter()
            .any(|p| p.path == "brief" && p.message.contains("`..` is not allowed")),
        "{p:?}"
    );
    assert!(!rendered(&p).contains(SECRET));
}

#[test]
fn load_role_dir_refuses_brief_symlink_escape() {
    let (root, dir) = role_dir("scout", &minimal("scout", "brief.md"));
    std::fs::write(root.path().join("outside.md"), SECRET).unwrap();
    std::os::unix::fs::symlink(root.path().join("outside.md"), dir.join("brief.md")).unwrap();
    let p = dir_problems(&dir);
    assert!(
        p.iter()
            .any(|p| p.path == "brief" && p.message.contains("outside the role's folder")),
        "{p:?}"
    );
    assert!(!rendered(&p).contains(SECRET));
}

#[test]
fn load_role_dir_refuses_symlinked_folder_escape_in_subpath() {
    let (root, dir) = role_dir("scout", &minimal("scout", "docs/brief.md"));
    let elsewhere = root.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("brief.md"), SECRET).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("docs")).unwrap();
    let p = dir_problems(&dir);
    assert!(
        p.iter()
            .any(|p| p.path == "brief" && p.message.contains("outside")),
        "{p:?}"
    );
}

#[test]
fn load_role_dir_accepts_symlink_inside_folder() {
    let (_root, dir) = role_dir("scout", &minimal("scout", "brief.md"));
    std::fs::write(dir.join("real.md"), "inside").unwrap();
    std::os::unix::fs::symlink("real.md", dir.join("brief.md")).unwrap();
    assert_eq!(load_role_dir(&dir).expect("loads").brief_text, "inside");
}

#[test]
fn load_role_dir_refuses_brief_that_is_a_folder() {
    let (_root, dir) = role_dir("scout", &minimal("scout", "brief.md"));
    std::fs::create_dir(dir.join("brief.md")).unwrap();
    let p = dir_problems(&dir);
    assert!(
        p.iter()
            .any(|p| p.path == "brief" && p.message.contains("not a regular file")),
        "{p:?}"
    );
}

#[test]
fn load_role_dir_refuses_folder_name_mismatch() {
    let (_root, dir) = role_dir("other", &minimal("scout", "brief.md"));
    std::fs::write(dir.join("brief.md"), "x").unwrap();
    let p = dir_problems(&dir);
    assert!(
        p.iter()
            .any(|p| p.path == "role" && p.message.contains("name of the role's folder")),
        "{p:?}"
    );
}

#[test]
fn load_role_dir_refuses_missing_goals_and_reports_with_brief() {
    let text = format!("{}goals: goals.md\n", minimal("other-name", "brief.md"));
    let (_root, dir) = role_dir("scout", &text);
    let p = dir_problems(&dir);
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.contains(&"role") && paths.contains(&"brief") && paths.contains(&"goals"),
        "{paths:?}"
    );
}

#[test]
fn load_role_dir_refuses_missing_role_file() {
    let root = tempfile::tempdir().unwrap();
    let p = dir_problems(root.path());
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].path, "(file)");
    assert!(p[0].message.contains("cannot be opened"), "{p:?}");
}

// A workflow role's own command: workflow.sh beside role.yaml.

fn workflow_minimal(role: &str) -> String {
    format!("schema: 1\nrole: {role}\nlevel: L1\nbrief: brief.md\nkind: workflow\nwrites: {{}}\ntools: {{}}\nbudget: {{}}\n")
}

#[test]
fn load_role_dir_reads_a_workflow_roles_script() {
    let (_root, dir) = role_dir("nightly", &workflow_minimal("nightly"));
    std::fs::write(dir.join("brief.md"), "Run the job.").unwrap();
    let loaded = load_role_dir(&dir).expect("loads without a script");
    assert_eq!(loaded.workflow_text, None);
    std::fs::write(dir.join("workflow.sh"), "echo nightly\n").unwrap();
    let loaded = load_role_dir(&dir).expect("loads with its script");
    assert_eq!(loaded.workflow_text.as_deref(), Some("echo nightly\n"));
}

#[test]
fn load_role_dir_refuses_a_workflow_script_in_an_agent_role() {
    let (_root, dir) = role_dir("scout", &minimal("scout", "brief.md"));
    std::fs::write(dir.join("brief.md"), "Read the board.").unwrap();
    std::fs::write(dir.join("workflow.sh"), "echo never\n").unwrap();
    let p = dir_problems(&dir);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].path, "kind");
    assert_eq!(p[0].file, dir.join("role.yaml"));
    assert!(p[0].message.contains("workflow.sh"), "{p:?}");
}

#[test]
fn load_role_dir_refuses_a_workflow_script_leading_outside_or_unreadable() {
    let (root, dir) = role_dir("nightly", &workflow_minimal("nightly"));
    std::fs::write(dir.join("brief.md"), "Run the job.").unwrap();
    std::fs::write(root.path().join("outside.sh"), SECRET).unwrap();
    std::os::unix::fs::symlink(root.path().join("outside.sh"), dir.join("workflow.sh")).unwrap();
    let p = dir_problems(&dir);
    assert!(
        p.iter().any(|p| p.file == dir.join("workflow.sh")
            && p.message.contains("outside the role's folder")),
        "{p:?}"
    );
    assert!(!rendered(&p).contains(SECRET));
    // A folder, and text that is not UTF-8: named, never shown.
    std::fs::remove_file(dir.join("workflow.sh")).unwrap();
    std::fs::create_dir(dir.join("workflow.sh")).unwrap();
    let p = dir_problems(&dir);
    assert!(
        p.iter().any(|p| p.message.contains("not a regular file")),
        "{p:?}"
    );
    std::fs::remove_dir(dir.join("workflow.sh")).unwrap();
    std::fs::write(dir.join("workflow.sh"), b"echo \xff\n").unwrap();
    let p = dir_problems(&dir);
    assert!(p.iter().any(|p| p.message.contains("not UTF-8")), "{p:?}");
}
