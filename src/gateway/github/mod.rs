//! The run's GitHub route: the GitHub API and git over smart HTTP, through the gateway.
//!
//! Clients in the jail use GitHub as they always do (`gh api repos/O/R`, `curl
//! https://api.github.com/...`, `git clone https://github.com/O/R`): their HTTPS_PROXY is
//! the gateway, and a CONNECT to `api.github.com:443` or `github.com:443` is not tunnelled
//! but answered here, TLS terminated with the run's own CA ([`tls`]). Their token is the
//! run token (`GH_TOKEN`, `GITHUB_TOKEN`; git sends it as Basic); the gateway checks it
//! against the run's lease, classifies the request ([`classify`]), decides each write
//! ([`crate::policy::github`]), counts it against `github_writes_per_run`, journals it
//! (`AIRLOCK_EVENT=github_write`) and forwards it to the configured `api_url`/`git_url`
//! with the real installation token, which never leaves airlockd: an API body as the
//! gateway read it (re-serialized), and GitHub's answer with the run's secrets withheld
//! ([`crate::gateway::withhold`]).

pub mod classify;
pub mod graphql;
pub mod land;
pub mod mcp;
pub mod mutate;
pub mod mutation;
pub mod nodes;
pub mod push;
pub mod scratch;
pub mod tls;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

use super::provider::ProviderUrl;
use super::withhold::{Secrets, Withheld, WithheldRecord};
use super::{CallLog, GwBody};
use crate::credentials::leases::{LeaseKind, LiveLeases};
use crate::credentials::Secret;
use crate::policy::github::{Action, GithubPolicy};
use classify::Kind;

/// The lease name of the run's GitHub token.
pub const LEASE_NAME: &str = "github";
/// Largest request body taken: an API call or a fetch's negotiation.
pub const MAX_BODY_BYTES: usize = 32 << 20;
/// Largest push taken (its pack is read whole before it is checked); one at a time.
pub const MAX_PUSH_BYTES: usize = 256 << 20;
/// Connections a run holds to its GitHub route at once: with the bodies above, what one
/// run can make airlockd hold stays bounded.
pub const MAX_CONNECTIONS: usize = 16;

/// What the GitHub route of one run enforces, decided (and its tokens minted) before the
/// run starts.
#[derive(Clone)]
pub struct GithubPlan {
    pub policy: Arc<GithubPolicy>,
    pub api: ProviderUrl,
    pub git: ProviderUrl,
    pub client_tls: Arc<rustls::ClientConfig>,
    /// Owner (lowercase) -> its installation token. Held by airlockd only.
    pub tokens: Vec<(String, Secret)>,
    pub server_tls: Arc<rustls::ServerConfig>,
    /// Writes made so far (for the closing ledger record).
    pub writes: Arc<AtomicU64>,
    /// Branches this run created (repo, branch), by a push or a tool that makes one: it
    /// may update those, fast-forward only; the closing ledger record keeps them.
    pub created: Arc<Mutex<Vec<(String, String)>>>,
    /// Who created a pull request's head branch, for the ratchet (`land: by-ratchet`).
    pub openers: Option<Arc<dyn land::Openers>>,
    /// The run's scratch repository for checking pushes (under its run directory).
    pub scratch: std::path::PathBuf,
}

impl std::fmt::Debug for GithubPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubPlan")
            .field("api", &self.api)
            .field("git", &self.git)
            .field(
                "owners",
                &self.tokens.iter().map(|t| &t.0).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// One GitHub write (or refused request) as the journal keeps it: no bodies, no tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubRecord {
    /// `owner/repo`, or `-`.
    pub repo: String,
    /// `issues.comment`, `push`, `unknown`, ...
    pub action: String,
    /// `POST /repos/o/r/issues`.
    pub endpoint: String,
    pub allow: bool,
    pub rule: String,
    pub reason: String,
    /// The run's writes after this one.
    pub writes: u64,
    pub budget: u64,
    /// GitHub's status, or the gateway's own for a refusal.
    pub status: u16,
    pub duration_ms: u64,
}

/// Which host a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Api,
    Git,
}

/// The GitHub route of one run's gateway.
pub struct Github {
    pub plan: GithubPlan,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    leases: Arc<LiveLeases>,
    log: Arc<dyn CallLog>,
    scratch: scratch::Scratch,
    conns: Arc<tokio::sync::Semaphore>,
    /// One push body read at a time.
    push_slot: tokio::sync::Mutex<()>,
    /// The run's secrets, withheld from what GitHub answers.
    secrets: Secrets,
    /// The run's tasks: intercepted connections end with the run.
    scope: super::scope::Scope,
    /// Node ids resolved for the run, and the pull requests it opened.
    nodes: nodes::Nodes,
}

