//! Wire format of the control socket: one JSON object per line, each carrying the protocol
//! version. Requests are bounded in size; anything unknown is refused, never guessed at.

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// How many runs `runs` lists when not told, and at most: a run is a few hundred bytes of
/// answer, and an answer must stay well under the client's limit (16 MiB).
pub const RUNS_DEFAULT: u32 = 100;
pub const RUNS_MAX: u32 = 10_000;

/// Longest request line accepted, in bytes (a launch with a long argv fits easily).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    Launch {
        role: String,
        instance: String,
        #[serde(default)]
        workspace: Option<String>,
        #[serde(default)]
        max_seconds: Option<u64>,
        /// Replaces the role's agent command, under the same jail and budgets.
        #[serde(default)]
        command: Option<Vec<String>>,
        /// Keep the connection open and stream the run's output, then its exit.
        #[serde(default)]
        wait: bool,
        /// `--tty`: the agent runs on a pseudo-terminal of this window size, and the
        /// connection carries its output and the person's keys (see [`TtyMsg`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty: Option<TtySize>,
    },
    /// Attach to a `--tty` run's terminal: as its one writer, or `read_only`.
    Attach {
        run: String,
        #[serde(default)]
        read_only: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty: Option<TtySize>,
    },
    Stop {
        run: String,
    },
    Ps,
    /// The newest runs in the ledger ([`RUNS_DEFAULT`] unless `last` says, at most
    /// [`RUNS_MAX`]).
    Runs {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last: Option<u32>,
    },
    Show {
        run: String,
    },
    Instances,
    Status,
    /// A person's hire: a decision raised and, when the person may approve it, approved at
    /// once.
    Hire {
        instance: String,
        role: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<DecisionArgs>,
    },
    Fire {
        instance: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<DecisionArgs>,
    },
    /// Decisions: pending ones, or all (`decision.all`).
    Decisions {
        decision: DecisionArgs,
    },
    DecisionShow {
        decision: DecisionArgs,
    },
    Approve {
        decision: DecisionArgs,
    },
    Deny {
        decision: DecisionArgs,
    },
    /// Asks waiting for a person.
    Asks,
    /// Let ask `decision.id` through (`decision.for_run`: and the same for the rest of its
    /// run). `deny` refuses an ask as it does a decision, by the id's shape.
    Allow {
        decision: DecisionArgs,
    },
    /// Move an instance to its template as it is now: a decision.
    Change {
        instance: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<DecisionArgs>,
    },
    /// The instance's frozen revision against its template now.
    RoleDiff {
        instance: String,
    },
    Reload,
    /// Start an operator's OAuth login for a `grant: authorization_code` connector.
    ConnectorLogin {
        connector: String,
    },
    /// Finish login `login`: wait for the device grant's approval, or take the URL the
    /// browser was sent back to (`redirected`, the code grant).
    ConnectorLoginFinish {
        connector: String,
        login: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        redirected: Option<String>,
    },
    /// Each OAuth connector's authorization state (never a token).
    ConnectorStatus,
    /// Revoke a connector's refresh token at its server and forget it.
    ConnectorLogout {
        connector: String,
    },
}

impl Op {
    /// The name used in authorization decisions and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Launch { .. } => "launch",
            Op::Attach { .. } => "attach",
            Op::Stop { .. } => "stop",
            Op::Ps => "ps",
            Op::Runs { .. } => "runs",
            Op::Show { .. } => "show",
            Op::Instances => "instances",
            Op::Status => "status",
            Op::Hire { .. } => "hire",
            Op::Fire { .. } => "fire",
            Op::Decisions { .. } => "decisions",
            Op::DecisionShow { .. } => "decision-show",
            Op::Approve { .. } => "approve",
            Op::Deny { .. } => "deny",
            Op::Asks => "asks",
            Op::Allow { .. } => "allow",
            Op::Change { .. } => "change",
            Op::RoleDiff { .. } => "role-diff",
            Op::Reload => "reload",
            Op::ConnectorLogin { .. } => "connector-login",
            Op::ConnectorLoginFinish { .. } => "connector-login-finish",
            Op::ConnectorStatus => "connector-status",
            Op::ConnectorLogout { .. } => "connector-logout",
        }
    }
}

/// What a decision operation names: which decision, the digest approved, a reason, and
/// for `decisions` whether resolved ones are listed too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// `allow --for-run`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub for_run: bool,
}

