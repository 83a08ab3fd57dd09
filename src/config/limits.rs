//! `limits`: what a run may use (processes, memory, CPU, IO, files, time) and the disk
//! bounds of its workspace and home. Plain data: the jail ([`crate::sandbox`]) applies the
//! first, the supervisor's disks ([`crate::supervisor::disk`]) the second.

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::Parser;
use crate::diag::key;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Most processes (tasks) the run may have at once.
    pub max_procs: u64,
    /// Memory cap in bytes, where cgroups allow it.
    pub memory_bytes: Option<u64>,
    /// Size of the private /tmp tmpfs in bytes.
    pub tmp_bytes: u64,
    /// Size of the private /dev/shm tmpfs in bytes.
    pub shm_bytes: u64,
    /// Most open files per process.
    pub nofile: u64,
    /// cgroup CPU weight of the run (v2 `cpu.weight`, 1-10000, default 100; on cgroup v1
    /// `cpu.shares` = weight * 1024 / 100). `None`: not set. Absent in older specs.
    #[serde(default)]
    pub cpu_weight: Option<u64>,
    /// CPU ceiling in thousandths of a CPU (v2 `cpu.max`, v1 `cpu.cfs_quota_us`); a ceiling
    /// that no controller can enforce refuses the run. `None`: no ceiling.
    #[serde(default)]
    pub cpu_max_millis: Option<u64>,
    /// IO weight (v2 `io.weight`, v1 `blkio.weight`, 1-10000 / 10-1000), where the host's
    /// controller allows; `None`: not set.
    #[serde(default)]
    pub io_weight: Option<u64>,
    /// Wall-clock budget of the run in milliseconds, counted from the spec's arrival. The
    /// helper enforces it itself (SIGTERM to every process of the run, then SIGKILL after
    /// [`Limits::grace_ms`]), so a run cannot outlive its budget even when the launcher's
    /// own watcher is gone. `None`: no deadline. Absent in older specs.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// Time between SIGTERM and SIGKILL when the deadline is reached; `None` means
    /// [`DEFAULT_GRACE_MS`].
    #[serde(default)]
    pub grace_ms: Option<u64>,
    /// Processes the agent side keeps for itself: the command side may have `max_procs`
    /// less these. `None`: [`Limits::agent_procs`]'s default.
    #[serde(default)]
    pub agent_reserve_procs: Option<u64>,
    /// Memory the agent side keeps for itself: the command side's limit is `memory_bytes`
    /// less this. `None`: [`Limits::agent_memory`]'s default.
    #[serde(default)]
    pub agent_reserve_memory_bytes: Option<u64>,
}

impl Limits {
    /// Processes the agent side keeps: `limits.agent_reserve.procs`, by default a quarter
    /// of the run's (64 of 256), never all of them.
    pub fn agent_procs(&self) -> u64 {
        self.agent_reserve_procs
            .unwrap_or(self.max_procs / 4)
            .min(self.max_procs.saturating_sub(1))
    }

    /// The command side's process limit.
    pub fn command_procs(&self) -> u64 {
        self.max_procs - self.agent_procs()
    }

    /// Memory the agent side keeps of the run's `memory`: `limits.agent_reserve.memory_bytes`,
    /// by default a quarter (512 MiB of 2 GiB), never all of it.
    pub fn agent_memory(&self, memory: u64) -> u64 {
        self.agent_reserve_memory_bytes
            .unwrap_or(memory / 4)
            .min(memory.saturating_sub(1 << 20))
    }

    /// The command side's memory limit, of the run's `memory`.
    pub fn command_memory(&self, memory: u64) -> u64 {
        memory - self.agent_memory(memory)
    }
}

/// A run's CPU weight unless the config says otherwise: half the default weight (100)
/// that airlockd's own cgroup has, so a busy run never outweighs its supervisor.
pub const DEFAULT_CPU_WEIGHT: u64 = 50;
/// A run's IO weight unless the config says otherwise (the default is 100).
pub const DEFAULT_IO_WEIGHT: u64 = 50;