impl Github {
    pub fn new(
        plan: GithubPlan,
        leases: Arc<LiveLeases>,
        log: Arc<dyn CallLog>,
        secrets: Secrets,
        scope: super::scope::Scope,
    ) -> Github {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(std::time::Duration::from_secs(10)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*plan.client_tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Github {
            client: Client::builder(TokioExecutor::new()).build(https),
            scratch: scratch::Scratch::new(plan.scratch.clone()),
            plan,
            leases,
            log,
            conns: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
            push_slot: tokio::sync::Mutex::new(()),
            secrets,
            scope,
            nodes: nodes::Nodes::default(),
        }
    }

    /// Whether this run created `branch` in `repo`.
    fn created_by_run(&self, repo: &str, branch: &str) -> bool {
        self.plan.created.lock().is_ok_and(|c| {
            c.iter()
                .any(|(r, b)| r.eq_ignore_ascii_case(repo) && b == branch)
        })
    }

    /// Remember a branch this run created.
    fn record_created(&self, repo: &str, branch: &str) {
        if let Ok(mut c) = self.plan.created.lock() {
            c.push((repo.to_string(), branch.to_string()));
        }
    }

    /// The push rules for a write that commits to a branch other than by a git push (a
    /// REST contents write, the MCP tools that commit files or make a branch): it names
    /// its branch (GitHub would take the default one), neither the default branch nor a
    /// ref that is not a branch, and, unless `making` it, a branch this run created.
    pub async fn branch_rules(
        &self,
        repo: &str,
        branch: Option<&str>,
        making: bool,
    ) -> Result<(), (&'static str, String)> {
        let Some(b) = branch.filter(|b| !b.is_empty()) else {
            return Err((
                "push: branch",
                "a write that commits names its branch (GitHub would take the default branch)"
                    .into(),
            ));
        };
        if b.starts_with("refs/") {
            return Err(("push: ref", "name the branch, not a ref".into()));
        }
        let default = default_branch(self, repo, self.token_for(Some(repo)).cloned())
            .await
            .ok_or((
                "push: default branch",
                "the repository's default branch could not be read, so no write goes on".into(),
            ))?;
        if b == default {
            return Err((
                "push: default branch",
                "writing to the default branch is refused".into(),
            ));
        }
        if !making && !self.created_by_run(repo, b) {
            return Err((
                "push: branch",
                "the run may update only branches it created".into(),
            ));
        }
        Ok(())
    }

    /// One `github_write` journal record.
    pub fn journal(
        &self,
        repo: &str,
        action: &str,
        endpoint: &str,
        (allow, rule, reason): (bool, &str, &str),
        status: u16,
        started: Instant,
    ) {
        self.log.github(GithubRecord {
            repo: repo.to_string(),
            action: action.to_string(),
            endpoint: endpoint.to_string(),
            allow,
            rule: rule.to_string(),
            reason: reason.to_string(),
            writes: self.plan.writes.load(Ordering::SeqCst),
            budget: self.plan.policy.budget,
            status,
            duration_ms: ms(started),
        })
    }

    /// Decide a write (every action of it must pass) and take one of the run's writes for
    /// it, atomically, so two writes at once cannot both take the last one. The deciding
    /// rule when allowed (the caller journals the outcome); a refusal is journaled here.
    pub fn authorize(
        &self,
        repo: &str,
        actions: &[Action],
        name: &str,
        endpoint: &str,
        started: Instant,
    ) -> Result<crate::policy::Decision, crate::policy::Decision> {
        let d = self.decide(repo, actions, name, endpoint, started)?;
        let budget = self.plan.policy.budget;
        let took = self
            .plan
            .writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < budget).then_some(n + 1)
            });
        if took.is_err() {
            let d = crate::policy::Decision::deny(
                "budget.github_writes_per_run",
                format!("the run has made all {budget} of its GitHub writes"),
            );
            return Err(self.refused(repo, name, endpoint, started, d));
        }
        Ok(d)
    }

    /// Journal a refused write; the refusal.
    fn refused(
        &self,
        repo: &str,
        name: &str,
        endpoint: &str,
        started: Instant,
        d: crate::policy::Decision,
    ) -> crate::policy::Decision {
        self.journal(
            repo,
            name,
            endpoint,
            (false, &d.rule, &d.reason),
            403,
            started,
        );
        d
    }

    /// The role's decision on a write, every action of it, taking nothing: a refusal is
    /// journaled here. (A write that commits to a branch is decided before its branch is
    /// looked at, so the role's own rules are what a refusal names first.)
    pub fn decide(
        &self,
        repo: &str,
        actions: &[Action],
        name: &str,
        endpoint: &str,
        started: Instant,
    ) -> Result<crate::policy::Decision, crate::policy::Decision> {
        let used = self.plan.writes.load(Ordering::SeqCst);
        let mut first = None;
        for a in actions {
            let d = self.plan.policy.decide(repo, a, used);
            if !d.allow {
                return Err(self.refused(repo, name, endpoint, started, d));
            }
            first.get_or_insert(d);
        }
        first.ok_or_else(|| crate::policy::Decision::deny("github", "a write with no action"))
    }

    fn token_for(&self, repo: Option<&str>) -> Option<&Secret> {
        let owner = repo
            .and_then(|r| r.split_once('/'))
            .map(|(o, _)| o.to_ascii_lowercase());
        owner
            .and_then(|o| self.plan.tokens.iter().find(|(t, _)| *t == o))
            .or_else(|| self.plan.tokens.first())
            .map(|(_, s)| s)
    }
}

