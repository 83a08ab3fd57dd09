//! What every daemon subcommand shares: where the socket is, one request and its answer
//! (from the files when airlockd is not running and the request only reads, see
//! [`offline`](super::offline)), and how daemon errors map to exit codes (0 ok, 1 refused
//! or not found, 2 error).

use crate::cli::output::outln;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::table::clean;
use super::{offline, output};
use crate::config::{self, Config};
use crate::control::client::{self, ClientError};
use crate::control::protocol::{ErrorBody, ErrorCode, Op, Request};

/// The global options the daemon subcommands read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ctx<'a> {
    pub config: Option<&'a Path>,
    pub socket: Option<&'a Path>,
    pub json: bool,
}

impl Ctx<'_> {
    /// The configuration, or the exit code after printing why it cannot be read.
    pub fn load_config(&self) -> Result<Config, i32> {
        config::load(self.config).map_err(|problems| {
            output::problems(&problems);
            output::ERROR
        })
    }

    /// `--socket`, else the config's `socket` (the config is only read when needed).
    pub fn socket_path(&self) -> Result<PathBuf, i32> {
        match self.socket {
            Some(s) => Ok(s.to_path_buf()),
            None => Ok(self.load_config()?.socket),
        }
    }

    /// Send `op` and return the answer's `data`, or the exit code after printing the error.
    pub fn call(&self, op: Op) -> Result<Value, i32> {
        self.request(&op).map_err(|f| report(&op, &f))
    }

    /// Send `op` and return the answer's `data`. When airlockd is not running and `op`
    /// only reads, the same answer is read from the files (and stderr says so, once).
    pub fn request(&self, op: &Op) -> Result<Value, Failed> {
        let socket = self.socket_path().map_err(Failed::Printed)?;
        match client::call(&socket, &Request::new(op.clone())) {
            Ok(resp) if resp.ok => Ok(resp.data.unwrap_or(Value::Null)),
            Ok(resp) => Err(Failed::Refused(resp.error)),
            Err(ClientError::NotRunning { .. }) if offline::reads(op) => {
                let cfg = self.load_config().map_err(Failed::Printed)?;
                say_offline(&cfg.state_dir);
                match offline::answer(&cfg, op) {
                    Some(Ok(data)) => Ok(data),
                    Some(Err(body)) => Err(Failed::Refused(Some(body))),
                    None => Err(Failed::Unreachable(ClientError::NotRunning { socket })),
                }
            }
            Err(e) => Err(Failed::Unreachable(e)),
        }
    }
}

/// Why a request has no answer.
#[derive(Debug)]
pub enum Failed {
    /// airlockd (or the files, read offline) refused, with its reason when it gave one.
    Refused(Option<ErrorBody>),
    /// airlockd could not be asked.
    Unreachable(ClientError),
    /// Already told on stderr; the exit code.
    Printed(i32),
}

/// Print why `op` failed; the exit code.
pub fn report(op: &Op, f: &Failed) -> i32 {
    let name = op.name();
    match f {
        Failed::Printed(code) => *code,
        Failed::Refused(Some(e)) if e.code == ErrorCode::NotFound => match op {
            Op::Show { run } | Op::Stop { run } => no_such_run(name, run),
            _ => daemon_error(name, Some(e)),
        },
        Failed::Refused(e) => daemon_error(name, e.as_ref()),
        Failed::Unreachable(ClientError::NotRunning { socket }) => not_running(name, socket, ""),
        Failed::Unreachable(e) => client_error(e),
    }
}

/// `RUN` is not in the ledger (1).
pub fn no_such_run(op: &str, run: &str) -> i32 {
    eprintln!(
        "airlockctl {op}: no run {} in the ledger; `airlockctl runs` lists them",
        clean(run)
    );
    output::NO
}

/// airlockd is not running, and `op` needs it (2). `more`: what else the caller can do.
pub fn not_running(op: &str, socket: &Path, more: &str) -> i32 {
    eprintln!(
        "airlockctl {op}: airlockd is not running (nothing listens on {}); {op} needs it: start it with `systemctl start airlockd`{more}",
        socket.display()
    );
    output::ERROR
}

/// Said once per command, on stderr, so that output read from the files is never taken
/// for airlockd's.
fn say_offline(state_dir: &Path) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "airlockctl: airlockd is not running; reading {} directly (offline)",
            state_dir.display()
        );
    }
}

/// Print a client-side failure; always a usage or I/O error (2).
pub fn client_error(e: &ClientError) -> i32 {
    eprintln!("airlockctl: {e}");
    output::ERROR
}

/// Print airlockd's refusal and map its code to an exit code.
pub fn daemon_error(op: &str, error: Option<&ErrorBody>) -> i32 {
    let Some(error) = error else {
        eprintln!(
            "airlockctl {op}: airlockd refused without saying why; check `journalctl -u airlockd`"
        );
        return output::ERROR;
    };
    let hint = match error.code {
        ErrorCode::Forbidden => {
            " (the groups named are the ones configured for airlockd; ask an admin to add you)"
        }
        ErrorCode::UnsupportedVersion => " (airlockctl and airlockd are from different builds)",
        ErrorCode::Draining => " (airlockd is shutting down; try again once it is back)",
        ErrorCode::Busy => {
            " (too many runs at once; try again later or raise the daemon's concurrency cap)"
        }
        _ => "",
    };
    eprintln!("airlockctl {op}: {}{hint}", clean(&error.message));
    exit_code(error.code)
}

pub fn exit_code(code: ErrorCode) -> i32 {
    match code {
        ErrorCode::Forbidden | ErrorCode::NotFound | ErrorCode::Refused => output::NO,
        ErrorCode::BadRequest
        | ErrorCode::UnsupportedVersion
        | ErrorCode::TooLarge
        | ErrorCode::Busy
        | ErrorCode::Draining
        | ErrorCode::Internal => output::ERROR,
    }
}

/// Read a typed field out of `data`; an answer of the wrong shape is an error (2).
pub fn field<T: DeserializeOwned>(data: &Value, key: &str) -> Result<T, i32> {
    data.get(key)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .ok_or_else(|| malformed(key))
}

/// `data` itself, typed.
pub fn whole<T: DeserializeOwned>(data: &Value) -> Result<T, i32> {
    serde_json::from_value(data.clone()).map_err(|_| malformed("data"))
}

fn malformed(what: &str) -> i32 {
    eprintln!("airlockctl: airlockd's answer has no valid `{what}`; airlockctl and airlockd may be from different builds");
    output::ERROR
}

/// Print a short confirmation, with airlockd's `message` when it sent one.
pub fn confirm(ctx: &Ctx, data: &Value, fallback: &str) -> i32 {
    if ctx.json {
        return output::json(data);
    }
    match data.get("message").and_then(Value::as_str) {
        Some(m) => outln!("{}", clean(m)),
        None => outln!("{fallback}"),
    }
    output::OK
}
