//! Egress: the run's only way to the network, as an HTTP proxy on its gateway
//! (`HTTPS_PROXY`/`HTTP_PROXY` point here). `CONNECT host:port` opens a TLS tunnel;
//! an absolute-form plain HTTP request (`GET http://host/path`) is forwarded. Each one:
//!
//! 1. the target is parsed ([`target`]) and decided by the role's grants
//!    ([`crate::policy::egress::decide`]);
//! 2. a name is resolved by Airlock itself ([`resolve`]), and every address it has is
//!    judged ([`crate::policy::egress::decide_addresses`]) against the refused ranges and
//!    the host's own addresses; an IP literal is judged the same way;
//! 3. the connection goes to an address that was checked (no second lookup);
//! 4. a tunnel's first bytes must be a TLS ClientHello whose server name is the CONNECT
//!    host ([`client_hello`]); then both ways are spliced ([`tunnel`]), counting bytes;
//! 5. the connection is a journal event (`AIRLOCK_EVENT=egress`) with host, port,
//!    decision, rule and bytes each way, refusals included.
//!
//! Redirects are the client's to follow: each goes through here again.

pub mod client_hello;
pub mod coding;
pub mod dns;
pub mod forward;
pub mod resolve;
// Where a request wants to go is parsed by a leaf the configuration shares.
pub use crate::authority as target;
pub mod terminate;
pub mod tunnel;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::http::{plain, Body};
use super::CallLog;
use crate::policy::egress::{decide_addresses, route, EgressGrants, Via};
use crate::policy::Decision;
use target::{Host, Target};

/// Outbound connections (tunnels and forwarded requests) one run may hold at once.
pub const MAX_TUNNELS: usize = 32;
/// A tunnel with no byte either way for this long is closed.
pub const IDLE: Duration = Duration::from_secs(300);
/// Time for the TCP connection to the destination (all its checked addresses together).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for the client's ClientHello after the tunnel is open.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// What one run's egress may reach, decided before it starts.
#[derive(Debug, Clone)]
pub struct EgressPlan {
    pub grants: EgressGrants,
    /// Where names are resolved (airlockd's `egress.nameservers`, else /etc/resolv.conf).
    pub nameservers: Vec<SocketAddr>,
    /// The host's own addresses, read for every connection (they may change while a run
    /// goes on). An error refuses the connection.
    pub host_addrs: fn() -> std::io::Result<Vec<IpAddr>>,
    /// Each terminated destination granted ([`crate::policy::egress::destinations`]), by
    /// name: its TLS both ways and its credential.
    pub terminated: std::collections::BTreeMap<String, Arc<Terminated>>,
}

/// A destination whose TLS the gateway terminates, to check each request and add its
/// credential.
pub struct Terminated {
    /// What the run's client sees: a leaf for the destination's hosts from a CA made for
    /// this run and this destination, name-constrained to those hosts.
    pub server_tls: Arc<rustls::ServerConfig>,
    /// How airlockd verifies the destination itself (the system store, or its `ca_file`).
    pub client_tls: Arc<rustls::ClientConfig>,
    /// The header and the secret added to every request. Held by airlockd only.
    pub auth: Option<(String, crate::credentials::Secret)>,
    /// The credential in every spelling an answer could echo it in: withheld from each
    /// answer's headers and body ([`forward::answered`]).
    pub secrets: crate::gateway::withhold::Secrets,
    /// `passthrough_body`: the answers' bodies go on unscanned (and undecoded).
    pub passthrough_body: bool,
}

impl std::fmt::Debug for Terminated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminated")
            .field("header", &self.auth.as_ref().map(|a| &a.0))
            .finish_non_exhaustive()
    }
}

fn unknown_host_addrs() -> std::io::Result<Vec<IpAddr>> {
    Err(std::io::Error::other("the host's addresses were not given"))
}

impl Default for EgressPlan {
    /// Nothing but the default ports, no nameserver, and no way to know the host's
    /// addresses: every destination refused.
    fn default() -> Self {
        EgressPlan {
            grants: EgressGrants::default(),
            nameservers: Vec::new(),
            host_addrs: unknown_host_addrs,
            terminated: std::collections::BTreeMap::new(),
        }
    }
}

