//! Resource limits of a run: rlimits on every process, and per-run cgroups: one in the
//! cgroup v2 hierarchy when the host gives us a writable one (also the kill switch:
//! `cgroup.kill` ends every process of the run), and ones in the cgroup v1 pids and memory
//! hierarchies for the limits the v2 one cannot enforce because those controllers are not
//! delegated to it. A requested memory limit that nothing can enforce refuses the run.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::resource::{setrlimit, Resource};

use super::spec::Limits;
use super::SandboxError;

/// The nice value of every process of a run.
pub const RUN_NICE: libc::c_int = 5;

/// Set the rlimits every process of the run inherits. `nproc`: also cap processes with
/// `RLIMIT_NPROC`, which counts processes of the real uid on the whole host (every run of
/// the instance together); only used when no pids cgroup limits the run itself.
pub fn apply_rlimits(l: &Limits, nproc: bool) -> Result<(), SandboxError> {
    let set = |r: Resource, v: u64, step: &'static str| {
        setrlimit(r, v, v).map_err(|e| SandboxError::errno(step, e))
    };
    set(Resource::RLIMIT_CORE, 0, "rlimit core")?;
    if nproc {
        set(Resource::RLIMIT_NPROC, l.max_procs, "rlimit nproc")?;
    }
    set(Resource::RLIMIT_NOFILE, l.nofile, "rlimit nofile")?;
    // Whatever priority the supervisor runs at (airlockd's unit raises its own), the run
    // runs below the host's default: the backstop where no cpu controller weighs it.
    // SAFETY: setpriority on this process; no memory is passed.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, RUN_NICE) } != 0 {
        return Err(SandboxError::sys("nice", std::io::Error::last_os_error()));
    }
    Ok(())
}

pub(super) fn write_file(path: &Path, text: &str, step: &'static str) -> Result<(), SandboxError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| SandboxError::sys(step, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| SandboxError::sys(step, e))
}

/// How the run's process limit is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcLimit {
    /// `pids.max` of the run's own cgroup v2: per run.
    CgroupV2,
    /// `pids.max` of the run's own cgroup in the v1 pids hierarchy: per run.
    CgroupV1,
    /// `RLIMIT_NPROC` on the instance uid: shared by every run of the instance.
    RlimitNproc,
}

/// How the run's memory limit is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemLimit {
    /// `limits.memory_bytes` is null: no limit was asked for.
    NotRequested,
    /// `memory.max` (and `memory.swap.max` 0 where present) of the run's cgroup v2.
    CgroupV2,
    /// `memory.limit_in_bytes` of the run's v1 memory cgroup; `memsw`: swap included.
    CgroupV1 { memsw: bool },
}

/// How one CPU or IO setting is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    NotRequested,
    /// By the run's cgroup v2.
    V2,
    /// By the run's cgroup in a v1 hierarchy.
    V1,
    /// Asked for, but no controller on this host has it.
    Unavailable,
}

fn knob(asked: Option<u64>, how: Knob) -> Knob {
    match asked {
        Some(_) => how,
        None => Knob::NotRequested,
    }
}

/// What the run's cgroups enforce, for the run log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforcement {
    pub procs: ProcLimit,
    pub memory: MemLimit,
    pub cpu_weight: Knob,
    pub cpu_max: Knob,
    pub io: Knob,
}

/// The run's cgroups: at most one in the cgroup v2 hierarchy (the kill switch and, where
/// delegated, the limits) and one per cgroup v1 hierarchy used for a limit the v2 one
/// cannot give (pids, memory). The helper creates them and stays outside; pid 1 is in all
/// of them before it starts anything of the run; the helper kills and removes them when
/// pid 1 is gone.
///
/// How pid 1 gets in matters for speed: moving another process (a write to
/// `cgroup.procs`) takes the kernel's global cgroup lock for writing, which after an idle
/// spell waits for an RCU grace period: 5-20 ms measured on a busy 2-core host. Two ways
/// avoid it: a child born in the v2 cgroup (`CLONE_INTO_CGROUP`, [`fork_into`]) and a
/// single-threaded process moving itself in a v1 hierarchy (its `tasks` file,
/// [`join_self_v1`]). The helper moves pid 1 into the v2 cgroup only when it could not be
/// born there (the cgroup was made after the fork, or clone3 was refused: a kernel
/// before 5.7, a host's seccomp filter).
///
/// The v1 `airlock` parents stay once made: creating and removing one per run cost each
/// run two more cgroup operations, which serialize on the kernel's cgroup lock. An empty
/// cgroup holds nothing, and systemd removes the subgroups of a unit's cgroup with it.
#[derive(Debug, Default)]
pub struct RunCgroups {
    /// Every run cgroup made, in order (each removed with what was made below it).
    pub dirs: Vec<PathBuf>,
    /// Pid 1 is in the v2 cgroup (born there or moved).
    v2_joined: bool,
    pub(super) run_id: String,
    pub(super) v2: Option<PathBuf>,
    /// Pid 1's leaf below the v2 cgroup, where the v2 cgroup hands controllers down to the
    /// sides of the run (a v2 cgroup with processes of its own may not).
    pub(super) v2_init: Option<PathBuf>,
    /// The v2 cgroup has the pids controller.
    pub(super) v2_pids: bool,
    /// The v2 cgroup has the memory controller.
    pub(super) v2_memory: bool,
    pub(super) v1_pids: Option<PathBuf>,
    pub(super) v1_memory: Option<PathBuf>,
    /// Made before the spec ([`RunCgroups::make_ahead`]): the sides' cgroups, which
    /// [`RunCgroups::split`] then only limits.
    pub(super) sides_ahead: Vec<PathBuf>,
    /// The v2 cgroup hands its controllers down already (made ahead).
    pub(super) handed_down: bool,
    /// A v1 memory cgroup made before the spec, the run's once a memory limit asks for it;
    /// unused (and removed with the rest) otherwise.
    pub(super) v1_memory_ahead: Option<PathBuf>,
}

