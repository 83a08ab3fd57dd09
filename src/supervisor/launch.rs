//! Preparing a launch, for airlockd and for `--standalone` alike: role + instance +
//! workspace -> checked run spec, run directory and deadline. Running it is
//! [`crate::supervisor::process`]; recording it is the daemon's or
//! [`crate::supervisor::standalone`]'s job.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::unistd::{chown, Gid, Uid};

use crate::config::{Config, UpstreamConf};
use crate::credentials::github_app;
use crate::credentials::leases::{self, LeaseKind, Want};
use crate::gateway::provider::{api_of, ProviderPlan, ProviderUrl};
use crate::gateway::{GatewayPlan, UpstreamPlan};
use crate::policy::agent_config::{provider_env, provider_name, GatewayEndpoints};
use crate::policy::classes::canonicalize;
use crate::policy::prices::budget_micro_usd;
use crate::policy::{Policies, RolePolicy};
use crate::role::LoadedRole;
use crate::sandbox::env::gateway_url;
use crate::sandbox::helper::Ahead;
use crate::sandbox::spec::{valid_name, RunSpec};
use crate::supervisor::agent_files::agent_files;
use crate::supervisor::disk::RunDisks;
use crate::supervisor::image_pool::ImagePool;
use crate::supervisor::instances::{self, Instance};
use crate::supervisor::mount_hold::KeptHomes;
use crate::supervisor::workspace;
use crate::supervisor::{connector, exec_set, github_plan};

pub use crate::supervisor::process::pids_of_uid;

/// Time between SIGTERM and SIGKILL when a standalone run hits its deadline (airlockd uses
/// its config's `grace_seconds`).
pub const GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Default)]
pub struct LaunchRequest {
    pub role: String,
    pub instance: String,
    pub workspace: Option<PathBuf>,
    pub max_seconds: Option<u64>,
    /// Replaces the role's agent command when not empty.
    pub command: Vec<String>,
    /// `--tty`: the agent runs on a pseudo-terminal (the role's own agent in its
    /// interactive form).
    pub tty: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Bad input: nothing was started.
    #[error("{0}")]
    Refused(String),
    /// The jail could not be built (names the step); the agent never ran.
    #[error("jail setup failed: {0}")]
    Jail(String),
    #[error("{0}")]
    Io(String),
}

/// The role a launch runs (as the catalog resolved it) and the policies in force with it.
#[derive(Debug, Clone)]
pub struct Resolved<'a> {
    pub role: &'a LoadedRole,
    pub policies: &'a Policies,
    /// The role's decisions, compiled (airlockd compiles each role once per load).
    pub policy: std::sync::Arc<RolePolicy>,
}

impl<'a> Resolved<'a> {
    /// A role and the host's policies, with the role's decisions compiled now.
    pub fn compile(role: &'a LoadedRole, policies: &'a Policies) -> Resolved<'a> {
        Resolved {
            role,
            policies,
            policy: std::sync::Arc::new(RolePolicy::compile(&role.role, policies)),
        }
    }
}

/// Everything decided before anything starts.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub spec: RunSpec,
    /// What the run's gateway enforces.
    pub gateway: GatewayPlan,
    pub run_dir: PathBuf,
    pub deadline: Option<Duration>,
    /// The run's credential leases, issued in memory; the caller records them once the
    /// run's opening record is durable ([`crate::supervisor::lease_records`]).
    pub leases: Vec<crate::credentials::leases::Lease>,
    /// The run's bounded filesystems, held until the run is over (dropped: released).
    pub disks: std::sync::Arc<RunDisks>,
    /// The pin on the run's image (`environments`), held until the run is over.
    pub image_pin: Option<std::sync::Arc<std::fs::File>>,
}

fn refused(msg: impl Into<String>) -> LaunchError {
    LaunchError::Refused(msg.into())
}

fn io_err(what: &str, path: &Path, e: impl std::fmt::Display) -> LaunchError {
    LaunchError::Io(format!("{}: {what}: {e}", path.display()))
}

/// A fresh run id: `r-YYYYMMDD-xxxxxxxx` (UTC date, 32 random bits).
pub fn new_run_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = crate::calendar::civil_from_days((secs / 86_400) as i64);
    let mut rnd = [0u8; 4];
    // SAFETY: getrandom writes at most rnd.len() bytes into rnd.
    let n = unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) };
    if n != rnd.len() as isize {
        // Fall back to time and pid: still unique enough for a run directory, which is
        // created with create_dir (never reused).
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        rnd = (t ^ std::process::id()).to_le_bytes();
    }
    format!("r-{y:04}{m:02}{d:02}-{:08x}", u32::from_le_bytes(rnd))
}

/// The run's deadline: the role's minutes_per_run, narrowed (never widened) by --max-seconds.
pub fn deadline(role_secs: Option<u64>, max_seconds: Option<u64>) -> Option<Duration> {
    let secs = match (role_secs, max_seconds) {
        (Some(r), Some(m)) => Some(r.min(m)),
        (r, m) => r.or(m),
    };
    secs.map(Duration::from_secs)
}