/// One run's egress: its plan and the bound on its connections.
pub struct Egress {
    pub plan: EgressPlan,
    slots: Arc<Semaphore>,
    /// The run's DNS answers, for their TTL.
    dns: resolve::Cache,
    /// The run's tasks: tunnels and forwarded connections end with the run.
    scope: super::scope::Scope,
    /// Where a destination no grant names is put to a person (the host's `asks`).
    asks: Option<Arc<dyn super::asks::AskDesk>>,
}

impl Egress {
    pub fn new(plan: EgressPlan, scope: super::scope::Scope) -> Egress {
        Egress {
            plan,
            slots: Arc::new(Semaphore::new(MAX_TUNNELS)),
            dns: resolve::Cache::default(),
            scope,
            asks: None,
        }
    }

    /// The run's ask desk, when the host's `asks` names its role.
    pub fn with_asks(mut self, asks: Option<Arc<dyn super::asks::AskDesk>>) -> Egress {
        self.asks = asks;
        self
    }
}

/// One egress connection, as the journal keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressRecord {
    /// `CONNECT`, or the forwarded request's method.
    pub method: String,
    /// The target's host as the run gave it (normalized), or `-` when it was unreadable.
    pub host: String,
    pub port: u16,
    /// A request on a terminated destination: its path, without the query. Empty for a
    /// tunnel or a forwarded request.
    pub path: String,
    /// The address dialled, once there is one.
    pub addr: Option<SocketAddr>,
    /// Whether the connection went through: refused by policy, by an address check, by
    /// the TLS check, or unreachable are all `false`.
    pub allow: bool,
    pub rule: String,
    pub reason: String,
    /// The HTTP status the run got (200 for an opened tunnel).
    pub status: u16,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// A record that goes to the journal when dropped: at the connection's end, however it
/// ends (the run's end cancels its tunnels, and their records are still written).
pub(crate) struct Journaled {
    rec: EgressRecord,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
    started: Instant,
    log: Arc<dyn CallLog>,
    /// Set once a terminated destination's requests take over the record-keeping.
    handed_over: bool,
}

impl Journaled {
    fn new(method: &str, log: Arc<dyn CallLog>) -> Journaled {
        Journaled {
            rec: EgressRecord {
                method: super::clip(method, 16),
                host: "-".into(),
                ..EgressRecord::default()
            },
            up: Arc::default(),
            down: Arc::default(),
            started: Instant::now(),
            log,
            handed_over: false,
        }
    }

    fn target(&mut self, t: &Target) {
        self.rec.host = t.host.text();
        self.rec.port = t.port;
    }

    fn decided(&mut self, d: &Decision) {
        self.rec.allow = d.allow;
        self.rec.rule = d.rule.clone();
        self.rec.reason = d.reason.clone();
    }

    /// Refused after the tunnel was answered: the record says why.
    fn closed(&mut self, rule: &str, reason: impl Into<String>) {
        self.rec.allow = false;
        self.rec.rule = rule.to_string();
        self.rec.reason = reason.into();
    }

    /// Refused (or failed): the answer the run gets, with the rule in its text.
    fn refuse(&mut self, status: StatusCode, rule: &str, reason: &str) -> Response<Body> {
        self.rec.allow = false;
        self.rec.rule = rule.to_string();
        self.rec.reason = reason.to_string();
        self.rec.status = status.as_u16();
        plain(
            status,
            &format!("Airlock egress refused by {rule}: {reason}\n"),
        )
    }
}

impl Drop for Journaled {
    fn drop(&mut self) {
        if self.handed_over {
            return;
        }
        let mut rec = std::mem::take(&mut self.rec);
        rec.bytes_up = self.up.load(Ordering::Relaxed);
        rec.bytes_down = self.down.load(Ordering::Relaxed);
        rec.duration_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.log.egress(rec);
    }
}

