//! The run's gateway: the only thing a run reaches outside its jail. The jail's pid 1
//! listens on 127.0.0.1:[`GATEWAY_PORT`] inside the run's network namespace and hands the
//! listener out ([`crate::sandbox::command_side`]); the supervisor serves it here, from
//! outside the jail, for that run alone, and stops it when the run ends.
//!
//! Served: Airlock's own MCP server at `/mcp/airlock` with the `bash` tool ([`bash`]),
//! whose allowed commands run on the run's command side ([`crate::sandbox::runner`]), and
//! `/mcp/<connector>` for each `run.mcp` connector with `{via: airlock}` ([`mcp`]) in front
//! of its upstream. The same listener is the run's HTTP proxy: the model provider's route
//! ([`provider`]), GitHub's ([`github`]), and `CONNECT` tunnels and absolute-form plain
//! HTTP to what the role may reach ([`egress`]). Every call is decided by the policy core
//! and journaled.
//!
//! One folder per route; beside them what the routes share: [`http`] (the front: routing,
//! limits, headers), [`headers`], [`withhold`] (credentials kept out of answers),
//! [`strict_json`] (the one reader of a run's JSON), [`scope`] and [`run_tls`].
//!
//! [`GATEWAY_PORT`]: crate::sandbox::runner::GATEWAY_PORT

pub mod asks;
pub mod bash;
pub mod egress;
pub mod github;
pub mod headers;
pub mod http;
pub mod live_policy;
pub mod mcp;
pub mod provider;
pub mod run_tls;
pub mod scope;
pub mod strict_json;
pub mod withhold;