impl RunCgroups {
    /// Create the run's cgroups, limiting nothing yet: one under `v2_parent` (when given),
    /// and one in the v1 pids hierarchy when the v2 one has no pids controller. Nothing is
    /// left behind on failure. [`RunCgroups::limit`] sets the limits; nothing of the run may
    /// start before it has.
    pub fn provision(v2_parent: Option<&Path>, run_id: &str) -> Result<RunCgroups, SandboxError> {
        let mut cgs = RunCgroups::default();
        match cgs.provision_inner(v2_parent, run_id) {
            Ok(()) => Ok(cgs),
            Err(e) => {
                let _ = cgs.kill_and_remove();
                Err(e)
            }
        }
    }

    fn provision_inner(
        &mut self,
        v2_parent: Option<&Path>,
        run_id: &str,
    ) -> Result<(), SandboxError> {
        if let Some(parent) = v2_parent {
            let dir = self.make(parent, run_id, "create run cgroup")?;
            // A controller's files only exist when the parent delegates it to us.
            self.v2_pids = dir.join("pids.max").exists();
            self.v2_memory = dir.join("memory.max").exists();
            if self.v2_pids || self.v2_memory {
                let init = dir.join("init");
                fs::create_dir(&init).map_err(|e| SandboxError::sys("create run cgroup", e))?;
                self.v2_init = Some(init);
            }
            self.v2 = Some(dir);
        }
        if !self.v2_pids {
            if let Some(parent) = v1_parents().pids.clone() {
                let dir = self.make_v1(&parent, run_id, "create run pids cgroup (v1)")?;
                self.v1_pids = Some(dir);
            }
        }
        self.run_id = run_id.to_string();
        Ok(())
    }

    /// Set the run's limits. Fails closed when a memory limit is requested and no memory
    /// controller can enforce it; pid 1 joins a v1 memory cgroup made here with the
    /// other v1 ones ([`join_self_v1`]).
    ///
    /// Memory accounting includes the run's private /tmp and /dev/shm: tmpfs pages are
    /// charged to the memory cgroup of the process that first touches them (the agent's),
    /// so filling the tmpfs counts against the limit as well as against its size bound.
    pub fn limit(&mut self, limits: &Limits) -> Result<Enforcement, SandboxError> {
        let max_procs = limits.max_procs.to_string();
        let procs = match (&self.v2, &self.v1_pids) {
            (Some(dir), _) if self.v2_pids => {
                write_file(&dir.join("pids.max"), &max_procs, "cgroup pids.max")?;
                ProcLimit::CgroupV2
            }
            (_, Some(dir)) => {
                write_file(&dir.join("pids.max"), &max_procs, "cgroup v1 pids.max")?;
                ProcLimit::CgroupV1
            }
            _ => ProcLimit::RlimitNproc,
        };
        let memory = self.limit_memory(limits)?;
        let (cpu_weight, cpu_max) = self.limit_cpu(limits)?;
        let io = self.limit_io(limits)?;
        Ok(Enforcement {
            procs,
            memory,
            cpu_weight,
            cpu_max,
            io,
        })
    }

