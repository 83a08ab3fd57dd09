//! Airlock's `bash` tool: `{command, cwd?, timeout_ms?}`. The policy core decides the
//! command string exactly as `airlockctl check ROLE bash` does; an allowed command runs on
//! the command side from its dequoted argv (no shell). A refused command, or bad input, is
//! a tool result with `isError` whose text names the rule or the key, never a value.
//!
//! A git command runs with git's program-naming config overridden and may execute only
//! git's own programs ([`crate::policy::git_overrides`]).

pub mod runner_client;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::gateway::{CallRecord, RunGateway};
use crate::sandbox::runner::{CommandRequest, CommandResult};
use crate::secret_shapes::find_secret;

/// The tool's name on Airlock's own MCP server.
pub const NAME: &str = crate::policy::agent_config::BASH_TOOL;
/// Default and largest `timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// The tool as `tools/list` shows it.
pub fn definition() -> Value {
    json!({
        "name": NAME,
        "title": "Run a command",
        "description": "Run one command in the run's workspace, as the run's own user, inside its jail. \
    The command is one program and its arguments (quotes are honoured; no pipes, redirections, \
    variables or other shell syntax). Only commands the role allows run; a refusal says which \
    rule refused it.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, e.g. `git log --oneline -5`."},
                "cwd": {"type": "string", "description": "Absolute directory inside the workspace or the home (default: the workspace)."},
                "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS, "description": "Default 120000."}
            },
            "required": ["command"],
            "additionalProperties": false
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "exit_code": {"type": ["integer", "null"]},
                "signal": {"type": ["integer", "null"]},
                "stdout": {"type": "string"},
                "stderr": {"type": "string"},
                "timed_out": {"type": "boolean"},
                "truncated": {"type": "boolean"},
                "duration_ms": {"type": "integer"}
            },
            "required": ["exit_code", "signal", "stdout", "stderr", "timed_out", "truncated", "duration_ms"]
        }
    })
}

/// The tool's input, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashInput {
    pub command: String,
    pub cwd: Option<PathBuf>,
    pub timeout_ms: u64,
}

/// Check the arguments of a call. Errors name the key and what is allowed.
pub fn parse_input(args: &Value) -> Result<BashInput, String> {
    let empty = Map::new();
    let obj = match args {
        Value::Object(o) => o,
        Value::Null => &empty,
        _ => return Err("arguments: must be an object".into()),
    };
    for k in obj.keys() {
        if !matches!(k.as_str(), "command" | "cwd" | "timeout_ms") {
            return Err(match shown_key(k) {
                Some(k) => {
                    format!("arguments.{k}: unknown; the keys are command, cwd and timeout_ms")
                }
                None => {
                    "arguments: an unknown key; the keys are command, cwd and timeout_ms".into()
                }
            });
        }
    }
    let command = match obj.get("command") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("arguments.command: must be a string".into()),
        None => return Err("arguments.command: required".into()),
    };
    let cwd = match obj.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(PathBuf::from(s)),
        Some(_) => return Err("arguments.cwd: must be a string".into()),
    };
    let timeout_ms = match obj.get("timeout_ms") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT_MS,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_TIMEOUT_MS).contains(&n) => n,
            _ => {
                return Err(format!(
                    "arguments.timeout_ms: an integer from 1 to {MAX_TIMEOUT_MS}"
                ))
            }
        },
    };
    Ok(BashInput {
        command,
        cwd,
        timeout_ms,
    })
}

/// A key worth repeating in an error: a plain identifier that is not secret-shaped.
fn shown_key(k: &str) -> Option<&str> {
    let plain = !k.is_empty()
        && k.len() <= 64
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (plain && find_secret(k).is_none()).then_some(k)
}