/// The GitHub host a CONNECT names, if the run's GitHub route answers it.
pub fn intercepts(req: &Request<Incoming>) -> Option<Host> {
    if req.method() != Method::CONNECT {
        return None;
    }
    let auth = req.uri().authority()?;
    if auth.port_u16() != Some(443) {
        return None;
    }
    // `api.github.com.` is the same host: it must not slip past to the egress proxy.
    let host = auth.host().trim_end_matches('.').to_ascii_lowercase();
    if host == tls::API_HOST {
        Some(Host::Api)
    } else if host == tls::GIT_HOST {
        Some(Host::Git)
    } else {
        None
    }
}

/// Answer a CONNECT to a GitHub host: 200, then TLS with the run's certificate and HTTP
/// served by this route on the upgraded connection.
pub fn intercept(gh: Arc<Github>, host: Host, req: Request<Incoming>) -> Response<GwBody> {
    let Ok(slot) = gh.conns.clone().try_acquire_owned() else {
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "Airlock: the run holds too many connections to GitHub at once",
        );
    };
    let scope = gh.scope.clone();
    scope.spawn(async move {
        let _slot = slot;
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(gh.plan.server_tls.clone());
        let Ok(Ok(stream)) = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            acceptor.accept(TokioIo::new(upgraded)),
        )
        .await
        else {
            return;
        };
        let service = hyper::service::service_fn(move |req| {
            let gh = gh.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(&gh, host, req).await) }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .max_buf_size(64 << 10)
            .serve_connection(TokioIo::new(stream), service)
            .await;
    });
    Response::new(super::full(Bytes::new()))
}