use bash::runner_client;
use mcp::{oauth, stdio_upstream, upstream};
use provider::charge;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The body of every gateway response: whole (a message) or streamed (a provider's answer).
pub type GwBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, std::io::Error>;

/// A whole response body.
pub fn full(b: bytes::Bytes) -> GwBody {
    use http_body_util::BodyExt;
    http_body_util::Full::new(b)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// What the gateway of one run enforces, decided before the run starts.
#[derive(Debug, Clone)]
pub struct GatewayPlan {
    /// The role's decisions; narrowed in place by a change decision (issue 45).
    pub policy: live_policy::LivePolicy,
    /// The run's workspace and the instance's home inside the jail: the bash tool's cwd
    /// must be inside one of them.
    pub workspace: PathBuf,
    pub home: PathBuf,
    /// `run.mcp` connectors that go through Airlock (`{via: airlock}`).
    pub connectors: Vec<String>,
    /// Those of them whose upstream this host configures (`mcp_connectors`).
    pub upstreams: std::collections::BTreeMap<String, UpstreamPlan>,
    /// The model provider route, when the role runs a model and this host configures its
    /// provider.
    pub provider: Option<provider::ProviderPlan>,
    /// The run's credential leases, as the gateway checks them.
    pub leases: Arc<crate::credentials::leases::LiveLeases>,
    /// Where the run's proxy may go (`HTTPS_PROXY`/`HTTP_PROXY`).
    pub egress: egress::EgressPlan,
    /// The GitHub route, when the role's key store is Airlock's and its tokens were minted.
    pub github: Option<github::GithubPlan>,
    /// Where a chief's decision tools go; only a run whose class holds `hire` has one.
    pub desk: Option<Arc<dyn mcp::decisions::DecisionDesk>>,
    /// Where requests refused for want of a grant wait for a person (`asks` names the
    /// role); none: such a refusal is final at once.
    pub asks: Option<Arc<dyn asks::AskDesk>>,
}

/// A connector's upstream, as the gateway will reach it.
#[derive(Debug, Clone)]
pub enum UpstreamPlan {
    /// Streamable HTTP, and the header carrying its credential (its name, and the secret:
    /// sent as `Bearer <secret>` in Authorization, as is in another header), if it has
    /// one. Held by airlockd only.
    Http {
        url: upstream::HttpUrl,
        auth: Option<(String, crate::credentials::Secret)>,
        /// How an `https` upstream's certificate is verified (the system store or the
        /// connector's `ca_file`); `None` for plain http.
        tls: Option<Arc<rustls::ClientConfig>>,
        /// An OAuth connector's access token, shared by its runs (then `auth` is `None`).
        oauth: Option<Arc<oauth::TokenSource>>,
    },
    /// A stdio server in a jail of its own, started with the gateway; its credential, if
    /// it has one, goes in its environment as the named variable (added to the spec only
    /// when the jail is started, so no Debug of a plan can show it).
    Stdio {
        spec: Box<crate::sandbox::RunSpec>,
        env: Option<(String, crate::credentials::Secret)>,
    },
}

/// What the jail handed over: the listener and the command runner's channel.
#[derive(Debug)]
pub struct GatewayFds {
    pub listener: OwnedFd,
    pub runner: OwnedFd,
    /// The command side's cgroups (each command gets one of its own below them).
    pub commands: crate::sandbox::command_cgroup::CommandCgroups,
}

/// The JSON-RPC request a call came in, for its trace span: set around the handling of one
/// request ([`RPC`]), read when its record is made. Request and session ids are clipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RpcMeta {
    pub method: String,
    pub request_id: Option<String>,
    pub session: Option<String>,
    pub protocol: Option<String>,
}

tokio::task_local! {
    /// The request being answered (see [`RpcMeta`]).
    pub static RPC: RpcMeta;
}

impl RpcMeta {
    pub fn new(
        method: &str,
        id: &serde_json::Value,
        session: Option<&str>,
        protocol: Option<&str>,
    ) -> RpcMeta {
        let id = match id {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        RpcMeta {
            method: clip(method, 64),
            request_id: Some(clip(&id, 64)),
            session: session.map(|s| clip(s, 128)),
            protocol: protocol.map(|s| clip(s, 32)),
        }
    }
}

/// One call through the gateway, as the journal keeps it: no argument values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    pub connector: String,
    pub tool: String,
    pub allow: bool,
    pub rule: String,
    pub reason: String,
    /// Bash: the argv as run, secret-shaped words redacted. MCP: the arguments' shape.
    pub detail: String,
    /// Bash: the program.
    pub program: Option<String>,
    pub exit_code: Option<i32>,
    pub is_error: bool,
    pub duration_ms: u64,
    pub result_bytes: u64,
    /// What the connector's upstream asked its client while answering, and what Airlock
    /// answered ([`upstream::asked`]), journaled for every call.
    pub asked: Vec<&'static str>,
    /// The request it came in, when known (for its trace span; not journaled).
    pub rpc: Option<RpcMeta>,
}

impl CallRecord {
    /// A call not yet decided (refused until said otherwise).
    pub fn new(connector: &str, tool: &str) -> CallRecord {
        CallRecord {
            connector: connector.to_string(),
            // An agent's tool name may be anything up to a message's size.
            tool: clip(tool, MAX_NAME_CHARS),
            allow: false,
            rule: String::new(),
            reason: String::new(),
            detail: String::new(),
            program: None,
            exit_code: None,
            is_error: true,
            duration_ms: 0,
            result_bytes: 0,
            asked: Vec::new(),
            rpc: RPC.try_with(Clone::clone).ok(),
        }
    }

    /// Take the policy's decision (allowed calls stay errors until a result says not).
    pub fn decided(&mut self, d: &crate::policy::Decision) {
        self.allow = d.allow;
        self.rule = d.rule.clone();
        self.reason = d.reason.clone();
    }

    /// Close the record with the reply the agent gets, and journal it.
    pub fn finish(mut self, started: Instant, reply: &serde_json::Value, log: &dyn CallLog) {
        self.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Counted as serialized, without making the text (the reply is sent as it is).
        let mut n = ByteCount(0);
        self.result_bytes = match serde_json::to_writer(&mut n, reply) {
            Ok(()) => n.0,
            // A Value always serializes; were it not to, the count is only a journal figure.
            Err(_) => 0,
        };
        log.call(self);
    }
}

/// A writer that only counts what it is given.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Most characters of a name (tool, key) a call's record keeps.
pub const MAX_NAME_CHARS: usize = 128;
/// Most characters of a call's detail (argv or argument shape) a record keeps.
pub const MAX_DETAIL_CHARS: usize = 1024;

/// `s` cut to `max` characters, marked when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

/// Where the gateway tells about its calls (the run's journal).
pub trait CallLog: Send + Sync {
    fn call(&self, record: CallRecord);
    /// A request on the provider route.
    fn provider(&self, record: provider::ProviderRecord);
    /// One egress connection (tunnel or forwarded request), at its end.
    fn egress(&self, record: egress::EgressRecord);
    /// A GitHub write, or a refused GitHub request.
    fn github(&self, record: github::GithubRecord);
    /// An ask raised, or its answer (`ask`); nothing by default (a log without a journal).
    fn ask(&self, _record: asks::AskRecord) {}
    /// An upstream's answer that echoed the run's secrets, withheld.
    fn withheld(&self, record: withhold::WithheldRecord);
}

/// Everything a request handler of one run's gateway needs.
pub struct RunGateway {
    pub plan: GatewayPlan,
    /// When the run's deadline passes, if it has one: no command outlives it.
    pub deadline: Option<Instant>,
    pub runner: runner_client::RunnerClient,
    pub log: Arc<dyn CallLog>,
    pub sessions: mcp::server::Sessions,
    /// The connectors served, by name.
    pub connectors: std::collections::BTreeMap<String, mcp::proxy::Connector>,
    /// The provider route, when the plan has one.
    pub provider: Option<provider::Provider>,
    pub egress: Arc<egress::Egress>,
    /// The GitHub route, when the plan has one.
    pub github: Option<Arc<github::Github>>,
    /// The run's tasks: every connection and stream is spawned through it.
    pub scope: scope::Scope,
}

/// A running gateway: tasks of the current runtime, in one [`scope::Scope`]. Dropping it
/// cancels them all (every connection and call of the run ends); [`Gateway::stop`] also
/// ends the upstream sessions and waits until the last task is gone.
pub struct Gateway {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
    scope: scope::Scope,
    account: Arc<charge::Account>,
}

impl Gateway {
    /// Serve the run's gateway on the current runtime. `stdio`: the gateway's end of each
    /// stdio connector's socket, by connector (the supervisor started their jails).
    pub fn start(
        plan: GatewayPlan,
        fds: GatewayFds,
        deadline: Option<Instant>,
        log: Arc<dyn CallLog>,
        mut stdio: std::collections::BTreeMap<String, OwnedFd>,
    ) -> std::io::Result<Gateway> {
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let listener = std::net::TcpListener::from(fds.listener);
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let scope = scope::Scope::default();
        let runner = runner_client::RunnerClient::new(fds.runner, fds.commands, scope.clone());
        let mut connectors = std::collections::BTreeMap::new();
        // The GitHub connector works with the run's installation token when the run has
        // a GitHub route (the first owner's: GitHub's MCP server takes one token).
        let gh_token = plan
            .github
            .as_ref()
            .and_then(|g| g.tokens.first())
            .map(|(_, t)| ("Authorization".to_string(), t.clone()));
        for (name, up) in &plan.upstreams {
            let up = match (up, &gh_token) {
                (UpstreamPlan::Http { url, tls, .. }, Some(t))
                    if name == github::mcp::CONNECTOR =>
                {
                    &UpstreamPlan::Http {
                        url: url.clone(),
                        auth: Some(t.clone()),
                        tls: tls.clone(),
                        oauth: None,
                    }
                }
                _ => up,
            };
            let secret = match up {
                UpstreamPlan::Http { auth, .. } => auth.as_ref(),
                UpstreamPlan::Stdio { env, .. } => env.as_ref(),
            }
            .map(|(_, s)| s.expose());
            let upstream = match up {
                UpstreamPlan::Http {
                    url,
                    auth,
                    tls,
                    oauth,
                } => {
                    let auth = match auth {
                        Some((h, secret)) => Some(auth_header(h, secret)?),
                        None => None,
                    };
                    upstream::Upstream::Http(Box::new(upstream::HttpUpstream::new(
                        url.clone(),
                        auth,
                        tls.clone(),
                        oauth.clone(),
                    )?))
                }
                UpstreamPlan::Stdio { .. } => {
                    let sock = stdio.remove(name).ok_or_else(|| {
                        std::io::Error::other(format!("connector {name}: its jail was not started"))
                    })?;
                    let _entered = runtime.enter();
                    upstream::Upstream::Stdio(stdio_upstream::StdioUpstream::new(sock)?)
                }
            };
            connectors.insert(
                name.clone(),
                mcp::proxy::Connector::new(name.clone(), upstream, secret, log.clone()),
            );
        }
        let account = Arc::new(charge::Account::default());
        let secrets = run_secrets(&plan);
        let provider = plan
            .provider
            .clone()
            .map(|p| provider::Provider::new(p, account.clone(), secrets.clone()));
        let github = plan.github.clone().map(|g| {
            Arc::new(github::Github::new(
                g,
                plan.leases.clone(),
                log.clone(),
                secrets.clone(),
                scope.clone(),
            ))
        });
        let state = Arc::new(RunGateway {
            github,
            provider,
            egress: Arc::new(
                egress::Egress::new(plan.egress.clone(), scope.clone())
                    .with_asks(plan.asks.clone()),
            ),
            connectors,
            plan,
            deadline,
            runner,
            log,
            sessions: mcp::server::Sessions::default(),
            scope: scope.clone(),
        });
        let served = runtime.spawn(http::serve(listener, state, rx));
        Ok(Gateway {
            account,
            stop: Some(tx),
            served: Some(served),
            scope,
        })
    }

    /// Stop serving: no new connection, the upstream sessions ended (bounded), then every
    /// task of the run cancelled; returns once the last is gone.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(served) = self.served.take() {
            let _ = served.await;
        }
        self.scope.end().await;
    }
}

