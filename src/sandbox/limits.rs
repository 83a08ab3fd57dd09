//! Resource limits of a run: rlimits on every process, and a per-run cgroup v2 when the host
//! gives us a writable cgroup2 hierarchy. The cgroup is also the kill switch: `cgroup.kill`
//! ends every process of the run, whatever it did to detach itself.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::resource::{setrlimit, Resource};

use super::spec::Limits;
use super::SandboxError;

/// Set the rlimits every process of the run inherits. `RLIMIT_NPROC` counts processes of
/// the real uid on the whole host, which is the instance's own uid.
pub fn apply_rlimits(l: &Limits) -> Result<(), SandboxError> {
    let set = |r: Resource, v: u64, step: &'static str| {
        setrlimit(r, v, v).map_err(|e| SandboxError::errno(step, e))
    };
    set(Resource::RLIMIT_CORE, 0, "rlimit core")?;
    set(Resource::RLIMIT_NPROC, l.max_procs, "rlimit nproc")?;
    set(Resource::RLIMIT_NOFILE, l.nofile, "rlimit nofile")?;
    Ok(())
}

/// A run's cgroup directory.
#[derive(Debug)]
pub struct RunCgroup {
    pub dir: PathBuf,
}

/// What the cgroup could enforce, for the run log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CgroupReport {
    pub pids_max: bool,
    pub memory_max: bool,
}

fn write_file(path: &Path, text: &str, step: &'static str) -> Result<(), SandboxError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| SandboxError::sys(step, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| SandboxError::sys(step, e))
}

impl RunCgroup {
    /// Create `<parent>/<run_id>` and set what limits its controllers allow. The caller
    /// (the helper) stays outside: it must be able to kill and remove the cgroup, which it
    /// cannot from inside (cgroup.kill would kill it too, rmdir would fail with EBUSY).
    /// Pid 1 of the run [`join`](RunCgroup::join)s it before anything else.
    pub fn create(
        parent: &Path,
        run_id: &str,
        limits: &Limits,
    ) -> Result<(RunCgroup, CgroupReport), SandboxError> {
        let dir = parent.join(run_id);
        fs::create_dir(&dir).map_err(|e| SandboxError::sys("create run cgroup", e))?;
        let cg = RunCgroup { dir };
        let mut report = CgroupReport::default();
        // A controller's files only exist when the parent delegates it to us.
        let pids = cg.dir.join("pids.max");
        if pids.exists() {
            write_file(&pids, &limits.max_procs.to_string(), "cgroup pids.max")?;
            report.pids_max = true;
        }
        if let Some(m) = limits.memory_bytes {
            let mem = cg.dir.join("memory.max");
            if mem.exists() {
                write_file(&mem, &m.to_string(), "cgroup memory.max")?;
                let swap = cg.dir.join("memory.swap.max");
                if swap.exists() {
                    write_file(&swap, "0", "cgroup memory.swap.max")?;
                }
                report.memory_max = true;
            }
        }
        Ok((cg, report))
    }

    /// Move the calling process into the cgroup (its children will follow).
    pub fn join(&self) -> Result<(), SandboxError> {
        write_file(&self.dir.join("cgroup.procs"), "0", "join run cgroup")
    }

    /// Kill every process in the cgroup and remove it. Safe to call more than once.
    pub fn kill_and_remove(&self) -> Result<(), SandboxError> {
        kill_and_remove(&self.dir)
    }
}

/// Kill every process in a run cgroup directory and remove it, waiting (bounded) until it
/// is empty.
pub fn kill_and_remove(dir: &Path) -> Result<(), SandboxError> {
    if !dir.exists() {
        return Ok(());
    }
    let kill = dir.join("cgroup.kill");
    if kill.exists() {
        write_file(&kill, "1", "cgroup.kill")?;
    } else {
        // Kernels before 5.14: signal each member; new forks are caught on the next pass.
        for _ in 0..50 {
            let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            if procs.trim().is_empty() {
                break;
            }
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                if Instant::now() > deadline {
                    return Err(SandboxError::sys("remove run cgroup", e));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Find a cgroup v2 directory we can create run cgroups under: `<cgroup2 mount><our
/// cgroup>/airlock`, created if needed. Tries to delegate the pids and memory controllers
/// to it; whether that worked shows up as `pids.max` in each run cgroup.
pub fn prepare_parent() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let fstype = post.split_whitespace().next()?;
        (fstype == "cgroup2").then(|| pre.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let base = mount.join(rel.trim_start_matches('/'));
    let parent = base.join("airlock");
    if !parent.is_dir() {
        fs::create_dir(&parent).ok()?;
    }
    // Best effort: delegation fails on hosts that keep these controllers elsewhere.
    let available = fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    for c in ["pids", "memory"] {
        if available.split_whitespace().any(|x| x == c) {
            let _ = write_file(&base.join("cgroup.subtree_control"), &format!("+{c}"), "");
            let _ = write_file(&parent.join("cgroup.subtree_control"), &format!("+{c}"), "");
        }
    }
    // Writable at all? A read-only cgroupfs would make every run fail later.
    let probe = parent.join(format!("probe-{}", std::process::id()));
    fs::create_dir(&probe).ok()?;
    let _ = fs::remove_dir(&probe);
    Some(parent)
}
