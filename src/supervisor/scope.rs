//! A standalone launch needs a cgroup of its own to hand controllers to its run: cgroup v2
//! lets a cgroup hold processes or hand controllers down, never both. Started from a login
//! shell or from inside another service, airlockctl shares its cgroup with processes that
//! are not its own, so on a systemd host it asks systemd for a scope with `Delegate=yes`
//! (as systemd's delegation documentation describes) by executing itself again under
//! `systemd-run --scope`, which runs the same process in the new scope: its terminal,
//! signals and exit code stay the caller's.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::sandbox::limits::{self, OwnCgroup, Settled};

/// Set in the environment of the launch systemd placed in its scope (never asked twice).
pub const IN_SCOPE_ENV: &str = "AIRLOCK_IN_SCOPE";

/// The leaf a standalone launch moves into inside its own cgroup.
const LEAF: &str = "launcher";

const SYSTEMD_RUN: &[&str] = &["/usr/bin/systemd-run", "/bin/systemd-run"];

/// Settle this standalone launch in its cgroup ([`limits::settle`]); when its cgroup is
/// shared and systemd runs the host, first execute it again in a delegated scope of its
/// own. Returns an error only when that execution failed.
pub fn settle_standalone() -> Result<Settled, String> {
    let shared = OwnCgroup::find(LEAF).is_some_and(|c| c.shared);
    if shared && std::env::var_os(IN_SCOPE_ENV).is_none() && systemd_is_init() {
        if let Some(run) = SYSTEMD_RUN.iter().map(Path::new).find(|p| p.is_file()) {
            return Err(reexec_in_scope(run));
        }
    }
    Ok(limits::settle(LEAF))
}

/// Whether systemd is the host's init (its own test, `sd_booted`).
fn systemd_is_init() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Execute this process again under `systemd-run --scope`; returns only on failure.
fn reexec_in_scope(systemd_run: &Path) -> String {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return format!("cannot find its own executable to run it in a scope: {e}"),
    };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let err = std::process::Command::new(systemd_run)
        .args([
            "--scope",
            "--quiet",
            "--collect",
            "--property=Delegate=yes",
            "--description=airlockctl launch --standalone",
            "--",
        ])
        .arg(exe)
        .args(args)
        .env(IN_SCOPE_ENV, "1")
        .exec();
    format!(
        "cannot run itself in a systemd scope of its own ({}: {err})",
        systemd_run.display()
    )
}
