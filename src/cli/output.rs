//! Exit codes and output helpers shared by the `airlockctl` subcommands.

use crate::diag::Problem;
use std::io::Write;

/// What a shell reports for a program its pipe's reader went away from (128 + SIGPIPE):
/// `airlockctl ... | head -1` ends with this, quietly, as coreutils do.
pub const BROKEN_PIPE: i32 = 141;

/// `print!` that never panics: a reader gone (`| head`) ends airlockctl quietly with
/// [`BROKEN_PIPE`]; any other failure to write says so on stderr and exits [`ERROR`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::output::stdout_fmt(format_args!($($arg)*)) };
}

/// `println!` that never panics (see [`out!`]).
macro_rules! outln {
    () => { $crate::cli::output::stdout_fmt(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::cli::output::stdout_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use {out, outln};

/// Write to stdout; on failure end the process as [`out!`] says.
pub fn stdout_fmt(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        stdout_failed(&e);
    }
}

/// End airlockctl after a failed write to stdout: quietly with [`BROKEN_PIPE`] when the
/// reader went away, else saying why.
pub fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(BROKEN_PIPE);
    }
    let _ = writeln!(std::io::stderr(), "airlockctl: cannot write to stdout: {e}");
    std::process::exit(ERROR);
}

/// Valid, or allowed.
pub const OK: i32 = 0;
/// Invalid, or denied.
pub const NO: i32 = 1;
/// Usage or I/O error.
pub const ERROR: i32 = 2;
/// Done on this host, not yet in the fleet store (queued; sent once the store is back).
pub const FLEET_PENDING: i32 = 4;

/// Print a JSON value on stdout, one document.
pub fn json(value: &serde_json::Value) -> i32 {
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer_pretty(&mut out, value)
        .map_err(std::io::Error::from)
        .and_then(|_| writeln!(out));
    match written {
        Ok(()) => OK,
        Err(e) => stdout_failed(&e),
    }
}

/// Print problems on stderr, one per line, as `file: key.path: what is wrong`.
pub fn problems(problems: &[Problem]) {
    let mut err = std::io::stderr().lock();
    for p in problems {
        let _ = writeln!(err, "{p}");
    }
}

pub fn problems_json(problems: &[Problem]) -> serde_json::Value {
    serde_json::Value::Array(
        problems
            .iter()
            .map(|p| {
                serde_json::json!({
                    "file": p.file.display().to_string(),
                    "path": p.path,
                    "message": p.message,
                })
            })
            .collect(),
    )
}
