//! `airlockctl launch`: parse nothing here (clap does it in the binary), just turn the
//! arguments into a launch and map the outcome to an exit code.

use std::path::PathBuf;

use super::{explain, output};
use crate::catalog::Catalog;
use crate::policy::Policies;
use crate::sandbox::limits;
use crate::supervisor::launch::{self, LaunchRequest};
use crate::supervisor::ledger::Outcome;
use crate::supervisor::outcome::outcome_str;
use crate::supervisor::{process, standalone};

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
    /// Stream the run's output and exit with its exit code.
    #[arg(long)]
    pub wait: bool,
    /// Run the supervisor in this process (no daemon).
    #[arg(long)]
    pub standalone: bool,
    /// Replace the role's agent command, under the same jail and budgets.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Exit code for refused input, failed jail setup, and a ledger held by airlockd.
pub const EXIT_REFUSED: i32 = 2;

pub fn run(ctx: &super::remote::Ctx, args: &LaunchArgs) -> i32 {
    if !args.standalone {
        return super::launch_daemon::run(ctx, args);
    }
    // Started first: the helper builds the common part of the jail while this process
    // reads the policies, the role and the ledger. Refused launches leave it to die with
    // this process.
    let slot = launch::new_slot(limits::prepare_parent());
    let helper = process::spawn_helper(Some(&slot));
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
    let entry = match Catalog::load_one(&cfg.roles, &policies, &args.role) {
        Ok(Some(entry)) => entry,
        Ok(None) => return explain::not_found(&args.role, &[]),
        Err(problems) => return explain::not_found(&args.role, &problems),
    };
    let wait = args.wait;
    let resolved = launch::Resolved {
        role: &entry.loaded,
        policies: &policies,
    };
    let finished = standalone::run(&cfg, &req, resolved, slot, helper, wait, |run_id| {
        // The run id once its record is open; with --wait stdout is the agent's.
        if wait {
            eprintln!("{run_id}");
        } else {
            println!("{run_id}");
        }
    });
    let f = match finished {
        Ok(f) => f,
        Err(e) => {
            eprintln!("airlockctl launch: {e}");
            return EXIT_REFUSED;
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
    if wait {
        c.code
    } else {
        0
    }
}