/// Is this request for the proxy (rather than the gateway's own endpoints)?
pub fn is_proxy_request(req: &Request<Incoming>) -> bool {
    req.method() == Method::CONNECT || req.uri().scheme().is_some()
}

/// Serve one proxy request.
pub async fn handle(
    eg: &Arc<Egress>,
    log: &Arc<dyn CallLog>,
    req: Request<Incoming>,
) -> Response<Body> {
    let mut j = Journaled::new(req.method().as_str(), log.clone());
    if req.method() == Method::CONNECT {
        connect(eg, j, req).await
    } else {
        match req.uri().scheme_str() {
            Some("http") => forward::forward(eg, j, req).await,
            _ => j.refuse(
                StatusCode::BAD_REQUEST,
                "egress: scheme",
                "only http:// is forwarded; for https, CONNECT host:443 (HTTPS_PROXY does so)",
            ),
        }
    }
}

/// A checked, connected destination and the slot it holds.
pub(crate) struct Opened {
    pub stream: TcpStream,
    pub slot: OwnedSemaphorePermit,
    /// The granted destination whose TLS the gateway terminates, when it is one.
    pub terminated: Option<String>,
}

/// Steps 1-3: decide, resolve, check every address, connect to a checked one.
pub(crate) async fn open(
    eg: &Egress,
    j: &mut Journaled,
    t: &Target,
    via: Via,
) -> Result<Opened, Response<Body>> {
    j.target(t);
    let host = t.host.text();
    let (mut d, dest) = route(&eg.plan.grants, &host, t.port, via);
    if !d.allow && eg.asks.is_some() {
        // Only "no grant" is put to a person; the addresses are checked after an allow.
        match super::asks::egress(eg.asks.clone(), j.log.as_ref(), &host, t.port, &d).await {
            Ok(by) => {
                d = Decision::allow(
                    format!("ask: allowed by {by}"),
                    "a person allowed this destination",
                )
            }
            Err(why) => {
                d.reason = why
                    .trim_start_matches(&format!("refused by {}: ", d.rule))
                    .to_string()
            }
        }
    }
    j.decided(&d);
    if !d.allow {
        return Err(j.refuse(StatusCode::FORBIDDEN, &d.rule, &d.reason));
    }
    let terminated = dest.filter(|g| g.terminated).map(|g| g.name.clone());
    let Ok(slot) = eg.slots.clone().try_acquire_owned() else {
        return Err(j.refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "egress: connection limit",
            &format!("this run has {MAX_TUNNELS} egress connections open already"),
        ));
    };
    let stream = dial(eg, j, t).await?;
    Ok(Opened {
        stream,
        slot,
        terminated,
    })
}

