//! The provider route, for real: standalone runs whose agent is a scripted client
//! (tests/agents/provider_client.py) calling its model provider through the run's gateway
//! with its run token, in front of a stand-in provider (tests/agents/standin_provider.py)
//! that speaks the Anthropic Messages and OpenAI Responses wire formats over loopback.

mod common;

use common::*;
use serde_json::{json, Value};

/// Cost of one stand-in Anthropic answer for claude-sonnet-4-5 (policies/prices.yaml):
/// 1000 in x $3 + 2000 cache write x $3.75 + 3000 cache read x $0.30 + 500 out x $15, per
/// million tokens, in micro-USD.
const ANTHROPIC_COST: u64 = 3_000 + 7_500 + 900 + 7_500;
/// One stand-in OpenAI answer for gpt-5-codex: 10000 in of which 8000 cached, 1000 out:
/// 2000 x $1.25 + 8000 x $0.125 + 1000 x $10.
const OPENAI_COST: u64 = 2_500 + 1_000 + 10_000;

fn host(si: &StandIn) -> Host {
    Host::new(&[("tess", "code"), ("rex", "review")], &si.config())
}

fn provider_events(run: &str, want: usize) -> Vec<Value> {
    events(run, "provider", want)
}

fn field<'a>(e: &'a Value, k: &str) -> &'a str {
    e[k].as_str().unwrap_or("")
}

