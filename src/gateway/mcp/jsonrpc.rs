//! What every MCP endpoint of the gateway shares: one JSON-RPC message per POST, read
//! strictly ([`crate::gateway::strict_json`]); sessions named by `Mcp-Session-Id`; the replies.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::gateway::strict_json;

/// Revisions spoken with a session (`initialize`), newest first; a client asking for
/// another gets the newest.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The stateless revision: no handshake, no session; every request names its revision and
/// the client's capabilities in `params._meta`.
pub const STATELESS_VERSION: &str = "2026-07-28";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

// JSON-RPC error codes.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A request Airlock's policy refused (server-defined range).
pub const REFUSED: i64 = -32001;

/// Most sessions one endpoint of a run's gateway keeps (a run has one agent; a few
/// reconnects).
const MAX_SESSIONS: usize = 64;

/// One checked message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: Option<Value>,
    pub method: Option<String>,
    pub params: Value,
}

impl Message {
    /// A request: a method and an id.
    pub fn request(&self) -> Option<(&str, &Value)> {
        Some((self.method.as_deref()?, self.id.as_ref()?))
    }
}

/// Read one POSTed message, or the reply refusing it.
pub fn parse_message(body: &[u8]) -> Result<Message, Reply> {
    let msg = match strict_json::parse(body) {
        Ok(v) => v,
        Err(e) => {
            return Err(Reply::refused(
                400,
                PARSE_ERROR,
                &format!("the message is {e}"),
            ))
        }
    };
    let obj = match msg {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(Reply::refused(
                400,
                INVALID_REQUEST,
                "JSON-RPC batches are not accepted: send one message per request",
            ))
        }
        _ => {
            return Err(Reply::refused(
                400,
                INVALID_REQUEST,
                "a message is a JSON-RPC object",
            ))
        }
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(Reply::refused(
            400,
            INVALID_REQUEST,
            "jsonrpc: must be \"2.0\"",
        ));
    }
    let id = obj.get("id").cloned();
    if id
        .as_ref()
        .is_some_and(|i| !(i.is_string() || i.is_i64() || i.is_u64()))
    {
        return Err(Reply::refused(
            400,
            INVALID_REQUEST,
            "id: a string or an integer",
        ));
    }
    let method = match obj.get("method") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => {
            return Err(Reply::refused(
                400,
                INVALID_REQUEST,
                "method: must be a string",
            ))
        }
    };
    Ok(Message {
        id,
        method,
        params: obj.get("params").cloned().unwrap_or(Value::Null),
    })
}

/// Whether a message speaks the stateless revision: `Ok(true)` when its `_meta` names
/// [`STATELESS_VERSION`], `Ok(false)` for a message of the session revisions, the reply
/// refusing it when it names a revision this gateway does not speak (or its header says
/// otherwise).
pub fn stateless(m: &Message, h: &Headers<'_>) -> Result<bool, Reply> {
    let meta = m
        .params
        .get("_meta")
        .and_then(|x| x.get(META_VERSION))
        .and_then(Value::as_str);
    match meta {
        None if h.version == Some(STATELESS_VERSION) => Err(Reply::refused(
            400,
            INVALID_PARAMS,
            "params._meta: a 2026-07-28 request names its protocolVersion there",
        )),
        None => Ok(false),
        Some(v) if v == STATELESS_VERSION && h.version.map_or(true, |hv| hv == v) => Ok(true),
        Some(v) if v == STATELESS_VERSION => Err(Reply::refused(
            400,
            INVALID_REQUEST,
            "MCP-Protocol-Version: differs from params._meta",
        )),
        Some(_) => Err(Reply {
            status: 400,
            body: Some(
                json!({"jsonrpc": "2.0", "id": m.id.clone().unwrap_or(Value::Null), "error": {
                    "code": INVALID_PARAMS,
                    "message": "unsupported protocol version",
                    "data": {"supportedVersions": all_versions()},
                }}),
            ),
            session: None,
        }),
    }
}

/// Every revision this gateway speaks.
pub fn all_versions() -> Vec<&'static str> {
    let mut v = vec![STATELESS_VERSION];
    v.extend_from_slice(SUPPORTED_VERSIONS);
    v
}

/// A result as the stateless revision shapes it: marked complete.
pub fn complete(mut result: Value) -> Value {
    if let Value::Object(o) = &mut result {
        o.insert("resultType".into(), json!("complete"));
    }
    result
}

/// The headers of a POST an endpoint looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Headers<'a> {
    pub session: Option<&'a str>,
    pub version: Option<&'a str>,
    /// `Mcp-Method` and `Mcp-Name` (newer clients name the message in headers too, for
    /// routing): when present they must say what the body says.
    pub method: Option<&'a str>,
    pub name: Option<&'a str>,
}

