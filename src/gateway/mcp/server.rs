//! Airlock's own MCP server (`/mcp/airlock`), streamable HTTP, revisions 2025-03-26,
//! 2025-06-18 and 2025-11-25: `initialize` opens a session (`Mcp-Session-Id`), every later
//! message names it; requests get one JSON response, notifications and responses 202. It
//! offers one tool, `bash`. It also speaks the stateless 2026-07-28 revision (no session;
//! `server/discover`; the revision in each request's `_meta`). Messages are read by
//! [`crate::gateway::mcp::jsonrpc`].

use serde_json::{json, Value};

use crate::gateway::mcp::jsonrpc::{
    all_versions, complete, negotiate, parse_message, rpc_error, rpc_result, stateless, Headers,
    Reply, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
};
use crate::gateway::{bash, RunGateway};

/// Sessions of Airlock's server: each keeps the revision it negotiated.
pub type Sessions = crate::gateway::mcp::jsonrpc::Sessions<String>;

/// One POSTed message.
pub async fn post(gw: &RunGateway, h: Headers<'_>, body: &[u8]) -> Reply {
    let msg = match parse_message(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = h.agree(&msg) {
        return r;
    }
    let stateless = match stateless(&msg, &h) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if stateless {
        let Some((method, id)) = msg.request() else {
            return Reply::accepted();
        };
        let rpc = crate::gateway::RpcMeta::new(method, id, None, h.version);
        return Reply::json(match method {
            "server/discover" => rpc_result(
                id,
                json!({
                    "resultType": "complete",
                    "supportedVersions": all_versions(),
                    "capabilities": {"tools": {}},
                    "serverInfo": server_info(),
                    "instructions": INSTRUCTIONS,
                }),
            ),
            _ => {
                crate::gateway::RPC
                    .scope(rpc, answer(gw, method, id, &msg.params, true))
                    .await
            }
        });
    }
    if let Some(("initialize", id)) = msg.request() {
        return initialize(gw, id, &msg.params);
    }
    let (session, version) = (h.session.map(str::to_string), h.version.map(str::to_string));
    if let Err(r) = gw.sessions.admit(h) {
        return r;
    }
    // Notifications and responses (we send no requests, so any response is stray).
    let Some((method, id)) = msg.request() else {
        return Reply::accepted();
    };
    let rpc = crate::gateway::RpcMeta::new(method, id, session.as_deref(), version.as_deref());
    Reply::json(
        crate::gateway::RPC
            .scope(rpc, answer(gw, method, id, &msg.params, false))
            .await,
    )
}

/// A request of either kind of revision (`stateless`: results marked complete).
async fn answer(
    gw: &RunGateway,
    method: &str,
    id: &Value,
    params: &Value,
    stateless: bool,
) -> Value {
    let done = |r: Value| rpc_result(id, if stateless { complete(r) } else { r });
    match method {
        "ping" if !stateless => done(json!({})),
        "tools/list" => {
            let mut tools = vec![bash::definition()];
            tools.extend(super::decisions::definitions(gw));
            done(json!({ "tools": tools }))
        }
        "tools/call" => match tool_call(gw, params).await {
            Ok(result) => done(result),
            Err(why) => rpc_error(id, INVALID_PARAMS, &why),
        },
        _ => rpc_error(
            id,
            METHOD_NOT_FOUND,
            "method not offered by Airlock's server",
        ),
    }
}

const INSTRUCTIONS: &str = "Airlock runs this agent in a jail. Run commands with the bash tool; only the commands the role allows run.";

fn server_info() -> Value {
    json!({"name": "airlock", "title": "Airlock", "version": env!("CARGO_PKG_VERSION")})
}

fn initialize(gw: &RunGateway, id: &Value, params: &Value) -> Reply {
    let version = negotiate(params);
    let Some(session) = gw.sessions.open(version.to_string()) else {
        return Reply::refused(500, INVALID_REQUEST, "no session id could be made");
    };
    let result = json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS,
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
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    if super::decisions::TOOLS.contains(&name) {
        return Ok(super::decisions::call(gw, name, &args).await);
    }
    if name != bash::NAME {
        return Err(
            "params.name: Airlock's server has the bash tool (and a chief's decision tools)".into(),
        );
    }
    Ok(bash::call(gw, &args).await)
}
