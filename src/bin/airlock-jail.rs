//! airlock-jail: the single-threaded jail helper. The supervisor spawns it (never forks
//! itself) with the run spec as JSON on stdin and the status pipe on `--status-fd`; it
//! builds the jail and execs the agent, and exits with the agent's exit code.

use std::io::Read;
use std::os::fd::AsRawFd;

use airlock::sandbox::status::StatusFd;
use airlock::sandbox::{fds, helper, RunSpec, SandboxError};

const MAX_SPEC_BYTES: u64 = 1 << 20;

fn main() {
    let status = match parse_args() {
        Some(fd) => StatusFd(fd),
        None => {
            eprintln!("usage: airlock-jail [--status-fd N] < spec.json");
            std::process::exit(2);
        }
    };
    let code = match prepare(status) {
        Ok(spec) => helper::run(&spec, status),
        Err(e) => {
            status.error(&e);
            helper::EXIT_SETUP_FAILED
        }
    };
    std::process::exit(code);
}

fn parse_args() -> Option<i32> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Some(2),
        [flag, n] if flag == "--status-fd" => n.parse().ok().filter(|fd| *fd >= 2),
        _ => None,
    }
}

fn invalid(step: &'static str, why: &str) -> SandboxError {
    SandboxError::Invalid {
        step,
        why: why.to_string(),
    }
}

fn prepare(status: StatusFd) -> Result<RunSpec, SandboxError> {
    // Nothing the launcher leaked (directory fds, sockets) may reach the jail.
    fds::close_all_except(&[status.raw()])?;
    if !nix::unistd::geteuid().is_root() {
        return Err(invalid("start helper", "airlock-jail must run as root"));
    }
    let threads = std::fs::read_dir("/proc/self/task")
        .map_err(|e| SandboxError::sys("start helper", e))?
        .count();
    if threads != 1 {
        return Err(invalid(
            "start helper",
            "the helper must be single-threaded",
        ));
    }
    let mut text = Vec::new();
    std::io::stdin()
        .take(MAX_SPEC_BYTES)
        .read_to_end(&mut text)
        .map_err(|e| SandboxError::sys("read run spec", e))?;
    // serde messages may quote values: say only that the spec is not valid.
    let spec: RunSpec = serde_json::from_slice(&text)
        .map_err(|_| invalid("read run spec", "stdin is not a valid run spec (JSON)"))?;
    // The agent's stdin is /dev/null, never the launcher's pipe or terminal.
    let null = std::fs::File::open("/dev/null").map_err(|e| SandboxError::sys("stdin", e))?;
    nix::unistd::dup2(null.as_raw_fd(), 0).map_err(|e| SandboxError::errno("stdin", e))?;
    Ok(spec)
}