    fn limit_memory(&mut self, limits: &Limits) -> Result<MemLimit, SandboxError> {
        let Some(m) = limits.memory_bytes else {
            return Ok(MemLimit::NotRequested);
        };
        let m = m.to_string();
        if let Some(dir) = self.v2.as_ref().filter(|d| d.join("memory.max").exists()) {
            write_file(&dir.join("memory.max"), &m, "cgroup memory.max")?;
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                write_file(&swap, "0", "cgroup memory.swap.max")?;
            }
            return Ok(MemLimit::CgroupV2);
        }
        let Some(parent) = v1_parents().memory.clone() else {
            return Err(SandboxError::Unsupported {
                step: "memory limit",
                why: "fail closed: memory limit requested but no memory controller is \
                      available; set limits.memory_bytes: null to run without one"
                    .to_string(),
            });
        };
        let dir = match self.v1_memory_ahead.take() {
            Some(dir) => dir,
            None => {
                let run_id = self.run_id.clone();
                self.make_v1(&parent, &run_id, "create run memory cgroup (v1)")?
            }
        };
        let has_memsw = limit_memory_v1(&dir, &m)?;
        self.v1_memory = Some(dir);
        Ok(MemLimit::CgroupV1 { memsw: has_memsw })
    }

    /// Ahead of the spec, where a memory limit would be a v1 one: the run's v1 memory
    /// cgroup, which [`RunCgroups::limit`] takes if the spec asks for a limit.
    pub(super) fn make_v1_memory_ahead(&mut self) -> Result<Option<PathBuf>, SandboxError> {
        if self.v2_memory || self.v1_memory.is_some() || self.v1_memory_ahead.is_some() {
            return Ok(None);
        }
        let Some(parent) = v1_parents().memory.clone() else {
            return Ok(None);
        };
        let run_id = self.run_id.clone();
        let dir = self.make_v1(&parent, &run_id, "create run memory cgroup (v1)")?;
        self.v1_memory_ahead = Some(dir.clone());
        Ok(Some(dir))
    }

    /// Where the run's memory limit is: (the cgroup, cgroup v2).
    pub(super) fn memory_dir(&self) -> Option<(&Path, bool)> {
        match (&self.v2, &self.v1_memory) {
            (Some(d), _) if self.v2_memory => Some((d, true)),
            (_, Some(d)) => Some((d, false)),
            _ => None,
        }
    }

    /// Where the run's process limit is: (the cgroup, cgroup v2).
    pub(super) fn pids_dir(&self) -> Option<(&Path, bool)> {
        match (&self.v2, &self.v1_pids) {
            (Some(d), _) if self.v2_pids => Some((d, true)),
            (_, Some(d)) => Some((d, false)),
            _ => None,
        }
    }

    /// The CPU weight (a priority: where no controller gives it, the run says so and
    /// starts) and the CPU ceiling (a bound: where none enforces it, the run is refused).
    fn limit_cpu(&mut self, limits: &Limits) -> Result<(Knob, Knob), SandboxError> {
        let (weight, max) = (limits.cpu_weight, limits.cpu_max_millis);
        if weight.is_none() && max.is_none() {
            return Ok((Knob::NotRequested, Knob::NotRequested));
        }
        const PERIOD_US: u64 = 100_000;
        if let Some(dir) = self.v2.as_ref().filter(|d| d.join("cpu.weight").exists()) {
            if let Some(w) = weight {
                write_file(&dir.join("cpu.weight"), &w.to_string(), "cgroup cpu.weight")?;
            }
            if let Some(m) = max {
                let quota = m.saturating_mul(PERIOD_US) / 1000;
                write_file(
                    &dir.join("cpu.max"),
                    &format!("{quota} {PERIOD_US}"),
                    "cgroup cpu.max",
                )?;
            }
            return Ok((knob(weight, Knob::V2), knob(max, Knob::V2)));
        }
        let Some(parent) = v1_parents().cpu.clone() else {
            if max.is_some() {
                return Err(SandboxError::Unsupported {
                    step: "cpu ceiling",
                    why: "fail closed: limits.cpu_max is set but no cpu controller is \
                          available; set limits.cpu_max: null to run without a ceiling"
                        .to_string(),
                });
            }
            return Ok((knob(weight, Knob::Unavailable), Knob::NotRequested));
        };
        let run_id = self.run_id.clone();
        let dir = self.make_v1(&parent, &run_id, "create run cpu cgroup (v1)")?;
        if let Some(w) = weight {
            // cpu.shares 1024 is cpu.weight 100.
            let shares = (w.saturating_mul(1024) / 100).max(2);
            write_file(
                &dir.join("cpu.shares"),
                &shares.to_string(),
                "cgroup v1 cpu.shares",
            )?;
        }
        if let Some(m) = max {
            write_file(
                &dir.join("cpu.cfs_period_us"),
                &PERIOD_US.to_string(),
                "cgroup v1 cpu.cfs_period_us",
            )?;
            let quota = (m.saturating_mul(PERIOD_US) / 1000).max(1000);
            write_file(
                &dir.join("cpu.cfs_quota_us"),
                &quota.to_string(),
                "cgroup v1 cpu.cfs_quota_us",
            )?;
        }
        Ok((knob(weight, Knob::V1), knob(max, Knob::V1)))
    }

    /// The IO weight, where the host's controller has one (v2 `io.weight`, or v1
    /// `blkio.weight` / `blkio.bfq.weight` with the CFQ or BFQ scheduler).
    fn limit_io(&mut self, limits: &Limits) -> Result<Knob, SandboxError> {
        let Some(w) = limits.io_weight else {
            return Ok(Knob::NotRequested);
        };
        if let Some(dir) = self.v2.as_ref().filter(|d| d.join("io.weight").exists()) {
            write_file(
                &dir.join("io.weight"),
                &format!("default {w}"),
                "cgroup io.weight",
            )?;
            return Ok(Knob::V2);
        }
        let Some(parent) = v1_parents().blkio.clone() else {
            return Ok(Knob::Unavailable);
        };
        // Only with a scheduler that weighs: otherwise the files are absent.
        let file = ["blkio.bfq.weight", "blkio.weight"]
            .into_iter()
            .find(|f| parent.parent().is_some_and(|p| p.join(f).exists()));
        let Some(file) = file else {
            return Ok(Knob::Unavailable);
        };
        let run_id = self.run_id.clone();
        let dir = self.make_v1(&parent, &run_id, "create run blkio cgroup (v1)")?;
        // v1 weights run from 10 to 1000 (default 100, as v2's).
        let w = w.clamp(10, 1000);
        write_file(&dir.join(file), &w.to_string(), "cgroup v1 blkio weight")?;
        Ok(Knob::V1)
    }

    fn make(
        &mut self,
        parent: &Path,
        run_id: &str,
        step: &'static str,
    ) -> Result<PathBuf, SandboxError> {
        let dir = parent.join(run_id);
        fs::create_dir(&dir).map_err(|e| SandboxError::sys(step, e))?;
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    /// Like `make`, under a v1 `airlock` parent, made first if this is its first run.
    fn make_v1(
        &mut self,
        parent: &Path,
        run_id: &str,
        step: &'static str,
    ) -> Result<PathBuf, SandboxError> {
        match fs::create_dir(parent) {
            // Every run together weighs less than airlockd beside them (see RUNS_CPU_WEIGHT).
            Ok(()) => {
                let shares = parent.join("cpu.shares");
                if shares.exists() {
                    let _ = write_file(&shares, &(RUNS_CPU_WEIGHT * 1024 / 100).to_string(), "");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(SandboxError::sys(step, e)),
        }
        self.make(parent, run_id, step)
    }

    /// The cgroups a run with this id has on the host right now (v2 under `v2_parent`, and
    /// the v1 pids and memory hierarchies). For the launcher's backstop after a helper that
    /// could not clean up (e.g. it was SIGKILLed): `existing(..).kill_and_remove()`.
    pub fn existing(v2_parent: Option<&Path>, run_id: &str) -> RunCgroups {
        let v1 = v1_parents();
        let dirs = v2_parent
            .map(Path::to_path_buf)
            .into_iter()
            .chain(v1.pids.iter().cloned())
            .chain(v1.memory.iter().cloned())
            .chain(v1.cpu.iter().cloned())
            .chain(v1.blkio.iter().cloned())
            .map(|p| p.join(run_id))
            .filter(|d| d.is_dir())
            .collect();
        RunCgroups {
            dirs,
            ..RunCgroups::default()
        }
    }

    /// The run's OOM kills as the end line for the launcher (`airlock-jail --end-fd`):
    /// `OOM_KILL run=N agent=N cmd=N`, each counter the kernel keeps (v2 `memory.events`,
    /// hierarchical; v1 `memory.oom_control`) and only those it could read.
    pub fn oom_kill_line(&self) -> String {
        let read = |dir: &Path, file: &str| -> Option<u64> {
            let text = std::fs::read_to_string(dir.join(file)).ok()?;
            super::command_cgroup::keyed(&text, "oom_kill")
        };
        let mut line = String::from("OOM_KILL");
        let mut add = |k: &str, n: Option<u64>| {
            if let Some(n) = n {
                line.push_str(&format!(" {k}={n}"));
            }
        };
        match (&self.v2, &self.v1_memory) {
            (Some(v2), _) if self.v2_memory => {
                add("run", read(v2, "memory.events"));
                add(
                    "agent",
                    read(&v2.join(super::sides::AGENT), "memory.events"),
                );
                add(
                    "cmd",
                    read(&v2.join(super::sides::COMMAND), "memory.events"),
                );
            }
            (_, Some(v1)) => {
                // v1 counts a kill in the victim's cgroup alone: the run's is the sum.
                let f = "memory.oom_control";
                let (own, agent, cmd) = (
                    read(v1, f),
                    read(&v1.join(super::sides::AGENT), f),
                    read(&v1.join(super::sides::COMMAND), f),
                );
                let run = own.map(|o| o + agent.unwrap_or(0) + cmd.unwrap_or(0));
                add("run", run);
                add("agent", agent);
                add("cmd", cmd);
            }
            _ => {}
        }
        line.push('\n');
        line
    }

    /// Pid 1's cgroup v2, for [`fork_into`]: the run's, or its leaf there.
    pub fn v2_dir(&self) -> Option<&Path> {
        self.v2_init.as_deref().or(self.v2.as_deref())
    }

    /// Pid 1 was born in the v2 cgroup: [`RunCgroups::join_v2`] has nothing to do.
    pub fn born_in_v2(&mut self) {
        self.v2_joined = true;
    }

    /// Move process `pid` (pid 1 of the run) into the v2 cgroup unless it is in already;
    /// the children it forks from then on are born there. Takes the kernel's global cgroup
    /// lock (see the type's doc).
    pub fn join_v2(&mut self, pid: nix::unistd::Pid) -> Result<(), SandboxError> {
        if let Some(dir) = self.v2_dir().filter(|_| !self.v2_joined) {
            write_file(
                &dir.join("cgroup.procs"),
                &pid.to_string(),
                "join run cgroup",
            )?;
            self.v2_joined = true;
        }
        Ok(())
    }

    /// The run's v1 cgroups, which pid 1 joins itself ([`join_self_v1`]).
    pub fn v1_dirs(&self) -> impl Iterator<Item = &PathBuf> {
        let v2 = self.v2.clone();
        self.dirs
            .iter()
            .filter(move |d| !v2.as_ref().is_some_and(|v| d.starts_with(v)))
            .filter(move |d| d.file_name().is_some_and(|n| n == self.run_id.as_str()))
            // A memory cgroup made ahead that no limit took is not the run's.
            .filter(move |d| self.v1_memory_ahead.as_ref() != Some(*d))
    }

    /// Kill every process in the run's cgroups and remove them. Safe to call more than
    /// once. Tries every directory even when one fails; returns the first error.
    pub fn kill_and_remove(&self) -> Result<(), SandboxError> {
        let mut first = Ok(());
        // The last made first: a cgroup goes only once its children are gone.
        for d in self.dirs.iter().rev() {
            let r = kill_and_remove(d);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl std::fmt::Display for Enforcement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let procs = match self.procs {
            ProcLimit::CgroupV2 => "per run, cgroup v2 pids.max",
            ProcLimit::CgroupV1 => "per run, cgroup v1 pids.max",
            ProcLimit::RlimitNproc => "per uid, RLIMIT_NPROC (no pids cgroup available)",
        };
        let memory = match self.memory {
            MemLimit::NotRequested => "none (limits.memory_bytes is null)",
            MemLimit::CgroupV2 => "cgroup v2 memory.max",
            MemLimit::CgroupV1 { memsw: true } => {
                "cgroup v1 memory.limit_in_bytes and memory.memsw.limit_in_bytes"
            }
            MemLimit::CgroupV1 { memsw: false } => "cgroup v1 memory.limit_in_bytes",
        };
        let knob = |k: Knob, v2: &'static str, v1: &'static str| match k {
            Knob::NotRequested => "not set (null in the config)",
            Knob::V2 => v2,
            Knob::V1 => v1,
            Knob::Unavailable => "not enforced: no controller for it on this host",
        };
        write!(
            f,
            "process limit: {procs}; memory limit: {memory}; cpu weight: {}; cpu ceiling: {}; io weight: {}",
            knob(self.cpu_weight, "cgroup v2 cpu.weight", "cgroup v1 cpu.shares"),
            match self.cpu_max {
                Knob::NotRequested => "none (limits.cpu_max is null)",
                k => knob(k, "cgroup v2 cpu.max", "cgroup v1 cpu.cfs_quota_us"),
            },
            knob(self.io, "cgroup v2 io.weight", "cgroup v1 blkio weight"),
        )
    }
}

/// The v1 `airlock` parents of this process ([`v1_parent`]), looked up once: where the v1
/// hierarchies are mounted and which cgroup this process is in do not change while it
/// runs, and each lookup reads /proc/self/mountinfo and /proc/self/cgroup.
struct V1Parents {
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    cpu: Option<PathBuf>,
    blkio: Option<PathBuf>,
}

fn v1_parents() -> &'static V1Parents {
    static PARENTS: std::sync::OnceLock<V1Parents> = std::sync::OnceLock::new();
    PARENTS.get_or_init(|| V1Parents {
        pids: v1_parent("pids"),
        memory: v1_parent("memory"),
        cpu: v1_parent("cpu"),
        blkio: v1_parent("blkio"),
    })
}

/// `<mount of the v1 hierarchy with controller>/<our cgroup there>/airlock`, created if
/// needed and writable, or None when that hierarchy is not mounted or not usable. Run
/// cgroups nest under the helper's own cgroup, so limits set above it still apply.
pub fn v1_parent(controller: &str) -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (mount_root, mount_point) = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let (fstype, _source, opts) = (post.next()?, post.next()?, post.next()?);
        if fstype != "cgroup" || !opts.split(',').any(|o| o == controller) {
            return None;
        }
        let mut pre = pre.split_whitespace().skip(3);
        Some((pre.next()?.to_string(), PathBuf::from(pre.next()?)))
    })?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrls.split(',').any(|c| c == controller).then_some(path)
    })?;
    // Our cgroup relative to what this mount shows (its root may be a subtree).
    let rel = Path::new(path).strip_prefix(&mount_root).ok()?;
    let base = mount_point.join(rel);
    // Usable: our own cgroup is there and we may create children in it.
    if !base.join("cgroup.procs").is_file()
        || nix::unistd::access(&base, nix::unistd::AccessFlags::W_OK).is_err()
    {
        return None;
    }
    Some(base.join("airlock"))
}

