//! airlockd: thin argument parsing over `airlock::daemon`.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "airlockd",
    version,
    about = "Supervise jailed AI agent runs: control socket, journal, ledger, budgets"
)]
pub(crate) struct Cli {
    /// Config file.
    #[arg(long, default_value = airlock::config::DEFAULT_CONFIG_PATH)]
    config: PathBuf,
    /// Only let the config's admin_group connect to the socket at PATH (an ACL entry
    /// beside its group), then exit: the socket unit's ExecStartPost=.
    #[arg(long, value_name = "PATH")]
    admit_socket: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    let code = match &cli.admit_socket {
        Some(socket) => airlock::daemon::admit_socket(&cli.config, socket),
        None => airlock::daemon::main(&cli.config),
    };
    std::process::exit(code);
}
