//! airlockd's Prometheus metrics: one registry per daemon, handed down to each run
//! ([`RunMetrics`]) and counted where the run's journal records its decisions, so a count
//! and the journal never disagree. Served by [`serve`] when the config has `metrics:`.
//!
//! Labels are bounded ([`labels`]): role, instance, connector, tool, provider, model,
//! decision, outcome, never a run id or an argument.

pub mod labels;
pub mod live;
pub mod process;
pub mod serve;
pub mod traces;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::policy::RolePolicy;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleOutcome {
    pub role: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolCall {
    pub role: String,
    pub connector: String,
    pub tool: String,
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleDecision {
    pub role: String,
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectorLabel {
    pub connector: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderRequest {
    pub role: String,
    pub provider: String,
    pub model: String,
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderTokens {
    pub role: String,
    pub provider: String,
    pub model: String,
    pub r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabel {
    pub role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GithubWrite {
    pub role: String,
    pub action: String,
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleDirection {
    pub role: String,
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceBudget {
    pub instance: String,
    pub budget: &'static str,
}

type Hist = Family<ConnectorLabel, Histogram, fn() -> Histogram>;

fn seconds_buckets() -> Histogram {
    // 1 ms to about 9 minutes.
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// Every metric airlockd exports, and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    pub runs_active: Gauge,
    pub runs: Family<RoleOutcome, Counter>,
    pub run_duration: Histogram,
    pub launch_duration: Histogram,
    pub tool_calls: Family<ToolCall, Counter>,
    pub bash_commands: Family<RoleDecision, Counter>,
    pub tool_call_duration: Hist,
    pub provider_requests: Family<ProviderRequest, Counter>,
    pub provider_tokens: Family<ProviderTokens, Counter>,
    pub spend_usd: Family<RoleLabel, Counter<f64, AtomicU64>>,
    pub github_writes: Family<GithubWrite, Counter>,
    pub egress_connections: Family<RoleDecision, Counter>,
    pub egress_bytes: Family<RoleDirection, Counter>,
    pub leases_active: Family<KindLabel, Gauge>,
    pub lease_revocations_pending: Gauge,
    pub budget_remaining: Family<InstanceBudget, Gauge>,
    pub ledger_records: Counter,
    pub journal_fallback_records: Counter,
    pub trace_spans_dropped: Counter,
    pub process: process::ProcessMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let m = Metrics {
            runs_active: Gauge::default(),
            runs: Family::default(),
            run_duration: seconds_buckets(),
            launch_duration: seconds_buckets(),
            tool_calls: Family::default(),
            bash_commands: Family::default(),
            tool_call_duration: Family::new_with_constructor(seconds_buckets),
            provider_requests: Family::default(),
            provider_tokens: Family::default(),
            spend_usd: Family::default(),
            github_writes: Family::default(),
            egress_connections: Family::default(),
            egress_bytes: Family::default(),
            leases_active: Family::default(),
            lease_revocations_pending: Gauge::default(),
            budget_remaining: Family::default(),
            ledger_records: Counter::default(),
            journal_fallback_records: Counter::default(),
            trace_spans_dropped: Counter::default(),
            process: process::ProcessMetrics::default(),
            registry: Registry::default(),
        };
        // Counters get their `_total` suffix from the crate.
        r.register(
            "airlock_runs_active",
            "Runs being supervised",
            m.runs_active.clone(),
        );
        r.register("airlock_runs", "Runs closed, by outcome", m.runs.clone());
        r.register(
            "airlock_run_duration_seconds",
            "Length of closed runs",
            m.run_duration.clone(),
        );
        r.register(
            "airlock_launch_duration_seconds",
            "From a launch request to the jail about to exec the agent",
            m.launch_duration.clone(),
        );
        r.register(
            "airlock_tool_calls",
            "MCP tool calls through the gateway, by decision",
            m.tool_calls.clone(),
        );
        r.register(
            "airlock_bash_commands",
            "Commands asked of the bash tool, by decision",
            m.bash_commands.clone(),
        );
        r.register(
            "airlock_tool_call_duration_seconds",
            "Tool calls from request to reply",
            m.tool_call_duration.clone(),
        );
        r.register(
            "airlock_provider_requests",
            "Model provider requests, by decision",
            m.provider_requests.clone(),
        );
        r.register(
            "airlock_provider_tokens",
            "Model tokens counted, by type (input, output, cache_write, cache_read)",
            m.provider_tokens.clone(),
        );
        r.register(
            "airlock_spend_usd",
            "Model spend in US dollars",
            m.spend_usd.clone(),
        );
        r.register(
            "airlock_github_writes",
            "GitHub writes and refused GitHub requests",
            m.github_writes.clone(),
        );
        r.register(
            "airlock_egress_connections",
            "Egress connections (tunnels and forwarded requests), by decision",
            m.egress_connections.clone(),
        );
        r.register(
            "airlock_egress_bytes",
            "Bytes through allowed egress connections (up: from the run)",
            m.egress_bytes.clone(),
        );
        r.register(
            "airlock_leases_active",
            "Credential leases of running runs not revoked or expired",
            m.leases_active.clone(),
        );
        r.register(
            "airlock_lease_revocations_pending",
            "Leases revoked here whose revocation at the source is still being retried",
            m.lease_revocations_pending.clone(),
        );
        r.register(
            "airlock_budget_remaining",
            "Budget left per hired instance (budget=runs_per_week: runs left this week)",
            m.budget_remaining.clone(),
        );
        r.register(
            "airlock_ledger_records",
            "Records in the ledger",
            m.ledger_records.clone(),
        );
        r.register(
            "airlock_journal_fallback_records",
            "Journal records written to a fallback file because journald refused them",
            m.journal_fallback_records.clone(),
        );
        r.register(
            "airlock_trace_spans_dropped",
            "Trace spans not exported: the queue was full or the collector failed",
            m.trace_spans_dropped.clone(),
        );
        m.process.register(&mut r);
        Metrics { registry: r, ..m }
    }

    /// The registry, for encoding.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// A run closed: its outcome and length.
    pub fn run_closed(&self, role: &str, outcome: &str, seconds: f64) {
        self.runs
            .get_or_create(&RoleOutcome {
                role: role.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        self.run_duration.observe(seconds);
    }

    /// The ledger holds `n` records (it only grows, so the counter catches up).
    pub fn ledger_len(&self, n: u64) {
        let have = self.ledger_records.get();
        if n > have {
            self.ledger_records.inc_by(n - have);
        }
    }
}

/// What a run's counts are labelled with, fixed when its gateway starts.
#[derive(Clone)]
pub struct RunMetrics {
    pub metrics: Arc<Metrics>,
    pub role: String,
    /// The run's connectors through Airlock (`run.mcp`).
    pub connectors: Vec<String>,
    /// The role's policy: whether it grants a tool.
    pub policy: Arc<RolePolicy>,
    /// `run.model`, when the run has a model.
    pub model: Option<String>,
    /// The run's tallies for `ps` and `top`.
    pub live: Arc<live::LiveCounts>,
    /// The run's trace span, when airlockd exports traces.
    pub trace: Option<Arc<traces::RunSpan>>,
}

/// What metrics and traces read of a tool call the gateway journaled: plain values, so
/// metrics need nothing of the gateway (the supervisor fills it in).
#[derive(Debug, Clone, Copy)]
pub struct CallSeen<'a> {
    pub connector: &'a str,
    pub tool: &'a str,
    pub allow: bool,
    pub rule: &'a str,
    pub is_error: bool,
    pub duration_ms: u64,
    /// The JSON-RPC request it came in, when known: method, session, protocol version, id.
    pub method: Option<&'a str>,
    pub session: Option<&'a str>,
    pub protocol: Option<&'a str>,
    pub request_id: Option<&'a str>,
}

/// What metrics and traces read of a model request the gateway journaled.
#[derive(Debug, Clone, Copy)]
pub struct ModelSeen<'a> {
    pub provider: &'a str,
    /// The model the request named, if any.
    pub model: Option<&'a str>,
    pub allow: bool,
    pub rule: &'a str,
    pub usage: &'a crate::policy::prices::Usage,
    pub cost_micro_usd: u64,
    /// The run's spend after it.
    pub spent_micro_usd: u64,
    pub duration_ms: u64,
}

impl RunMetrics {
    /// A tool call as journaled.
    pub fn call(&self, r: &CallSeen<'_>) {
        let (connector, tool, allow, rule) = (r.connector, r.tool, r.allow, r.rule);
        let bash = connector == labels::AIRLOCK_CONNECTOR && tool == labels::BASH_TOOL;
        let duration_ms = r.duration_ms;
        let decision = labels::decision(allow);
        let c = labels::connector(&self.connectors, connector);
        let grant = match c == labels::AIRLOCK_CONNECTOR {
            true => None,
            false => self.policy.tool_grant(c, tool),
        };
        let t = labels::tool(c, tool, grant.as_deref());
        self.live
            .call(allow, format!("{c}/{t} {decision} by {rule}"));
        if let Some(span) = &self.trace {
            span.mcp(&traces::McpCall {
                method: labels::method(r.method.unwrap_or("tools/call")),
                tool: t,
                connector: c,
                session: r.session,
                protocol: r.protocol,
                request_id: r.request_id,
                allow,
                rule,
                is_error: r.is_error,
                duration_ms,
            });
        }
        self.metrics
            .tool_calls
            .get_or_create(&ToolCall {
                role: self.role.clone(),
                connector: c.to_string(),
                tool: t.to_string(),
                decision,
            })
            .inc();
        self.metrics
            .tool_call_duration
            .get_or_create(&ConnectorLabel {
                connector: c.to_string(),
            })
            .observe(duration_ms as f64 / 1000.0);
        if bash {
            self.metrics
                .bash_commands
                .get_or_create(&RoleDecision {
                    role: self.role.clone(),
                    decision,
                })
                .inc();
        }
    }

    /// A model request as journaled.
    pub fn provider(&self, r: &ModelSeen<'_>) {
        let (provider, allow) = (r.provider, r.allow);
        let u = r.usage;
        let tokens = [u.input, u.output, u.cache_write, u.cache_read];
        let (cost_micro_usd, spent_micro_usd) = (r.cost_micro_usd, r.spent_micro_usd);
        let model = labels::model(self.model.as_deref().unwrap_or(""), r.model).to_string();
        if let Some(span) = &self.trace {
            span.model(&traces::ModelCall {
                provider,
                model: &model,
                input_tokens: u.input,
                output_tokens: u.output,
                allow,
                rule: r.rule,
                duration_ms: r.duration_ms,
            });
        }
        self.live.spent(spent_micro_usd);
        self.live
            .decided(format!("provider {provider} {}", labels::decision(allow)));
        self.metrics
            .provider_requests
            .get_or_create(&ProviderRequest {
                role: self.role.clone(),
                provider: provider.to_string(),
                model: model.clone(),
                decision: labels::decision(allow),
            })
            .inc();
        for (kind, n) in ["input", "output", "cache_write", "cache_read"]
            .into_iter()
            .zip(tokens)
        {
            if n > 0 {
                self.metrics
                    .provider_tokens
                    .get_or_create(&ProviderTokens {
                        role: self.role.clone(),
                        provider: provider.to_string(),
                        model: model.clone(),
                        r#type: kind,
                    })
                    .inc_by(n);
            }
        }
        if cost_micro_usd > 0 {
            self.metrics
                .spend_usd
                .get_or_create(&RoleLabel {
                    role: self.role.clone(),
                })
                .inc_by(cost_micro_usd as f64 / 1e6);
        }
    }

    /// A GitHub write or refusal; `writes`: the run's writes after it.
    pub fn github(&self, action: &str, allow: bool, writes: u64) {
        let action = labels::github_action(action);
        self.live.wrote(writes);
        self.live
            .decided(format!("github {action} {}", labels::decision(allow)));
        self.metrics
            .github_writes
            .get_or_create(&GithubWrite {
                role: self.role.clone(),
                action: action.to_string(),
                decision: labels::decision(allow),
            })
            .inc();
    }

    pub fn egress(&self, allow: bool, up: u64, down: u64) {
        self.live
            .decided(format!("egress {}", labels::decision(allow)));
        self.metrics
            .egress_connections
            .get_or_create(&RoleDecision {
                role: self.role.clone(),
                decision: labels::decision(allow),
            })
            .inc();
        for (direction, n) in [("up", up), ("down", down)] {
            if n > 0 {
                self.metrics
                    .egress_bytes
                    .get_or_create(&RoleDirection {
                        role: self.role.clone(),
                        direction,
                    })
                    .inc_by(n);
            }
        }
    }
}