/// In pid 1 (single-threaded): move this process into each v1 cgroup in `dirs` by writing
/// 0 (itself) to its `tasks` file. A thread that moves itself is moved without the
/// kernel's global cgroup lock; for a single-threaded process that is the whole process.
pub fn join_self_v1(dirs: &[PathBuf]) -> Result<(), SandboxError> {
    for d in dirs {
        write_file(&d.join("tasks"), "0", "join run cgroup (v1)")?;
    }
    Ok(())
}

/// How [`fork_into`] and [`clone_into`] placed the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// `born_in`: the child was born in the cgroup asked for.
    Child { born_in: bool },
    Parent {
        child: nix::unistd::Pid,
        born_in: bool,
    },
}

/// Fork, with the child born in the cgroup v2 directory `cgroup` when given
/// (`clone3(CLONE_INTO_CGROUP)`: no move, so no wait for the kernel's global cgroup lock).
/// Falls back to a plain fork where it cannot be used (kernels before 5.7, a seccomp filter
/// of the host's); the caller then moves the child. The caller must be single-threaded.
pub fn fork_into(cgroup: Option<&Path>) -> Result<Forked, SandboxError> {
    let dir = match cgroup {
        Some(d) => Some(fs::File::open(d).map_err(|e| SandboxError::sys("fork pid 1", e))?),
        None => None,
    };
    clone_into(
        dir.as_ref().map(std::os::fd::AsFd::as_fd),
        false,
        "fork pid 1",
    )
}