/// One request: the protocol version and the operation, flattened into one JSON object
/// (`{"v":1,"op":"ps"}`). Serde cannot refuse unknown fields through `flatten`, so the
/// version is taken off by hand and the rest must be exactly one `Op`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub v: u32,
    pub op: Op,
}

impl Request {
    pub fn new(op: Op) -> Self {
        Request { v: VERSION, op }
    }

    /// The request as one line, without the trailing newline.
    pub fn to_line(&self) -> String {
        let mut value = serde_json::to_value(&self.op).unwrap_or(serde_json::Value::Null);
        if let Some(map) = value.as_object_mut() {
            map.insert("v".into(), self.v.into());
        }
        value.to_string()
    }
}

/// A terminal's window size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

/// What a client sends on a terminal session's connection after its request (`launch
/// --tty`, `attach`): keys (hex, so any byte travels) and window sizes. A reader's are
/// ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "tty", rename_all = "snake_case", deny_unknown_fields)]
pub enum TtyMsg {
    Keys {
        hex: String,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
    /// The writer answers an ask of its own run from the terminal (`Ctrl-]` then `a`,
    /// `r` or `n`), as `airlockctl allow|deny` would.
    Answer {
        ask: String,
        how: AskHow,
    },
}

/// How a person answers an ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskHow {
    Allow,
    AllowForRun,
    Deny,
}

/// An ask as a terminal session shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskShown {
    pub id: String,
    pub kind: String,
    pub what: String,
    pub rule: String,
}

/// Longest line a terminal session's client may send (a paste of 16 KiB, in hex).
pub const MAX_TTY_LINE: usize = 64 * 1024;

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Machine-readable error codes; the message says what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    BadRequest,
    UnsupportedVersion,
    TooLarge,
    Forbidden,
    NotFound,
    Refused,
    Busy,
    Draining,
    Internal,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// One response line. `ok: false` carries `error`; streamed output uses `event` lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl Response {
    pub fn ok(data: serde_json::Value) -> Self {
        Response {
            v: VERSION,
            ok: true,
            error: None,
            data: Some(data),
        }
    }

    pub fn err(code: ErrorCode, message: impl Into<String>) -> Self {
        Response {
            v: VERSION,
            ok: false,
            error: Some(ErrorBody {
                code,
                message: message.into(),
            }),
            data: None,
        }
    }
}

/// Parse one request line. Errors never quote the request: it may carry a secret.
pub fn parse_request(line: &[u8]) -> Result<Request, Response> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(Response::err(
            ErrorCode::TooLarge,
            format!("request is over {MAX_REQUEST_BYTES} bytes"),
        ));
    }
    let mut value: serde_json::Value = serde_json::from_slice(line).map_err(|_| {
        Response::err(
            ErrorCode::BadRequest,
            "request is not one JSON object on one line",
        )
    })?;
    let version = value.as_object_mut().and_then(|m| m.remove("v"));
    match version.as_ref().and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(VERSION) => {}
        Some(_) => {
            return Err(Response::err(
                ErrorCode::UnsupportedVersion,
                format!("this airlockd speaks protocol version {VERSION}; upgrade airlockctl or airlockd so they match"),
            ))
        }
        None => {
            return Err(Response::err(ErrorCode::BadRequest, "request has no protocol version `v`"))
        }
    }
    let bad = || {
        Response::err(
            ErrorCode::BadRequest,
            "unknown operation, missing field or field the operation does not take; see `airlockctl --help`",
        )
    };
    let wire: Wire = serde_json::from_value(value).map_err(|_| bad())?;
    wire.into_op()
        .ok_or_else(bad)
        .map(|op| Request { v: VERSION, op })
}

/// Every field any operation takes. Serde refuses unknown fields here (it cannot through an
/// internally tagged enum); `into_op` then refuses fields the named operation does not take.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    op: String,
    role: Option<String>,
    instance: Option<String>,
    workspace: Option<String>,
    max_seconds: Option<u64>,
    command: Option<Vec<String>>,
    wait: Option<bool>,
    run: Option<String>,
    last: Option<u32>,
    connector: Option<String>,
    login: Option<String>,
    redirected: Option<String>,
    decision: Option<DecisionArgs>,
    tty: Option<TtySize>,
    read_only: Option<bool>,
}

