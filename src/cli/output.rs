//! Exit codes and output helpers shared by the `airlockctl` subcommands.

use crate::diag::Problem;
use std::io::Write;

/// Valid, or allowed.
pub const OK: i32 = 0;
/// Invalid, or denied.
pub const NO: i32 = 1;
/// Usage or I/O error.
pub const ERROR: i32 = 2;

/// Print a JSON value on stdout, one document.
pub fn json(value: &serde_json::Value) -> i32 {
    let mut out = std::io::stdout().lock();
    match serde_json::to_writer_pretty(&mut out, value)
        .and_then(|_| writeln!(out).map_err(serde_json::Error::io))
    {
        Ok(()) => OK,
        Err(_) => ERROR,
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