/// Fork as [`fork_into`] does, into the cgroup v2 directory open as `cgroup`, and with
/// `new_pid_ns` as pid 1 of a new pid namespace (the caller needs CAP_SYS_ADMIN). The
/// caller must be single-threaded.
pub fn clone_into(
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    new_pid_ns: bool,
    step: &'static str,
) -> Result<Forked, SandboxError> {
    let pid_ns = if new_pid_ns {
        libc::CLONE_NEWPID as u64
    } else {
        0
    };
    if let Some(fd) = cgroup {
        // The kernel's struct clone_args (version 2, with `cgroup`).
        #[repr(C)]
        struct CloneArgs {
            flags: u64,
            pidfd: u64,
            child_tid: u64,
            parent_tid: u64,
            exit_signal: u64,
            stack: u64,
            stack_size: u64,
            tls: u64,
            set_tid: u64,
            set_tid_size: u64,
            cgroup: u64,
        }
        const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
        let args = CloneArgs {
            flags: CLONE_INTO_CGROUP | pid_ns,
            pidfd: 0,
            child_tid: 0,
            parent_tid: 0,
            exit_signal: libc::SIGCHLD as u64,
            stack: 0,
            stack_size: 0,
            tls: 0,
            set_tid: 0,
            set_tid_size: 0,
            cgroup: std::os::fd::AsRawFd::as_raw_fd(&fd) as u64,
        };
        // SAFETY: clone3 without CLONE_VM and without a stack is fork: the child gets a copy
        // of this single-threaded process and returns here with 0. glibc's fork handlers do
        // not run: with one thread no lock can be held by another. What stays stale in the
        // child (pthread_self()'s cached tid, the robust-mutex list) is unused by the jail's
        // processes; raise() and abort() ask the kernel for the tid, and glibc's fork, which
        // they call later, sets it right in the grandchildren.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        match rc {
            0 => return Ok(Forked::Child { born_in: true }),
            pid if pid > 0 => {
                return Ok(Forked::Parent {
                    child: nix::unistd::Pid::from_raw(pid as i32),
                    born_in: true,
                })
            }
            _ => {
                let e = std::io::Error::last_os_error();
                // Out of processes or memory: a fork would fail too. Anything else (no
                // clone3, no CLONE_INTO_CGROUP, a seccomp filter of the host's refusing
                // clone3): fork, and the child is moved, failing closed if it cannot be.
                if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOMEM)) {
                    return Err(SandboxError::sys(step, e));
                }
            }
        }
    }
    if !new_pid_ns {
        // SAFETY: the caller is single-threaded (see above).
        return match unsafe { nix::unistd::fork() }.map_err(|e| SandboxError::errno(step, e))? {
            nix::unistd::ForkResult::Child => Ok(Forked::Child { born_in: false }),
            nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent {
                child,
                born_in: false,
            }),
        };
    }
    // SAFETY: as above; `clone` with only these flags and no stack is fork with a new pid
    // namespace for the child.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            pid_ns | libc::SIGCHLD as u64,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match rc {
        0 => Ok(Forked::Child { born_in: false }),
        pid if pid > 0 => Ok(Forked::Parent {
            child: nix::unistd::Pid::from_raw(pid as i32),
            born_in: false,
        }),
        _ => Err(SandboxError::sys(step, std::io::Error::last_os_error())),
    }
}

