//! Airlock's own MCP server (`/mcp/airlock`), streamable HTTP, revisions 2025-03-26,
//! 2025-06-18 and 2025-11-25: `initialize` opens a session (`Mcp-Session-Id`), every later
//! message names it; requests get one JSON response, notifications and responses 202. It
//! offers one tool, `bash`. One JSON-RPC message per POST: batches are refused, and so
//! are duplicate keys and deep nesting ([`super::strict_json`]).

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::{bash_tool, strict_json, RunGateway};

/// Revisions spoken, newest first; a client asking for another gets the newest.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Most sessions one run's gateway keeps (a run has one agent; a few reconnects).
const MAX_SESSIONS: usize = 64;

// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

#[derive(Default)]
pub struct Sessions {
    inner: Mutex<HashMap<String, String>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self, version: &str) -> Option<String> {
        let id = session_id()?;
        let mut s = self.lock();
        if s.len() >= MAX_SESSIONS {
            // The oldest cannot be told apart cheaply; any one goes.
            let victim = s.keys().next().cloned();
            if let Some(v) = victim {
                s.remove(&v);
            }
        }
        s.insert(id.clone(), version.to_string());
        Some(id)
    }

    fn known(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// End a session (HTTP DELETE). False when it was not open.
    pub fn close(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }
}

/// 128 random bits as hex: a session id the agent cannot guess for another session.
fn session_id() -> Option<String> {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    (n == b.len() as isize).then(|| b.iter().map(|x| format!("{x:02x}")).collect())
}

/// What the HTTP layer sends back.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Option<Value>,
    /// A new session's id, for the `Mcp-Session-Id` header.
    pub session: Option<String>,
}

impl Reply {
    fn json(body: Value) -> Reply {
        Reply {
            status: 200,
            body: Some(body),
            session: None,
        }
    }

    fn accepted() -> Reply {
        Reply {
            status: 202,
            body: None,
            session: None,
        }
    }

    /// An HTTP error with a JSON-RPC error body (id null: the message was not taken).
    pub fn refused(status: u16, code: i64, message: &str) -> Reply {
        Reply {
            status,
            body: Some(rpc_error(&Value::Null, code, message)),
            session: None,
        }
    }
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn rpc_result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// The headers of a POST the server looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Headers<'a> {
    pub session: Option<&'a str>,
    pub version: Option<&'a str>,
}

/// One POSTed message.
pub async fn post(gw: &RunGateway, h: Headers<'_>, body: &[u8]) -> Reply {
    let msg = match strict_json::parse(body) {
        Ok(v) => v,
        Err(e) => return Reply::refused(400, PARSE_ERROR, &format!("the message is {e}")),
    };
    let obj = match &msg {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Reply::refused(
                400,
                INVALID_REQUEST,
                "JSON-RPC batches are not accepted: send one message per request",
            )
        }
        _ => return Reply::refused(400, INVALID_REQUEST, "a message is a JSON-RPC object"),
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Reply::refused(400, INVALID_REQUEST, "jsonrpc: must be \"2.0\"");
    }
    let id = obj.get("id");
    if id.is_some_and(|i| !(i.is_string() || i.is_i64() || i.is_u64())) {
        return Reply::refused(400, INVALID_REQUEST, "id: a string or an integer");
    }
    let method = match obj.get("method") {
        None => None,
        Some(Value::String(m)) => Some(m.as_str()),
        Some(_) => return Reply::refused(400, INVALID_REQUEST, "method: must be a string"),
    };
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    if let (Some("initialize"), Some(id)) = (method, id) {
        return initialize(gw, id, &params);
    }
    match h.session {
        None => {
            return Reply::refused(
                400,
                INVALID_REQUEST,
                "Mcp-Session-Id: required; send initialize first",
            )
        }
        Some(s) if !gw.sessions.known(s) => {
            return Reply::refused(404, INVALID_REQUEST, "Mcp-Session-Id: no such session")
        }
        Some(_) => {}
    }
    if let Some(v) = h.version {
        if !SUPPORTED_VERSIONS.contains(&v) {
            return Reply::refused(400, INVALID_REQUEST, "MCP-Protocol-Version: not supported");
        }
    }
    // Notifications and responses (we send no requests, so any response is stray).
    let (Some(method), Some(id)) = (method, id) else {
        return Reply::accepted();
    };
    Reply::json(match method {
        "ping" => rpc_result(id, json!({})),
        "tools/list" => rpc_result(id, json!({"tools": [bash_tool::definition()]})),
        "tools/call" => match tool_call(gw, &params).await {
            Ok(result) => rpc_result(id, result),
            Err(why) => rpc_error(id, INVALID_PARAMS, &why),
        },
        _ => rpc_error(
            id,
            METHOD_NOT_FOUND,
            "method not offered by Airlock's server",
        ),
    })
}

fn initialize(gw: &RunGateway, id: &Value, params: &Value) -> Reply {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .and_then(|a| SUPPORTED_VERSIONS.iter().find(|v| **v == a))
        .copied()
        .unwrap_or(SUPPORTED_VERSIONS[0]);
    let Some(session) = gw.sessions.open(version) else {
        return Reply::refused(500, INVALID_REQUEST, "no session id could be made");
    };
    let result = json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "airlock", "title": "Airlock", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Airlock runs this agent in a jail. Run commands with the bash tool; only the commands the role allows run."
    });
    Reply {
        status: 200,
        body: Some(rpc_result(id, result)),
        session: Some(session),
    }
}

async fn tool_call(gw: &RunGateway, params: &Value) -> Result<Value, String> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or("params.name: required, a string")?;
    if name != bash_tool::NAME {
        return Err("params.name: Airlock's server has one tool, bash".into());
    }
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    Ok(bash_tool::call(gw, &args).await)
}
