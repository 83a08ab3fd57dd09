//! airlockctl: thin argument parsing over `airlock::cli`.

use std::path::PathBuf;

use airlock::cli::check::Query;
use airlock::cli::remote::Ctx;
use airlock::cli::sources::SourceArgs;
use airlock::cli::{
    check, connector, decisions, explain, fleet, instances, logs, runs, status, timers, validate,
    verify_ledger,
};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "airlockctl",
    version,
    about = "Validate roles, check policy decisions, and launch jailed AI agent runs",
    after_help = "Exit codes: 0 ok or allowed, 1 denied, invalid or not found, 2 usage or I/O error \
                  (launch --wait: the run's exit code, or 128 + the signal that interrupted it; \
                  status: 3 when airlockd is not running; 141 when stdout's reader went away, as after SIGPIPE).\n\
                  Without airlockd, ps, runs, show, instances and logs read the state directory \
                  themselves (as root, or whoever may read it); hire, fire, stop, reload and \
                  launch (but launch --standalone) need airlockd."
)]
pub(crate) struct Cli {
    /// Config file (default /etc/airlock/airlock.yaml, else the built-in default).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// airlockd control socket (default: the config's `socket`).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(flatten)]
    sources: Sources,
    #[command(subcommand)]
    command: Cmd,
}

/// Where roles and policies are read from, overriding the config.
#[derive(Args, Clone, Default)]
struct Sources {
    /// A role directory; repeat for layers, later overrides earlier (roles/ then roles.local/).
    #[arg(long = "roles", value_name = "DIR", global = true)]
    roles: Vec<PathBuf>,
    /// The policies directory.
    #[arg(long, value_name = "DIR", global = true)]
    policies: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long, global = true)]
    json: bool,
}

