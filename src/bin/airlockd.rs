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
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(airlock::daemon::main(&cli.config));
}
