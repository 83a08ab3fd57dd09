//! airlockd / airlockctl configuration (YAML). Keys: `roles` (list of dirs, later overrides
//! earlier), `policies`, `state_dir`, `socket`, `uid_range`, `instances` (name -> `{role,
//! uid?}`), `limits`. An embedded default makes the CLI work with no installed file.
//!
//! airlockd's keys: `admin_group` (may hire, fire, reload; root always may), `operator_group`
//! (may launch, stop and read), `socket_group` (group of the bound control socket, mode 0660;
//! default the operator group), each a group name or a numeric gid, resolved through NSS when
//! airlockd starts; `max_concurrent_runs` (default 16), `grace_seconds` between SIGTERM and
//! SIGKILL when a run is stopped or hits its deadline (default 10), `journal_socket`
//! (journald's native socket, default `/run/systemd/journal/socket`; when it cannot take
//! records they go to `<state_dir>/journal/<run>.journal`).
//!
//! The gateway's keys: `credentials` (name -> a root-only file, or a systemd credential's
//! name) and `mcp_connectors` (name -> `{url, credential? | oauth?, header?, ca_file?}` for
//! a streamable-HTTP upstream over https, or plain http on this host, or
//! `{command, uid, credential?, credential_env?}` for a stdio one
//! run in a jail of its own), `egress` (`{nameservers, ports, http_ports}`, see
//! [`crate::config_egress`]).
//!
//! `store` (absent: this host's files alone): a fleet's shared PostgreSQL, see
//! [`crate::store::conf`].
//!
//! Default `uid_range` 1880000000-1880099999, chosen to collide with nothing common:
//! above systemd's container range (524288-1879048191) and therefore above every
//! /etc/subuid range useradd hands out by default (100000 up to 600100000), above
//! DynamicUser (61184-65519), homed (60001-60513), regular users (1000-60000) and nobody,
//! below systemd's foreign range (2147352576-2147418111) and below 2^31, so no signed
//! 32-bit uid handling breaks. Every uid is still checked against NSS before use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::diag::{key, Problem};
use crate::sandbox::spec::{valid_name, Limits};
use crate::supervisor::disk::{Bound, DiskLimits};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/airlock/airlock.yaml";

/// The configuration used when no file is given and none is installed.
pub const BUILTIN: &str = "\
roles:
  - /usr/share/airlock/roles
  - /etc/airlock/roles.local
policies: /etc/airlock/policies
state_dir: /var/lib/airlock
socket: /run/airlock/airlockd.sock
uid_range: 1880000000-1880099999
instances: {}
";

/// A credential's name: `[A-Za-z0-9_.-]{1,64}`, not `.` or `..`.
pub fn credential_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn env_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn header_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

impl Config {
    /// Where a run's journal records go when journald cannot take them:
    /// `<state_dir>/journal/<run>.journal`. Writers and `airlockctl logs` agree on it here.
    pub fn journal_dir(&self) -> PathBuf {
        self.state_dir.join("journal")
    }

    /// How run journals reach journald (its socket), for every writer.
    pub fn journal_config(&self) -> crate::journal::JournalConfig {
        crate::journal::JournalConfig {
            socket: self.journal_socket.clone(),
            ..crate::journal::JournalConfig::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceConf {
    pub role: String,
    pub uid: Option<u32>,
}

/// A group named in the config: by name (resolved through NSS when used) or by number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRef {
    Name(String),
    Gid(u32),
}

impl std::fmt::Display for GroupRef {
    /// As the config names it: the group's name, or `gid N`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupRef::Name(n) => f.write_str(n),
            GroupRef::Gid(g) => write!(f, "gid {g}"),
        }
    }
}

impl GroupRef {
    /// The gid, looked up through NSS for a name. `Err` says which key could not be resolved.
    pub fn resolve(&self) -> Result<u32, String> {
        match self {
            GroupRef::Gid(g) => Ok(*g),
            GroupRef::Name(n) => match nix::unistd::Group::from_name(n) {
                Ok(Some(g)) => Ok(g.gid.as_raw()),
                _ => Err("no such group on this host (create it, or give a numeric gid)".into()),
            },
        }
    }
}

pub const DEFAULT_MAX_CONCURRENT_RUNS: usize = 16;
pub const DEFAULT_GRACE_SECONDS: u64 = 10;
pub const DEFAULT_JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from (`(built-in)` for the embedded default).
    pub file: PathBuf,
    pub roles: Vec<PathBuf>,
    pub policies: PathBuf,
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    pub uid_range: UidRange,
    pub instances: BTreeMap<String, InstanceConf>,
    pub limits: Limits,
    /// `limits.workspace`, `limits.home` and `limits.reserve`: the disk bounds.
    pub disk: DiskLimits,
    pub admin_group: Option<GroupRef>,
    pub operator_group: Option<GroupRef>,
    pub socket_group: Option<GroupRef>,
    pub max_concurrent_runs: usize,
    pub grace_seconds: u64,
    pub journal_socket: PathBuf,
    /// Secrets airlockd holds, by name: where each is read from.
    pub credentials: BTreeMap<String, CredentialSource>,
    /// Upstreams of `run.mcp.<name>: {via: airlock}` connectors.
    pub mcp_connectors: BTreeMap<String, ConnectorConf>,
    /// Where a run's model traffic goes, by `run.provider` (`claude`, `codex`).
    pub providers: BTreeMap<String, ProviderConf>,
    /// The organization's Airlock GitHub App (`identity.key_store: airlock`).
    pub github: Option<GithubConf>,
    /// Runs' proxied connections: nameservers and ports (see [`crate::config_egress`]).
    pub egress: crate::config_egress::EgressConf,
    /// `metrics`: where airlockd serves Prometheus metrics (none: not served).
    pub metrics: Option<crate::config_metrics::MetricsConf>,
    /// `tracing`: where airlockd sends OpenTelemetry traces (none: no traces).
    pub tracing: Option<crate::config_metrics::TracingConf>,
    /// The agent program of each provider (`agents.claude`, `agents.codex`).
    pub agents: BTreeMap<String, PathBuf>,
    /// The fleet's shared store (`store:`); `None`: this host's files alone.
    pub store: Option<crate::store::StoreConf>,
}

/// Where scripts/install-agents.sh puts the pinned agent CLIs.
pub const AGENTS_DIR: &str = "/usr/local/lib/airlock-agents";

/// The agent programs when the config names none: the native binaries of the pinned npm
/// packages' platform packages (not their launchers: Codex's is a Node wrapper that would
/// have to start the binary, and a contained agent starts no other program; Claude Code's
/// is put in place by an install script, which scripts/install-agents.sh does not run).
pub fn default_agents() -> BTreeMap<String, PathBuf> {
    let at = |p: &str| PathBuf::from(AGENTS_DIR).join("node_modules").join(p);
    BTreeMap::from([
        (
            "claude".to_string(),
            at("@anthropic-ai/claude-code-linux-x64/claude"),
        ),
        (
            "codex".to_string(),
            at("@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"),
        ),
    ])
}

