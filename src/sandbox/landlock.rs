//! Landlock layer of the jail: after this, the run can read only what is listed, write only
//! under `read_write`, reach only the listed TCP ports, and neither signal nor connect to
//! abstract unix sockets of processes outside its own domain.
//!
//! Ordering: the caller sets `PR_SET_NO_NEW_PRIVS` first (the kernel refuses
//! `landlock_restrict_self` without it unless the caller has `CAP_SYS_ADMIN` in its user
//! namespace); `apply` sets it again as a guard and checks it stuck. The domain binds the
//! calling thread and everything it later forks or execs, so call `apply` in the
//! single-threaded child, after the mounts are final and before `execve`.
//!
//! ABI policy (ABI numbers are what `landlock_create_ruleset(VERSION)` reports):
//! - ABI 3 is the minimum. ABI 1 cannot stop `truncate(2)` of a file that is only readable
//!   and ABI 2 adds only REFER; without TRUNCATE (ABI 3) a "read-only" tree could be emptied.
//!   Below 3 `apply` refuses to start the run.
//! - ABI 4 adds TCP bind/connect rules, ABI 5 device ioctls, ABI 6 signal and abstract-unix
//!   scoping. Each is requested exactly when the kernel has it, and reported.
//! - Features of ABI 7 and later (audit flags, thread sync, pathname-unix and UDP rights) are
//!   not requested: the policy is pinned to ABI 6 semantics so a kernel upgrade cannot
//!   silently deny something a role relies on. `LandlockReport::abi` is that enforced level.
//!
//! Everything requested is a hard requirement (the crate errors rather than degrading), and
//! `restrict_self` must report full enforcement, or the run does not start.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use super::SandboxError;

const STEP: &str = "landlock";

/// Below this the filesystem rules cannot be enforced as the jail needs (see module doc).
pub const MIN_ABI: i32 = 3;
/// Highest ABI whose features are requested (see module doc).
pub const POLICY_ABI: i32 = 6;

/// What the jailed run may touch. Paths must exist; a missing one fails the run. A path may
/// name a single file (rights are clipped to those a file can carry): e.g. `/dev/null` must be
/// in `read_write` for any program that redirects to it, as `Command::output` does for stdin.
/// Descriptors opened before `apply` (stdio, sockets) keep working.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LandlockRules {
    /// Read files and list directories.
    pub read_only: Vec<PathBuf>,
    /// As `read_only`, plus execute.
    pub read_exec: Vec<PathBuf>,
    /// Every handled right but making sockets: create, write, remove, truncate, execute,
    /// device ioctl.
    pub read_write: Vec<PathBuf>,
    /// As `read_write`, without execute (the agent side's workspace, home and scratch).
    pub read_write_noexec: Vec<PathBuf>,
    /// Where unix sockets may be made (bound): a side's own /tmp and /dev/shm, never a
    /// folder the other side (or the host) can reach, so no socket can carry a descriptor
    /// from one side to the other.
    pub make_sock: Vec<PathBuf>,
    /// TCP ports the run may connect to (enforced from ABI 4; empty = none).
    pub connect_tcp: Vec<u16>,
    /// TCP ports the run may bind (enforced from ABI 4; empty = none).
    pub bind_tcp: Vec<u16>,
}

/// What the kernel enforced, for the run log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LandlockReport {
    /// The ABI level whose features were enforced: min(kernel ABI, POLICY_ABI).
    pub abi: i32,
    /// TCP bind/connect limited to the listed ports.
    pub net_rules: bool,
    /// Signals and abstract unix sockets scoped to the domain.
    pub scoped: bool,
}

impl fmt::Display for LandlockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "landlock abi={} fs=enforced net={} scope={}",
            self.abi,
            if self.net_rules {
                "enforced"
            } else {
                "unsupported"
            },
            if self.scoped {
                "abstract-unix,signal"
            } else {
                "unsupported"
            }
        )
    }
}

// From <linux/landlock.h>; libc does not export it.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Landlock ABI version of the running kernel; 0 when Landlock is not built in or not enabled.
pub fn probe_abi() -> i32 {
    // SAFETY: with a null attr, size 0 and the VERSION flag the kernel only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        0
    } else {
        i32::try_from(v).unwrap_or(i32::MAX)
    }
}

/// The crate's ABI value for a level we have already checked is within 3..=6.
fn abi_const(level: i32) -> ABI {
    match level {
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

/// Filesystem rights handled at `level` (3..=6).
fn handled_fs(level: i32) -> BitFlags<AccessFs> {
    let mut fs = AccessFs::from_all(ABI::V3);
    if level >= 5 {
        fs |= AccessFs::IoctlDev;
    }
    fs
}

fn read_rights() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir
}

fn unsupported(why: impl Into<String>) -> SandboxError {
    SandboxError::Unsupported {
        step: STEP,
        why: why.into(),
    }
}

fn rule_error(e: landlock::RulesetError) -> SandboxError {
    // The crate's messages name access flags and errnos, never paths from the spec.
    unsupported(format!("the kernel refused the ruleset: {e}"))
}

/// Open `path` as an O_PATH handle and clip `access` to what a non-directory can carry, so
/// a rule on a single file is not rejected for directory-only rights.
fn path_rule(
    list: &str,
    index: usize,
    path: &Path,
    access: BitFlags<AccessFs>,
    level: i32,
) -> Result<PathBeneath<File>, SandboxError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| SandboxError::Invalid {
            step: STEP,
            why: format!("{list}[{index}] cannot be opened: {}", e.kind()),
        })?;
    let meta = file.metadata().map_err(|e| SandboxError::sys(STEP, e))?;
    let access = if meta.is_dir() {
        access
    } else {
        access & AccessFs::from_file(abi_const(level))
    };
    Ok(PathBeneath::new(file, access))
}