/// The helper enforces the deadline too, a little after the supervisor would, so a run
/// whose supervisor is stuck still ends; the supervisor's own watcher records the outcome.
fn helper_limits(cfg: &Config, deadline: Option<Duration>) -> crate::sandbox::spec::Limits {
    const MARGIN_MS: u64 = 5_000;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let grace_ms = cfg.grace_seconds.saturating_mul(1000);
    let mut limits = cfg.limits.clone();
    limits.grace_ms = Some(grace_ms);
    limits.deadline_ms = deadline.map(|d| {
        ms(d)
            .saturating_add(grace_ms)
            .saturating_add(MARGIN_MS)
            .min(MAX_DEADLINE_MS)
    });
    limits
}

/// The longest deadline the jail helper takes (its clock arithmetic stays below 2^40 ms).
const MAX_DEADLINE_MS: u64 = (1 << 40) - 1;

/// The secret a config entry at `at` names in `credentials`, read now, if it names one.
fn read_credential(
    cfg: &Config,
    name: Option<&str>,
    at: &str,
) -> Result<Option<crate::credentials::Secret>, LaunchError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let src = cfg
        .credentials
        .get(name)
        .ok_or_else(|| refused(format!("{at}.credential: no such entry in credentials")))?;
    crate::credentials::read(name, src)
        .map(Some)
        .map_err(|e| refused(format!("{}: {e}", cfg.file.display())))
}

/// The upstreams of the role's gateway connectors that this host configures, with their
/// credentials read now (held in memory, sent only upstream); a stdio connector's jail is
/// prepared beside the run's (its own uid, home and workspace).
fn upstream_plans<'a>(
    cfg: &Config,
    run: &RunSpec,
    role: &crate::role::Role,
    connectors: impl Iterator<Item = &'a String>,
) -> Result<std::collections::BTreeMap<String, UpstreamPlan>, LaunchError> {
    let mut out = std::collections::BTreeMap::new();
    for name in connectors {
        let direct = role.run.as_ref().and_then(|r| match r.mcp.get(name) {
            Some(crate::role::McpConnector::Direct { url, header }) => Some((url, header)),
            _ => None,
        });
        if let Some((url, header)) = direct {
            out.insert(name.clone(), direct_plan(cfg, role, name, url, header)?);
            continue;
        }
        let Some(c) = cfg.mcp_connectors.get(name) else {
            continue;
        };
        let where_ = || format!("{}: mcp_connectors.{name}", cfg.file.display());
        let secret = read_credential(cfg, c.credential.as_deref(), &where_())?;
        let plan = match &c.upstream {
            UpstreamConf::Url {
                url,
                header,
                ca_file,
            } => {
                let url = crate::urls::parse_http_url(url)
                    .ok_or_else(|| refused(format!("{}.url: not an http(s) URL", where_())))?;
                let tls = if url.https {
                    Some(
                        crate::gateway::provider::tls_config(ca_file.as_deref())
                            .map_err(|e| refused(format!("{}.ca_file: {e}", where_())))?,
                    )
                } else {
                    None
                };
                let oauth = match &c.oauth {
                    Some(o) => Some(oauth_source(cfg, name, &url, o, ca_file.as_deref())?),
                    None => None,
                };
                let auth = secret.map(|s| (header.clone(), s));
                UpstreamPlan::Http {
                    url,
                    auth,
                    tls,
                    oauth,
                }
            }
            UpstreamConf::Command {
                argv,
                uid,
                credential_env,
                env,
            } => {
                let spec =
                    connector::prepare(cfg, run, name, argv, *uid, env).map_err(|e| match e {
                        LaunchError::Refused(m) => refused(format!("{}: {m}", where_())),
                        e => e,
                    })?;
                let env = credential_env.clone().zip(secret);
                UpstreamPlan::Stdio {
                    spec: Box::new(spec),
                    env,
                }
            }
        };
        out.insert(name.clone(), plan);
    }
    Ok(out)
}

/// The upstream of a role's direct connector (`run.mcp.<name>: {url, header}`): the role's
/// URL (https, with the system's CA store, or plain http to this host), its bearer the
/// credentials entry `ROLE_<ROLE>_<CONNECTOR>_TOKEN`, which the launch needs.
fn direct_plan(
    cfg: &Config,
    role: &crate::role::Role,
    name: &str,
    url: &str,
    header: &Option<String>,
) -> Result<UpstreamPlan, LaunchError> {
    let at = format!("run.mcp.{name}");
    let parsed = crate::urls::parse_http_url(url)
        .filter(|u| u.https || u.is_loopback())
        .ok_or_else(|| {
            refused(format!(
                "{at}.url: must be https://HOST[:PORT]/PATH (or http:// to this host), without user, query or fragment"
            ))
        })?;
    let cred = crate::policy::hire::direct_credential(&role.role, name);
    let src = cfg.credentials.get(&cred).ok_or_else(|| {
        refused(format!(
            "{}: credentials.{cred}: no such entry; the role's direct connector {at} takes its bearer from it",
            cfg.file.display()
        ))
    })?;
    let secret = crate::credentials::read(&cred, src)
        .map_err(|e| refused(format!("{}: {e}", cfg.file.display())))?;
    let header = header.clone().unwrap_or_else(|| "Authorization".into());
    if hyper::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
        return Err(refused(format!(
            "{at}.header: must be an HTTP header name (letters, digits and -)"
        )));
    }
    let tls = if parsed.https {
        Some(
            crate::gateway::provider::tls_config(None)
                .map_err(|e| refused(format!("{at}.url: {e}")))?,
        )
    } else {
        None
    };
    Ok(UpstreamPlan::Http {
        url: parsed,
        auth: Some((header, secret)),
        tls,
        oauth: None,
    })
}