impl Wire {
    fn into_op(self) -> Option<Op> {
        let Wire {
            op,
            role,
            instance,
            workspace,
            max_seconds,
            command,
            wait,
            run,
            last,
            connector,
            login,
            redirected,
            decision,
            tty,
            read_only,
        } = self;
        let decision_op = matches!(
            op.as_str(),
            "hire"
                | "fire"
                | "change"
                | "decisions"
                | "decision-show"
                | "approve"
                | "deny"
                | "allow"
        );
        if decision.is_some() && !decision_op {
            return None;
        }
        if op == "attach" {
            let clean = role.is_none()
                && instance.is_none()
                && workspace.is_none()
                && max_seconds.is_none()
                && command.is_none()
                && wait.is_none()
                && last.is_none()
                && connector.is_none()
                && login.is_none()
                && redirected.is_none();
            return clean.then_some(Op::Attach {
                run: run?,
                read_only: read_only.unwrap_or(false),
                tty,
            });
        }
        if read_only.is_some() {
            return None;
        }
        let launch_only = workspace.is_some()
            || max_seconds.is_some()
            || command.is_some()
            || wait.is_some()
            || tty.is_some();
        // Taken by `runs` only; refused by every other operation below.
        let runs_only = last.is_some();
        // Taken by the connector operations only.
        let connector_only = connector.is_some() || login.is_some() || redirected.is_some();
        let only = |role_ok: bool, instance_ok: bool, run_ok: bool| {
            (role_ok || role.is_none())
                && (instance_ok || instance.is_none())
                && (run_ok || run.is_none())
                && !launch_only
        };
        let finish = op == "connector-login-finish";
        match op.as_str() {
            other if runs_only && other != "runs" => None,
            other if connector_only && !other.starts_with("connector-") => None,
            _ if !finish && (login.is_some() || redirected.is_some()) => None,
            "connector-login" if only(false, false, false) => Some(Op::ConnectorLogin {
                connector: connector?,
            }),
            "connector-login-finish" if only(false, false, false) => {
                Some(Op::ConnectorLoginFinish {
                    connector: connector?,
                    login: login?,
                    redirected,
                })
            }
            "connector-status" if only(false, false, false) && connector.is_none() => {
                Some(Op::ConnectorStatus)
            }
            "connector-logout" if only(false, false, false) => Some(Op::ConnectorLogout {
                connector: connector?,
            }),
            "launch" if run.is_none() => Some(Op::Launch {
                role: role?,
                instance: instance?,
                workspace,
                max_seconds,
                command,
                wait: wait.unwrap_or(false),
                tty,
            }),
            "stop" if only(false, false, true) => Some(Op::Stop { run: run? }),
            "show" if only(false, false, true) => Some(Op::Show { run: run? }),
            "hire" if only(true, true, false) => Some(Op::Hire {
                instance: instance?,
                role: role?,
                decision,
            }),
            "fire" if only(false, true, false) => Some(Op::Fire {
                instance: instance?,
                decision,
            }),
            "change" if only(false, true, false) => Some(Op::Change {
                instance: instance?,
                decision,
            }),
            "role-diff" if only(false, true, false) => Some(Op::RoleDiff {
                instance: instance?,
            }),
            "decisions" if only(false, false, false) => Some(Op::Decisions {
                decision: decision.unwrap_or_default(),
            }),
            "asks" if only(false, false, false) => Some(Op::Asks),
            "decision-show" | "approve" | "deny" | "allow" if only(false, false, false) => {
                let decision = decision?;
                decision.id.as_ref()?;
                if decision.for_run && op != "allow" {
                    return None;
                }
                Some(match op.as_str() {
                    "decision-show" => Op::DecisionShow { decision },
                    "allow" => Op::Allow { decision },
                    "approve" => {
                        decision.digest.as_ref()?;
                        Op::Approve { decision }
                    }
                    _ => Op::Deny { decision },
                })
            }
            "ps" if only(false, false, false) => Some(Op::Ps),
            "runs" if only(false, false, false) => Some(Op::Runs { last }),
            "instances" if only(false, false, false) => Some(Op::Instances),
            "status" if only(false, false, false) => Some(Op::Status),
            "reload" if only(false, false, false) => Some(Op::Reload),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_and_a_tty_launch_take_their_fields_only() {
        let parse = |line: &str| parse_request(line.as_bytes()).map(|r| r.op);
        assert_eq!(
            parse(r#"{"v":1,"op":"attach","run":"r-1","read_only":true}"#).ok(),
            Some(Op::Attach {
                run: "r-1".into(),
                read_only: true,
                tty: None
            })
        );
        let launch = Op::Launch {
            role: "code".into(),
            instance: "tess".into(),
            workspace: None,
            max_seconds: None,
            command: None,
            wait: false,
            tty: Some(TtySize { rows: 24, cols: 80 }),
        };
        assert_eq!(
            parse(&Request::new(launch.clone()).to_line()).ok(),
            Some(launch)
        );
        for bad in [
            r#"{"v":1,"op":"attach","run":"r-1","wait":true}"#,
            r#"{"v":1,"op":"ps","read_only":true}"#,
            r#"{"v":1,"op":"stop","run":"r-1","tty":{"rows":1,"cols":1}}"#,
            r#"{"v":1,"op":"launch","role":"code","instance":"tess","tty":{"rows":1,"cols":1,"x":1}}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            from_hex(&to_hex(b"\x03\x1d\xff")),
            Some(b"\x03\x1d\xff".to_vec())
        );
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
    }

    #[test]
    fn only_runs_takes_last() {
        let parse = |line: &str| parse_request(line.as_bytes()).map(|r| r.op);
        assert_eq!(
            parse(r#"{"v":1,"op":"runs","last":5}"#).ok(),
            Some(Op::Runs { last: Some(5) })
        );
        assert_eq!(
            parse(r#"{"v":1,"op":"runs"}"#).ok(),
            Some(Op::Runs { last: None })
        );
        for other in [
            r#"{"v":1,"op":"ps","last":5}"#,
            r#"{"v":1,"op":"stop","run":"r-1","last":5}"#,
            r#"{"v":1,"op":"launch","role":"code","instance":"tess","last":5}"#,
        ] {
            assert!(parse(other).is_err(), "{other}");
        }
        // Sent as before when not given, so an older airlockd still understands it.
        let line = Request::new(Op::Runs { last: None }).to_line();
        assert!(!line.contains("last"), "{line}");
    }

    #[test]
    fn the_connector_operations_take_only_their_fields() {
        let parse = |line: &str| parse_request(line.as_bytes()).map(|r| r.op);
        for op in [
            Op::ConnectorLogin {
                connector: "linear".into(),
            },
            Op::ConnectorLoginFinish {
                connector: "linear".into(),
                login: "ab12".into(),
                redirected: Some("http://127.0.0.1:8976/callback?code=c&state=s".into()),
            },
            Op::ConnectorStatus,
            Op::ConnectorLogout {
                connector: "linear".into(),
            },
        ] {
            let req = Request::new(op);
            assert_eq!(parse_request(req.to_line().as_bytes()), Ok(req));
        }
        for bad in [
            r#"{"v":1,"op":"ps","connector":"linear"}"#,
            r#"{"v":1,"op":"connector-login","connector":"linear","login":"x"}"#,
            r#"{"v":1,"op":"connector-status","connector":"linear"}"#,
            r#"{"v":1,"op":"connector-login-finish","connector":"linear"}"#,
            r#"{"v":1,"op":"connector-logout","connector":"linear","run":"r-1"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trips_a_launch() {
        let req = Request::new(Op::Launch {
            role: "code".into(),
            instance: "tess".into(),
            workspace: None,
            max_seconds: Some(5),
            command: Some(vec!["/bin/true".into()]),
            wait: true,
            tty: None,
        });
        assert_eq!(parse_request(req.to_line().as_bytes()), Ok(req));
        let ps = Request::new(Op::Ps);
        assert_eq!(ps.to_line(), r#"{"op":"ps","v":1}"#);
    }

    #[test]
    fn refuses_bad_requests_without_echoing_them() {
        let secret = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
        for line in [
            format!("{{\"v\":1,\"op\":\"launch\",\"role\":\"{secret}\"}}"),
            format!("{{\"v\":1,\"op\":\"{secret}\"}}"),
            format!("{{\"v\":2,\"op\":\"ps\",\"x\":\"{secret}\"}}"),
            format!("not json {secret}"),
            format!("{{\"op\":\"ps\",\"x\":\"{secret}\"}}"),
            format!("{{\"v\":1,\"op\":\"ps\",\"extra\":\"{secret}\"}}"),
            format!("{{\"v\":1,\"op\":\"ps\",\"run\":\"{secret}\"}}"),
            format!("{{\"v\":1,\"op\":\"stop\",\"run\":\"r\",\"command\":[\"{secret}\"]}}"),
        ] {
            let err = parse_request(line.as_bytes()).expect_err("refused");
            assert!(!err.ok);
            let text = serde_json::to_string(&err).expect("serializes");
            assert!(!text.contains(secret), "{text}");
        }
        let big = vec![b' '; MAX_REQUEST_BYTES + 1];
        let err = parse_request(&big).expect_err("too large");
        assert_eq!(err.error.map(|e| e.code), Some(ErrorCode::TooLarge));
    }
}

/// One run as `ps`, `runs` and `show` report it (`data.runs[]` / `data.run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub run: String,
    pub role: String,
    pub instance: String,
    pub uid: u32,
    pub launched_by_uid: u32,
    /// The image its command side was rooted in, and the image's manifest digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// `running`, or the outcome once closed: exited, killed, timed_out, stopped,
    /// interrupted, aborted, refused; read without airlockd, `unsupervised` for an open
    /// record whose supervisor is gone.
    pub state: String,
    /// Unix milliseconds.
    pub started_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds the run may last from its start (0: no deadline).
    pub deadline_s: u64,
    /// The frozen revision of its role the run ran (absent for older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<u32>,
    /// Calls through the run's gateway, allowed and refused, once the run is closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<crate::supervisor::ledger::CallCounts>,
    /// Model requests and spend, once the run is closed, when it had a provider route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::supervisor::ledger::SpendCounts>,
    /// The run's GitHub writes and their budget, when it had a GitHub route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<crate::supervisor::ledger::GithubWrites>,
    /// The run's egress connections and bytes, once the run is closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<crate::supervisor::ledger::EgressCounts>,
    /// The run's credential leases and their state (`show` only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<crate::credentials::leases::Lease>,
    /// Why the run's leases could not be read from the lease store (`show` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases_unreadable: Option<String>,
    /// A running run's tallies, CPU and memory so far (`ps` through airlockd only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<crate::metrics::live::LiveInfo>,
}

/// One hired instance (`data.instances[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceInfo {
    pub instance: String,
    pub role: String,
    pub uid: u32,
    /// `config` (declared in the config file) or `hired` (through `airlockctl hire`).
    pub source: String,
    pub fired: bool,
    pub active_runs: usize,
    /// The frozen revision of its role it runs (none until its hire or first run).
    #[serde(default)]
    pub role_sha256: Option<String>,
    #[serde(default)]
    pub rev: Option<u32>,
    /// Whether its role's template changed since that revision (`airlockctl role diff`).
    #[serde(default)]
    pub template_changed: bool,
    /// Leases of the instance's runs not yet revoked (active, or revoke-pending).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<crate::credentials::leases::Lease>,
}

/// `status` (`data`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    pub version: String,
    pub pid: u32,
    pub active_runs: usize,
    pub max_concurrent_runs: usize,
    pub draining: bool,
    pub roles: usize,
    /// Unix milliseconds of the last successful (re)load of roles, policies and config.
    pub loaded_at: u64,
    pub ledger_records: u64,
    /// With a fleet store: what this host wrote that the store does not have yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetStatus>,
    /// Jails built ahead of launches, waiting.
    #[serde(default)]
    pub warm: WarmStatus,
}

/// The warm jails waiting now: the shared one (0 or 1) and each role's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmStatus {
    pub shared: usize,
    pub roles: std::collections::BTreeMap<String, usize>,
}

/// `status` of a host of a fleet: its writes the fleet store does not have yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetStatus {
    pub host_id: String,
    /// Instances fired here whose fire the store does not have yet (queued in this host's
    /// state, sent once the store is back).
    pub pending_fires: Vec<String>,
    /// Ledger records of this host not yet in the store's mirror.
    pub unmirrored_records: u64,
}

/// A `launch` with `wait: true` answers with a stream of frames (`data`), one per line:
/// `started`, then `output` lines, then `exited`. Without `wait` only `started` is sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "frame", rename_all = "snake_case")]
pub enum Frame {
    Started {
        run: String,
    },
    Output {
        /// `stdout` or `stderr`.
        stream: String,
        /// One line of output with its newline, as UTF-8 (invalid bytes replaced; the
        /// journal keeps the exact bytes).
        data: String,
    },
    Exited {
        run: String,
        /// The run's exit code, 128 + signal when killed.
        exit_code: i32,
        /// exited, killed, timed_out, stopped, aborted.
        outcome: String,
        reason: String,
    },
    /// On a terminal session: the asks of its run waiting now, sent whenever they change
    /// (empty: none waits any more).
    Asks {
        asks: Vec<AskShown>,
    },
    /// On a terminal session: one line for its status line (how an answer given there
    /// went).
    Notice {
        text: String,
    },
}