/// `memory.limit_in_bytes` of a v1 memory cgroup, and memory plus swap where the host
/// accounts swap (set after the memory limit, which it may not be below). Whether it did.
pub(super) fn limit_memory_v1(dir: &Path, bytes: &str) -> Result<bool, SandboxError> {
    write_file(
        &dir.join("memory.limit_in_bytes"),
        bytes,
        "cgroup v1 memory.limit_in_bytes",
    )?;
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    let has_memsw = memsw.exists();
    if has_memsw {
        write_file(&memsw, bytes, "cgroup v1 memory.memsw.limit_in_bytes")?;
    }
    Ok(has_memsw)
}

/// Kill every process in a run cgroup directory and below it, and remove them all (the
/// deepest first), waiting (bounded) until each is empty.
pub fn kill_and_remove(dir: &Path) -> Result<(), SandboxError> {
    if !dir.exists() {
        return Ok(());
    }
    // cgroup.kill (below) reaches the children too; their folders must go first.
    let mut first = Ok(());
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let r = kill_and_remove(&e.path());
                if first.is_ok() {
                    first = r;
                }
            }
        }
    }
    first?;
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
    // The kernel frees a cgroup a moment after its last task is reaped; until then rmdir
    // says EBUSY. Retry soon, then less often: every launch waits on this.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut pause = Duration::from_micros(50);
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                if Instant::now() > deadline {
                    return Err(SandboxError::sys("remove run cgroup", e));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            }
        }
    }
}