/// The GitHub App airlockd mints installation tokens with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubConf {
    pub api_url: String,
    pub git_url: String,
    pub app_id: u64,
    /// A `credentials` name: the App's private key (PEM).
    pub private_key: String,
    /// Owner -> installation id, where configured (looked up otherwise).
    pub installations: BTreeMap<String, u64>,
}

/// A model provider's endpoint, as airlockd's config declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConf {
    /// `https://HOST[:PORT][/BASE]`, or `http://` to this host only.
    pub url: String,
    /// A `credentials` name: the provider's key, sent only to `url`.
    pub credential: Option<String>,
    /// PEM CA certificates trusted for `url` instead of the system's (a private gateway).
    pub ca_file: Option<PathBuf>,
}

/// The providers a role's `run.provider` may name.
pub const PROVIDER_NAMES: &[&str] = &["claude", "codex"];

/// Where a secret is read from: a root-only file, or a systemd credential
/// (`LoadCredential=NAME`, read from `$CREDENTIALS_DIRECTORY/NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    File(PathBuf),
    Systemd(String),
}

/// One MCP connector's upstream, as airlockd's config declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorConf {
    pub upstream: UpstreamConf,
    /// A `credentials` name sent only upstream.
    pub credential: Option<String>,
    /// OAuth 2.1 instead of a static credential (a URL upstream only).
    pub oauth: Option<OAuthConf>,
}

/// `mcp_connectors.<name>.oauth`: the client airlockd is at the connector's authorization
/// server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConf {
    /// Pre-registered; `None`: registered at `airlockctl connector login` (RFC 7591).
    pub client_id: Option<String>,
    /// A `credentials` name: a confidential client's secret.
    pub client_secret: Option<String>,
    pub grant: OAuthGrant,
    pub scopes: Vec<String>,
    /// Where the authorization code grant's browser is sent back to (a loopback URL,
    /// nothing listens there: the operator pastes the URL it was sent to).
    pub redirect_uri: String,
    /// The authorization server discovery must arrive at (its RFC 8414 `issuer`): the
    /// only one the client's secret goes to, and the only one outside the public internet
    /// token requests may reach. Required for `client_credentials` with a `client_secret`.
    pub issuer: Option<String>,
}

/// How airlockd gets a connector's access tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthGrant {
    /// An operator authorizes once (`airlockctl connector login`); airlockd keeps the
    /// refresh token.
    AuthorizationCode,
    /// Machine to machine: the client's own credentials.
    ClientCredentials,
}

/// The redirect URI of the authorization code grant when the config names none.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:8976/callback";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamConf {
    /// A streamable-HTTP MCP endpoint (`https://host[:port]/path`, or `http://` to this
    /// host only); the credential goes in `header`: `Authorization` (as `Bearer <secret>`,
    /// the default) or another name (as is). `ca_file`: PEM CAs trusted for an https
    /// upstream instead of the system's.
    Url {
        url: String,
        header: String,
        ca_file: Option<PathBuf>,
    },
    /// A stdio MCP server, started for each run in a jail of its own as `uid` (never root,
    /// never the instance's); the credential, if any, in its environment as `credential_env`.
    Command {
        argv: Vec<String>,
        uid: u32,
        credential_env: Option<String>,
        /// More environment for it (no secrets: those go through `credential`).
        env: Vec<(String, String)>,
    },
}

/// Load `path`, or the installed default file, or the embedded default.
pub fn load(path: Option<&Path>) -> Result<Config, Vec<Problem>> {
    let file = match path {
        Some(p) => p.to_path_buf(),
        None if Path::new(DEFAULT_CONFIG_PATH).is_file() => PathBuf::from(DEFAULT_CONFIG_PATH),
        None => return parse(Path::new("(built-in)"), BUILTIN),
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| vec![Problem::new(&file, "", format!("cannot read: {e}"))])?;
    parse(&file, &text)
}

/// Parse a config document. Relative paths are relative to the file's directory.
pub fn parse(file: &Path, text: &str) -> Result<Config, Vec<Problem>> {
    let doc = crate::policy::store::parse_text(file, text)?;
    // `--config airlock.yaml` has an empty parent: that is the working directory.
    let base = match file.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.to_path_buf(),
        None if file.is_relative() => {
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
        }
        None => PathBuf::from("/"),
    };
    let mut p = Parser {
        file,
        base,
        problems: Vec::new(),
    };
    let cfg = p.config(&doc);
    match cfg {
        Some(c) if p.problems.is_empty() => Ok(c),
        _ => Err(p.problems),
    }
}

struct Parser<'a> {
    file: &'a Path,
    base: PathBuf,
    problems: Vec<Problem>,
}

const TOP_KEYS: &[&str] = &[
    "roles",
    "policies",
    "state_dir",
    "socket",
    "uid_range",
    "instances",
    "limits",
    "admin_group",
    "operator_group",
    "socket_group",
    "max_concurrent_runs",
    "grace_seconds",
    "journal_socket",
    "credentials",
    "mcp_connectors",
    "providers",
    "github",
    "egress",
    "agents",
    "metrics",
    "tracing",
    "store",
];
const GITHUB_KEYS: &[&str] = &[
    "api_url",
    "git_url",
    "app_id",
    "private_key",
    "installations",
];
const PROVIDER_KEYS: &[&str] = &["url", "credential", "ca_file"];
const CONNECTOR_KEYS: &[&str] = &[
    "url",
    "ca_file",
    "oauth",
    "command",
    "credential",
    "header",
    "credential_env",
    "uid",
    "env",
];
const LIMIT_KEYS: &[&str] = &[
    "max_procs",
    "memory_bytes",
    "tmp_bytes",
    "shm_bytes",
    "nofile",
    "workspace",
    "home",
    "reserve",
    "agent_reserve",
    "cpu_weight",
    "cpu_max",
    "io_weight",
];
const DISK_KEYS: &[&str] = &["disk_bytes", "disk_inodes"];
const AGENT_RESERVE_KEYS: &[&str] = &["procs", "memory_bytes"];

/// What a group key must be.
pub(crate) const GROUP_PROBLEM: &str =
    "must be a group name ([a-z_][a-z0-9_-]{0,31}) or a numeric gid below 2147483648";

/// A group key's value: a name or a gid.
pub(crate) fn group_ref(v: &Value) -> Option<GroupRef> {
    if let Some(n) = v.as_u64() {
        if n < 1 << 31 {
            return Some(GroupRef::Gid(n as u32));
        }
    } else if let Some(s) = v.as_str() {
        let ok = !s.is_empty()
            && s.len() <= 32
            && s.bytes()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
            && s.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'));
        if ok {
            return Some(GroupRef::Name(s.to_string()));
        }
    }
    None
}