/// The working directory of a command: the workspace by default, else an absolute plain
/// path (no `.` or `..`) at or under the workspace or the home.
pub fn check_cwd(cwd: Option<&Path>, workspace: &Path, home: &Path) -> Result<PathBuf, String> {
    let Some(c) = cwd else {
        return Ok(workspace.to_path_buf());
    };
    // Checked on the text: `Path::components` would quietly drop a `.`.
    let plain = c
        .to_str()
        .and_then(|s| s.strip_prefix('/'))
        .is_some_and(|rest| {
            rest.split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..")
        });
    if plain && (c.starts_with(workspace) || c.starts_with(home)) {
        Ok(c.to_path_buf())
    } else {
        Err(
            "arguments.cwd: must be an absolute path (no . or ..) inside the workspace or the home"
                .into(),
        )
    }
}

/// The argv as the journal shows it: secret-shaped words redacted, long words cut.
pub fn shown_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|w| {
            if find_secret(w).is_some() {
                "[redacted]".to_string()
            } else if w.chars().count() > 200 {
                format!("{}…", w.chars().take(200).collect::<String>())
            } else if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", w.replace('\'', "'\\''"))
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A tool result with `isError`.
pub fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// A finished command as a tool result: structured, and the same as text.
pub fn command_result(r: &CommandResult) -> Value {
    let structured = json!({
        "exit_code": r.exit_code,
        "signal": r.signal,
        "stdout": r.stdout,
        "stderr": r.stderr,
        "timed_out": r.timed_out,
        "truncated": r.truncated,
        "duration_ms": r.duration_ms,
    });
    let text = structured.to_string();
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": false,
    })
}

/// One call of the tool: decide, run, journal. Returns the tool result.
pub async fn call(gw: &RunGateway, args: &Value) -> Value {
    let started = Instant::now();
    let mut rec = CallRecord::new(crate::policy::agent_config::BASH_SERVER, NAME);
    let result = run(gw, args, &mut rec).await;
    rec.finish(started, &result, gw.log.as_ref());
    result
}

async fn run(gw: &RunGateway, args: &Value, rec: &mut CallRecord) -> Value {
    let input = match parse_input(args) {
        Ok(i) => i,
        Err(why) => {
            rec.rule = "input".into();
            rec.reason = why.clone();
            return error_result(&why);
        }
    };
    let (decision, argv) = gw.plan.policy.get().bash_command(&input.command);
    rec.decided(&decision);
    let argv = match argv.filter(|_| decision.allow) {
        Some(argv) => argv,
        None => match ask(gw, &input.command, &decision).await {
            Ok((argv, by)) => {
                rec.allow = true;
                rec.rule = format!("ask: allowed by {by}");
                argv
            }
            Err(why) => return error_result(&why),
        },
    };
    rec.detail = crate::gateway::clip(&shown_argv(&argv), crate::gateway::MAX_DETAIL_CHARS);
    rec.program = argv.first().cloned();
    let cwd = match check_cwd(input.cwd.as_deref(), &gw.plan.workspace, &gw.plan.home) {
        Ok(c) => c,
        Err(why) => {
            rec.rule = "input".into();
            rec.reason = why.clone();
            rec.allow = false;
            return error_result(&why);
        }
    };
    // Never past the run's deadline.
    let mut timeout = Duration::from_millis(input.timeout_ms);
    if let Some(d) = gw.deadline {
        timeout = timeout.min(d.saturating_duration_since(Instant::now()));
    }
    let timeout_ms = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut req = CommandRequest {
        argv,
        cwd,
        timeout_ms,
        env: Vec::new(),
        git_config: Vec::new(),
        exec_only: None,
    };
    if let Err(why) = plan_git(&mut req) {
        rec.allow = false;
        rec.rule = "git: bash tool".into();
        rec.reason = why.clone();
        return error_result(&format!("refused by git: bash tool: {why}"));
    }
    match gw.runner.run(&req).await {
        Ok(r) => match &r.error {
            Some(why) => {
                rec.exit_code = r.exit_code;
                error_result(&format!("the command did not run: {why}"))
            }
            None => {
                rec.exit_code = r.exit_code;
                rec.is_error = false;
                command_result(&r)
            }
        },
        Err(e) => error_result(&format!("the command did not run: {e}")),
    }
}