/// The shared access token source of an OAuth connector, its client secret read now.
fn oauth_source(
    cfg: &Config,
    name: &str,
    url: &crate::urls::HttpUrl,
    o: &crate::config::OAuthConf,
    ca_file: Option<&Path>,
) -> Result<std::sync::Arc<crate::gateway::mcp::oauth::TokenSource>, LaunchError> {
    let at = format!("{}: mcp_connectors.{name}.oauth", cfg.file.display());
    let client_secret = match &o.client_secret {
        Some(n) => {
            let src = cfg.credentials.get(n).ok_or_else(|| {
                refused(format!("{at}.client_secret: no such entry in credentials"))
            })?;
            Some(
                crate::credentials::read(n, src)
                    .map_err(|e| refused(format!("{}: {e}", cfg.file.display())))?,
            )
        }
        None => None,
    };
    let tls =
        crate::gateway::provider::tls_config(ca_file).map_err(|e| refused(format!("{at}: {e}")))?;
    use crate::gateway::mcp::oauth::GrantPlan;
    let grant = match o.grant {
        crate::config::OAuthGrant::ClientCredentials => GrantPlan::ClientCredentials,
        crate::config::OAuthGrant::AuthorizationCode => GrantPlan::AuthorizationCode {
            store: crate::credentials::oauth_grant::path(&cfg.state_dir, name),
            redirect_uri: o.redirect_uri.clone(),
        },
    };
    let issuer = match &o.issuer {
        Some(u) => Some(crate::urls::endpoint_url(u).ok_or_else(|| {
            refused(format!(
                "{at}.issuer: not an https URL (nor http on this host)"
            ))
        })?),
        None => None,
    };
    let plan = crate::gateway::mcp::oauth::OAuthPlan {
        issuer,
        client_id: o.client_id.clone(),
        client_secret,
        grant,
        scopes: o.scopes.clone(),
        tls,
    };
    Ok(crate::gateway::mcp::oauth::shared(name, url, plan))
}

/// The shared token source of OAuth connector `name` (for `airlockctl connector`).
pub fn connector_oauth(
    cfg: &Config,
    name: &str,
) -> Result<std::sync::Arc<crate::gateway::mcp::oauth::TokenSource>, String> {
    let c = cfg.mcp_connectors.get(name).ok_or_else(|| {
        format!(
            "{}: mcp_connectors has no connector {name}",
            cfg.file.display()
        )
    })?;
    let (UpstreamConf::Url { url, ca_file, .. }, Some(o)) = (&c.upstream, &c.oauth) else {
        return Err(format!(
            "{}: mcp_connectors.{name} has no oauth: its credential is static",
            cfg.file.display()
        ));
    };
    let url = crate::urls::parse_http_url(url).ok_or_else(|| {
        format!(
            "{}: mcp_connectors.{name}.url: not an http(s) URL",
            cfg.file.display()
        )
    })?;
    oauth_source(cfg, name, &url, o, ca_file.as_deref()).map_err(|e| e.to_string())
}

/// The agent program of the role's provider, as airlockd's config names it (`agents`),
/// refused with how to install it when it is not there.
fn agent_program(cfg: &Config, role: &crate::role::Role) -> Result<Option<String>, LaunchError> {
    let Some(run) = &role.run else {
        return Ok(None);
    };
    let name = provider_name(run.provider);
    let Some(path) = cfg.agents.get(name) else {
        return Ok(None);
    };
    if !path.is_file() {
        return Err(refused(format!(
            "agent program for run.provider {name}: {} is not installed; install the pinned agents with scripts/install-agents.sh (as root), or name another program in airlockd's config (agents.{name})",
            path.display()
        )));
    }
    Ok(Some(path.to_string_lossy().into_owned()))
}

