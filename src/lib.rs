//! Airlock: launch AI agents as their own Unix uid inside namespaces, Landlock and seccomp,
//! under the policy their role file grants.
//!
//! Layering (the manual, docs/src/development.md, "Layout"):
//! - [`role`] and [`policy`] are pure: they parse, validate and decide, with no syscalls
//!   beyond reading the files they are pointed at.
//! - [`sandbox`] is the only place that makes namespace, mount and credential syscalls.
//! - [`supervisor`], [`journal`] and [`control`] turn the jail into a service.
//! - The binaries in `src/bin` only parse arguments and call into [`cli`].

pub mod authority;
pub mod calendar;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod control;
pub mod credentials;
pub mod daemon;
pub mod diag;
pub mod gateway;
pub mod images;
pub mod journal;
pub mod metrics;
pub mod names;
pub mod pattern;
pub mod policy;
pub mod role;
pub mod sandbox;
pub mod schedule;
pub mod secret_shapes;
pub mod shell;
pub mod store;
pub mod supervisor;
pub mod terminal;
pub mod tree;
pub mod trust;
pub mod urls;

/// For unit tests that need root (namespaces, loop devices, mounts): fail loudly, naming
/// `why`, when not run as root.
#[cfg(test)]
pub(crate) fn require_root(why: &str) {
    if !nix::unistd::geteuid().is_root() {
        panic!("{why}: run the tests as root (scripts/test)");
    }
}