fn show_json(h: &Host, run: &str) -> Value {
    let o = h.ctl(&["show", run, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn an_anthropic_agent_reaches_its_model_with_a_run_token_the_real_key_never_in_the_jail() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let ws = h.workspace("ws", h.uids[0]);
    let model = "claude-sonnet-4-5";
    let steps = json!([
        {"op": "call", "api": "anthropic", "model": model, "stream": false},
        {"op": "call", "api": "anthropic", "model": model, "stream": true},
        {"op": "call", "api": "anthropic", "model": model, "stream": true, "hold": true},
        {"op": "call", "api": "anthropic", "model": model, "token": "wrong"},
        {"op": "call", "api": "anthropic", "model": model, "token": "none"},
        {"op": "call", "api": "anthropic", "model": "claude-opus-4-1"},
        {"op": "scan", "out": ws.join("scan.bin").to_str().unwrap()},
        // A server tool: the provider would reach an MCP server itself, past the egress.
        {"op": "call", "api": "anthropic", "model": model,
         "extra": {"mcp_servers": [{"type": "url", "url": "https://x.example/mcp", "name": "x"}]}},
    ]);
    let argv = provider_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h
        .launch(
            "code",
            "tess",
            &["--workspace", ws.to_str().unwrap()],
            &argv,
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let run = run_id_of(&o);
    let lines = agent_lines(&o);

    assert_eq!(step(&lines, 0)["status"], 200);
    assert_eq!(
        step(&lines, 0)["body"]["content"][0]["text"],
        "hello from the stand-in"
    );
    assert_eq!(step(&lines, 1)["status"], 200);
    assert_eq!(step(&lines, 1)["text"], "hello from the stand-in");
    // The held stream: its first words reached the agent while the stand-in held the rest,
    // and only the agent's own release (through the gateway) let it finish.
    assert_eq!(step(&lines, 2)["text"], "hello from the stand-in");
    assert_eq!(step(&lines, 2)["released_status"], 200);
    let reqs = si.requests();
    let held: Vec<&Value> = reqs
        .iter()
        .filter(|r| r.get("released").is_some())
        .collect();
    assert_eq!(held.len(), 1, "{reqs:?}");
    assert_eq!(held[0]["released"], "by_agent", "the stream was buffered");

    for (i, kind) in [
        (3, "authentication_error"),
        (4, "authentication_error"),
        (5, "permission_error"),
    ] {
        assert_eq!(
            step(&lines, i)["body"]["type"],
            "error",
            "{}",
            step(&lines, i)
        );
        assert_eq!(step(&lines, i)["error_type"], kind, "{}", step(&lines, i));
    }
    assert_eq!(step(&lines, 3)["status"], 401);
    assert_eq!(step(&lines, 5)["status"], 403);

    // The stand-in saw the real key on every request, and never a run token.
    assert_eq!(reqs.len(), 4, "three answers and one model list: {reqs:?}");
    for r in &reqs {
        assert_eq!(r["x_api_key"], si.key.as_str(), "{r}");
        assert!(r["authorization"].is_null(), "{r}");
        assert_eq!(r["accept_encoding"], "identity");
        assert_eq!(r["anthropic_version"], "2023-06-01");
    }
    assert!(reqs
        .iter()
        .all(|r| r["model"].is_null() || r["model"] == model));

    // Everything the agent could read: its run token is there, the real key is not.
    let scan = std::fs::read(ws.join("scan.bin")).unwrap();
    assert!(step(&lines, 6)["scanned"].as_u64().unwrap() > 10);
    let has = |needle: &str| scan.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        has("ANTHROPIC_API_KEY=airlock-run-"),
        "the scan saw no run token"
    );
    assert!(!has(&si.key), "the real key is readable inside the jail");
    assert!(
        !journal_text(&run).contains(&si.key),
        "the key reached the journal"
    );

    // Journaled: three priced answers, the model list, and the three refusals by rule.
    let ev = provider_events(&run, 7);
    let allowed: Vec<&Value> = ev
        .iter()
        .filter(|e| field(e, "AIRLOCK_DECISION") == "allow")
        .collect();
    let priced: Vec<&Value> = allowed
        .iter()
        .copied()
        .filter(|e| field(e, "AIRLOCK_ENDPOINT") == "POST /v1/messages")
        .collect();
    assert_eq!(priced.len(), 3, "{ev:?}");
    for e in &priced {
        assert_eq!(
            field(e, "AIRLOCK_COST_MICRO_USD"),
            ANTHROPIC_COST.to_string()
        );
        assert_eq!(field(e, "AIRLOCK_USAGE"), "final");
        assert_eq!(field(e, "AIRLOCK_CACHE_READ_TOKENS"), "3000");
        assert_eq!(field(e, "AIRLOCK_CACHE_WRITE_TOKENS"), "2000");
    }
    let rules: Vec<&str> = ev
        .iter()
        .filter(|e| field(e, "AIRLOCK_DECISION") == "deny")
        .map(|e| field(e, "AIRLOCK_RULE"))
        .collect();
    assert_eq!(rules, ["lease", "lease", "model", "tools"]);
    assert_eq!(step(&lines, 7)["status"], 403, "{}", step(&lines, 7));
    assert_eq!(step(&lines, 7)["error_type"], "permission_error");

    // The closing record has the spend; the lease was revoked at the run's end.
    let shown = show_json(&h, &run);
    let s = &shown["run"]["spend"];
    assert_eq!(s["micro_usd"], 3 * ANTHROPIC_COST, "{shown}");
    assert_eq!(s["requests"], 3);
    assert_eq!(s["refused"], 4);
    assert_eq!(s["budget_micro_usd"], 15_000_000);
    let leases = shown["run"]["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{shown}");
    assert_eq!(leases[0]["id"], format!("run/{run}/provider/1"));
    assert_eq!(leases[0]["state"], "revoked");
    assert!(
        events(&run, "lease", 2).len() >= 2,
        "issue and revocation journaled"
    );
}

#[test]
fn an_openai_responses_agent_is_priced_with_cached_tokens_apart() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let model = "gpt-5-codex";
    let steps = json!([
        {"op": "call", "api": "openai", "model": model, "stream": false},
        {"op": "call", "api": "openai", "model": model, "stream": true, "hold": true},
        {"op": "call", "api": "openai", "model": "gpt-5"},
        {"op": "call", "api": "openai", "model": model, "token": "wrong"},
        // The provider's own web search, for a role whose run.tools lacks WebSearch.
        {"op": "call", "api": "openai", "model": model, "extra": {"tools": [{"type": "web_search"}]}},
    ]);
    let argv = provider_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("review", "rex", &[], &argv).output().unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let run = run_id_of(&o);
    let lines = agent_lines(&o);
    assert_eq!(step(&lines, 0)["status"], 200);
    assert_eq!(step(&lines, 1)["text"], "hello from the stand-in");
    assert_eq!(step(&lines, 2)["status"], 403);
    assert_eq!(step(&lines, 2)["error_type"], "invalid_request_error");
    assert_eq!(step(&lines, 3)["status"], 401);
    assert_eq!(step(&lines, 3)["error_type"], "invalid_api_key");
    assert_eq!(step(&lines, 4)["status"], 403, "{}", step(&lines, 4));
    assert!(
        step(&lines, 4)["message"]
            .as_str()
            .is_some_and(|m| m.contains("WebSearch")),
        "{}",
        step(&lines, 4)
    );
    let reqs = si.requests();
    assert!(reqs.iter().any(|r| r["released"] == "by_agent"), "{reqs:?}");
    for r in &reqs {
        assert_eq!(r["authorization"], format!("Bearer {}", si.key), "{r}");
    }
    let ev = provider_events(&run, 5);
    let priced: Vec<&Value> = ev
        .iter()
        .filter(|e| {
            field(e, "AIRLOCK_ENDPOINT") == "POST /responses"
                && field(e, "AIRLOCK_DECISION") == "allow"
        })
        .collect();
    assert_eq!(priced.len(), 2, "{ev:?}");
    for e in &priced {
        assert_eq!(field(e, "AIRLOCK_INPUT_TOKENS"), "2000");
        assert_eq!(field(e, "AIRLOCK_CACHE_READ_TOKENS"), "8000");
        assert_eq!(field(e, "AIRLOCK_COST_MICRO_USD"), OPENAI_COST.to_string());
    }
    assert_eq!(
        show_json(&h, &run)["run"]["spend"]["micro_usd"],
        2 * OPENAI_COST
    );
}

#[test]
fn the_request_that_would_start_past_the_budget_is_refused_in_the_providers_format() {
    require_journald();
    let si = StandIn::start();
    let h = Host::new(&[("tess", "code"), ("zed", "code-scout")], &si.config());
    // Room for two answers (2 x $0.0189 > $0.03 only after the second).
    h.local_role("code", |t| {
        t.replace("  spend_usd: 15\n", "  spend_usd: 0.03\n")
    });
    let model = "claude-sonnet-4-5";
    let call = json!({"op": "call", "api": "anthropic", "model": model, "stream": true});
    let steps = json!([call, call, call]);
    let argv = provider_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code", "tess", &[], &argv).output().unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let run = run_id_of(&o);
    let lines = agent_lines(&o);
    assert_eq!(step(&lines, 0)["status"], 200);
    assert_eq!(step(&lines, 1)["status"], 200);
    let third = step(&lines, 2);
    assert_eq!(third["status"], 403, "{third}");
    assert_eq!(third["error_type"], "permission_error");
    assert!(
        third["message"]
            .as_str()
            .unwrap()
            .contains("budget.spend_usd"),
        "{third}"
    );
    assert_eq!(
        si.requests().len(),
        2,
        "the refused request never left the gateway"
    );
    let ev = provider_events(&run, 3);
    let denied: Vec<&Value> = ev
        .iter()
        .filter(|e| field(e, "AIRLOCK_DECISION") == "deny")
        .collect();
    assert_eq!(denied.len(), 1);
    assert_eq!(field(denied[0], "AIRLOCK_RULE"), "budget.spend_usd");
    assert_eq!(
        field(denied[0], "AIRLOCK_SPENT_MICRO_USD"),
        (2 * ANTHROPIC_COST).to_string()
    );
    assert_eq!(
        show_json(&h, &run)["run"]["spend"]["micro_usd"],
        2 * ANTHROPIC_COST
    );

    // A budget of 0 allows no request at all.
    h.local_role("code-scout", |t| {
        t.replace("  spend_usd: 2\n", "  spend_usd: 0\n")
    });
    let steps = json!([call]);
    let argv = provider_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code-scout", "zed", &[], &argv).output().unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(step(&agent_lines(&o), 0)["status"], 403);
    assert_eq!(si.requests().len(), 2);
}

#[test]
fn a_launch_of_a_model_without_a_price_or_a_provider_is_refused_before_it_starts() {
    let si = StandIn::start();
    let h = host(&si);
    h.local_role("code", |t| {
        t.replace("model: claude-sonnet-4-5", "model: claude-unpriced-9")
    });
    let argv = provider_agent(&json!([]));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code", "tess", &[], &argv).output().unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("prices.yaml: models.claude-unpriced-9: no price"),
        "{e}"
    );
}