/// A command refused for want of a prefix, put to a person when the host lets the role ask
/// ([`crate::policy::asks`]); the rails are checked again on an allowed one. `Ok`: the
/// argv to run and who allowed it; `Err`: the refusal's text.
async fn ask(
    gw: &RunGateway,
    command: &str,
    d: &crate::policy::Decision,
) -> Result<(Vec<String>, String), String> {
    use crate::policy::asks::{askable, AskKind};
    let refused = format!("refused by {}: {}", d.rule, d.reason);
    if !askable(AskKind::Bash, &d.rule, gw.plan.asks.is_some(), false) {
        return Err(refused);
    }
    let argv = match gw.plan.policy.get().bash_answered(command) {
        Ok(argv) => argv,
        Err(rail) => return Err(format!("refused by {}: {}", rail.rule, rail.reason)),
    };
    let req = super::asks::AskRequest {
        kind: AskKind::Bash,
        what: crate::gateway::clip(&shown_argv(&argv), crate::gateway::MAX_DETAIL_CHARS),
        key: serde_json::to_string(&argv).unwrap_or_default(),
        rule: d.rule.clone(),
    };
    let by = super::asks::put(gw, req, &refused).await?;
    Ok((argv, by))
}

/// For a git command: the overrides and the exec limit that keep git from starting any
/// program the agent configured ([`crate::policy::git_overrides`]); an error when the
/// command is one the bash tool does not run.
fn plan_git(req: &mut CommandRequest) -> Result<(), String> {
    let Some(plan) = crate::policy::git_overrides::plan(&req.argv)? else {
        return Ok(());
    };
    req.argv = plan.argv;
    req.env = plan.env;
    req.git_config = plan.config;
    req.exec_only = Some(plan.exec.into_iter().map(PathBuf::from).collect());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_checked_by_key() {
        let ok = parse_input(&json!({"command": "git log", "timeout_ms": 5})).unwrap();
        assert_eq!(ok.timeout_ms, 5);
        assert_eq!(
            parse_input(&json!({"command": "ls"})).unwrap().timeout_ms,
            DEFAULT_TIMEOUT_MS
        );
        for (args, key) in [
            (json!({}), "arguments.command: required"),
            (json!({"command": 1}), "arguments.command"),
            (
                json!({"command": "ls", "timeout_ms": 0}),
                "arguments.timeout_ms",
            ),
            (
                json!({"command": "ls", "timeout_ms": 600_001}),
                "arguments.timeout_ms",
            ),
            (
                json!({"command": "ls", "timeout_ms": "5"}),
                "arguments.timeout_ms",
            ),
            (json!({"command": "ls", "cwd": 3}), "arguments.cwd"),
            (
                json!({"command": "ls", "shell": true}),
                "arguments.shell: unknown",
            ),
            (json!([1]), "arguments: must be an object"),
        ] {
            let e = parse_input(&args).unwrap_err();
            assert!(e.starts_with(key), "{args}: {e}");
        }
        let secret_key = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        let e = parse_input(&json!({"command": "ls", secret_key: 1})).unwrap_err();
        assert!(!e.contains(secret_key), "{e}");
    }

    #[test]
    fn cwd_stays_in_the_workspace_or_home() {
        let ws = Path::new("/srv/ws");
        let home = Path::new("/home/tess");
        let ok = |c: &str| check_cwd(Some(Path::new(c)), ws, home);
        assert_eq!(check_cwd(None, ws, home).unwrap(), ws);
        assert!(ok("/srv/ws").is_ok());
        assert!(ok("/srv/ws/src").is_ok());
        assert!(ok("/home/tess/x").is_ok());
        for bad in [
            "/srv/ws/../etc",
            "/srv/wsx",
            "relative",
            "/etc",
            "/srv/ws/./a",
            "/",
        ] {
            assert!(ok(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_shown_argv_hides_secrets() {
        let argv: Vec<String> = [
            "git",
            "log",
            "ghp_0123456789abcdefghijABCDEFGHIJ012345",
            "a b",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(shown_argv(&argv), "git log [redacted] 'a b'");
    }
}