impl Headers<'_> {
    /// Refuse a message whose headers name another method or target than its body: what
    /// a router reads and what the gateway checked must be the same message.
    pub fn agree(&self, m: &Message) -> Result<(), Reply> {
        if let Some(h) = self.method {
            if m.method.as_deref() != Some(h) {
                return Err(Reply::refused(
                    400,
                    INVALID_REQUEST,
                    "Mcp-Method: differs from the message's method",
                ));
            }
        }
        if let Some(h) = self.name {
            let target = m
                .params
                .get("name")
                .or_else(|| m.params.get("uri"))
                .and_then(Value::as_str);
            if target != Some(h) {
                return Err(Reply::refused(
                    400,
                    INVALID_REQUEST,
                    "Mcp-Name: differs from the message's name or uri",
                ));
            }
        }
        Ok(())
    }
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
    pub fn json(body: Value) -> Reply {
        Reply {
            status: 200,
            body: Some(body),
            session: None,
        }
    }

    pub fn accepted() -> Reply {
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

pub fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

pub fn rpc_result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// The protocol revision to answer a client's `initialize` with.
pub fn negotiate(params: &Value) -> &'static str {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    asked
        .and_then(|a| SUPPORTED_VERSIONS.iter().find(|v| **v == a))
        .copied()
        .unwrap_or(SUPPORTED_VERSIONS[0])
}

/// The sessions of one endpoint, each with its state `S`.
pub struct Sessions<S> {
    inner: Mutex<HashMap<String, S>>,
}

impl<S> Default for Sessions<S> {
    fn default() -> Self {
        Sessions {
            inner: Mutex::new(HashMap::new()),
        }
    }
}

impl<S> Sessions<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, S>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new session; its id, or None when no random id could be made.
    pub fn open(&self, state: S) -> Option<String> {
        let id = session_id()?;
        let mut s = self.lock();
        if s.len() >= MAX_SESSIONS {
            let victim = s.keys().next().cloned();
            if let Some(v) = victim {
                s.remove(&v);
            }
        }
        s.insert(id.clone(), state);
        Some(id)
    }

    /// Run `f` on a session's state.
    pub fn with<R>(&self, id: &str, f: impl FnOnce(&mut S) -> R) -> Option<R> {
        self.lock().get_mut(id).map(f)
    }

    /// End a session (HTTP DELETE). False when it was not open.
    pub fn close(&self, id: &str) -> bool {
        self.take(id).is_some()
    }

    /// End a session and hand back its state.
    pub fn take(&self, id: &str) -> Option<S> {
        self.lock().remove(id)
    }

    /// End every session, handing back their states.
    pub fn take_all(&self) -> Vec<S> {
        self.lock().drain().map(|(_, s)| s).collect()
    }

    /// The checks every message but `initialize` passes: a known session, a revision this
    /// gateway speaks.
    pub fn admit(&self, h: Headers<'_>) -> Result<String, Reply> {
        let s = match h.session {
            None => {
                return Err(Reply::refused(
                    400,
                    INVALID_REQUEST,
                    "Mcp-Session-Id: required; send initialize first",
                ))
            }
            Some(s) if !self.lock().contains_key(s) => {
                return Err(Reply::refused(
                    404,
                    INVALID_REQUEST,
                    "Mcp-Session-Id: no such session",
                ))
            }
            Some(s) => s.to_string(),
        };
        if let Some(v) = h.version {
            if !SUPPORTED_VERSIONS.contains(&v) {
                return Err(Reply::refused(
                    400,
                    INVALID_REQUEST,
                    "MCP-Protocol-Version: not supported",
                ));
            }
        }
        Ok(s)
    }
}

/// 128 random bits as hex: a session id the agent cannot guess for another session.
fn session_id() -> Option<String> {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    (n == b.len() as isize).then(|| b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A JSON value by shape only (keys and types, never values): what the journal keeps of
/// MCP arguments.
pub fn shape(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "boolean".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(a) => match a.first() {
            Some(x) => format!("[{}; {}]", shape(x), a.len()),
            None => "[]".into(),
        },
        Value::Object(o) => {
            let parts: Vec<String> = o
                .iter()
                .take(32)
                .map(|(k, v)| {
                    let k = if crate::secret_shapes::find_secret(k).is_some() {
                        "[redacted]".to_string()
                    } else {
                        crate::gateway::clip(k, 64)
                    };
                    format!("{k}: {}", shape(v))
                })
                .collect();
            crate::gateway::clip(
                &format!("{{{}}}", parts.join(", ")),
                crate::gateway::MAX_DETAIL_CHARS,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_headers_must_say_what_the_body_says() {
        let m = parse_message(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#,
        )
        .unwrap();
        let h = |method, name| Headers {
            method,
            name,
            ..Headers::default()
        };
        assert!(h(None, None).agree(&m).is_ok());
        assert!(h(Some("tools/call"), Some("echo")).agree(&m).is_ok());
        assert_eq!(
            h(Some("tools/list"), None).agree(&m).unwrap_err().status,
            400
        );
        assert_eq!(
            h(None, Some("delete_repo")).agree(&m).unwrap_err().status,
            400
        );
        let r = parse_message(
            br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a://b"}}"#,
        )
        .unwrap();
        assert!(h(Some("resources/read"), Some("a://b")).agree(&r).is_ok());
        assert!(h(None, Some("a://c")).agree(&r).is_err());
    }

    #[test]
    fn a_shape_has_keys_and_types_only() {
        let v = json!({"base": "main", "n": 3, "tags": ["a", "b"], "x": {"secret": "value"}});
        let s = shape(&v);
        assert_eq!(
            s,
            "{base: string, n: number, tags: [string; 2], x: {secret: string}}"
        );
        assert!(!s.contains("main") && !s.contains("value"));
    }
}
