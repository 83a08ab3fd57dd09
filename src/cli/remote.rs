//! What every daemon subcommand shares: where the socket is, one request and its answer,
//! and how daemon errors map to exit codes (0 ok, 1 refused or not found, 2 error).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::output;
use super::table::clean;
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
        let socket = self.socket_path()?;
        let name = op.name();
        match client::call(&socket, &Request::new(op)) {
            Ok(resp) if resp.ok => Ok(resp.data.unwrap_or(Value::Null)),
            Ok(resp) => Err(daemon_error(name, resp.error.as_ref())),
            Err(e) => Err(client_error(&e)),
        }
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
        ErrorCode::Forbidden => " (ask an admin to add you to the airlock-operators group, or airlock-admin for hire, fire and reload)",
        ErrorCode::UnsupportedVersion => " (airlockctl and airlockd are from different builds)",
        ErrorCode::Draining => " (airlockd is shutting down; try again once it is back)",
        ErrorCode::Busy => " (too many runs at once; try again later or raise the daemon's concurrency cap)",
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
        Some(m) => println!("{}", clean(m)),
        None => println!("{fallback}"),
    }
    output::OK
}
