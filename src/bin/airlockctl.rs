//! airlockctl: thin argument parsing over `airlock::cli`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "airlockctl",
    about = "Launch and supervise jailed AI agent runs"
)]
struct Cli {
    /// Config file (default /etc/airlock/airlock.yaml, else the built-in default).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// airlockd control socket.
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a run of ROLE as a hired instance.
    Launch(airlock::cli::launch::LaunchArgs),
}

fn main() {
    let cli = Cli::parse();
    let _ = &cli.socket;
    let code = match &cli.command {
        Cmd::Launch(args) => airlock::cli::launch::run(cli.config.as_deref(), args),
    };
    std::process::exit(code);
}