/// A refusal in GitHub's format (git shows the status; gh and curl the message).
fn refusal(status: StatusCode, message: &str) -> Response<GwBody> {
    let body =
        json!({"message": message, "documentation_url": "airlock: see `airlockctl explain ROLE`"});
    let mut r = Response::new(super::full(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

/// The run token a client sent: `token X`, `Bearer X`, or Basic with X as the password.
fn presented(h: &hyper::HeaderMap) -> Option<String> {
    let v = h.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = v.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_string());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let raw = crate::credentials::github_app::b64std_decode(rest)?;
        let text = String::from_utf8(raw).ok()?;
        return text.split_once(':').map(|(_, p)| p.to_string());
    }
    None
}

/// Request headers not forwarded beyond the hop-by-hop ones ([`crate::gateway::headers`]):
/// the client's credential (the run token; the minted token replaces it), framing, and
/// encodings (an API body goes as read; answers come unencoded, to be checked).
const DROP_REQUEST: &[&str] = &[
    "host",
    "authorization",
    "cookie",
    "content-length",
    "accept-encoding",
];
/// Response headers not passed back beyond the hop-by-hop ones: the body is re-framed
/// (withholding a secret changes its length).
const DROP_RESPONSE: &[&str] = &["set-cookie", "content-length"];

/// What git sends as its Basic credential for an installation token (base64 of
/// `x-access-token:TOKEN`), without the scheme.
pub fn basic_credential(token: &Secret) -> String {
    crate::credentials::github_app::b64std(format!("x-access-token:{}", token.expose()).as_bytes())
}

fn ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Serve one request that came in on a GitHub host.
pub async fn handle(gh: &Github, host: Host, req: Request<Incoming>) -> Response<GwBody> {
    let started = Instant::now();
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let endpoint = super::clip(&format!("{method} {path}"), super::MAX_NAME_CHARS);
    let record = |repo: &str, action: &str, allow: bool, rule: &str, reason: &str, status: u16| {
        gh.journal(
            repo,
            action,
            &endpoint,
            (allow, rule, reason),
            status,
            started,
        )
    };
    let now = crate::clock::now_ms();
    if let Err(why) = presented(req.headers())
        .ok_or(crate::credentials::leases::TokenRefusal::Unknown)
        .and_then(|t| {
            gh.leases
                .check(LeaseKind::Github, LEASE_NAME, &t, now)
                .map(|_| ())
        })
    {
        let msg = format!("Airlock: {why}; the run's GitHub token is its run token (GH_TOKEN)");
        record("-", "token", false, "lease", &msg, 401);
        let mut r = refusal(StatusCode::UNAUTHORIZED, &msg);
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"Airlock\""),
        );
        return r;
    }
    let (mut parts, body) = req.into_parts();
    let pushing = host == Host::Git && parts.uri.path().ends_with("/git-receive-pack");
    let _push = match pushing {
        true => Some(gh.push_slot.lock().await),
        false => None,
    };
    let limit = if pushing {
        MAX_PUSH_BYTES
    } else {
        MAX_BODY_BYTES
    };
    let body = match Limited::new(body, limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Airlock: the request is too large",
            )
        }
    };
    let json_body = (!body.is_empty())
        .then(|| super::strict_json::parse(&body).ok())
        .flatten();
    // An API body goes on as the gateway read it (the value it classified, re-serialized),
    // read by GitHub as the JSON it is, whatever the client said.
    let mut body = match (&json_body, host) {
        (Some(v), Host::Api) => {
            // A GraphQL body goes on as its three keys the gateway read (a persisted
            // query's id or extensions would be a document it never saw).
            let kept;
            let v = match v.as_object() {
                Some(o) if path == "/graphql" => {
                    kept = Value::Object(
                        o.iter()
                            .filter(|(k, _)| {
                                matches!(k.as_str(), "query" | "variables" | "operationName")
                            })
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    );
                    &kept
                }
                _ => v,
            };
            let Ok(read) = serde_json::to_vec(v) else {
                return refusal(
                    StatusCode::BAD_REQUEST,
                    "Airlock: the request cannot be forwarded as it is",
                );
            };
            parts
                .headers
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Bytes::from(read)
        }
        _ => body,
    };
    let kind = match host {
        Host::Api => {
            let names: Vec<&str> = parts.headers.keys().map(|k| k.as_str()).collect();
            let extras = classify::Extras {
                query: query.as_deref(),
                headers: &names,
                json: json_body.as_ref(),
                has_body: !body.is_empty(),
                encoded: super::headers::encoded(&parts.headers),
            };
            classify::api(&method, &path, &extras)
        }
        Host::Git => classify::git(&method, &path, query.as_deref()),
    };
    let repo = match &kind {
        Kind::Read => repo_in_path(host, &path),
        Kind::Write { repo, .. } | Kind::Push { repo } => Some(repo.clone()),
        Kind::Mutation(m) => return mutate::handle(gh, &parts, body, m.clone(), started).await,
        Kind::Unknown(why) => {
            let msg = format!("Airlock: {why}");
            let repo = repo_in_path(host, &path).unwrap_or_else(|| "-".into());
            record(&repo, "unknown", false, "github: unknown write", &msg, 403);
            if host == Host::Api && path == "/graphql" {
                return mutate::refusal(&format!(
                    "Airlock refused by github: unknown write: {why}"
                ));
            }
            return refusal(StatusCode::FORBIDDEN, &msg);
        }
    };
    // What the merge gate found (the approver, the head), for the journal.
    let mut landed = String::new();
    let write = match &kind {
        Kind::Read => None,
        Kind::Write { repo, actions } => {
            // Every pull request is an issue too: a comment, a label or an assignee given
            // through an issue's number that is a pull request's is the pull request's
            // write (`pull_requests.comment`, `pull_requests.label`), as GraphQL names it.
            let remapped;
            let actions = match issue_sub(&method, &path) {
                None => actions,
                Some(n) => {
                    // The role's own rules first (writes.repos, the issue's action): GitHub
                    // is asked only for a write that could go on.
                    let name = write_name(actions);
                    if let Err(d) = gh.decide(repo, actions, &name, &endpoint, started) {
                        return refusal(
                            StatusCode::FORBIDDEN,
                            &format!("Airlock refused {name} by {}: {}", d.rule, d.reason),
                        );
                    }
                    let pull = is_pull(gh, repo, n).await;
                    match pull {
                        None => {
                            let msg = "GitHub could not be asked whether the issue is a pull request, so the write does not go on";
                            record(
                                repo,
                                &write_name(actions),
                                false,
                                "github: unknown write",
                                msg,
                                403,
                            );
                            return refusal(StatusCode::FORBIDDEN, &format!("Airlock: {msg}"));
                        }
                        Some(false) => actions,
                        Some(true) => {
                            remapped = actions
                                .iter()
                                .map(|a| match a {
                                    Action::Issue("comment") => Action::PullRequest("comment"),
                                    Action::Issue("label") => Action::PullRequest("label"),
                                    other => other.clone(),
                                })
                                .collect::<Vec<_>>();
                            &remapped
                        }
                    }
                }
            };
            // A contents write commits to a branch: the push rules hold for it too.
            if actions
                .iter()
                .any(|a| matches!(a, Action::Contents(Some(_))))
            {
                let name = write_name(actions);
                if let Err(d) = gh.decide(repo, actions, &name, &endpoint, started) {
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by {}: {}", d.rule, d.reason),
                    );
                }
                let branch = json_body
                    .as_ref()
                    .and_then(|b| b.get("branch"))
                    .and_then(serde_json::Value::as_str);
                if let Err((rule, msg)) = gh.branch_rules(repo, branch, false).await {
                    record(repo, &name, false, rule, &msg, 403);
                    return refusal(StatusCode::FORBIDDEN, &format!("Airlock: {msg}"));
                }
            }
            if actions.contains(&Action::PullRequest("merge")) {
                let name = write_name(actions);
                if let Err(d) = gh.decide(repo, actions, &name, &endpoint, started) {
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by {}: {}", d.rule, d.reason),
                    );
                }
                match land::gate(gh, repo, merge_number(&path)).await {
                    Ok((note, head)) => {
                        landed = format!("; {note}");
                        // GitHub merges the head the gate decided on (`sha`), or nothing.
                        let pinned = land::pin_head(json_body.as_ref(), "sha", &head)
                            .and_then(|v| serde_json::to_vec(&v).map_err(|e| e.to_string()));
                        match pinned {
                            Ok(b) => {
                                body = Bytes::from(b);
                                parts.headers.insert(
                                    CONTENT_TYPE,
                                    HeaderValue::from_static("application/json"),
                                );
                            }
                            Err(msg) => {
                                record(repo, &name, false, "land: head", &msg, 403);
                                return refusal(
                                    StatusCode::FORBIDDEN,
                                    &format!("Airlock refused {name} by land: head: {msg}"),
                                );
                            }
                        }
                    }
                    Err((rule, msg)) => {
                        record(repo, &name, false, rule, &msg, 403);
                        return refusal(
                            StatusCode::FORBIDDEN,
                            &format!("Airlock refused {name} by {rule}: {msg}"),
                        );
                    }
                }
            }
            // Opening a pull request by REST meets createPullRequest's rules: its head a
            // branch of this repository this run created, never the default branch.
            if opening_pull(&method, &path) {
                let name = write_name(actions);
                if let Err(d) = gh.decide(repo, actions, &name, &endpoint, started) {
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by {}: {}", d.rule, d.reason),
                    );
                }
                let head = json_body
                    .as_ref()
                    .and_then(|b| b.get("head"))
                    .and_then(serde_json::Value::as_str);
                if let Err((rule, msg)) = open_head_rules(gh, repo, head).await {
                    let msg = format!("head: {msg}");
                    record(repo, &name, false, rule, &msg, 403);
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by {rule}: {msg}"),
                    );
                }
            }
            if let Some(n) = pull_edit(&method, &path) {
                let name = write_name(actions);
                if let Err(d) = gh.decide(repo, actions, &name, &endpoint, started) {
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by {}: {}", d.rule, d.reason),
                    );
                }
                if !gh.nodes.opened_number(repo, n) {
                    let msg = "only a pull request this run opened may be edited";
                    record(repo, &name, false, "pull_requests.open", msg, 403);
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by pull_requests.open: {msg}"),
                    );
                }
            }
            // Every pull request is an issue too: GitHub takes `PATCH /repos/O/R/issues/N`
            // of a pull request's number as an edit of the pull request (its title, body,
            // state), which is allowed only on one this run opened, as `PATCH .../pulls/N`.
            if let Some(n) = issue_edit(&method, &path, actions) {
                let name = write_name(actions);
                if let Err(d) = gh.decide(repo, actions, &name, &endpoint, started) {
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by {}: {}", d.rule, d.reason),
                    );
                }
                if let Some(msg) = issue_is_anothers_pull(gh, repo, n).await {
                    record(repo, &name, false, "pull_requests.open", msg, 403);
                    return refusal(
                        StatusCode::FORBIDDEN,
                        &format!("Airlock refused {name} by pull_requests.open: {msg}"),
                    );
                }
            }
            Some((repo.clone(), actions.clone()))
        }
        Kind::Push { repo } => {
            let token = gh.token_for(Some(repo)).cloned();
            match push_check(gh, repo, &parts.headers, &body, token).await {
                Ok(()) => Some((repo.clone(), vec![Action::Contents(None)])),
                Err((rule, msg)) => {
                    record(repo, "push", false, rule, &msg, 403);
                    return push_refusal(&body, &format!("{rule}: {msg}"));
                }
            }
        }
        Kind::Unknown(_) | Kind::Mutation(_) => None,
    };
    if let Some((repo, actions)) = &write {
        let name = match &kind {
            Kind::Push { .. } => "push".to_string(),
            _ => write_name(actions),
        };
        let d = match gh.authorize(repo, actions, &name, &endpoint, started) {
            Ok(d) => d,
            Err(d) if matches!(kind, Kind::Push { .. }) => {
                return push_refusal(&body, &format!("{}: {}", d.rule, d.reason))
            }
            Err(d) => {
                return refusal(
                    StatusCode::FORBIDDEN,
                    &format!("Airlock refused {name} by {}: {}", d.rule, d.reason),
                )
            }
        };
        let resp = forward(gh, host, &parts, body, Some(repo.clone())).await;
        let resp = if opening_pull(&method, &path) {
            mutate::remember_pull(gh, repo, resp).await
        } else {
            resp
        };
        gh.journal(
            repo,
            &name,
            &endpoint,
            (true, &d.rule, &format!("{}{landed}", d.reason)),
            resp.status().as_u16(),
            started,
        );
        return resp;
    }
    forward(gh, host, &parts, body, repo).await
}

