//! One MCP message POSTed by a jailed agent to its gateway: the strict JSON reader (unique
//! keys, bounded depth), the JSON-RPC checks, the revision and header checks, the shape
//! the journal keeps, and the policy decision on a tools/call or resources/read for a
//! shipped role. Input: up to four header values (Mcp-Session-Id, MCP-Protocol-Version,
//! Mcp-Method, Mcp-Name) on lines ending in a NUL byte, then the body.
//! Invariants: what the strict reader accepts, serde_json reads identically, and its
//! re-serialization (what is forwarded) reads back the same; shape never shows a string.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use airlock::gateway::mcp::jsonrpc::{self, Headers};
use airlock::gateway::strict_json;
use airlock::policy::engine::RolePolicy;
use airlock::policy::Policies;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn policy() -> &'static RolePolicy {
    static P: OnceLock<RolePolicy> = OnceLock::new();
    P.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let policies = Policies::load(&root.join("policies")).expect("shipped policies load");
        let role = airlock::role::load_role_dir(&root.join("roles/code"))
            .expect("the shipped code role loads");
        RolePolicy::compile(&role.role, &policies)
    })
}

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let mut headers: Vec<Option<&str>> = Vec::new();
    while headers.len() < 4 {
        match rest.iter().position(|&b| b == 0) {
            Some(i) if i < 128 => {
                headers.push(
                    std::str::from_utf8(&rest[..i])
                        .ok()
                        .filter(|s| !s.is_empty()),
                );
                rest = &rest[i + 1..];
            }
            _ => break,
        }
    }
    headers.resize(4, None);
    let body = rest;

    if let Ok(v) = strict_json::parse(body) {
        let plain: Value =
            serde_json::from_slice(body).expect("strict accepted what serde refuses");
        assert_eq!(
            plain, v,
            "strict and serde_json read the message differently"
        );
        let forwarded = serde_json::to_vec(&v).expect("a value serializes");
        let back = strict_json::parse(&forwarded).expect("the forwarded form reads back");
        assert_eq!(back, v, "the forwarded form means something else");
    }

    let Ok(msg) = jsonrpc::parse_message(body) else {
        return;
    };
    let h = Headers {
        session: headers[0],
        version: headers[1],
        method: headers[2],
        name: headers[3],
    };
    let _ = h.agree(&msg);
    let _ = jsonrpc::stateless(&msg, &h);
    let _ = jsonrpc::negotiate(&msg.params);
    let shown = jsonrpc::shape(&msg.params);
    if let Some(Value::String(s)) = msg.params.get("name") {
        if s.len() >= 8 && !shown.contains(&format!("{s}:")) {
            assert!(!shown.contains(s.as_str()), "shape shows a string value");
        }
    }
    let _ = jsonrpc::complete(msg.params.clone());
    let p = policy();
    match msg.method.as_deref() {
        Some("tools/call") => {
            if let Some(tool) = msg.params.get("name").and_then(Value::as_str) {
                let args = msg.params.get("arguments").cloned().unwrap_or(Value::Null);
                let _ = p.tool("github", tool, &args);
                let _ = p.tool_listed("github", tool);
                if tool == "bash" {
                    if let Some(cmd) = args.get("command").and_then(Value::as_str) {
                        let (d, argv) = p.bash_command(cmd);
                        assert_eq!(d.allow, argv.is_some(), "an allow without an argv");
                    }
                }
            }
        }
        Some("resources/read") => {
            if let Some(uri) = msg.params.get("uri").and_then(Value::as_str) {
                let _ = p.resource("github", uri);
            }
        }
        _ => {}
    }
});
