//! The chief's decision tools on Airlock's own server (`/mcp/airlock`, beside `bash`):
//! `hire_request`, `fire_request`, `change_request`, `withdraw_request`, `decision_status`
//! (seed 003). Each call is decided by the role's policy like any tool (the role must grant
//! it on the `airlock` connector, and its class must hold the `hire` authority, checked at
//! load and per call), then answered by the desk airlockd hands the gateway: only a run
//! whose class holds `hire` gets one, so any other run is refused whatever its grants.

use std::time::Instant;

use serde_json::{json, Value};

use crate::gateway::{bash::error_result, CallRecord, RunGateway};
use crate::policy::agent_config::BASH_SERVER;

/// The tools, by name.
pub use crate::policy::classes::DECISION_TOOLS as TOOLS;

/// Where a chief's requests go (airlockd's decisions); blocking.
pub trait DecisionDesk: Send + Sync + std::fmt::Debug {
    fn request(&self, tool: &str, args: &Value) -> Result<Value, String>;
}

/// The definitions of the tools the run's role grants (and may call).
pub fn definitions(gw: &RunGateway) -> Vec<Value> {
    if gw.plan.desk.is_none() {
        return Vec::new();
    }
    TOOLS
        .iter()
        .filter(|t| gw.plan.policy.get().tool_listed(BASH_SERVER, t).allow)
        .map(|t| {
            json!({
                "name": t,
                "description": match *t {
                    "hire_request" => "Ask a person to approve hiring an instance: {name, role: {template: NAME} | {inline: {role_yaml, brief}}, reason, credentials?: [service]}. Airlock computes the flagged and credential lines and the digest; each service named in credentials must be one the role's runs use.",
                    "fire_request" => "Ask a person to approve firing an instance: {name, reason}.",
                    "change_request" => "Ask a person to approve changing an instance's role: {name, role?, reason}.",
                    "withdraw_request" => "Withdraw a pending decision this instance raised: {decision}.",
                    _ => "The state of a decision this instance raised: {decision}.",
                },
                "inputSchema": {"type": "object"},
            })
        })
        .collect()
}

/// One call: decide, ask the desk, journal. Returns the tool result.
pub async fn call(gw: &RunGateway, name: &str, args: &Value) -> Value {
    let started = Instant::now();
    let mut rec = CallRecord::new(BASH_SERVER, name);
    rec.detail = crate::gateway::mcp::jsonrpc::shape(args);
    let d = gw.plan.policy.get().tool(BASH_SERVER, name, args);
    rec.decided(&d);
    let result = match (&gw.plan.desk, d.allow) {
        (_, false) => error_result(&format!("refused by {}: {}", d.rule, d.reason)),
        (None, true) => {
            rec.allow = false;
            rec.rule = "authority: hire".into();
            error_result("refused by authority: hire: only a role of a class holding the hire authority (chief) may ask for decisions")
        }
        (Some(desk), true) => {
            let (desk, name2, args2) = (desk.clone(), name.to_string(), args.clone());
            match tokio::task::spawn_blocking(move || desk.request(&name2, &args2)).await {
                Ok(Ok(v)) => {
                    rec.is_error = false;
                    json!({"content": [{"type": "text", "text": v.to_string()}], "structuredContent": v, "isError": false})
                }
                Ok(Err(why)) => error_result(&why),
                Err(_) => error_result("the request failed inside airlockd"),
            }
        }
    };
    rec.finish(started, &result, gw.log.as_ref());
    result
}