fn add_paths(
    mut ruleset: RulesetCreated,
    list: &str,
    paths: &[PathBuf],
    access: BitFlags<AccessFs>,
    level: i32,
) -> Result<RulesetCreated, SandboxError> {
    for (i, p) in paths.iter().enumerate() {
        let rule = path_rule(list, i, p, access, level)?;
        ruleset = ruleset.add_rule(rule).map_err(rule_error)?;
    }
    Ok(ruleset)
}

/// A nested domain that only scopes signals and abstract unix sockets: the caller (a
/// command about to exec) can no longer signal, trace or reach anything of its parent
/// domain (the shepherd that times it, the runner), only its own descendants. Needs
/// Landlock ABI 6; refuses otherwise.
pub fn scope_only() -> Result<(), SandboxError> {
    if probe_abi() < 6 {
        return Err(unsupported(
            "Landlock ABI 6 (signal scoping) is needed to keep a command from its shepherd",
        ));
    }
    let status = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(rule_error)?
        .create()
        .map_err(rule_error)?
        .restrict_self()
        .map_err(rule_error)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(unsupported("the scope was not enforced"));
    }
    Ok(())
}

/// [`scope_only`], and besides: execute (a program, an ELF interpreter, a script's
/// interpreter) only files at or beneath `exec` (missing paths are left out, so one list
/// serves systems that lay programs out differently). Reading, writing and everything else
/// stay as the parent domain has them. For a command whose program must start no other
/// program but the few listed (git, see [`crate::policy::git_overrides`]).
pub fn scope_exec_only(exec: &[PathBuf]) -> Result<(), SandboxError> {
    if probe_abi() < 6 {
        return Err(unsupported(
            "Landlock ABI 6 (signal scoping) is needed to keep a command from its shepherd",
        ));
    }
    let mut created = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::Execute)
        .map_err(rule_error)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(rule_error)?
        .create()
        .map_err(rule_error)?;
    for p in exec {
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(p)
        else {
            continue;
        };
        created = created
            .add_rule(PathBeneath::new(file, AccessFs::Execute))
            .map_err(rule_error)?;
    }
    let status = created.restrict_self().map_err(rule_error)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(unsupported("the exec limit was not enforced"));
    }
    Ok(())
}

/// Restrict the calling thread and its future children to `rules`.
///
/// Refuses (`Unsupported`) when the kernel ABI is below [`MIN_ABI`] or anything requested is
/// not fully enforced; `Invalid` when a listed path cannot be opened.
pub fn apply(rules: &LandlockRules) -> Result<LandlockReport, SandboxError> {
    let kernel = probe_abi();
    if kernel < MIN_ABI {
        return Err(unsupported(format!(
            "Landlock ABI {MIN_ABI} or newer is needed to enforce read-only files \
             (truncate control); this kernel reports {}",
            if kernel == 0 {
                "no Landlock".to_string()
            } else {
                format!("ABI {kernel}")
            }
        )));
    }
    let level = kernel.min(POLICY_ABI);
    let net_rules = level >= 4;
    let scoped = level >= 6;

    let fs = handled_fs(level);
    let mut ruleset = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs)
        .map_err(rule_error)?;
    if net_rules {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(rule_error)?;
    }
    if scoped {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(rule_error)?;
    }
    let mut created = ruleset.create().map_err(rule_error)?;

    created = add_paths(created, "read_only", &rules.read_only, read_rights(), level)?;
    created = add_paths(
        created,
        "read_exec",
        &rules.read_exec,
        read_rights() | AccessFs::Execute,
        level,
    )?;
    let rw = fs & !AccessFs::MakeSock;
    created = add_paths(created, "read_write", &rules.read_write, rw, level)?;
    created = add_paths(
        created,
        "read_write_noexec",
        &rules.read_write_noexec,
        rw & !AccessFs::Execute,
        level,
    )?;
    created = add_paths(
        created,
        "make_sock",
        &rules.make_sock,
        AccessFs::MakeSock.into(),
        level,
    )?;
    if net_rules {
        for &port in &rules.connect_tcp {
            created = created
                .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                .map_err(rule_error)?;
        }
        for &port in &rules.bind_tcp {
            created = created
                .add_rule(NetPort::new(port, AccessNet::BindTcp))
                .map_err(rule_error)?;
        }
    }

    let status = created
        .no_new_privs(true)
        .restrict_self()
        .map_err(rule_error)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(unsupported(format!(
            "the ruleset was not fully enforced ({:?})",
            status.ruleset
        )));
    }
    if !status.no_new_privs {
        return Err(unsupported("no_new_privs could not be set"));
    }
    Ok(LandlockReport {
        abi: level,
        net_rules,
        scoped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_names_each_layer() {
        let full = LandlockReport {
            abi: 6,
            net_rules: true,
            scoped: true,
        };
        assert_eq!(
            full.to_string(),
            "landlock abi=6 fs=enforced net=enforced scope=abstract-unix,signal"
        );
        let old = LandlockReport {
            abi: 3,
            net_rules: false,
            scoped: false,
        };
        assert_eq!(
            old.to_string(),
            "landlock abi=3 fs=enforced net=unsupported scope=unsupported"
        );
    }

    #[test]
    fn handled_rights_grow_with_level() {
        assert!(handled_fs(3).contains(AccessFs::Truncate));
        assert!(!handled_fs(4).contains(AccessFs::IoctlDev));
        assert!(handled_fs(5).contains(AccessFs::IoctlDev));
        assert!(!read_rights().contains(AccessFs::Execute));
        assert!(!read_rights().contains(AccessFs::WriteFile));
    }
}
