//! What the supervisor asks the jail helper to build. Serialized as JSON and handed to the
//! single-threaded helper process (`airlock-jail`), never interpreted by the agent.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Run id, e.g. `r-20261129-1a2b3c`. Also the jail's hostname.
    pub run_id: String,
    pub role: String,
    pub instance: String,
    /// The instance's uid and gid on the host.
    pub uid: u32,
    pub gid: u32,
    /// The instance's persistent home (read-write, mode 0700, owned by uid).
    pub home: PathBuf,
    /// The run's workspace (read-write, the cwd, `AIRLOCK_WORKSPACE`).
    pub workspace: PathBuf,
    /// Program and arguments. The program is resolved on the jail's trusted PATH.
    pub argv: Vec<String>,
    /// The whole environment of the agent; nothing is inherited from the launcher.
    pub env: Vec<(String, String)>,
    /// Host paths that must not be visible inside the jail (state dir, other homes, sockets).
    pub hide: Vec<PathBuf>,
    /// Loopback TCP ports the run may connect to (its gateway endpoints).
    pub connect_tcp: Vec<u16>,
    pub limits: Limits,
    /// A delegated cgroup v2 directory to create the run's cgroup under, if any.
    pub cgroup_parent: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_procs: 256,
            memory_bytes: Some(2 << 30),
            tmp_bytes: 256 << 20,
            shm_bytes: 64 << 20,
            nofile: 1024,
        }
    }
}