/// A refused push in git's words: receive-pack's report-status with every ref `ng`
/// (git prints the reason), or a bare 403 for a request that asked for no report.
fn push_refusal(body: &[u8], why: &str) -> Response<GwBody> {
    let Some(report) = push::refused_report(body, why) else {
        return refusal(StatusCode::FORBIDDEN, &format!("Airlock: {why}"));
    };
    let mut r = Response::new(super::full(Bytes::from(report)));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-git-receive-pack-result"),
    );
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    r
}

/// Whether a request opens a pull request (`POST /repos/O/R/pulls`).
fn opening_pull(method: &str, path: &str) -> bool {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    method == "POST" && matches!(seg.as_slice(), ["repos", _, _, "pulls"])
}

/// The number of the pull request a REST merge names (`PUT /repos/O/R/pulls/N/merge`).
fn merge_number(path: &str) -> Option<u64> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match seg.as_slice() {
        ["repos", _, _, "pulls", n, "merge"] => n.parse().ok(),
        _ => None,
    }
}

/// Whether a pull request opened in `repo` by REST or the MCP `create_pull_request` may have
/// `head` (`BRANCH` or `OWNER:BRANCH`): a branch of `repo` this run created, never the
/// default branch, as `createPullRequest`'s `headRefName`.
async fn open_head_rules(
    gh: &Github,
    repo: &str,
    head: Option<&str>,
) -> Result<(), (&'static str, String)> {
    let owner = repo.split('/').next().unwrap_or_default();
    let branch = head.map(|h| match h.split_once(':') {
        Some((o, b)) if o.eq_ignore_ascii_case(owner) => Some(b),
        Some(_) => None,
        None => Some(h),
    });
    match branch {
        None => Err((
            "push: branch",
            "a pull request's head names a branch of this repository".into(),
        )),
        Some(None) => Err((
            "push: branch",
            "a pull request's head is a branch of another owner's repository, which no run here created".into(),
        )),
        Some(Some(b)) => gh.branch_rules(repo, Some(b), false).await,
    }
}