/// Every secret the run's gateway sends upstream, as an upstream could echo it: the
/// provider's key, each GitHub installation token (and git's Basic credential made of it),
/// each connector's credential, each checked egress destination's credential.
fn run_secrets(plan: &GatewayPlan) -> withhold::Secrets {
    let mut all: Vec<String> = Vec::new();
    if let Some(k) = plan.provider.as_ref().and_then(|p| p.key.as_ref()) {
        all.push(k.expose().to_string());
    }
    for (_, t) in plan.github.iter().flat_map(|g| &g.tokens) {
        all.push(t.expose().to_string());
        all.push(github::basic_credential(t));
    }
    for up in plan.upstreams.values() {
        let secret = match up {
            UpstreamPlan::Http { auth, .. } => auth.as_ref(),
            UpstreamPlan::Stdio { env, .. } => env.as_ref(),
        };
        if let Some((_, s)) = secret {
            all.push(s.expose().to_string());
        }
    }
    for t in plan.egress.terminated.values() {
        if let Some((_, s)) = &t.auth {
            all.push(s.expose().to_string());
        }
    }
    withhold::Secrets::new(all.iter().map(String::as_str))
}

/// The header carrying an HTTP connector's credential, marked sensitive.
pub(crate) fn auth_header(
    name: &str,
    secret: &crate::credentials::Secret,
) -> std::io::Result<(hyper::header::HeaderName, hyper::header::HeaderValue)> {
    let name = hyper::header::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| std::io::Error::other("bad credential header name"))?;
    let text = if name == hyper::header::AUTHORIZATION {
        format!("Bearer {}", secret.expose())
    } else {
        secret.expose().to_string()
    };
    let mut value = hyper::header::HeaderValue::from_str(&text)
        .map_err(|_| std::io::Error::other("a credential is not a valid header value"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

impl Gateway {
    /// The run's spend and model requests, kept up to date while it runs.
    pub fn account(&self) -> Arc<charge::Account> {
        self.account.clone()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(served) = self.served.take() {
            served.abort();
        }
        self.scope.cancel();
    }
}