impl Sources {
    fn args(&self) -> SourceArgs {
        SourceArgs {
            roles: self.roles.clone(),
            policies: self.policies.clone(),
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Check every role file and policy file, offline. Exit 0 valid, 1 invalid.
    Validate,
    /// Show everything Airlock would grant a run of ROLE.
    Explain { role: String },
    /// Decide one request as the gateway would. Exit 0 allow, 1 deny, 2 error.
    Check {
        role: String,
        #[command(subcommand)]
        what: CheckCmd,
    },
    /// Start a run of ROLE as a hired instance (through airlockd unless --standalone).
    Launch(airlock::cli::launch::LaunchArgs),
    /// Attach this terminal to a `launch --tty` run: as its one writer (its launcher or an
    /// admin), or --read-only (any operator). Ctrl-] then d detaches. Exit 1 for an ended,
    /// unknown or someone else's run, 5 without a terminal, 6 while another person types.
    Attach {
        run: String,
        /// Watch only; keys other than the detach key are ignored.
        #[arg(long)]
        read_only: bool,
    },
    /// Active runs (read from the files when airlockd is not running).
    Ps,
    /// Running runs with what they have done so far: age, CPU, memory, tool calls, spend,
    /// writes, the last decision; refreshed in place on a terminal (airlockd only).
    Top {
        /// Print once and exit (also when stdout is not a terminal; --json prints once).
        #[arg(long)]
        once: bool,
    },
    /// The newest runs the ledger records, oldest first (read from the ledger itself when
    /// airlockd is not running).
    Runs {
        /// How many (default 100, at most 10000).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
        last: Option<u32>,
        /// Every host's runs, from the fleet store (`store:`): host, state (active, closed,
        /// unsupervised).
        #[arg(long)]
        fleet: bool,
    },
    /// One run in detail (from the ledger itself when airlockd is not running).
    Show { run: String },
    /// A run's output and events, from the journal or the run's fallback file.
    Logs {
        run: String,
        /// Keep printing until the run ends.
        #[arg(short, long)]
        follow: bool,
        /// Print the agent's own events as it wrote them (JSON lines), not as readable lines.
        #[arg(long)]
        raw: bool,
    },
    /// Stop a run: SIGTERM, a grace period, then kill (needs airlockd; a standalone run is
    /// stopped with Ctrl-C or SIGTERM to its `launch --standalone`).
    Stop { run: String },
    /// Hire an instance of ROLE with its own uid: a decision raised and approved at once
    /// (admin; one with flagged or credential lines waits for an owner; needs airlockd).
    Hire {
        name: String,
        #[arg(long)]
        role: String,
        /// Why, kept with the decision.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Decisions waiting for a person (hires, fires, changes); --all: resolved ones too.
    Decisions {
        #[arg(long)]
        all: bool,
    },
    /// One decision in full: the role, its lines, its digest.
    Decision {
        #[command(subcommand)]
        what: DecisionCmd,
    },
    /// Approve decision ID; --digest must be its current digest (`decision show ID`).
    Approve {
        id: String,
        #[arg(long)]
        digest: String,
    },
    /// Requests waiting for a person: a run's role grants no match for them.
    Asks,
    /// Let ask ID through; --for-run: and the same request for the rest of its run.
    Allow {
        id: String,
        #[arg(long)]
        for_run: bool,
    },
    /// Deny decision ID (d-N) or ask ID (a-N).
    Deny {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Move an instance to its role's template as it is now (a decision).
    Change {
        name: String,
        /// The only change a person asks for here: the template as it is now.
        #[arg(long, required = true)]
        to_template: bool,
    },
    /// An instance's frozen role against its template.
    Role {
        #[command(subcommand)]
        what: RoleCmd,
    },
    /// Fire an instance: it may not run again (admin; needs airlockd).
    Fire { name: String },
    /// Hired instances (from the registry itself when airlockd is not running).
    Instances,
    /// airlockd's state; exit 3 when it is not running.
    Status,
    /// Reload roles, policies and config; an invalid new set is refused whole (admin;
    /// needs airlockd).
    Reload,
    /// Check the ledger's hash chain offline. Exit 0 intact, 1 broken.
    VerifyLedger {
        /// The ledger file (default: <state_dir>/ledger.jsonl).
        #[arg(long, value_name = "PATH")]
        ledger: Option<PathBuf>,
        /// Check every host's ledger as the fleet store (`store:`) mirrors it instead.
        #[arg(long, conflicts_with = "ledger")]
        fleet: bool,
    },
    /// An OAuth connector's authorization (`grant: authorization_code`): log in once,
    /// see each connector's state, log out (needs airlockd).
    Connector {
        #[command(subcommand)]
        what: ConnectorCmd,
    },
    /// The host's OCI images, the roots of runs' command sides (`images`, `environments`;
    /// root only).
    Image {
        #[command(subcommand)]
        what: ImageCmd,
    },
    /// Write systemd timers for hired instances whose role has run.schedule.
    Timers {
        /// Where to write the units.
        #[arg(long, value_name = "DIR", default_value = timers::DEFAULT_OUTPUT)]
        output: PathBuf,
    },
}

#[derive(Subcommand)]
enum DecisionCmd {
    /// The decision in full.
    Show { id: String },
}

#[derive(Subcommand)]
enum RoleCmd {
    /// What changed in the template since the instance's frozen revision.
    Diff { name: String },
}

#[derive(Subcommand)]
enum ImageCmd {
    /// Import an OCI layout (a folder), an OCI archive or a `docker save` tar as NAME.
    Import {
        path: PathBuf,
        #[arg(long)]
        name: String,
    },
    /// Pull REF (registry.example/team/image:tag or @sha256:...) from its registry as NAME,
    /// with the credential and CA `registries` names for its host.
    Pull {
        reference: String,
        #[arg(long)]
        name: String,
    },
    /// Every image: name, digest, size, the roles whose environment it is.
    Ls,
    /// Remove NAME (refused while an environment names it or a run uses it).
    Rm { name: String },
}

#[derive(Subcommand)]
enum ConnectorCmd {
    /// Authorize NAME for this host (admin): the device grant when its server offers it,
    /// else a browser login whose final address you paste back. airlockd keeps the refresh
    /// token.
    Login { name: String },
    /// Each OAuth connector's authorization and access token expiry (never a token).
    Status,
    /// Revoke NAME's refresh token at its server (when it offers revocation) and forget it
    /// (admin).
    Logout { name: String },
}

#[derive(Subcommand)]
enum CheckCmd {
    /// An agent's bash command string, as one argument.
    Bash { command: String },
    /// An MCP tool call with optional JSON arguments.
    Tool {
        connector: String,
        tool: String,
        args_json: Option<String>,
    },
    /// An MCP resource read.
    Resource { connector: String, uri: String },
    /// Whether the role may change PATH in OWNER/REPO, at which effective level.
    Write { repo: String, path: String },
    /// Whether the role's runs may reach HOST[:PORT] (443 by default) through their proxy,
    /// and on a checked destination send METHOD PATH.
    Egress {
        target: String,
        method: Option<String>,
        path: Option<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let config = cli.config.as_deref();
    let sources = &cli.sources;
    let ctx = Ctx {
        config,
        socket: cli.socket.as_deref(),
        json: sources.json,
    };
    let code = match &cli.command {
        Cmd::Validate => match ctx.load_config() {
            Ok(cfg) => validate::run(&sources.args(), &cfg, sources.json),
            Err(code) => code,
        },
        Cmd::Explain { role } => match ctx.load_config() {
            Ok(cfg) => explain::run(&sources.args(), &cfg, role, sources.json),
            Err(code) => code,
        },
        Cmd::Check { role, what } => {
            let query = match what {
                CheckCmd::Bash { command } => Query::Bash {
                    command: command.clone(),
                },
                CheckCmd::Tool {
                    connector,
                    tool,
                    args_json,
                } => Query::Tool {
                    connector: connector.clone(),
                    tool: tool.clone(),
                    args: args_json.clone(),
                },
                CheckCmd::Resource { connector, uri } => Query::Resource {
                    connector: connector.clone(),
                    uri: uri.clone(),
                },
                CheckCmd::Write { repo, path } => Query::Write {
                    repo: repo.clone(),
                    path: path.clone(),
                },
                CheckCmd::Egress {
                    target,
                    method,
                    path,
                } => Query::Egress {
                    target: target.clone(),
                    request: match (method, path) {
                        (Some(m), Some(p)) => Some((m.clone(), p.clone())),
                        (None, None) => None,
                        _ => {
                            eprintln!("check ROLE egress HOST[:PORT] [METHOD PATH]: give both METHOD and PATH, or neither");
                            std::process::exit(2);
                        }
                    },
                },
            };
            match ctx.load_config() {
                Ok(cfg) => check::run(&sources.args(), &cfg, role, &query, sources.json),
                Err(code) => code,
            }
        }
        Cmd::Launch(args) => airlock::cli::launch::run(&ctx, args),
        Cmd::Ps => runs::ps(&ctx),
        Cmd::Top { once } => airlock::cli::top::top(&ctx, *once),
        Cmd::Runs { last, fleet: true } => fleet::runs(&ctx, *last),
        Cmd::Runs { last, .. } => runs::runs(&ctx, *last),
        Cmd::Show { run } => runs::show(&ctx, run),
        Cmd::Logs { run, follow, raw } => logs::logs(&ctx, run, *follow, *raw),
        Cmd::Stop { run } => runs::stop(&ctx, run),
        Cmd::Attach { run, read_only } => airlock::cli::tty::attach(&ctx, run, *read_only),
        Cmd::Hire { name, role, reason } => instances::hire(&ctx, name, role, reason.as_deref()),
        Cmd::Decisions { all } => decisions::list(&ctx, *all),
        Cmd::Decision {
            what: DecisionCmd::Show { id },
        } => decisions::show(&ctx, id),
        Cmd::Approve { id, digest } => decisions::approve(&ctx, id, digest),
        Cmd::Deny { id, .. } if airlock::cli::asks::is_ask_id(id) => {
            airlock::cli::asks::deny(&ctx, id)
        }
        Cmd::Deny { id, reason } => decisions::deny(&ctx, id, reason.as_deref()),
        Cmd::Asks => airlock::cli::asks::list(&ctx),
        Cmd::Allow { id, for_run } => airlock::cli::asks::allow(&ctx, id, *for_run),
        Cmd::Change { name, .. } => decisions::change(&ctx, name),
        Cmd::Role {
            what: RoleCmd::Diff { name },
        } => decisions::role_diff(&ctx, name),
        Cmd::Fire { name } => instances::fire(&ctx, name),
        Cmd::Instances => instances::list(&ctx),
        Cmd::Status => status::status(&ctx),
        Cmd::Reload => status::reload(&ctx),
        Cmd::VerifyLedger { fleet: true, .. } => fleet::verify(&ctx),
        Cmd::VerifyLedger { ledger, .. } => verify_ledger::run(&ctx, ledger.as_deref()),
        Cmd::Connector { what } => match what {
            ConnectorCmd::Login { name } => connector::login(&ctx, name),
            ConnectorCmd::Status => connector::status(&ctx),
            ConnectorCmd::Logout { name } => connector::logout(&ctx, name),
        },
        Cmd::Image { what } => match what {
            ImageCmd::Import { path, name } => airlock::cli::image::import(&ctx, path, name),
            ImageCmd::Pull { reference, name } => airlock::cli::image::pull(&ctx, reference, name),
            ImageCmd::Ls => airlock::cli::image::ls(&ctx),
            ImageCmd::Rm { name } => airlock::cli::image::rm(&ctx, name),
        },
        Cmd::Timers { output } => timers::run(&ctx, &sources.args(), Some(output)),
    };
    std::process::exit(code);
}