/// Why an edit of issue `n` of `repo` (its title, body or state) may not go on: GitHub
/// says it is a pull request this run did not open (GitHub takes the edit as one of the
/// pull request), or GitHub could not be asked.
async fn issue_is_anothers_pull(gh: &Github, repo: &str, n: u64) -> Option<&'static str> {
    match is_pull(gh, repo, n).await {
        None => Some("GitHub could not be asked whether the issue is a pull request, so the edit does not go on"),
        Some(true) if !gh.nodes.opened_number(repo, n) => {
            Some("the issue is a pull request, and only a pull request this run opened may be edited")
        }
        Some(_) => None,
    }
}

/// Whether issue `n` of `repo` is a pull request, as GitHub answers the gateway (its issue
/// carries `pull_request`); none when GitHub could not be asked.
async fn is_pull(gh: &Github, repo: &str, n: u64) -> Option<bool> {
    let token = gh.token_for(Some(repo)).cloned();
    let v = get_json(gh, &format!("/repos/{repo}/issues/{n}"), token).await?;
    Some(v.get("pull_request").is_some_and(|p| !p.is_null()))
}

/// The issue number of a comment, label or assignee write through the issues API
/// (`POST .../issues/N/comments`, `POST|PUT|DELETE .../issues/N/labels[/NAME]`,
/// `POST|DELETE .../issues/N/assignees`).
fn issue_sub(method: &str, path: &str) -> Option<u64> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, seg.as_slice()) {
        ("POST", ["repos", _, _, "issues", n, "comments"])
        | ("POST" | "PUT", ["repos", _, _, "issues", n, "labels"])
        | ("DELETE", ["repos", _, _, "issues", n, "labels", ..])
        | ("POST" | "DELETE", ["repos", _, _, "issues", n, "assignees"]) => n.parse().ok(),
        _ => None,
    }
}