/// The provider route of a run of `role`: its `run.provider` as this host configures it
/// (`providers`), with the key read now and the model's price from `prices.yaml`. `None`
/// when the role runs no model or the host configures no such provider; a launch of the
/// role's own agent is then refused (it could not think), a `-- CMD` launch goes on
/// without the route.
fn provider_plan(
    cfg: &Config,
    role: &crate::role::Role,
    policies: &Policies,
    own_agent: bool,
) -> Result<Option<ProviderPlan>, LaunchError> {
    let Some(run) = role
        .run
        .as_ref()
        .filter(|_| role.kind != crate::role::Kind::Workflow)
    else {
        return Ok(None);
    };
    let name = provider_name(run.provider);
    let Some(conf) = cfg.providers.get(name) else {
        if own_agent {
            return Err(refused(format!(
                "{}: providers.{name}: not configured, so the role's agent could not reach its model; add providers.{name} {{url, credential}} to airlockd's config",
                cfg.file.display()
            )));
        }
        return Ok(None);
    };
    let at = || format!("{}: providers.{name}", cfg.file.display());
    let url = ProviderUrl::parse(&conf.url).map_err(|e| refused(format!("{}.url: {e}", at())))?;
    let key = read_credential(cfg, conf.credential.as_deref(), &at())?;
    let mut price = *policies.prices.get(&run.model).ok_or_else(|| {
        refused(format!(
            "{}: models.{}: no price for the role's run.model, so its spend budget cannot be enforced; add the model's prices",
            policies.dir.join("prices.yaml").display(),
            run.model
        ))
    })?;
    let web_search = run.tools.iter().any(|t| t == "WebSearch");
    if web_search {
        // The provider charges each search: without its fee the budget could not hold.
        price.web_search = *policies.prices.web_search.get(name).ok_or_else(|| {
            refused(format!(
                "{}: providers.{name}.web_search_per_request_usd: required, since the role's run.tools grants WebSearch and the provider charges each search; add the fee (USD per search request)",
                policies.dir.join("prices.yaml").display()
            ))
        })?;
    }
    let tls = crate::gateway::provider::tls_config(conf.ca_file.as_deref())
        .map_err(|e| refused(format!("{}: {e}", at())))?;
    Ok(Some(ProviderPlan {
        name: name.to_string(),
        api: api_of(run.provider),
        url,
        key,
        tls,
        model: run.model.clone(),
        price,
        budget_micro_usd: budget_micro_usd(role.budget.spend_usd),
        max_turns: run
            .max_turns
            .unwrap_or(crate::policy::agent_config::DEFAULT_MAX_TURNS),
        web_search,
        web_fetch: run.tools.iter().any(|t| t == "WebFetch"),
    }))
}

/// One lease per credential the run will use through its gateway: the provider's key, and
/// each connector credential.
fn lease_wants(
    provider: Option<&ProviderPlan>,
    upstreams: &std::collections::BTreeMap<String, UpstreamPlan>,
) -> Vec<Want> {
    let mut wants = Vec::new();
    if let Some(p) = provider {
        let scheme = if p.url.https { "https" } else { "http" };
        wants.push(Want {
            kind: LeaseKind::Provider,
            name: p.name.clone(),
            grants: format!(
                "provider {}: model {} at {scheme}://{}{}",
                p.name, p.model, p.url.authority, p.url.base_path
            ),
        });
    }
    for (name, up) in upstreams {
        let has = match up {
            UpstreamPlan::Http { auth, oauth, .. } => auth.is_some() || oauth.is_some(),
            UpstreamPlan::Stdio { env, .. } => env.is_some(),
        };
        if has {
            wants.push(Want {
                kind: LeaseKind::Connector,
                name: name.clone(),
                grants: format!("connector {name}: its credential, used by the gateway"),
            });
        }
    }
    wants
}

/// A disk bound the run needs could not be set up: the run does not start.
fn bound_failed(cfg: &Config, what: &str, e: &str) -> LaunchError {
    LaunchError::Jail(format!(
        "{}: limits.{what}: the {what}'s disk bound could not be set up, so the run was not started: {e}",
        cfg.file.display()
    ))
}

/// Refuse the launch when the state directory's filesystem has less free than
/// `limits.reserve` (see [`crate::supervisor::reserve`]).
fn check_reserve(cfg: &Config) -> Result<(), LaunchError> {
    use crate::supervisor::reserve;
    let free = reserve::free_under(&cfg.state_dir).map_err(LaunchError::Io)?;
    reserve::check(&cfg.state_dir, free, cfg.disk.reserve).map_err(refused)
}

/// The largest `--max-seconds` accepted: anything longer is no narrowing anyway, since a
/// role's `minutes_per_run` is at most a week.
pub const MAX_SECONDS: u64 = 7 * 24 * 3600;

/// A run's id and the parent of its cgroup, chosen before the run is prepared so a jail
/// helper can be started for it ahead (see [`crate::sandbox::helper::Ahead`]).
pub fn new_slot(cgroup_parent: Option<PathBuf>) -> Ahead {
    Ahead {
        run_id: new_run_id(),
        cgroup_parent,
    }
}

