//! Landlock layer of the jail (API placeholder; enforcement lands in the next commit).

use std::fmt;
use std::path::PathBuf;

use super::SandboxError;

/// What the jailed run may touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LandlockRules {
    pub read_only: Vec<PathBuf>,
    pub read_exec: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub connect_tcp: Vec<u16>,
    pub bind_tcp: Vec<u16>,
}

/// What the kernel enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LandlockReport {
    pub abi: i32,
    pub net_rules: bool,
    pub scoped: bool,
}

impl fmt::Display for LandlockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "landlock abi={} fs=enforced net={} scope={}",
            self.abi,
            if self.net_rules { "enforced" } else { "unavailable" },
            if self.scoped { "abstract-unix,signal" } else { "unavailable" }
        )
    }
}

/// Landlock ABI version of the running kernel, 0 when Landlock is unavailable.
pub fn probe_abi() -> i32 {
    0
}

/// Restrict the calling thread (and its future children). Not implemented yet.
pub fn apply(_rules: &LandlockRules) -> Result<LandlockReport, SandboxError> {
    Err(SandboxError::Unsupported {
        step: "landlock",
        why: "not implemented yet in this build".to_string(),
    })
}
