//! What the provider route does to each request and answer on one core, with plain
//! `std::time` (no harness): reading a request the size of a coding agent's (strict JSON,
//! case twins, model, tools, content, output limit) and re-serializing it, and scanning an
//! answer stream for the run's secrets.
//!
//! Run: `cargo bench --bench provider_checks`.

use airlock::gateway::provider::check::{self as provider_check, Metered, Rules};
use airlock::gateway::provider::usage::Api;
use airlock::gateway::withhold::Secrets;
use bytes::Bytes;
use serde_json::json;
use std::hint::black_box;
use std::time::Instant;

/// A request like a coding agent's: a system prompt, tools with schemas, a long history.
fn request(turns: usize) -> Vec<u8> {
    let tools: Vec<_> = (0..20)
        .map(|i| {
            json!({"name": format!("tool_{i}"), "description": "x".repeat(400),
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["path"]}})
        })
        .collect();
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "line of output\n".repeat(40)}]}));
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "working on it"}, {"type": "tool_use", "id": format!("t{}", i + 1), "name": "tool_1", "input": {"path": "/src/main.rs"}}]}));
    }
    serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": true,
        "system": [{"type": "text", "text": "s".repeat(20000)}], "tools": tools, "messages": messages}))
    .unwrap()
}

fn main() {
    let body = request(150);
    let rules = Rules {
        api: Api::AnthropicMessages,
        model: "claude-sonnet-4-5",
        max_output: 64000,
        web_search: false,
        web_fetch: false,
    };
    let n = 200;
    // What the route did before it checked case twins and content and re-serialized.
    let t = Instant::now();
    for _ in 0..n {
        black_box(airlock::gateway::strict_json::parse(black_box(&body)).unwrap());
    }
    let parse = t.elapsed() / n;
    let t = Instant::now();
    for _ in 0..n {
        let doc = provider_check::read(black_box(&body)).unwrap();
        black_box(provider_check::decide(&rules, Metered::Yes, &doc).unwrap());
        black_box(serde_json::to_vec(&doc).unwrap());
    }
    let per = t.elapsed() / n;
    println!(
        "request of {} KiB: read, checked and re-serialized in {:.2} ms ({:.0} MiB/s); the strict read alone {:.2} ms",
        body.len() / 1024,
        per.as_secs_f64() * 1e3,
        body.len() as f64 / per.as_secs_f64() / (1 << 20) as f64,
        parse.as_secs_f64() * 1e3
    );

    let secrets = Secrets::new([
        "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz0123456789",
        "ghs_0123456789abcdefghijklmnopqrstuvwxyz",
    ]);
    let event = Bytes::from(
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"some streamed words, and some more of them\"}}\n\n",
    );
    let frames = 200_000;
    let mut scan = secrets.scanner();
    let t = Instant::now();
    for _ in 0..frames {
        black_box(scan.push(black_box(event.clone())));
    }
    let el = t.elapsed();
    println!(
        "stream scan: {:.0} ns a frame of {} bytes ({:.0} MiB/s)",
        el.as_nanos() as f64 / frames as f64,
        event.len(),
        (event.len() * frames) as f64 / el.as_secs_f64() / (1 << 20) as f64
    );
}
