//! `airlockctl launch`: parse nothing here (clap does it in the binary), just turn the
//! arguments into a launch and map the outcome to an exit code.

use std::path::PathBuf;
use std::sync::Arc;

use super::interrupt::{self, Signals};
use super::{explain, output};
use crate::catalog::Catalog;
use crate::policy::Policies;

use crate::supervisor::launch::{self, LaunchRequest};
use crate::supervisor::ledger::Outcome;
use crate::supervisor::outcome::outcome_str;
use crate::supervisor::standalone::{signal_name, Interrupt};
use crate::supervisor::{process, scope, standalone};
use crate::terminal::Show;

/// Arguments of `airlockctl launch`.
#[derive(Debug, Clone, clap::Args)]
pub struct LaunchArgs {
    /// The role to run.
    pub role: String,
    /// The hired instance to run as.
    #[arg(long)]
    pub instance: String,
    /// Workspace directory (default: a fresh one under the state dir).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Narrow the run's deadline (never widens the role's minutes_per_run).
    #[arg(long)]
    pub max_seconds: Option<u64>,
    /// Stream the run's output and exit with its exit code. Through airlockd, Ctrl-C
    /// detaches (the run goes on; `airlockctl stop RUN` stops it) and a second Ctrl-C
    /// within 3 s stops the run; SIGTERM stops it; SIGHUP detaches.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: the agent's output exactly as it wrote it, also on a terminal (there,
    /// by default, control characters are shown escaped so the agent cannot drive it).
    #[arg(long, requires = "wait")]
    pub raw: bool,
    /// Run the supervisor in this process (no daemon). Ctrl-C, SIGTERM or SIGHUP stop the
    /// run (SIGTERM, a grace period, then kill), record it as interrupted and exit
    /// 128 + the signal.
    #[arg(long)]
    pub standalone: bool,
    /// Run the agent on a pseudo-terminal and relay this terminal to it (raw mode; keys,
    /// window size, exit code); the role's agent starts in its interactive form with the
    /// brief as its first message. Ctrl-] then d detaches (`airlockctl attach RUN`).
    /// Needs a terminal on stdin and stdout (exit 5 otherwise) and airlockd.
    #[arg(long, conflicts_with_all = ["wait", "raw", "standalone"])]
    pub tty: bool,
    /// Replace the role's agent command, under the same jail and budgets.
    #[arg(last = true)]
    pub command: Vec<String>,
}

impl LaunchArgs {
    /// How `--wait` shows the run's output.
    pub fn show(&self) -> Show {
        if self.raw {
            Show::Raw
        } else {
            Show::Safe
        }
    }
}

/// Exit code for refused input, failed jail setup, and a ledger held by airlockd.
pub const EXIT_REFUSED: i32 = 2;