impl Parser<'_> {
    fn problem(&mut self, path: &str, msg: &str) {
        self.problems.push(Problem::new(self.file, path, msg));
    }

    fn mapping<'v>(
        &mut self,
        v: &'v Value,
        path: &str,
        allowed: &[&str],
    ) -> Option<&'v serde_yaml::Mapping> {
        let Some(m) = v.as_mapping() else {
            self.problem(path, "must be a mapping");
            return None;
        };
        for k in m.keys() {
            match k.as_str() {
                Some(k) if allowed.is_empty() || allowed.contains(&k) => {}
                Some(k) => {
                    // An unknown key may be a pasted secret: name it only when it looks
                    // like a key.
                    let at = if crate::secret_shapes::is_plain_key(k) {
                        key(path, k)
                    } else {
                        key(path, "<unknown key>")
                    };
                    self.problem(
                        &at,
                        &format!("unknown key; allowed: {}", allowed.join(", ")),
                    );
                }
                None => self.problem(path, "keys must be strings"),
            }
        }
        Some(m)
    }

    fn path(&mut self, v: &Value, path: &str) -> Option<PathBuf> {
        match v.as_str() {
            Some(s) if !s.is_empty() && !s.contains('\0') => Some(self.base.join(s)),
            _ => {
                self.problem(path, "must be a non-empty path string");
                None
            }
        }
    }

    fn config(&mut self, doc: &Value) -> Option<Config> {
        let m = self.mapping(doc, "", TOP_KEYS)?;
        let get = |k: &str| m.get(Value::from(k));
        let roles = match get("roles") {
            Some(Value::Sequence(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| self.path(v, &crate::diag::index("roles", i)))
                .collect(),
            Some(_) => {
                self.problem("roles", "must be a list of directories");
                Vec::new()
            }
            None => Vec::new(),
        };
        let policies = get("policies")
            .and_then(|v| self.path(v, "policies"))
            .unwrap_or_else(|| PathBuf::from("/etc/airlock/policies"));
        let state_dir = get("state_dir")
            .and_then(|v| self.path(v, "state_dir"))
            .unwrap_or_else(|| PathBuf::from("/var/lib/airlock"));
        let socket = get("socket")
            .and_then(|v| self.path(v, "socket"))
            .unwrap_or_else(|| PathBuf::from("/run/airlock/airlockd.sock"));
        let default_range = UidRange {
            first: 1_880_000_000,
            last: 1_880_099_999,
        };
        // On a bad range keep parsing, to report every problem at once; the problem
        // already recorded makes the whole config fail.
        let uid_range = match get("uid_range") {
            None => default_range,
            Some(v) => self.uid_range(v).unwrap_or(default_range),
        };
        let mut instances = BTreeMap::new();
        if let Some(v) = get("instances") {
            if let Some(im) = self.mapping(v, "instances", &[]) {
                for (k, v) in im {
                    let Some(name) = k.as_str() else { continue };
                    if !valid_name(name) {
                        self.problem(
                            &key("instances", "<invalid name>"),
                            "instance names match [a-z][a-z0-9_-]{0,31}",
                        );
                        continue;
                    }
                    let at = key("instances", name);
                    if let Some(i) = self.instance(v, &at) {
                        instances.insert(name.to_string(), i);
                    }
                }
            }
        }
        let (limits, disk) = match get("limits") {
            None => (Limits::default(), DiskLimits::default()),
            Some(v) => (self.limits(v)?, self.disk_limits(v)?),
        };
        let admin_group = get("admin_group").and_then(|v| self.group(v, "admin_group"));
        let operator_group = get("operator_group").and_then(|v| self.group(v, "operator_group"));
        let socket_group = match get("socket_group") {
            Some(v) => self.group(v, "socket_group"),
            None => operator_group.clone(),
        };
        let max_concurrent_runs = match get("max_concurrent_runs") {
            None => DEFAULT_MAX_CONCURRENT_RUNS,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=4096).contains(&n) => n as usize,
                _ => {
                    self.problem("max_concurrent_runs", "must be an integer from 1 to 4096");
                    DEFAULT_MAX_CONCURRENT_RUNS
                }
            },
        };
        let grace_seconds = match get("grace_seconds") {
            None => DEFAULT_GRACE_SECONDS,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=3600).contains(&n) => n,
                _ => {
                    self.problem("grace_seconds", "must be an integer from 1 to 3600");
                    DEFAULT_GRACE_SECONDS
                }
            },
        };
        let journal_socket = get("journal_socket")
            .and_then(|v| self.path(v, "journal_socket"))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_JOURNAL_SOCKET));
        let credentials = match get("credentials") {
            None => BTreeMap::new(),
            Some(v) => self.credentials(v),
        };
        let mcp_connectors = match get("mcp_connectors") {
            None => BTreeMap::new(),
            Some(v) => self.connectors(v, &credentials),
        };
        let providers = match get("providers") {
            None => BTreeMap::new(),
            Some(v) => self.providers(v, &credentials),
        };
        let github = get("github").and_then(|v| self.github(v, &credentials));
        let mut agents = default_agents();
        if let Some(v) = get("agents") {
            if let Some(m) = self.mapping(v, "agents", PROVIDER_NAMES) {
                for (k, v) in m {
                    let Some(name) = k.as_str() else { continue };
                    match v.as_str() {
                        Some(p) if p.starts_with('/') && !p.contains('\0') => {
                            agents.insert(name.to_string(), PathBuf::from(p));
                        }
                        _ => self.problem(
                            &key("agents", name),
                            "must be the absolute path of the provider's agent program",
                        ),
                    }
                }
            }
        }
        let egress = match get("egress") {
            None => crate::config_egress::EgressConf::default(),
            Some(v) => crate::config_egress::parse(
                self.file,
                v,
                &|c: &str| credentials.contains_key(c),
                &mut self.problems,
            ),
        };
        let metrics = get("metrics")
            .and_then(|v| crate::config_metrics::parse(self.file, v, &mut self.problems));
        let tracing = get("tracing")
            .and_then(|v| crate::config_metrics::parse_tracing(self.file, v, &mut self.problems));
        let store = get("store").and_then(|v| {
            let problems = &mut self.problems;
            let file = self.file;
            crate::store::conf::parse(v, &|c: &str| credentials.contains_key(c), &mut |p, m| {
                problems.push(Problem::new(file, p, m))
            })
        });
        Some(Config {
            metrics,
            tracing,
            store,
            egress,
            credentials,
            mcp_connectors,
            providers,
            github,
            agents,
            admin_group,
            operator_group,
            socket_group,
            max_concurrent_runs,
            grace_seconds,
            journal_socket,
            file: self.file.to_path_buf(),
            roles,
            policies,
            state_dir,
            socket,
            uid_range,
            instances,
            limits,
            disk,
        })
    }

    /// `limits.workspace`, `limits.home` (a mapping `{disk_bytes, disk_inodes}`, each key
    /// optional, or null: no bound) and `limits.reserve` (the same mapping).
    fn disk_limits(&mut self, v: &Value) -> Option<DiskLimits> {
        use crate::supervisor::disk::{MIN_BYTES, MIN_INODES};
        let m = v.as_mapping()?;
        let mut d = DiskLimits::default();
        let bound =
            |p: &mut Self, k: &str, dflt: Bound, min: (u64, u64)| -> Option<Option<Bound>> {
                let at = key("limits", k);
                let Some(v) = m.get(Value::from(k)) else {
                    return Some(Some(dflt));
                };
                if v.is_null() {
                    return Some(None);
                }
                let bm = p.mapping(v, &at, DISK_KEYS)?;
                let mut b = dflt;
                for (name, lo, slot) in [
                    ("disk_bytes", min.0, &mut b.bytes),
                    ("disk_inodes", min.1, &mut b.inodes),
                ] {
                    if let Some(x) = bm.get(Value::from(name)) {
                        match x.as_u64() {
                            Some(n) if n >= lo && n < 1 << 50 => *slot = n,
                            _ => {
                                p.problem(
                                    &key(&at, name),
                                    &format!("must be an integer from {lo} to 2^50"),
                                );
                                return None;
                            }
                        }
                    }
                }
                Some(Some(b))
            };
        d.workspace = bound(
            self,
            "workspace",
            crate::supervisor::disk::DEFAULT_WORKSPACE,
            (MIN_BYTES, MIN_INODES),
        )?;
        d.home = bound(
            self,
            "home",
            crate::supervisor::disk::DEFAULT_HOME,
            (MIN_BYTES, MIN_INODES),
        )?;
        match bound(self, "reserve", d.reserve, (0, 0))? {
            Some(r) => d.reserve = r,
            None => {
                self.problem(
                    "limits.reserve",
                    "must be a mapping {disk_bytes, disk_inodes}; give 0 for no reserve",
                );
                return None;
            }
        }
        Some(d)
    }

    fn credentials(&mut self, v: &Value) -> BTreeMap<String, CredentialSource> {
        let mut out = BTreeMap::new();
        let Some(m) = self.mapping(v, "credentials", &[]) else {
            return out;
        };
        for (k, v) in m {
            let Some(name) = k.as_str().filter(|n| credential_name(n)) else {
                self.problem(
                    &key("credentials", "<invalid name>"),
                    "credential names are [A-Za-z0-9_.-]{1,64}",
                );
                continue;
            };
            let at = key("credentials", name);
            // Never echo the value: an operator may have pasted the secret itself.
            if v.as_str()
                .is_some_and(|s| crate::secret_shapes::find_secret(s).is_some())
            {
                self.problem(
                    &at,
                    "looks like a secret itself; put the secret in a root-only file and name the file here",
                );
                continue;
            }
            match v.as_str() {
                Some(s) if s.starts_with('/') && !s.contains('\0') => {
                    out.insert(name.to_string(), CredentialSource::File(PathBuf::from(s)));
                }
                Some(s) if credential_name(s) => {
                    out.insert(name.to_string(), CredentialSource::Systemd(s.to_string()));
                }
                _ => self.problem(
                    &at,
                    "must be an absolute path to a root-only file, or the name of a systemd credential (LoadCredential=NAME)",
                ),
            }
        }
        out
    }

    /// `<at>.credential`: absent, or the name of a `credentials` entry.
    fn credential_ref(
        &mut self,
        at: &str,
        v: Option<&Value>,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> Result<Option<String>, ()> {
        match v {
            None => Ok(None),
            Some(Value::String(c)) if credentials.contains_key(c) => Ok(Some(c.clone())),
            Some(_) => {
                self.problem(&key(at, "credential"), "must name an entry of credentials");
                Err(())
            }
        }
    }

    fn github(
        &mut self,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> Option<GithubConf> {
        let m = self.mapping(v, "github", GITHUB_KEYS)?;
        let get = |k: &str| m.get(Value::from(k));
        let url = |p: &mut Self, k: &str, default: &str| -> Option<String> {
            match get(k) {
                None => Some(default.to_string()),
                Some(Value::String(u)) if crate::urls::ProviderUrl::parse(u).is_ok() => {
                    Some(u.trim_end_matches('/').to_string())
                }
                Some(_) => {
                    p.problem(
                        &key("github", k),
                        "must be an https:// URL (or http:// to this host)",
                    );
                    None
                }
            }
        };
        let api_url = url(self, "api_url", "https://api.github.com");
        let git_url = url(self, "git_url", "https://github.com");
        let app_id = match get("app_id").and_then(Value::as_u64) {
            Some(n) if n > 0 => Some(n),
            _ => {
                self.problem(&key("github", "app_id"), "required: the App's numeric id");
                None
            }
        };
        let private_key = match get("private_key") {
            Some(Value::String(c)) if credentials.contains_key(c) => Some(c.clone()),
            _ => {
                self.problem(
                    &key("github", "private_key"),
                    "required: the name of the credentials entry holding the App's private key",
                );
                None
            }
        };
        let mut installations = BTreeMap::new();
        if let Some(v) = get("installations") {
            if let Some(im) = self.mapping(v, &key("github", "installations"), &[]) {
                for (k, v) in im {
                    match (k.as_str(), v.as_u64()) {
                        (Some(owner), Some(id))
                            if id > 0 && crate::secret_shapes::is_plain_key(owner) =>
                        {
                            installations.insert(owner.to_string(), id);
                        }
                        _ => self.problem(
                            &key("github", "installations"),
                            "maps an owner (user or organization) to its installation id",
                        ),
                    }
                }
            }
        }
        Some(GithubConf {
            api_url: api_url?,
            git_url: git_url?,
            app_id: app_id?,
            private_key: private_key?,
            installations,
        })
    }

    fn providers(
        &mut self,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> BTreeMap<String, ProviderConf> {
        let mut out = BTreeMap::new();
        let Some(m) = self.mapping(v, "providers", PROVIDER_NAMES) else {
            return out;
        };
        for (k, v) in m {
            let Some(name) = k.as_str() else { continue };
            let at = key("providers", name);
            let Some(c) = self.mapping(v, &at, PROVIDER_KEYS) else {
                continue;
            };
            let get = |k: &str| c.get(Value::from(k));
            let Ok(credential) = self.credential_ref(&at, get("credential"), credentials) else {
                continue;
            };
            let url = match get("url").and_then(Value::as_str) {
                Some(u) => match crate::urls::ProviderUrl::parse(u) {
                    Ok(_) => u.to_string(),
                    Err(why) => {
                        self.problem(&key(&at, "url"), why);
                        continue;
                    }
                },
                None => {
                    self.problem(
                        &key(&at, "url"),
                        "required: the provider's API base, https://HOST[:PORT][/PATH]",
                    );
                    continue;
                }
            };
            let ca_file = match get("ca_file") {
                None => None,
                Some(Value::String(p)) if p.starts_with('/') && !p.contains('\0') => {
                    Some(PathBuf::from(p))
                }
                Some(_) => {
                    self.problem(
                        &key(&at, "ca_file"),
                        "must be an absolute path to a PEM file of CA certificates",
                    );
                    continue;
                }
            };
            out.insert(
                name.to_string(),
                ProviderConf {
                    url,
                    credential,
                    ca_file,
                },
            );
        }
        out
    }

    fn connectors(
        &mut self,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> BTreeMap<String, ConnectorConf> {
        let mut out = BTreeMap::new();
        let Some(m) = self.mapping(v, "mcp_connectors", &[]) else {
            return out;
        };
        for (k, v) in m {
            let Some(name) = k.as_str().filter(|n| valid_name(n)) else {
                self.problem(
                    &key("mcp_connectors", "<invalid name>"),
                    "connector names match [a-z][a-z0-9_-]{0,31}",
                );
                continue;
            };
            let at = key("mcp_connectors", name);
            let Some(c) = self.mapping(v, &at, CONNECTOR_KEYS) else {
                continue;
            };
            let get = |k: &str| c.get(Value::from(k));
            let Ok(credential) = self.credential_ref(&at, get("credential"), credentials) else {
                continue;
            };
            if let Some(cmd) = get("command") {
                if get("oauth").is_some() {
                    self.problem(&key(&at, "oauth"), "only for a url connector");
                    continue;
                }
                if let Some(upstream) = self.command_upstream(&at, c, cmd, credential.is_some()) {
                    out.insert(
                        name.to_string(),
                        ConnectorConf {
                            upstream,
                            credential,
                            oauth: None,
                        },
                    );
                }
                continue;
            }
            let oauth = match get("oauth") {
                None => None,
                Some(_) if credential.is_some() => {
                    self.problem(
                        &key(&at, "oauth"),
                        "a connector has either a static credential or oauth",
                    );
                    continue;
                }
                Some(v) => match self.oauth(&key(&at, "oauth"), v, credentials) {
                    Some(o) => Some(o),
                    None => continue,
                },
            };
            let Some(url) = self.upstream_url(&at, get("url")) else {
                continue;
            };
            let ca_file = match get("ca_file") {
                None => None,
                Some(_) if !url.starts_with("https://") => {
                    self.problem(&key(&at, "ca_file"), "only for an https:// url");
                    continue;
                }
                Some(v) => match self.ca_file(&at, v) {
                    Some(p) => Some(p),
                    None => continue,
                },
            };
            let header = match get("header") {
                None => "Authorization".to_string(),
                Some(Value::String(h)) if header_name(h) => h.clone(),
                Some(_) => {
                    self.problem(
                        &key(&at, "header"),
                        "must be an HTTP header name (letters, digits and -)",
                    );
                    continue;
                }
            };
            out.insert(
                name.to_string(),
                ConnectorConf {
                    upstream: UpstreamConf::Url {
                        url,
                        header,
                        ca_file,
                    },
                    credential,
                    oauth,
                },
            );
        }
        out
    }

    /// `oauth: {client_id?, client_secret?, grant?, scopes?, redirect_uri?, issuer?}` at `at`.
    fn oauth(
        &mut self,
        at: &str,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> Option<OAuthConf> {
        let m = self.mapping(
            v,
            at,
            &[
                "client_id",
                "client_secret",
                "grant",
                "scopes",
                "redirect_uri",
                "issuer",
            ],
        )?;
        let get = |k: &str| m.get(Value::from(k));
        let grant = match get("grant").map(|g| g.as_str()) {
            Some(Some("client_credentials")) => OAuthGrant::ClientCredentials,
            None | Some(Some("authorization_code")) => OAuthGrant::AuthorizationCode,
            Some(_) => {
                self.problem(
                    &key(at, "grant"),
                    "must be authorization_code (the default: airlockctl connector login) or client_credentials",
                );
                return None;
            }
        };
        let client_id = match get("client_id") {
            None if grant == OAuthGrant::AuthorizationCode => None,
            Some(Value::String(id))
                if !id.is_empty()
                    && id.len() <= 256
                    && id.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Some(id.to_string())
            }
            None => {
                self.problem(
                    &key(at, "client_id"),
                    "required with grant: client_credentials: the client's id at the authorization server",
                );
                return None;
            }
            Some(_) => {
                self.problem(
                    &key(at, "client_id"),
                    "must be the client's id at the authorization server, printable ASCII (leave it out to register at login, RFC 7591)",
                );
                return None;
            }
        };
        let redirect_uri = match get("redirect_uri") {
            None => DEFAULT_REDIRECT_URI.to_string(),
            Some(Value::String(u))
                if crate::urls::parse_http_url(u).is_some_and(|p| !p.https && p.is_loopback())
                    && !crate::urls::has_userinfo(u)
                    && !u.contains(['?', '#']) =>
            {
                u.clone()
            }
            Some(_) => {
                self.problem(
                    &key(at, "redirect_uri"),
                    "must be a loopback http URL without a query (http://127.0.0.1:PORT/PATH)",
                );
                return None;
            }
        };
        let client_secret = match get("client_secret") {
            None => None,
            Some(Value::String(n)) if credentials.contains_key(n) => Some(n.clone()),
            Some(_) => {
                self.problem(
                    &key(at, "client_secret"),
                    "must name an entry in credentials",
                );
                return None;
            }
        };
        let scopes = match get("scopes") {
            None => Vec::new(),
            Some(v) => {
                let list: Option<Vec<String>> = v.as_sequence().and_then(|s| {
                    s.iter()
                        .map(|x| {
                            x.as_str()
                                .filter(|t| {
                                    !t.is_empty()
                                        && t.bytes().all(|b| {
                                            b.is_ascii_graphic() && b != b'"' && b != b'\\'
                                        })
                                })
                                .map(str::to_string)
                        })
                        .collect()
                });
                match list {
                    Some(l) => l,
                    None => {
                        self.problem(
                            &key(at, "scopes"),
                            "must be a list of scope names (printable ASCII, no spaces)",
                        );
                        return None;
                    }
                }
            }
        };
        let issuer = match get("issuer") {
            None => None,
            Some(Value::String(u))
                if crate::urls::endpoint_url(u).is_some()
                    && !crate::urls::has_userinfo(u)
                    && !u.contains(['?', '#']) =>
            {
                Some(u.clone())
            }
            Some(_) => {
                self.problem(
                    &key(at, "issuer"),
                    "must be the authorization server's issuer URL (https, or http on this host), without a user, query or fragment",
                );
                return None;
            }
        };
        if grant == OAuthGrant::ClientCredentials && client_secret.is_some() && issuer.is_none() {
            self.problem(
                &key(at, "issuer"),
                "required with grant: client_credentials and a client_secret: the authorization server (its issuer URL) the secret may be sent to; otherwise the connector's server would choose it",
            );
            return None;
        }
        if grant == OAuthGrant::ClientCredentials && get("redirect_uri").is_some() {
            self.problem(
                &key(at, "redirect_uri"),
                "only the authorization_code grant has a redirect URI",
            );
            return None;
        }
        Some(OAuthConf {
            client_id,
            client_secret,
            grant,
            scopes,
            redirect_uri,
            issuer,
        })
    }

    /// A connector's `url`: https, or plain http to this host. A URL with a user or
    /// password in it is refused without being repeated (it is likely a secret).
    fn upstream_url(&mut self, at: &str, v: Option<&Value>) -> Option<String> {
        use crate::urls::{has_userinfo, parse_http_url};
        let at = key(at, "url");
        let u = match v.and_then(Value::as_str) {
            Some(u) => u,
            None => {
                self.problem(
                    &at,
                    "required: the upstream's streamable-HTTP endpoint, https://HOST[:PORT]/PATH (or http:// to this host)",
                );
                return None;
            }
        };
        if has_userinfo(u) {
            self.problem(
                &at,
                "must not carry a user or password (not repeated here): put the token in credentials and name it in credential",
            );
            return None;
        }
        match parse_http_url(u) {
            Some(p) if p.https || p.is_loopback() => Some(u.to_string()),
            Some(_) => {
                self.problem(
                    &at,
                    "plain http goes only to this host (127.0.0.1, ::1, localhost): a credential must not cross a network in clear; use https://",
                );
                None
            }
            None => {
                self.problem(
                    &at,
                    "must be https://HOST[:PORT]/PATH (or http:// to this host), without query or fragment",
                );
                None
            }
        }
    }

    /// A `ca_file` at `at`: an absolute path to a regular file that only root (or airlockd's
    /// own user) can write, since whoever writes it decides which servers are trusted.
    fn ca_file(&mut self, at: &str, v: &Value) -> Option<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let at = key(at, "ca_file");
        let p = match v {
            Value::String(p) if p.starts_with('/') && !p.contains('\0') => PathBuf::from(p),
            _ => {
                self.problem(
                    &at,
                    "must be an absolute path to a PEM file of CA certificates",
                );
                return None;
            }
        };
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                self.problem(&at, &format!("{}: {}", p.display(), e.kind()));
                return None;
            }
        };
        let owner_ok = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
        if !meta.is_file() || !owner_ok || meta.mode() & 0o022 != 0 {
            self.problem(
                &at,
                &format!(
                    "{}: others may write it (owner uid {}, mode {:o}), and so choose which servers are trusted; chown root and chmod 0644 it",
                    p.display(),
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            );
            return None;
        }
        Some(p)
    }

    /// `command`, `uid` and `credential_env` of a stdio connector at `at`.
    fn command_upstream(
        &mut self,
        at: &str,
        c: &serde_yaml::Mapping,
        cmd: &Value,
        has_credential: bool,
    ) -> Option<UpstreamConf> {
        let get = |k: &str| c.get(Value::from(k));
        for k in ["url", "header", "ca_file"] {
            if get(k).is_some() {
                self.problem(&key(at, k), "a connector has either url or command");
                return None;
            }
        }
        let argv: Option<Vec<String>> = cmd.as_sequence().and_then(|items| {
            items
                .iter()
                .map(|v| v.as_str().filter(|s| !s.contains('\0')).map(str::to_string))
                .collect()
        });
        let argv = match argv {
            Some(a) if a.first().is_some_and(|p| p.starts_with('/')) => a,
            _ => {
                self.problem(
                    &key(at, "command"),
                    "must be a list of strings, the program first as an absolute path",
                );
                return None;
            }
        };
        let uid = match get("uid").and_then(Value::as_u64) {
            Some(n) if (1000..1 << 31).contains(&n) && n != 65534 => n as u32,
            _ => {
                self.problem(
                    &key(at, "uid"),
                    "required for a command: the uid its jail runs as, from 1000 to 2147483647, not nobody, and no instance's",
                );
                return None;
            }
        };
        let credential_env = match get("credential_env") {
            None => None,
            Some(Value::String(n)) if has_credential && env_name(n) => Some(n.clone()),
            Some(_) => {
                self.problem(
                    &key(at, "credential_env"),
                    "an environment variable name ([A-Za-z_][A-Za-z0-9_]*), and only with credential",
                );
                return None;
            }
        };
        let mut env = Vec::new();
        if let Some(v) = get("env") {
            let at = key(at, "env");
            let m = self.mapping(v, &at, &[])?;
            for (k, v) in m {
                let name = k.as_str().filter(|n| env_name(n));
                match (name, v.as_str()) {
                    (Some(n), Some(val)) if !val.contains('\0') => {
                        if crate::secret_shapes::find_secret(val).is_some() {
                            self.problem(
                                &key(&at, n),
                                "looks like a secret; give it as the connector's credential (credential_env)",
                            );
                            return None;
                        }
                        env.push((n.to_string(), val.to_string()));
                    }
                    _ => {
                        self.problem(&at, "names are [A-Za-z_][A-Za-z0-9_]*, values strings");
                        return None;
                    }
                }
            }
        }
        Some(UpstreamConf::Command {
            argv,
            uid,
            credential_env,
            env,
        })
    }

    fn group(&mut self, v: &Value, at: &str) -> Option<GroupRef> {
        let g = group_ref(v);
        if g.is_none() {
            self.problem(at, GROUP_PROBLEM);
        }
        g
    }

    fn uid_range(&mut self, v: &Value) -> Option<UidRange> {
        const MSG: &str = "must be FIRST-LAST with 1000 <= FIRST <= LAST < 2147483648";
        let parsed = v.as_str().and_then(|s| {
            let (a, b) = s.split_once('-')?;
            Some((a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?))
        });
        match parsed {
            Some((first, last)) if first >= 1000 && first <= last && last < 1 << 31 => {
                if (first..=last).contains(&65534) || (first..=last).contains(&65535) {
                    self.problem("uid_range", "must not contain 65534 (nobody) or 65535");
                    return None;
                }
                Some(UidRange { first, last })
            }
            _ => {
                self.problem("uid_range", MSG);
                None
            }
        }
    }

    fn instance(&mut self, v: &Value, at: &str) -> Option<InstanceConf> {
        let m = self.mapping(v, at, &["role", "uid"])?;
        let role = match m.get(Value::from("role")).and_then(Value::as_str) {
            Some(r) if valid_name(r) => r.to_string(),
            _ => {
                self.problem(
                    &key(at, "role"),
                    "required; a role name [a-z][a-z0-9_-]{0,31}",
                );
                return None;
            }
        };
        let uid = match m.get(Value::from("uid")) {
            None => None,
            Some(u) => match u.as_u64() {
                Some(n) if n < 1 << 31 => Some(n as u32),
                _ => {
                    self.problem(&key(at, "uid"), "must be an integer below 2147483648");
                    return None;
                }
            },
        };
        Some(InstanceConf { role, uid })
    }

    fn limits(&mut self, v: &Value) -> Option<Limits> {
        let m = self.mapping(v, "limits", LIMIT_KEYS)?;
        let mut l = Limits::default();
        let num = |p: &mut Self, k: &str, min: u64| -> Option<Option<u64>> {
            match m.get(Value::from(k)) {
                None => Some(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n >= min => Some(Some(n)),
                    _ => {
                        p.problem(&key("limits", k), &format!("must be an integer >= {min}"));
                        None
                    }
                },
            }
        };
        if let Some(n) = num(self, "max_procs", 1)? {
            l.max_procs = n;
        }
        if let Some(n) = num(self, "nofile", 16)? {
            l.nofile = n;
        }
        if let Some(n) = num(self, "tmp_bytes", 4096)? {
            l.tmp_bytes = n;
        }
        if let Some(n) = num(self, "shm_bytes", 4096)? {
            l.shm_bytes = n;
        }
        for (k, slot, hi) in [
            ("cpu_weight", &mut l.cpu_weight, 10_000u64),
            ("io_weight", &mut l.io_weight, 10_000u64),
        ] {
            match m.get(Value::from(k)) {
                None => {}
                Some(Value::Null) => *slot = None,
                Some(v) => match v.as_u64() {
                    Some(n) if (1..=hi).contains(&n) => *slot = Some(n),
                    _ => {
                        self.problem(
                            &key("limits", k),
                            &format!("must be an integer from 1 to {hi} (100 is the cgroup default), or null to leave it unset"),
                        );
                        return None;
                    }
                },
            }
        }
        match m.get(Value::from("cpu_max")) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_f64() {
                Some(c) if (0.01..=1000.0).contains(&c) => {
                    l.cpu_max_millis = Some((c * 1000.0).round() as u64);
                }
                _ => {
                    self.problem(
                        "limits.cpu_max",
                        "must be a number of CPUs from 0.01 to 1000 (e.g. 1.5), or null for no ceiling",
                    );
                    return None;
                }
            },
        }
        // Absent: the default cap. `null`: no memory limit asked for (the jail refuses to
        // start when a limit is asked for and no memory controller can enforce it).
        if m.get(Value::from("memory_bytes"))
            .is_some_and(Value::is_null)
        {
            l.memory_bytes = None;
        } else if let Some(n) = num(self, "memory_bytes", 1 << 20)? {
            l.memory_bytes = Some(n);
        }
        if let Some(v) = m.get(Value::from("agent_reserve")) {
            self.agent_reserve(v, &mut l)?;
        }
        Some(l)
    }

    /// `limits.agent_reserve: {procs, memory_bytes}`: what the agent side keeps of the run's
    /// processes and memory (the command side gets the rest). Each below the run's own.
    fn agent_reserve(&mut self, v: &Value, l: &mut Limits) -> Option<()> {
        const AT: &str = "limits.agent_reserve";
        let m = self.mapping(v, AT, AGENT_RESERVE_KEYS)?;
        let get = |k: &str| m.get(Value::from(k)).map(|v| v.as_u64());
        match get("procs") {
            None => {}
            Some(Some(n)) if n < l.max_procs => l.agent_reserve_procs = Some(n),
            Some(_) => {
                self.problem(
                    &key(AT, "procs"),
                    "must be an integer below limits.max_procs (the command side gets the rest)",
                );
                return None;
            }
        }
        match (get("memory_bytes"), l.memory_bytes) {
            (None, _) => {}
            (Some(Some(n)), None) => l.agent_reserve_memory_bytes = Some(n),
            (Some(Some(n)), Some(total)) if n < total => l.agent_reserve_memory_bytes = Some(n),
            (Some(_), _) => {
                self.problem(
                    &key(AT, "memory_bytes"),
                    "must be an integer below limits.memory_bytes (the command side gets the rest)",
                );
                return None;
            }
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connectors_and_credentials_are_checked_by_key_path() {
        let p = Path::new("c.yaml");
        let c = parse(
            p,
            "credentials:\n  tok: /etc/airlock/credentials/tok\n  sd: tok-from-systemd\nmcp_connectors:\n  web: {url: \"http://127.0.0.1:9/mcp\", credential: tok}\n  git: {command: [/usr/bin/python3, -m, mcp_server_git], uid: 1880099990, credential: sd, credential_env: TOKEN}\n",
        )
        .unwrap();
        assert_eq!(
            c.credentials["sd"],
            CredentialSource::Systemd("tok-from-systemd".into())
        );
        assert!(
            matches!(&c.mcp_connectors["web"].upstream, UpstreamConf::Url { header, .. } if header == "Authorization")
        );
        assert!(matches!(
            &c.mcp_connectors["git"].upstream,
            UpstreamConf::Command {
                uid: 1880099990,
                ..
            }
        ));
        let secret = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        for (text, at) in [
            ("mcp_connectors:\n  web: {url: \"http://10.0.0.1/mcp\"}\n", "mcp_connectors.web.url"),
            (&format!("mcp_connectors:\n  web: {{url: \"https://x:{secret}@mcp.example/mcp\"}}\n")[..], "mcp_connectors.web.url"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/mcp?a=1\"}\n", "mcp_connectors.web.url"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {client_id: a, grant: password}}\n", "mcp_connectors.web.oauth.grant"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {redirect_uri: \"https://as.example/cb\"}}\n", "mcp_connectors.web.oauth.redirect_uri"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {client_id: a, grant: client_credentials, redirect_uri: \"http://127.0.0.1/cb\"}}\n", "mcp_connectors.web.oauth.redirect_uri"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {grant: client_credentials}}\n", "mcp_connectors.web.oauth.client_id"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {client_id: a, grant: client_credentials, client_secret: nope}}\n", "mcp_connectors.web.oauth.client_secret"),
            ("credentials:\n  tok: /etc/t\nmcp_connectors:\n  web: {url: \"https://mcp.example/\", credential: tok, oauth: {client_id: a, grant: client_credentials}}\n", "mcp_connectors.web.oauth"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {client_id: a, grant: client_credentials, scopes: [\"a b\"]}}\n", "mcp_connectors.web.oauth.scopes"),
            ("credentials:\n  cs: /etc/cs\nmcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {client_id: a, grant: client_credentials, client_secret: cs}}\n", "mcp_connectors.web.oauth.issuer"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {issuer: \"http://10.0.0.1/\"}}\n", "mcp_connectors.web.oauth.issuer"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {issuer: \"https://as.example/?x=1\"}}\n", "mcp_connectors.web.oauth.issuer"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", oauth: {issuer: [1]}}\n", "mcp_connectors.web.oauth.issuer"),
            ("mcp_connectors:\n  web: {url: \"http://127.0.0.1/\", ca_file: /etc/ssl/certs/ca-certificates.crt}\n", "mcp_connectors.web.ca_file"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", ca_file: rel.pem}\n", "mcp_connectors.web.ca_file"),
            ("mcp_connectors:\n  web: {url: \"https://mcp.example/\", ca_file: /nonexistent/ca.pem}\n", "mcp_connectors.web.ca_file"),
            ("mcp_connectors:\n  web: {url: \"http://127.0.0.1/\", credential: nope}\n", "mcp_connectors.web.credential"),
            ("mcp_connectors:\n  git: {command: [python3]}\n", "mcp_connectors.git.command"),
            ("mcp_connectors:\n  git: {command: [/usr/bin/x]}\n", "mcp_connectors.git.uid"),
            ("mcp_connectors:\n  git: {command: [/usr/bin/x], uid: 0}\n", "mcp_connectors.git.uid"),
            ("mcp_connectors:\n  git: {command: [/usr/bin/x], uid: 5000, credential_env: T}\n", "mcp_connectors.git.credential_env"),
            ("mcp_connectors:\n  git: {command: [/usr/bin/x], url: \"http://127.0.0.1/\", uid: 5000}\n", "mcp_connectors.git.url"),
            (&format!("credentials:\n  x: \"{secret}\"\n")[..], "credentials.x"),
        ] {
            let problems = parse(p, text).unwrap_err();
            let all: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            assert!(all.iter().any(|m| m.contains(at)), "{text}: {all:?}");
            assert!(all.iter().all(|m| !m.contains(secret)), "{all:?}");
        }
    }

    #[test]
    fn an_https_connector_takes_a_ca_file_only_others_cannot_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not read at load\n").unwrap();
        let text = format!(
            "mcp_connectors:\n  web: {{url: \"https://mcp.example/mcp\", ca_file: {}}}\n",
            ca.display()
        );
        for (mode, ok) in [(0o644, true), (0o600, true), (0o664, false), (0o646, false)] {
            std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(mode)).unwrap();
            let r = parse(Path::new("c.yaml"), &text);
            match (r, ok) {
                (Ok(c), true) => assert!(matches!(
                    &c.mcp_connectors["web"].upstream,
                    UpstreamConf::Url { ca_file: Some(p), .. } if p == &ca
                )),
                (Err(e), false) => {
                    let all: Vec<String> = e.iter().map(|p| p.to_string()).collect();
                    assert!(
                        all.iter().any(|m| m.contains("mcp_connectors.web.ca_file")
                            && m.contains("others may write it")),
                        "{all:?}"
                    );
                }
                (r, _) => panic!("mode {mode:o}: {:?}", r.map(|_| ())),
            }
        }
    }

    #[test]
    fn builtin_parses() {
        let c = parse(Path::new("(built-in)"), BUILTIN).unwrap();
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/airlock"));
        assert_eq!(c.uid_range.first, 1_880_000_000);
        assert!(c.instances.is_empty());
    }

    #[test]
    fn instances_and_relative_paths() {
        let c = parse(
            Path::new("/etc/airlock/airlock.yaml"),
            "roles: [roles]\nstate_dir: /srv/st\ninstances:\n  tess: {role: code, uid: 1880000005}\n  max: {role: code}\nlimits: {max_procs: 32}\n",
        )
        .unwrap();
        assert_eq!(c.roles, vec![PathBuf::from("/etc/airlock/roles")]);
        assert_eq!(c.instances["tess"].uid, Some(1_880_000_005));
        assert_eq!(c.instances["max"].uid, None);
        assert_eq!(c.limits.max_procs, 32);
        assert_eq!(c.limits.memory_bytes, Limits::default().memory_bytes);
    }

    #[test]
    fn the_agent_reserve_is_carved_from_the_runs_limits() {
        let p = Path::new("c.yaml");
        let c = parse(p, "limits: {max_procs: 100, memory_bytes: 1073741824}\n").unwrap();
        // By default the agent keeps a quarter.
        assert_eq!(c.limits.command_procs(), 75);
        assert_eq!(c.limits.command_memory(1 << 30), 3 << 28);
        let c = parse(
            p,
            "limits: {max_procs: 100, memory_bytes: 1073741824, agent_reserve: {procs: 10, memory_bytes: 104857600}}\n",
        )
        .unwrap();
        assert_eq!(c.limits.command_procs(), 90);
        assert_eq!(c.limits.command_memory(1 << 30), (1 << 30) - (100 << 20));
        for (text, at) in [
            (
                "limits: {max_procs: 10, agent_reserve: {procs: 10}}\n",
                "limits.agent_reserve.procs",
            ),
            (
                "limits: {memory_bytes: 1048576, agent_reserve: {memory_bytes: 1048576}}\n",
                "limits.agent_reserve.memory_bytes",
            ),
            (
                "limits: {agent_reserve: {procs: -1}}\n",
                "limits.agent_reserve.procs",
            ),
            (
                "limits: {agent_reserve: {threads: 3}}\n",
                "limits.agent_reserve.threads",
            ),
            ("limits: {agent_reserve: 5}\n", "limits.agent_reserve"),
        ] {
            let e = parse(p, text).unwrap_err();
            assert!(format!("{e:?}").contains(at), "{text}: {e:?}");
        }
    }

    #[test]
    fn memory_bytes_null_asks_for_no_memory_limit() {
        let p = Path::new("c.yaml");
        let c = parse(p, "limits: {memory_bytes: null}\n").unwrap();
        assert_eq!(c.limits.memory_bytes, None);
        let c = parse(p, "limits: {memory_bytes: 104857600}\n").unwrap();
        assert_eq!(c.limits.memory_bytes, Some(100 << 20));
        assert!(parse(p, "limits: {memory_bytes: -1}\n").is_err());
    }

    #[test]
    fn problems_name_keys_not_values() {
        let errs = parse(
            Path::new("c.yaml"),
            "uid_range: 5-1\nsecret_key: hunter2\ninstances:\n  Bad: {role: code}\n  ok: {role: code, uid: -4}\n",
        )
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(|p| p.to_string()).collect();
        assert!(text.iter().any(|t| t.contains("uid_range")));
        assert!(text
            .iter()
            .any(|t| t.contains("secret_key") && t.contains("unknown key")));
        assert!(text.iter().any(|t| t.contains("instances.ok.uid")));
        assert!(text.iter().all(|t| !t.contains("hunter2")));
    }

    #[test]
    fn unknown_keys_and_bad_instance_names_are_not_echoed() {
        let secret = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
        for text in [
            format!("{secret}: 1\n"),
            format!("limits: {{{secret}: 1}}\n"),
            format!("instances:\n  \"{secret} x\": {{role: code}}\n"),
        ] {
            let problems = parse(Path::new("c.yaml"), &text).expect_err("refused");
            let shown: String = problems.iter().map(|p| format!("{p}\n")).collect();
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn agents_name_each_providers_program() {
        let c = parse(
            Path::new("/c.yaml"),
            "agents: {claude: /opt/claude/bin/claude}\n",
        )
        .unwrap();
        assert_eq!(c.agents["claude"], PathBuf::from("/opt/claude/bin/claude"));
        assert_eq!(c.agents["codex"], default_agents()["codex"]);
        let problems = parse(Path::new("/c.yaml"), "agents: {claude: bin/claude}\n").unwrap_err();
        assert!(problems
            .iter()
            .any(|p| p.to_string().contains("agents.claude")));
    }

    #[test]
    fn daemon_keys() {
        let c = parse(
            Path::new("/c.yaml"),
            "admin_group: wheel\noperator_group: 901\n",
        )
        .unwrap();
        assert_eq!(c.admin_group, Some(GroupRef::Name("wheel".into())));
        assert_eq!(c.operator_group, Some(GroupRef::Gid(901)));
        assert_eq!(c.socket_group, Some(GroupRef::Gid(901)));
        assert_eq!(c.max_concurrent_runs, DEFAULT_MAX_CONCURRENT_RUNS);
        assert_eq!(c.grace_seconds, DEFAULT_GRACE_SECONDS);
        assert_eq!(c.journal_socket, PathBuf::from(DEFAULT_JOURNAL_SOCKET));
        let errs = parse(
            Path::new("/c.yaml"),
            "admin_group: \"Bad Group s3cret\"\nmax_concurrent_runs: 0\ngrace_seconds: -1\n",
        )
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(|p| p.to_string()).collect();
        assert!(text.iter().any(|t| t.contains("admin_group")));
        assert!(text.iter().any(|t| t.contains("max_concurrent_runs")));
        assert!(text.iter().any(|t| t.contains("grace_seconds")));
        assert!(text.iter().all(|t| !t.contains("s3cret")));
        assert_eq!(GroupRef::Name("root".into()).resolve(), Ok(0));
    }
}