/// Steps 2-3 for a target already decided: resolve, check every address, connect to a
/// checked one (the address goes on the record).
pub(crate) async fn dial(
    eg: &Egress,
    j: &mut Journaled,
    t: &Target,
) -> Result<TcpStream, Response<Body>> {
    let addrs = match &t.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(n) => match eg.dns.resolve(&eg.plan.nameservers, n).await {
            Ok(a) => a,
            Err(e) => {
                return Err(j.refuse(
                    StatusCode::BAD_GATEWAY,
                    "egress: dns",
                    &format!("cannot resolve the host: {e}"),
                ))
            }
        },
    };
    let own = match (eg.plan.host_addrs)() {
        Ok(o) => o,
        Err(_) => {
            return Err(j.refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "egress: host addresses",
                "the host's own addresses cannot be read, so no destination can be checked",
            ))
        }
    };
    let checked = decide_addresses(&addrs, &own);
    if !checked.allow {
        return Err(j.refuse(StatusCode::FORBIDDEN, &checked.rule, &checked.reason));
    }
    // Dial what was checked, in the resolver's order, within one time budget.
    let dial = async {
        let mut last = None;
        for ip in &addrs {
            let sa = SocketAddr::new(*ip, t.port);
            match TcpStream::connect(sa).await {
                Ok(s) => return Ok((s, sa)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no address")))
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, dial).await {
        Ok(Ok((stream, sa))) => {
            let _ = stream.set_nodelay(true);
            j.rec.addr = Some(sa);
            Ok(stream)
        }
        Ok(Err(e)) => Err(j.refuse(
            StatusCode::BAD_GATEWAY,
            "egress: unreachable",
            &format!("cannot connect: {}", e.kind()),
        )),
        Err(_) => Err(j.refuse(
            StatusCode::BAD_GATEWAY,
            "egress: unreachable",
            "no answer within 10 s",
        )),
    }
}

/// A TLS alert (fatal, unrecognized_name): what the client's TLS stack reports when the
/// tunnel is closed for its server name.
const ALERT_UNRECOGNIZED_NAME: [u8; 7] = [21, 3, 3, 0, 2, 2, 112];

async fn connect(eg: &Arc<Egress>, mut j: Journaled, mut req: Request<Incoming>) -> Response<Body> {
    let authority = req.uri().authority().map(|a| a.as_str().to_string());
    let Some(t) = authority
        .as_deref()
        .and_then(|a| target::parse_authority(a, None))
    else {
        return j.refuse(
            StatusCode::BAD_REQUEST,
            "egress: target",
            "CONNECT needs HOST:PORT, HOST a DNS name or an IP address",
        );
    };
    let opened = match open(eg, &mut j, &t, Via::Connect).await {
        Ok(o) => o,
        Err(resp) => return resp,
    };
    let upgrade = hyper::upgrade::on(&mut req);
    j.rec.status = 200;
    if let Some(name) = opened.terminated.clone() {
        let eg2 = eg.clone();
        eg.scope
            .spawn(terminate::serve(eg2, j, t, opened, upgrade, name));
        return Response::new(super::http::empty());
    }
    eg.scope.spawn(async move {
        let Opened { stream, slot, .. } = opened;
        let Ok(upgraded) = upgrade.await else {
            let rule = j.rec.rule.clone();
            j.closed(&rule, "the client went away before the tunnel opened");
            return;
        };
        let mut client = hyper_util::rt::TokioIo::new(upgraded);
        let hello = read_hello(&mut client).await;
        let (first, name) = match hello {
            Ok(x) => x,
            Err(why) => {
                j.closed("egress: tls", format!("not a TLS ClientHello: {why}"));
                return;
            }
        };
        if !target::server_name_matches(&t.host, name.as_deref()) {
            let why = match (&t.host, &name) {
                (Host::Ip(_), Some(_)) => "a tunnel to an IP address must carry no TLS server name",
                (_, None) => "the ClientHello names no server",
                _ => "the TLS server name is not the CONNECT host",
            };
            j.closed("egress: tls server name", why);
            let _ = client.write_all(&ALERT_UNRECOGNIZED_NAME).await;
            let _ = client.shutdown().await;
            return;
        }
        let mut server = stream;
        if server.write_all(&first).await.is_err() {
            return;
        }
        j.up.fetch_add(first.len() as u64, Ordering::Relaxed);
        let (up, down) = (j.up.clone(), j.down.clone());
        tunnel::splice(client, server, &up, &down, IDLE).await;
        drop(slot);
    });
    Response::new(super::http::empty())
}

/// The client's bytes up to the end of its ClientHello, and its server name.
async fn read_hello<R: tokio::io::AsyncRead + Unpin>(
    client: &mut R,
) -> Result<(Vec<u8>, Option<String>), &'static str> {
    let read = async {
        let mut buf = Vec::with_capacity(2048);
        let mut chunk = [0u8; 4096];
        loop {
            match client_hello::parse(&buf) {
                client_hello::Parse::Hello { server_name } => return Ok((buf, server_name)),
                client_hello::Parse::Refused(why) => return Err(why),
                client_hello::Parse::NeedMore => {}
            }
            let room = client_hello::MAX_HELLO_BYTES
                .saturating_sub(buf.len())
                .min(chunk.len());
            match client.read(&mut chunk[..room]).await {
                Ok(0) | Err(_) => return Err("the client closed the tunnel first"),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    match tokio::time::timeout(HELLO_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err("no ClientHello within 10 s"),
    }
}