/// Grace between SIGTERM and SIGKILL when a spec does not say.
pub const DEFAULT_GRACE_MS: u64 = 3000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_procs: 256,
            memory_bytes: Some(2 << 30),
            tmp_bytes: 256 << 20,
            shm_bytes: 64 << 20,
            nofile: 1024,
            cpu_weight: Some(DEFAULT_CPU_WEIGHT),
            cpu_max_millis: None,
            io_weight: Some(DEFAULT_IO_WEIGHT),
            deadline_ms: None,
            grace_ms: None,
            agent_reserve_procs: None,
            agent_reserve_memory_bytes: None,
        }
    }
}

/// A size and inode bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub bytes: u64,
    pub inodes: u64,
}

/// `limits.workspace`, `limits.home` (each `None` when the config says null: unbounded),
/// and `limits.reserve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLimits {
    pub workspace: Option<Bound>,
    pub home: Option<Bound>,
    pub reserve: Bound,
}

/// A code repository with its build (a Rust `target/`, `node_modules`) fits in 10 GiB and
/// a million files.
pub const DEFAULT_WORKSPACE: Bound = Bound {
    bytes: 10 << 30,
    inodes: 1_000_000,
};
/// Caches that persist between runs (cargo, npm, pip): 4 GiB, 500 000 files.
pub const DEFAULT_HOME: Bound = Bound {
    bytes: 4 << 30,
    inodes: 500_000,
};
/// Free space and inodes under the state directory below which no run starts: room for
/// the ledger, the journal's fallback files and the runs' directories.
pub const DEFAULT_RESERVE: Bound = Bound {
    bytes: 1 << 30,
    inodes: 50_000,
};

/// Smallest bounded filesystem: ext4 needs room for its own metadata.
pub const MIN_BYTES: u64 = 16 << 20;
/// Fewest inodes of a bounded filesystem (ext4 keeps 11 for itself).
pub const MIN_INODES: u64 = 64;

impl Default for DiskLimits {
    fn default() -> Self {
        DiskLimits {
            workspace: Some(DEFAULT_WORKSPACE),
            home: Some(DEFAULT_HOME),
            reserve: DEFAULT_RESERVE,
        }
    }
}

const LIMIT_KEYS: &[&str] = &[
    "max_procs",
    "memory_bytes",
    "tmp_bytes",
    "shm_bytes",
    "nofile",
    "workspace",
    "home",
    "reserve",
    "agent_reserve",
    "cpu_weight",
    "cpu_max",
    "io_weight",
];

const DISK_KEYS: &[&str] = &["disk_bytes", "disk_inodes"];

const AGENT_RESERVE_KEYS: &[&str] = &["procs", "memory_bytes"];

