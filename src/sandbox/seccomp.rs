//! Seccomp layer of the jail (API placeholder; the filter lands in the next commit).

use super::SandboxError;

/// Install the jail's syscall filter on the calling thread. Not implemented yet.
pub fn install() -> Result<(), SandboxError> {
    Err(SandboxError::Unsupported {
        step: "seccomp",
        why: "not implemented yet in this build".to_string(),
    })
}

/// The `Seccomp:` mode from /proc/self/status (0 off, 1 strict, 2 filter).
pub fn seccomp_mode_of_self() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}