/// CPU weight of the `airlock` parent of every run's cgroup: half the default (100) that
/// airlockd's own cgroup (or, in v1, each of its threads) has, so runs together never
/// outweigh the supervisor that answers `airlockctl` and streams their output.
pub const RUNS_CPU_WEIGHT: u64 = 50;

/// This process's cgroup v2: the cgroup2 mount point and our path below it (the `0::`
/// line of `/proc/self/cgroup`).
pub fn own_cgroup_v2() -> Option<(PathBuf, String)> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let fstype = post.split_whitespace().next()?;
        (fstype == "cgroup2").then(|| pre.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim()
        .to_string();
    Some((mount, rel))
}

/// `<our cgroup>/airlock` as [`prepare_parent_in`] makes it, without moving this process
/// (a test's jails; a service settles with [`settle`]).
pub fn prepare_parent() -> Option<PathBuf> {
    let (mount, rel) = own_cgroup_v2()?;
    prepare_parent_in(&mount.join(rel.trim_start_matches('/')))
}

/// Where this process put itself and where its runs' cgroups go ([`settle`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The parent of the runs' cgroups (`<base>/airlock`); None without a writable cgroup
    /// v2 (runs then rely on their pid namespace, v1 limits and the uid backstop).
    pub parent: Option<PathBuf>,
    /// Our cgroup holds processes that are not ours (a login session's scope, another
    /// service's cgroup): no controller can be handed down from it, so the runs get no
    /// pids or memory controller of cgroup v2 there.
    pub shared: bool,
}