pub fn run(ctx: &super::remote::Ctx, args: &LaunchArgs) -> i32 {
    if !args.standalone {
        return super::launch_daemon::run(ctx, args);
    }
    // First of all (it may execute this process again in a systemd scope of its own).
    let settled = match scope::settle_standalone() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("airlockctl launch: {e}; nothing was started");
            return EXIT_REFUSED;
        }
    };
    if settled.shared {
        eprintln!("airlockctl launch: this process shares its cgroup with other processes and systemd cannot give it a scope of its own, so no cgroup controller limits the run here (a memory limit then refuses the run); launch through airlockd, or from a cgroup of its own");
    }
    // Before any thread or child exists, so no thread ever takes these signals' default
    // (death, with the run's record left open) and the helper starts with its own mask.
    let signals = match Signals::take() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("airlockctl launch: cannot take SIGINT, SIGTERM and SIGHUP ({e}), so an interrupt could not close the run's record; nothing was started");
            return EXIT_REFUSED;
        }
    };
    let interrupt = Arc::new(Interrupt::default());
    watch_signals(signals, interrupt.clone());
    // Started first: the helper builds the common part of the jail while this process
    // reads the policies, the role and the ledger. Refused launches leave it to die with
    // this process.
    let slot = launch::new_slot(settled.parent);
    let helper = process::spawn_helper(Some(&slot), None);
    let cfg = match ctx.load_config() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let req = LaunchRequest {
        role: args.role.clone(),
        instance: args.instance.clone(),
        workspace: args.workspace.clone(),
        max_seconds: args.max_seconds,
        command: args.command.clone(),
        tty: false,
    };
    // The same rules `validate` checks (rails, classes, canonical names, layers), for the
    // one role this launch needs.
    let policies = match Policies::load(&cfg.policies) {
        Ok(p) => p,
        Err(problems) => {
            output::problems(&problems);
            eprintln!("airlockctl launch: the policies are invalid, so nothing may run; fix them first (`airlockctl validate`)");
            return EXIT_REFUSED;
        }
    };
    // A hired instance runs its frozen revision, never roles/ as it is now (seed 003).
    let pinned = crate::supervisor::decisions::launch_role::pinned(
        &cfg.state_dir,
        &policies,
        &args.instance,
        &args.role,
    );
    let (entry, revision) = match pinned {
        Ok(Some((entry, pin))) => (entry, Some((pin.sha256, pin.rev))),
        Ok(None) => match Catalog::load_one(&cfg.roles, &policies, &args.role) {
            Ok(Some(entry)) => (entry, None),
            Ok(None) => return explain::not_found(&args.role, &[]),
            Err(problems) => return explain::not_found(&args.role, &problems),
        },
        Err(e) => {
            eprintln!("airlockctl launch: {e}; nothing was started");
            return EXIT_REFUSED;
        }
    };
    let wait = args.wait;
    let resolved = launch::Resolved::compile(&entry.loaded, &policies);
    let finished = standalone::run(
        &cfg,
        &req,
        resolved,
        slot,
        helper,
        standalone::Caller {
            stream: wait.then_some(args.show()),
            interrupt: &interrupt,
            revision,
        },
        |run_id| {
            // The run id once its record is open; with --wait stdout is the agent's.
            if wait {
                eprintln!("{run_id}");
            } else {
                // The run goes on whether or not its id could be shown (`| head` gone).
                use std::io::Write;
                let _ = writeln!(std::io::stdout(), "{run_id}");
            }
        },
    );
    let interrupted = interrupt.received();
    let f = match finished {
        Ok(f) => f,
        Err(e) => {
            eprintln!("airlockctl launch: {e}");
            return interrupted.map_or(EXIT_REFUSED, interrupt::exit_code);
        }
    };
    let run_id = &f.run_id;
    let c = &f.closing;
    if let Some(e) = &f.ledger_error {
        eprintln!("airlockctl: run {run_id}: its ledger record could not be closed: {e}; the next start of airlockd closes it as aborted");
    }
    if c.outcome == Outcome::Refused {
        eprintln!("airlockctl: run {run_id}: {}", c.reason);
        return EXIT_REFUSED;
    }
    if c.outcome != Outcome::Exited {
        eprintln!(
            "airlockctl: run {run_id} {}: {}",
            outcome_str(c.outcome),
            c.reason
        );
    }
    match interrupted {
        Some(sig) if c.outcome == Outcome::Interrupted => interrupt::exit_code(sig),
        _ if wait => c.code,
        _ => 0,
    }
}

/// Hand every signal to `interrupt` from a thread of its own, saying on stderr what the
/// first one does.
fn watch_signals(mut signals: Signals, interrupt: Arc<Interrupt>) {
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Some(sig) = signals.wait() {
                let first = interrupt.received().is_none();
                let run = interrupt.signal(sig);
                if !first {
                    continue;
                }
                match run {
                    Some(run) => eprintln!(
                        "airlockctl: {}: stopping run {run} (SIGTERM, then SIGKILL after {} s)",
                        signal_name(sig),
                        launch::GRACE.as_secs()
                    ),
                    None => eprintln!(
                        "airlockctl: {}: stopping the launch before its run starts",
                        signal_name(sig)
                    ),
                }
            }
        });
    if let Err(e) = spawned {
        // The signals stay blocked: they wait, unanswered, until the run ends on its own.
        eprintln!(
            "airlockctl launch: cannot watch for signals ({e}); Ctrl-C has no effect on this run"
        );
    }
}