/// The number of the issue a request edits the title, body or state of (`PATCH
/// /repos/O/R/issues/N`), which may be a pull request's.
fn issue_edit(method: &str, path: &str, actions: &[Action]) -> Option<u64> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let edits = actions.iter().any(|a| {
        matches!(
            a,
            Action::Issue("close") | Action::Issue("reopen") | Action::Issue("edit_body")
        )
    });
    match (method, seg.as_slice()) {
        ("PATCH", ["repos", _, _, "issues", n]) if edits => n.parse().ok(),
        _ => None,
    }
}

/// The number of the pull request a request edits (`PATCH /repos/O/R/pulls/N`).
fn pull_edit(method: &str, path: &str) -> Option<u64> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, seg.as_slice()) {
        ("PATCH", ["repos", _, _, "pulls", n]) => n.parse().ok(),
        _ => None,
    }
}

/// A write's name for the journal: its actions joined.
pub fn write_name(actions: &[Action]) -> String {
    actions
        .iter()
        .map(Action::name)
        .collect::<Vec<_>>()
        .join("+")
}

/// `owner/repo` a read names, for picking its owner's token.
fn repo_in_path(host: Host, path: &str) -> Option<String> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (host, seg.as_slice()) {
        (Host::Api, ["repos", o, r, ..]) => Some(format!("{o}/{r}")),
        (Host::Git, [o, r, ..]) => Some(format!("{o}/{}", r.trim_end_matches(".git"))),
        _ => None,
    }
}