/// Settle this process for running jails, the way cgroup v2's delegation rules ask: a
/// cgroup either holds processes or hands controllers to its children, never both. When
/// our cgroup holds only us (a service with `Delegate=yes`, a delegated scope), we move
/// into a leaf `<base>/<leaf>` of it, which frees `<base>` to hand `pids`, `memory`, `cpu`
/// and `io` to `<base>/airlock`, the parent of every run's cgroup. In the root cgroup (a
/// test host, a container without a cgroup namespace) no such rule holds. A cgroup shared
/// with other processes is left as it is ([`Settled::shared`]): enabling even a threaded
/// controller there would turn it into a thread root and every cgroup below it into an
/// invalid domain, where no process can be placed.
pub fn settle(leaf: &str) -> Settled {
    let Some(own) = OwnCgroup::find(leaf) else {
        return Settled::default();
    };
    let placed = !own.shared && {
        let leaf_dir = own.base.join(leaf);
        (leaf_dir.is_dir() || fs::create_dir(&leaf_dir).is_ok())
            && fs::write(
                leaf_dir.join("cgroup.procs"),
                std::process::id().to_string(),
            )
            .is_ok()
    };
    Settled {
        parent: prepare_parent_in(&own.base),
        shared: own.shared || (!own.root && !placed),
    }
}

/// This process's cgroup v2 as [`settle`] sees it, read only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnCgroup {
    /// Our cgroup (the parent of our leaf when we are in the leaf already).
    pub base: PathBuf,
    /// `base` is the hierarchy's root.
    pub root: bool,
    /// `base` holds processes that are not ours.
    pub shared: bool,
}

impl OwnCgroup {
    pub fn find(leaf: &str) -> Option<OwnCgroup> {
        let (mount, rel) = own_cgroup_v2()?;
        let mut base = mount.join(rel.trim_start_matches('/'));
        if is_hierarchy_root(&base) {
            return Some(OwnCgroup {
                base,
                root: true,
                shared: false,
            });
        }
        // Restarted inside our own leaf (not by systemd, which starts a service in its
        // unit's cgroup): the base is the leaf's parent.
        if base.file_name().is_some_and(|n| n == leaf) {
            if let Some(p) = base.parent() {
                base = p.to_path_buf();
            }
        }
        let me = std::process::id().to_string();
        let shared = fs::read_to_string(base.join("cgroup.procs"))
            .map(|procs| procs.split_whitespace().any(|p| p != me))
            .unwrap_or(true);
        Some(OwnCgroup {
            base,
            root: false,
            shared,
        })
    }
}

/// The root of the cgroup v2 hierarchy (the only cgroup without `cgroup.type`), where a
/// cgroup may hold processes and hand controllers down at once. The root of a cgroup
/// namespace is not the hierarchy's root, and has the file.
fn is_hierarchy_root(dir: &Path) -> bool {
    dir.join("cgroup.controllers").exists() && !dir.join("cgroup.type").exists()
}

/// Whether a cgroup may hand controllers to its children: the hierarchy's root, or a
/// cgroup with no process of its own.
fn may_hand_down(dir: &Path) -> bool {
    is_hierarchy_root(dir)
        || fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
}

/// `<base>/airlock`, created if needed, with the pids, memory, cpu and io controllers
/// handed down to it where `base` has them and may ([`may_hand_down`]), and checked
/// writable; None when it cannot be used. Every standalone launch asks, so a parent
/// already set up costs only reads.
pub fn prepare_parent_in(base: &Path) -> Option<PathBuf> {
    let parent = base.join("airlock");
    let existed = parent.is_dir();
    if !existed {
        fs::create_dir(&parent).ok()?;
    }
    // Best effort: delegation fails on hosts that keep these controllers elsewhere.
    let available = fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    let delegated = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |list: &str, c: &str| list.split_whitespace().any(|x| x == c);
    let base_may = may_hand_down(base);
    for c in ["pids", "memory", "cpu", "io"] {
        if has(&available, c) && !has(&delegated, c) && base_may {
            let _ = write_file(&base.join("cgroup.subtree_control"), &format!("+{c}"), "");
            let _ = write_file(&parent.join("cgroup.subtree_control"), &format!("+{c}"), "");
        }
    }
    // Every run together weighs less than airlockd beside them.
    let weight = parent.join("cpu.weight");
    let want = RUNS_CPU_WEIGHT.to_string();
    if fs::read_to_string(&weight).is_ok_and(|w| w.trim() != want) {
        let _ = write_file(&weight, &want, "");
    }
    // Made just now, it is writable; one made before may sit on a cgroupfs mounted
    // read-only since (a container's), which access() reports (EROFS).
    if existed && nix::unistd::access(&parent, nix::unistd::AccessFlags::W_OK).is_err() {
        return None;
    }
    Some(parent)
}