impl Parser<'_> {
    pub(super) fn limits(&mut self, v: &Value) -> Option<Limits> {
        let m = self.mapping(v, "limits", LIMIT_KEYS)?;
        let mut l = Limits::default();
        let num = |p: &mut Self, k: &str, min: u64| -> Option<Option<u64>> {
            match m.get(Value::from(k)) {
                None => Some(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n >= min => Some(Some(n)),
                    _ => {
                        p.problem(&key("limits", k), &format!("must be an integer >= {min}"));
                        None
                    }
                },
            }
        };
        if let Some(n) = num(self, "max_procs", 1)? {
            l.max_procs = n;
        }
        if let Some(n) = num(self, "nofile", 16)? {
            l.nofile = n;
        }
        if let Some(n) = num(self, "tmp_bytes", 4096)? {
            l.tmp_bytes = n;
        }
        if let Some(n) = num(self, "shm_bytes", 4096)? {
            l.shm_bytes = n;
        }
        for (k, slot, hi) in [
            ("cpu_weight", &mut l.cpu_weight, 10_000u64),
            ("io_weight", &mut l.io_weight, 10_000u64),
        ] {
            match m.get(Value::from(k)) {
                None => {}
                Some(Value::Null) => *slot = None,
                Some(v) => match v.as_u64() {
                    Some(n) if (1..=hi).contains(&n) => *slot = Some(n),
                    _ => {
                        self.problem(
                            &key("limits", k),
                            &format!("must be an integer from 1 to {hi} (100 is the cgroup default), or null to leave it unset"),
                        );
                        return None;
                    }
                },
            }
        }
        match m.get(Value::from("cpu_max")) {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_f64() {
                Some(c) if (0.01..=1000.0).contains(&c) => {
                    l.cpu_max_millis = Some((c * 1000.0).round() as u64);
                }
                _ => {
                    self.problem(
                        "limits.cpu_max",
                        "must be a number of CPUs from 0.01 to 1000 (e.g. 1.5), or null for no ceiling",
                    );
                    return None;
                }
            },
        }
        // Absent: the default cap. `null`: no memory limit asked for (the jail refuses to
        // start when a limit is asked for and no memory controller can enforce it).
        if m.get(Value::from("memory_bytes"))
            .is_some_and(Value::is_null)
        {
            l.memory_bytes = None;
        } else if let Some(n) = num(self, "memory_bytes", 1 << 20)? {
            l.memory_bytes = Some(n);
        }
        if let Some(v) = m.get(Value::from("agent_reserve")) {
            self.agent_reserve(v, &mut l)?;
        }
        Some(l)
    }

    /// `limits.workspace`, `limits.home` (a mapping `{disk_bytes, disk_inodes}`, each key
    /// optional, or null: no bound) and `limits.reserve` (the same mapping).
    pub(super) fn disk_limits(&mut self, v: &Value) -> Option<DiskLimits> {
        let m = v.as_mapping()?;
        let mut d = DiskLimits::default();
        let bound =
            |p: &mut Self, k: &str, dflt: Bound, min: (u64, u64)| -> Option<Option<Bound>> {
                let at = key("limits", k);
                let Some(v) = m.get(Value::from(k)) else {
                    return Some(Some(dflt));
                };
                if v.is_null() {
                    return Some(None);
                }
                let bm = p.mapping(v, &at, DISK_KEYS)?;
                let mut b = dflt;
                for (name, lo, slot) in [
                    ("disk_bytes", min.0, &mut b.bytes),
                    ("disk_inodes", min.1, &mut b.inodes),
                ] {
                    if let Some(x) = bm.get(Value::from(name)) {
                        match x.as_u64() {
                            Some(n) if n >= lo && n < 1 << 50 => *slot = n,
                            _ => {
                                p.problem(
                                    &key(&at, name),
                                    &format!("must be an integer from {lo} to 2^50"),
                                );
                                return None;
                            }
                        }
                    }
                }
                Some(Some(b))
            };
        d.workspace = bound(
            self,
            "workspace",
            DEFAULT_WORKSPACE,
            (MIN_BYTES, MIN_INODES),
        )?;
        d.home = bound(self, "home", DEFAULT_HOME, (MIN_BYTES, MIN_INODES))?;
        match bound(self, "reserve", d.reserve, (0, 0))? {
            Some(r) => d.reserve = r,
            None => {
                self.problem(
                    "limits.reserve",
                    "must be a mapping {disk_bytes, disk_inodes}; give 0 for no reserve",
                );
                return None;
            }
        }
        Some(d)
    }

    /// `limits.agent_reserve: {procs, memory_bytes}`: what the agent side keeps of the run's
    /// processes and memory (the command side gets the rest). Each below the run's own.
    pub(super) fn agent_reserve(&mut self, v: &Value, l: &mut Limits) -> Option<()> {
        const AT: &str = "limits.agent_reserve";
        let m = self.mapping(v, AT, AGENT_RESERVE_KEYS)?;
        let get = |k: &str| m.get(Value::from(k)).map(|v| v.as_u64());
        match get("procs") {
            None => {}
            Some(Some(n)) if n < l.max_procs => l.agent_reserve_procs = Some(n),
            Some(_) => {
                self.problem(
                    &key(AT, "procs"),
                    "must be an integer below limits.max_procs (the command side gets the rest)",
                );
                return None;
            }
        }
        match (get("memory_bytes"), l.memory_bytes) {
            (None, _) => {}
            (Some(Some(n)), None) => l.agent_reserve_memory_bytes = Some(n),
            (Some(Some(n)), Some(total)) if n < total => l.agent_reserve_memory_bytes = Some(n),
            (Some(_), _) => {
                self.problem(
                    &key(AT, "memory_bytes"),
                    "must be an integer below limits.memory_bytes (the command side gets the rest)",
                );
                return None;
            }
        }
        Some(())
    }
}
