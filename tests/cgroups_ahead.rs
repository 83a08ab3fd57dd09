//! A run's cgroups made before its spec (a warm jail, or a helper its launcher started
//! before the run's record was durable): the sides' cgroups, and on a host whose memory
//! controller is a v1 one the run's memory cgroup. After the spec, only limits are written
//! into them; one the spec does not use (no memory limit) is never joined; all of them go
//! with the run. Real cgroups of this host (hybrid or cgroup2 only), as root.

mod common;

use std::path::{Path, PathBuf};

use airlock::sandbox::limits::{self, RunCgroups};
use airlock::sandbox::spec::Limits;
use common::require_root;

fn run_id(case: &str) -> String {
    format!("r-ahead{case}-{}", std::process::id())
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// The run's cgroups, removed when the test ends, whether it passed or not.
struct Removed(RunCgroups);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = self.0.kill_and_remove();
    }
}

/// Provision as a helper told its run ahead does, make the rest ahead, then limit and split
/// for `limits`. Returns the cgroups and every directory that existed before the spec.
fn ahead_then(case: &str, l: &Limits) -> (Removed, Vec<PathBuf>, airlock::sandbox::sides::Sides) {
    let parent = limits::prepare_parent();
    let c = RunCgroups::provision(parent.as_deref(), &run_id(case)).expect("provision");
    let mut c = Removed(c);
    c.0.make_ahead().expect("make ahead");
    let before = c.0.dirs.clone();
    c.0.limit(l).expect("limit");
    let (sides, _) = c.0.split(l).expect("split");
    (c, before, sides)
}

fn side_dirs(s: &airlock::sandbox::sides::Sides) -> Vec<PathBuf> {
    [&s.agent, &s.command]
        .into_iter()
        .flat_map(|d| d.v2.iter().chain(&d.v1).cloned())
        .collect()
}

#[test]
fn the_sides_are_made_ahead_and_only_limited_after_the_spec() {
    require_root();
    let l = Limits {
        memory_bytes: Some(256 << 20),
        ..Limits::default()
    };
    let (c, before, sides) = ahead_then("m", &l);
    let made = side_dirs(&sides);
    assert!(!made.is_empty(), "no side cgroup on this host: {sides:?}");
    for d in &made {
        assert!(
            before.contains(d),
            "{} was made after the spec",
            d.display()
        );
    }
    // The memory limit is on the run's memory cgroup, made ahead on a v1 host, and that
    // cgroup is one pid 1 joins; each side's own limit is below it.
    let memory = sides
        .agent
        .memory
        .clone()
        .expect("the agent side's memory cgroup");
    let run_memory = memory.parent().unwrap().to_path_buf();
    match limits::v1_parent("memory").filter(|p| run_memory.starts_with(p)) {
        Some(_) => {
            assert!(before.contains(&run_memory), "{}", run_memory.display());
            assert!(c.0.v1_dirs().any(|d| *d == run_memory), "not joined");
            assert_eq!(read(&run_memory.join("memory.limit_in_bytes")), "268435456");
            assert_ne!(
                read(&memory.join("memory.limit_in_bytes")),
                "9223372036854771712"
            );
        }
        None => {
            assert_eq!(read(&run_memory.join("memory.max")), "268435456");
            assert_ne!(read(&memory.join("memory.max")), "max");
        }
    }
    let all = c.0.dirs.clone();
    c.0.kill_and_remove().expect("remove");
    for d in all {
        assert!(!d.exists(), "{} left behind", d.display());
    }
}

#[test]
fn a_memory_cgroup_made_ahead_that_no_limit_takes_is_never_joined() {
    require_root();
    let l = Limits {
        memory_bytes: None,
        ..Limits::default()
    };
    let (c, before, sides) = ahead_then("n", &l);
    assert!(sides.agent.memory.is_none() && sides.command.memory.is_none());
    if let Some(v1) = limits::v1_parent("memory") {
        let ahead: Vec<&PathBuf> = before.iter().filter(|d| d.starts_with(&v1)).collect();
        assert!(
            !ahead.is_empty(),
            "no memory cgroup made ahead on this v1 host"
        );
        assert!(
            !c.0.v1_dirs().any(|d| d.starts_with(&v1)),
            "pid 1 would join a memory cgroup without a limit"
        );
    }
    let all = c.0.dirs.clone();
    c.0.kill_and_remove().expect("remove");
    for d in all {
        assert!(!d.exists(), "{} left behind", d.display());
    }
}
