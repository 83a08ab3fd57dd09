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
//! [`egress`]).
//!
//! `store` (absent: this host's files alone): a fleet's shared PostgreSQL, see
//! [`store`].
//!
//! Default `uid_range` 1880000000-1880099999, chosen to collide with nothing common:
//! above systemd's container range (524288-1879048191) and therefore above every
//! /etc/subuid range useradd hands out by default (100000 up to 600100000), above
//! DynamicUser (61184-65519), homed (60001-60513), regular users (1000-60000) and nobody,
//! below systemd's foreign range (2147352576-2147418111) and below 2^31, so no signed
//! 32-bit uid handling breaks. Every uid is still checked against NSS before use.

pub mod asks;
pub mod connectors;
pub mod credentials;
pub mod decisions;
pub mod egress;
pub mod github;
pub mod groups;
pub mod images;
pub mod instances;
pub mod limits;
pub mod metrics;
pub mod providers;
pub mod store;
pub mod warm;

pub use connectors::{ConnectorConf, OAuthConf, OAuthGrant, UpstreamConf, DEFAULT_REDIRECT_URI};
pub use credentials::{credential_name, CredentialSource};
pub use github::GithubConf;
pub use groups::GroupRef;
pub(crate) use groups::{group_ref, GROUP_PROBLEM};
pub use instances::{InstanceConf, UidRange};
pub use providers::{ProviderConf, PROVIDER_NAMES};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::diag::{key, Problem};
use crate::names::valid_name;
use limits::{DiskLimits, Limits};

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
    /// Runs' proxied connections: nameservers and ports (see [`crate::config::egress`]).
    pub egress: crate::config::egress::EgressConf,
    /// `metrics`: where airlockd serves Prometheus metrics (none: not served).
    pub metrics: Option<crate::config::metrics::MetricsConf>,
    /// `tracing`: where airlockd sends OpenTelemetry traces (none: no traces).
    pub tracing: Option<crate::config::metrics::TracingConf>,
    /// The agent program of each provider (`agents.claude`, `agents.codex`).
    pub agents: BTreeMap<String, PathBuf>,
    /// The fleet's shared store (`store:`); `None`: this host's files alone.
    pub store: Option<store::StoreConf>,
    /// `decisions`: who approves hires, fires and changes (see [`decisions`]).
    pub decisions: decisions::DecisionsConf,
    /// `images`, `environments`, `registries`: the command side's OCI images.
    pub images: images::ImagesConf,
    /// `asks`: which roles' runs may wait for a person's answer (see [`asks`]).
    pub asks: asks::AsksConf,
    /// Jails built ahead of launches (`warm`, `warm_max`).
    pub warm: warm::WarmConf,
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
    let doc = crate::diag::parse_yaml(file, text)?;
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
    "decisions",
    "images",
    "environments",
    "registries",
    "asks",
    "warm",
    "warm_max",
];
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
            None => crate::config::egress::EgressConf::default(),
            Some(v) => crate::config::egress::parse(
                self.file,
                v,
                &|c: &str| credentials.contains_key(c),
                &mut self.problems,
            ),
        };
        let metrics = get("metrics")
            .and_then(|v| crate::config::metrics::parse(self.file, v, &mut self.problems));
        let tracing = get("tracing")
            .and_then(|v| crate::config::metrics::parse_tracing(self.file, v, &mut self.problems));
        let store = get("store").and_then(|v| {
            let problems = &mut self.problems;
            let file = self.file;
            store::parse(v, &|c: &str| credentials.contains_key(c), &mut |p, m| {
                problems.push(Problem::new(file, p, m))
            })
        });
        let decisions = get("decisions")
            .map(|v| decisions::parse(self.file, v, &mut self.problems))
            .unwrap_or_default();
        let images = images::parse(
            self.file,
            get("images"),
            get("environments"),
            get("registries"),
            &|c: &str| credentials.contains_key(c),
            &mut self.problems,
        );
        let asks = get("asks")
            .map(|v| asks::parse(self.file, v, &mut self.problems))
            .unwrap_or_default();
        let warm = warm::parse(self.file, get("warm"), get("warm_max"), &mut self.problems);
        Some(Config {
            asks,
            warm,
            decisions,
            images,
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