/// Check everything and create the run directory and workspace; nothing runs yet. `role`
/// is the role as the catalog resolved it (validated, rails and class checked); the run's
/// id and cgroup parent were chosen by the caller ([`new_slot`]: airlockd settles its
/// cgroup layout once at startup, a standalone launch uses its own; a parent of `None`
/// means no cgroup v2, and the pid namespace and v1 limits apply).
pub fn prepare_in(
    cfg: &Config,
    req: &LaunchRequest,
    resolved: Resolved<'_>,
    slot: Ahead,
    images: Option<&ImagePool>,
    homes: Option<&KeptHomes>,
) -> Result<Prepared, LaunchError> {
    let Resolved {
        role,
        policies,
        policy,
    } = resolved;
    let Ahead {
        run_id,
        cgroup_parent,
    } = slot;
    if !valid_name(&req.instance) {
        return Err(refused(
            "--instance: instance names match [a-z][a-z0-9_-]{0,31}",
        ));
    }
    if req.max_seconds == Some(0) {
        return Err(refused("--max-seconds: must be at least 1"));
    }
    if req.max_seconds.is_some_and(|s| s > MAX_SECONDS) {
        return Err(refused(format!(
            "--max-seconds: at most {MAX_SECONDS} (a week); it can only narrow the role's minutes_per_run"
        )));
    }
    // Names the jail will refuse are refused before anything is created for the run.
    if !valid_name(&role.role.role) {
        return Err(refused(
            "ROLE: runnable role names have at most 32 characters ([a-z][a-z0-9_-]{0,31})",
        ));
    }
    // Unknown or fired instance first: nothing is created for it.
    let conf = instances::lookup(cfg, &req.instance)
        .map_err(|e| refused(format!("{}: {e}", cfg.file.display())))?;
    if conf.fired {
        return Err(refused(
            instances::InstanceError::Fired(req.instance.clone()).to_string(),
        ));
    }
    // The instance is hired for a class; compare canonical names so `implementer` and
    // `code` are the same role and nothing else is.
    if canonicalize(&conf.role) != role.role.role {
        return Err(refused(format!(
            "{}: instances.{}.role: the instance is hired for another role",
            cfg.file.display(),
            req.instance
        )));
    }
    let loaded = role;
    let workspace = match &req.workspace {
        Some(w) => Some(workspace::check(w, &cfg.state_dir).map_err(refused)?),
        None => None,
    };
    let endpoints = GatewayEndpoints::at(&gateway_url(), &loaded.role);
    let given = agent_files(loaded, &endpoints)
        .map_err(|e| refused(format!("{}: {e}", loaded.file.display())))?;
    // `-- CMD` replaces only the argv: the files and environment stay (see agent_files).
    let workflow = loaded.role.kind == crate::role::Kind::Workflow;
    let argv = if req.command.is_empty() {
        let mut argv = given.argv.clone().ok_or_else(|| {
            if workflow {
                refused(format!(
                    "{}: kind: a workflow role's own command is {} beside its role.yaml, and there is none; add {} (run as /bin/sh {} on the command side) or pass -- CMD ARGS",
                    loaded.file.display(),
                    crate::role::WORKFLOW_FILE,
                    loaded.dir.join(crate::role::WORKFLOW_FILE).display(),
                    super::agent_files::WORKFLOW_PATH,
                ))
            } else {
                refused(format!(
                    "{}: run: the role runs no agent, so it has no agent command; pass -- CMD ARGS",
                    loaded.file.display()
                ))
            }
        })?;
        // A workflow's command is the shell of the system view, never a configured agent.
        if !workflow {
            if let Some(program) = agent_program(cfg, &loaded.role)? {
                argv[0] = program;
            }
            if req.tty {
                argv = crate::policy::agent_config::interactive_command(&argv);
            }
        }
        argv
    } else {
        req.command.clone()
    };
    let inst: Instance = instances::resolve(cfg, &req.instance)
        .map_err(|e| refused(format!("{}: {e}", cfg.file.display())))?;
    // An agent runs contained (it can start no program but its own); a workflow role's
    // command runs on the command side.
    let exec = if workflow {
        None
    } else {
        Some(
            exec_set::exec_set(&argv[0], inst.uid, inst.gid)
                .map_err(|e| refused(format!("agent program: {e}")))?,
        )
    };
    let provider = provider_plan(cfg, &loaded.role, policies, req.command.is_empty())?;
    let github_lease = format!("run/{run_id}/github/1");

    check_reserve(cfg)?;
    let run_dir = cfg.state_dir.join("runs").join(&run_id);
    // A stdio connector's jail has a run dir of its own beside the run's.
    let connector_dirs: Vec<PathBuf> = cfg
        .mcp_connectors
        .keys()
        .map(|name| cfg.state_dir.join("runs").join(format!("{run_id}-{name}")))
        .collect();
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&run_dir)
        .map_err(|e| io_err("cannot create run directory", &run_dir, e))?;
    // A refusal from here on leaves nothing of the run behind, and the run's end nothing
    // of its directories.
    let mut disks = RunDisks::default();
    disks.remove_at_end(run_dir.clone());
    for d in &connector_dirs {
        disks.remove_at_end(d.clone());
    }
    let built = (|| {
        // GitHub tokens first: a fresh workspace gets the run.clone repositories in it
        // from the start (and a bounded one is made holding them). As with the provider, a
        // `-- CMD` launch on a host without the App goes on without the route (the role's
        // own agent is refused, since it could not work).
        let own_agent = req.command.is_empty();
        let github = if github_plan::wanted(&loaded.role) && (own_agent || cfg.github.is_some()) {
            let m = github_plan::mint(
                cfg,
                &loaded.role,
                policies,
                &run_id,
                run_dir.join("github-scratch"),
            )
            .map_err(refused)?;
            github_app::Held::put(
                &github_lease,
                m.minted.clone(),
                &github_app::held_dir(&cfg.state_dir),
            )
            .map_err(refused)?;
            Some(m)
        } else {
            None
        };
        // Cloned where only root reaches (the run's directory), then placed.
        let staged = match (&github, &workspace) {
            (Some(m), None) => {
                let dir = run_dir.join("clone");
                let clone = loaded.role.clone_repos();
                github_plan::clone_into(&m.plan, clone, &dir, (inst.uid, inst.gid))
                    .map_err(|e| refused(format!("{}: {e}", loaded.file.display())))?
                    .then_some(dir)
            }
            _ => None,
        };
        let workspace = match workspace {
            Some(w) => w,
            None => {
                let w = run_dir.join("workspace");
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&w)
                    .map_err(|e| io_err("cannot create workspace", &w, e))?;
                chown(
                    &w,
                    Some(Uid::from_raw(inst.uid)),
                    Some(Gid::from_raw(inst.gid)),
                )
                .map_err(|e| io_err("cannot chown workspace", &w, e))?;
                // Gone with the run, bounded or not: `--workspace DIR` keeps results.
                disks.fresh_workspace(&w, inst.uid, inst.gid);
                if let Some(b) = cfg.disk.workspace {
                    // An empty workspace comes from the pool when there is one ready.
                    let premade = match staged {
                        None => images.and_then(|p| p.take(b)),
                        Some(_) => None,
                    };
                    disks
                        .add_workspace(
                            &run_dir,
                            b,
                            (inst.uid, inst.gid),
                            staged.as_deref(),
                            premade,
                        )
                        .map_err(|e| bound_failed(cfg, "workspace", &e))?;
                } else if let Some(dir) = &staged {
                    fs::rename(dir.join("repos"), w.join("repos"))
                        .map_err(|e| io_err("cannot place the run.clone repositories", &w, e))?;
                }
                if let Some(dir) = &staged {
                    let _ = fs::remove_dir_all(dir);
                }
                w
            }
        };
        if let Some(b) = cfg.disk.home {
            disks
                .add_home(
                    &cfg.state_dir,
                    &inst.name,
                    &inst.home,
                    b,
                    (inst.uid, inst.gid),
                    homes,
                )
                .map_err(|e| bound_failed(cfg, "home", &e))?;
        }
        let deadline = deadline(loaded.role.max_run_seconds(), req.max_seconds);
        // No provider host: model traffic takes the provider route, which holds the key
        // and counts spend. `egress_plan::provider_host(url)` values listed here would also
        // let the run CONNECT to the provider's host itself.
        let (egress, mut extra_cas) = crate::supervisor::egress_plan::plan(
            cfg,
            &loaded.role,
            &crate::supervisor::egress_plan::class_of(&loaded.dir),
            &run_id,
            Vec::new(),
        )
        .map_err(refused)?;
        // The image the host grants the role, as the root of its command side.
        let chosen = crate::supervisor::image_env::choose(
            cfg,
            &loaded.role.role,
            &crate::supervisor::egress_plan::class_of(&loaded.dir),
        )
        .map_err(refused)?;
        let (image, image_pin) = match chosen {
            Some(c) => (Some(c.root), Some(std::sync::Arc::new(c.pin))),
            None => (None, None),
        };
        let mut env = given.env;
        let spec = RunSpec {
            image,
            run_id,
            role: loaded.role.role.clone(),
            instance: inst.name.clone(),
            uid: inst.uid,
            gid: inst.gid,
            home: inst.home.clone(),
            workspace,
            argv,
            env: Vec::new(),
            hide: vec![cfg.state_dir.clone(), cfg.socket.clone()],
            connect_tcp: Vec::new(),
            limits: helper_limits(cfg, deadline),
            cgroup_parent,
            files: given.files,
            gateway: true,
            exec,
            stdio: false,
            tty: req.tty,
            disks: disks.mounts.clone(),
            home_state: None,
        };
        let upstreams = upstream_plans(cfg, &spec, &loaded.role, endpoints.mcp.keys())?;
        // The run's leases, and the provider's run token in the agent's key variable.
        let now = crate::supervisor::ledger::now_ms();
        let expires =
            deadline.map(|d| now.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
        let mut wants = lease_wants(provider.as_ref(), &upstreams);
        if let Some(m) = &github {
            wants.push(Want {
                kind: LeaseKind::Github,
                name: crate::gateway::github::LEASE_NAME.into(),
                grants: m.grants.clone(),
            });
        }
        let mut issued = leases::issue(&spec.run_id, &spec.instance, &wants, now, expires)
            .map_err(|e| LaunchError::Io(format!("run tokens could not be made: {e}")))?;
        let mut spec = spec;
        let github = match github {
            Some(m) => {
                let token = issued.tokens.last().map(|t| t.expose().to_string());
                if let Some(rec) = issued.records.iter_mut().find(|l| l.id == github_lease) {
                    rec.upstream_expires_at = m.minted.iter().map(|t| t.expires_at).max();
                }
                env.extend(github_plan::env(token.as_deref().unwrap_or_default()));
                extra_cas.insert(0, m.ca_pem);
                Some(m.plan)
            }
            None => None,
        };
        let (ca_files, ca_env) = crate::supervisor::run_ca::files_and_env(&extra_cas);
        env.extend(ca_env);
        spec.files.extend(ca_files);
        // The provider's want comes first, so its token is the first.
        if let (Some(run), Some(_), Some(token)) =
            (&loaded.role.run, &provider, issued.tokens.first())
        {
            env.push((
                provider_env(run.provider).0.to_string(),
                token.expose().to_string(),
            ));
        }
        // Claude Code's own interface: its first-run screens answered for this run.
        if let (Some(run), true, true) = (&loaded.role.run, req.tty, req.command.is_empty()) {
            if run.provider == crate::role::Provider::Claude {
                use crate::policy::agent_config::claude_state::{tty_seed, STATE_FILE};
                let key = provider.as_ref().and(issued.tokens.first());
                spec.home_state = Some(crate::sandbox::spec::HomeState {
                    file: STATE_FILE.to_string(),
                    seed: tty_seed(
                        &spec.jail_workspace().to_string_lossy(),
                        key.map(|t| t.expose()),
                    ),
                });
            }
        }
        spec.env = env;
        spec.validate()
            .map_err(|e| refused(format!("run spec refused before start: {e}")))?;
        Ok((spec, deadline, upstreams, issued, github, egress, image_pin))
    })();
    match built {
        Ok((spec, deadline, upstreams, issued, github, egress, image_pin)) => Ok(Prepared {
            image_pin,
            gateway: GatewayPlan {
                policy: crate::gateway::live_policy::LivePolicy::new(policy),
                workspace: spec.jail_workspace(),
                home: spec.jail_home(),
                connectors: endpoints.mcp.keys().cloned().collect(),
                upstreams,
                provider,
                leases: issued.live,
                egress,
                github,
                desk: None,
                asks: None,
            },
            leases: issued.records,
            deadline,
            spec,
            run_dir,
            disks: std::sync::Arc::new(disks),
        }),
        Err(e) => {
            // Tokens minted for a run that does not start are revoked at once.
            if github_app::Held::revoke(&github_lease) {
                github_app::Held::recorded(&github_lease);
            }
            drop(disks);
            let _ = fs::remove_dir_all(&run_dir);
            // And those of the stdio connectors prepared before the refusal.
            for d in &connector_dirs {
                let _ = fs::remove_dir_all(d);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_deadlines_saturate_instead_of_overflowing() {
        let cfg = crate::config::parse(Path::new("t.yaml"), "grace_seconds: 3600\n")
            .expect("config parses");
        let limits = helper_limits(&cfg, deadline(Some(u64::MAX), None));
        assert_eq!(limits.deadline_ms, Some(MAX_DEADLINE_MS));
        let limits = helper_limits(&cfg, Some(Duration::MAX));
        assert_eq!(limits.deadline_ms, Some(MAX_DEADLINE_MS));
        let limits = helper_limits(&cfg, Some(Duration::from_secs(2)));
        assert_eq!(limits.deadline_ms, Some(2_000 + 3_600_000 + 5_000));
        assert_eq!(helper_limits(&cfg, None).deadline_ms, None);
    }

    /// A real prepare (root: it chowns the workspace) of a shipped role, in a temp state dir.
    fn prepared(role: &str, command: &[&str]) -> (tempfile::TempDir, Prepared) {
        let (dir, p) = prepared_with(role, command, |_| {});
        (dir, p.unwrap())
    }

    fn prepared_with(
        role: &str,
        command: &[&str],
        edit: impl FnOnce(&mut LoadedRole),
    ) -> (tempfile::TempDir, Result<Prepared, LaunchError>) {
        assert!(
            nix::unistd::geteuid().is_root(),
            "prepare creates and chowns a run workspace: run the tests as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let repo = env!("CARGO_MANIFEST_DIR");
        let file = dir.path().join("airlock.yaml");
        let text = format!(
            "roles: [{repo}/roles]\npolicies: {repo}/policies\nstate_dir: {}\nuid_range: 1880097000-1880097999\nproviders:\n  claude: {{url: \"http://127.0.0.1:9\"}}\n  codex: {{url: \"http://127.0.0.1:9\"}}\ninstances:\n  tess: {{role: {role}, uid: 1880097001}}\n",
            dir.path().join("state").display()
        );
        std::fs::write(&file, &text).unwrap();
        let cfg = crate::config::parse(&file, &text).unwrap();
        std::fs::create_dir_all(cfg.state_dir.join("runs")).unwrap();
        let mut loaded =
            crate::role::load_role_dir(&Path::new(repo).join("roles").join(role)).unwrap();
        edit(&mut loaded);
        let req = LaunchRequest {
            role: role.into(),
            instance: "tess".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            tty: false,
            ..Default::default()
        };
        let policies = Policies::load(&Path::new(repo).join("policies")).unwrap();
        let resolved = Resolved::compile(&loaded, &policies);
        let p = prepare_in(&cfg, &req, resolved, new_slot(None), None, None);
        (dir, p)
    }

    #[test]
    fn a_configuration_error_is_refused_by_key_path_with_nothing_left_behind() {
        use crate::role::McpConnector;
        for command in [&[][..], &["/bin/true"][..]] {
            let (dir, p) = prepared_with("code", command, |l| {
                let run = l.role.run.as_mut().unwrap();
                run.mcp.insert(
                    "airlock".into(),
                    McpConnector::Gateway {
                        via: "airlock".into(),
                    },
                );
            });
            let msg = match p {
                Err(LaunchError::Refused(m)) => m,
                other => panic!("not refused: {other:?}"),
            };
            assert!(msg.contains("role.yaml: run.mcp.airlock: "), "{msg}");
            let runs = dir.path().join("state/runs");
            assert_eq!(fs::read_dir(&runs).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_role_without_an_agent_needs_a_command() {
        let (_dir, p) = prepared_with("code", &[], |l| l.role.run = None);
        match p {
            Err(LaunchError::Refused(m)) => assert!(m.contains("-- CMD"), "{m}"),
            other => panic!("not refused: {other:?}"),
        }
        let (_dir, p) = prepared_with("code", &["/bin/true"], |l| l.role.run = None);
        let p = p.unwrap();
        assert_eq!(p.spec.files.len(), 1, "only the brief");
        assert!(p.spec.env.is_empty());
    }

    #[test]
    fn a_workflow_role_runs_its_script_on_the_command_side() {
        use crate::supervisor::agent_files::{WORKFLOW_PATH, WORKFLOW_SHELL};
        let (_dir, p) = prepared("hello", &[]);
        assert_eq!(p.spec.argv, [WORKFLOW_SHELL, WORKFLOW_PATH]);
        assert!(p.spec.exec.is_none(), "a workflow runs on the command side");
        let script = p
            .spec
            .files
            .iter()
            .find(|f| f.path == Path::new(WORKFLOW_PATH))
            .expect("the script is a jail file");
        let shipped = fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("roles/hello/workflow.sh"),
        )
        .unwrap();
        assert_eq!(script.contents, shipped);
        assert_eq!(script.mode, 0o444);
        p.spec.validate().unwrap();

        // `-- CMD` replaces the script's command; the script stays readable.
        let (_dir, p) = prepared("hello", &["/bin/echo", "hi"]);
        assert_eq!(p.spec.argv, ["/bin/echo", "hi"]);
        assert!(p.spec.exec.is_none());

        // Without the script and without `-- CMD`: refused, naming the file to add.
        let (dir, p) = prepared_with("hello", &[], |l| l.workflow_text = None);
        match p {
            Err(LaunchError::Refused(m)) => {
                assert!(m.contains("role.yaml: kind: "), "{m}");
                assert!(m.contains("hello/workflow.sh"), "{m}");
                assert!(m.contains("-- CMD"), "{m}");
            }
            other => panic!("not refused: {other:?}"),
        }
        assert_eq!(
            fs::read_dir(dir.path().join("state/runs")).unwrap().count(),
            0
        );
    }

    #[test]
    fn the_default_argv_is_agent_configs_and_the_brief_is_a_file() {
        use crate::policy::agent_config::{self, CLAUDE_MANAGED_SETTINGS_PATH};
        use crate::supervisor::agent_files::BRIEF_PATH;
        let loaded =
            crate::role::load_role_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("roles/code"))
                .unwrap();
        let want =
            agent_config::agent_command(&loaded.role, BRIEF_PATH, CLAUDE_MANAGED_SETTINGS_PATH)
                .unwrap();
        // The agent program must be installed for its exec set; where it is not, the
        // launch is refused before anything starts, naming it.
        // GitHub left to GitHub: a run of an airlock-held identity needs the host's App.
        let github = |l: &mut LoadedRole| {
            if let Some(i) = l.role.identity.as_mut() {
                i.key_store = Some("github".into());
            }
        };
        let (_dir, p) = prepared_with("code", &[], github);
        let p = match p {
            Ok(p) => p,
            Err(LaunchError::Refused(m)) => {
                assert!(m.contains("is not installed"), "{m}");
                // The rest of the run's files, with the program replaced.
                prepared("code", &["/bin/true"]).1
            }
            Err(e) => panic!("{e}"),
        };
        if p.spec.argv != ["/bin/true"] {
            // The configured program in place of the bare name.
            assert_eq!(p.spec.argv[1..], want[1..]);
            assert!(p.spec.argv[0].ends_with("/claude"), "{:?}", p.spec.argv);
        }
        assert!(p.spec.exec.is_some(), "an agent role runs contained");
        let brief = p
            .spec
            .files
            .iter()
            .find(|f| f.path == Path::new(BRIEF_PATH))
            .unwrap();
        assert_eq!(
            brief.contents,
            crate::policy::brief::with_floors(&loaded.brief_text, &loaded.role.floors)
        );
        assert!(p
            .spec
            .files
            .iter()
            .any(|f| f.path == Path::new(CLAUDE_MANAGED_SETTINGS_PATH)));
        p.spec.validate().unwrap();
    }

    #[test]
    fn a_replacing_command_keeps_the_files_and_environment() {
        let (_dir, p) = prepared("review", &["/bin/true"]);
        assert_eq!(p.spec.argv, vec!["/bin/true".to_string()]);
        assert!(p
            .spec
            .files
            .iter()
            .any(|f| f.path == Path::new("/etc/codex/managed_config.toml")));
        // The provider's run token and nothing else; no CODEX_HOME (Codex keeps its state in
        // the instance's home).
        assert_eq!(p.spec.env.len(), 1, "{:?}", p.spec.env);
        assert_eq!(p.spec.env[0].0, "OPENAI_API_KEY");
        assert!(p.spec.env[0].1.starts_with("airlock-run-"));
    }

    #[test]
    fn deadline_only_narrows() {
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(deadline(Some(600), Some(2)), s(2));
        assert_eq!(deadline(Some(60), Some(600)), s(60));
        assert_eq!(deadline(None, Some(5)), s(5));
        assert_eq!(deadline(Some(60), None), s(60));
        assert_eq!(deadline(None, None), None);
    }

    #[test]
    fn run_ids_are_valid_and_dated() {
        let id = new_run_id();
        assert!(crate::sandbox::spec::valid_run_id(&id), "{id}");
        assert_ne!(new_run_id(), new_run_id());
    }
}