/// The request as checked, to the configured upstream with the real token.
async fn forward(
    gh: &Github,
    host: Host,
    parts: &hyper::http::request::Parts,
    body: Bytes,
    repo: Option<String>,
) -> Response<GwBody> {
    let base = match host {
        Host::Api => &gh.plan.api,
        Host::Git => &gh.plan.git,
    };
    let scheme = if base.https { "https" } else { "http" };
    let url = match parts.uri.query() {
        Some(q) => format!(
            "{scheme}://{}{}{}?{q}",
            base.authority,
            base.base_path,
            parts.uri.path()
        ),
        None => format!(
            "{scheme}://{}{}{}",
            base.authority,
            base.base_path,
            parts.uri.path()
        ),
    };
    let mut up = Request::builder().method(parts.method.clone()).uri(&url);
    if let Some(h) = up.headers_mut() {
        *h = crate::gateway::headers::forwarded(&parts.headers, DROP_REQUEST);
        h.insert(
            hyper::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        if host == Host::Api {
            // The body is the one read: never encoded.
            h.remove(hyper::header::CONTENT_ENCODING);
        }
        if let Some(token) = gh.token_for(repo.as_deref()) {
            let text = match host {
                Host::Api => format!("token {}", token.expose()),
                Host::Git => format!("Basic {}", basic_credential(token)),
            };
            if let Ok(mut v) = HeaderValue::from_str(&text) {
                v.set_sensitive(true);
                h.insert(AUTHORIZATION, v);
            }
        }
    }
    let endpoint = super::clip(
        &format!("{} {}", parts.method, parts.uri.path()),
        super::MAX_NAME_CHARS,
    );
    let Ok(up) = up.body(Full::new(body)) else {
        return refusal(
            StatusCode::BAD_REQUEST,
            "Airlock: the request cannot be forwarded as it is",
        );
    };
    let resp = match tokio::time::timeout(
        std::time::Duration::from_secs(300),
        gh.client.request(up),
    )
    .await
    {
        Ok(Ok(r)) => r,
        _ => {
            return refusal(
                StatusCode::BAD_GATEWAY,
                "Airlock: GitHub could not be reached or did not answer in time",
            )
        }
    };
    let (mut parts, body) = resp.into_parts();
    parts.headers = crate::gateway::headers::forwarded(&parts.headers, DROP_RESPONSE);
    if crate::gateway::headers::encoded(&parts.headers) {
        // Asked for identity: an encoded answer could hide what must be withheld.
        return refusal(
            StatusCode::BAD_GATEWAY,
            "Airlock: GitHub encoded its answer though asked not to; it was not passed on",
        );
    }
    let in_headers = gh.secrets.headers(&mut parts.headers) as u64;
    let route = match host {
        Host::Api => "github api",
        Host::Git => "github git",
    };
    let record = WithheldRecord {
        route: route.to_string(),
        endpoint,
        in_headers,
        in_body: 0,
    };
    let body = Withheld::new(body, &gh.secrets, record, gh.log.clone());
    Response::from_parts(parts, GwBody::new(body))
}

/// A push's ref updates, checked before its pack goes on: each by the push rules, then
/// by git (fast-forward, and the paths it changes, each decided as a contents write:
/// `.github/workflows/` needs `writes.workflows`, and the path's effective level must let
/// the role propose a change).
async fn push_check(
    gh: &Github,
    repo: &str,
    headers: &hyper::HeaderMap,
    body: &[u8],
    token: Option<Secret>,
) -> Result<(), (&'static str, String)> {
    if headers
        .get(hyper::header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity")
    {
        return Err((
            "push",
            "a compressed push body is not read; push without compression".into(),
        ));
    }
    let updates = push::ref_updates(body).map_err(|e| ("push", e.to_string()))?;
    let token = token.ok_or(("push", "no installation token for this owner".to_string()))?;
    let default = default_branch(gh, repo, Some(token.clone())).await.ok_or((
        "push: default branch",
        "the repository's default branch could not be read, so no push goes on".to_string(),
    ))?;
    let mut new_branches = Vec::new();
    let own = |branch: &str| gh.created_by_run(repo, branch);
    for u in &updates {
        let branch = push::check(u, &default, &own).map_err(|(r, m)| (r, m.to_string()))?;
        if u.is_create() {
            new_branches.push(branch.to_string());
        }
    }
    let base = &gh.plan.git;
    let scheme = if base.https { "https" } else { "http" };
    let upstream = format!("{scheme}://{}{}/{repo}.git", base.authority, base.base_path);
    let auth = format!("Basic {}", basic_credential(&token));
    let checked = gh
        .scratch
        .check(&upstream, &auth, push::pack_of(body), &updates, &default)
        .await
        .map_err(|e| ("push: verify", format!("{e}, so the push does not go on")))?;
    for (u, c) in updates.iter().zip(&checked) {
        if !c.fast_forward {
            return Err((
                "push: force",
                format!("{}: not a fast-forward; force pushes are refused", u.name),
            ));
        }
        for p in &c.paths {
            let d = gh
                .plan
                .policy
                .decide(repo, &Action::Contents(Some(p.clone())), 0);
            if !d.allow && d.rule != "budget.github_writes_per_run" {
                let rule: &'static str = if d.rule == "writes.workflows" {
                    "writes.workflows"
                } else {
                    "push: level"
                };
                return Err((rule, format!("{}: {}", super::clip(p, 200), d.reason)));
            }
        }
    }
    for b in new_branches {
        gh.record_created(repo, &b);
    }
    Ok(())
}

/// The repository's default branch, asked of GitHub with the run's token.
async fn default_branch(gh: &Github, repo: &str, token: Option<Secret>) -> Option<String> {
    let v = get_json(gh, &format!("/repos/{repo}"), token).await?;
    v.get("default_branch")?.as_str().map(str::to_string)
}

/// A REST read of the gateway's own (`path` under `api_url`), with `token`: its JSON.
async fn get_json(gh: &Github, path: &str, token: Option<Secret>) -> Option<Value> {
    own_request(gh, path, &token?, None, 4 << 20).await
}

/// A request of the gateway's own to GitHub's API (`path` under `api_url`) with `token`:
/// a GET, or a POST of `body` as JSON; the answer's JSON (at most `limit` bytes, each key
/// once) when it succeeded.
pub(crate) async fn own_request(
    gh: &Github,
    path: &str,
    token: &Secret,
    body: Option<&Value>,
    limit: usize,
) -> Option<Value> {
    let base = &gh.plan.api;
    let scheme = if base.https { "https" } else { "http" };
    let url = format!("{scheme}://{}{}{path}", base.authority, base.base_path);
    let mut auth = HeaderValue::from_str(&format!("token {}", token.expose())).ok()?;
    auth.set_sensitive(true);
    let req = Request::builder()
        .method(if body.is_some() { "POST" } else { "GET" })
        .uri(url)
        .header(AUTHORIZATION, auth)
        .header(hyper::header::USER_AGENT, "airlockd")
        .header(hyper::header::ACCEPT, "application/vnd.github+json");
    let req = match body {
        Some(b) => req
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(b).ok()?))),
        None => req.body(Full::new(Bytes::new())),
    }
    .ok()?;
    let resp = tokio::time::timeout(std::time::Duration::from_secs(10), gh.client.request(req))
        .await
        .ok()?
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let b = Limited::new(resp.into_body(), limit)
        .collect()
        .await
        .ok()?
        .to_bytes();
    crate::gateway::strict_json::parse(&b).ok()
}
