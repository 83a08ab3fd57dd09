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
//! - ABI 1 is the minimum (Linux 5.13). Each later feature is requested exactly when the
//!   kernel has it, and reported; where it is missing, the jail keeps the same guarantee by
//!   other means, or the run does not start:
//!   - TRUNCATE (ABI 3, Linux 6.2): without it `truncate(2)` of a file that is only
//!     readable is not refused by Landlock, so [`apply`] checks that every writable mount of
//!     the caller's view with file data lies in a place it may write anyway: anywhere else
//!     the mount's read-only flag refuses it (EROFS). A writable mount elsewhere refuses the
//!     run.
//!   - TCP rules (ABI 4, 6.7): the seccomp filter refuses every IPv4/IPv6 socket but a TCP
//!     stream and every `listen` on one, so no process of a run can listen: the gateway,
//!     made by Airlock, is all a connect can reach, and binding a port serves nothing.
//!   - Scoping (ABI 6, 6.12): the sides are in sibling pid namespaces, so neither can name a
//!     process of the other to signal; an abstract unix socket can neither be listened on
//!     ([`listen_notify`](super::listen_notify)) nor made as a datagram socket (seccomp),
//!     so none can carry anything between the sides; a command is kept from signalling its
//!     shepherd and the runner by its own filter ([`scope_only`]).
//!   - ABI 2 adds only REFER, ABI 5 device ioctls (the seccomp filter refuses the
//!     dangerous ioctls on every kernel).
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

/// Below this there is no Landlock (see module doc).
pub const MIN_ABI: i32 = 1;
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
    /// Truncation refused by Landlock (ABI 3); otherwise by read-only mounts, checked.
    pub truncate: bool,
}

impl fmt::Display for LandlockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "landlock abi={} fs=enforced{} net={} scope={}",
            self.abi,
            if self.truncate {
                ""
            } else {
                " truncate=by-read-only-mounts"
            },
            if self.net_rules {
                "enforced"
            } else {
                "by-seccomp(no-listener-but-airlock)"
            },
            if self.scoped {
                "abstract-unix,signal"
            } else {
                "by-pid-namespaces-and-seccomp"
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

/// The crate's ABI value for a level we have already checked is within 1..=6.
fn abi_const(level: i32) -> ABI {
    match level {
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

/// Filesystem rights handled at `level` (1..=6).
fn handled_fs(level: i32) -> BitFlags<AccessFs> {
    let mut fs = AccessFs::from_all(abi_const(level.min(3)));
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
/// domain (the shepherd that times it, the runner), only its own descendants. On a kernel
/// without scoping (Landlock ABI below 6, Linux before 6.12) the nested domain still keeps
/// it from tracing them (every ABI), and a seccomp filter from signalling `guarded` (the
/// shepherd and the runner, [`seccomp::guard_signals`](super::seccomp::guard_signals)).
pub fn scope_only(guarded: &[i32]) -> Result<(), SandboxError> {
    scope_exec_only(None, guarded)
}

/// [`scope_only`], and besides, with `exec`: execute (a program, an ELF interpreter, a
/// script's interpreter) only files at or beneath `exec` (missing paths are left out, so
/// one list serves systems that lay programs out differently). Reading, writing and
/// everything else stay as the parent domain has them. For a command whose program must
/// start no other program but the few listed (git, see
/// [`crate::policy::git_overrides`]).
pub fn scope_exec_only(exec: Option<&[PathBuf]>, guarded: &[i32]) -> Result<(), SandboxError> {
    ExecScope::build(exec, guarded)?
        .enter()
        .map_err(|e| SandboxError::sys(STEP, std::io::Error::from_raw_os_error(e)))
}

/// [`scope_exec_only`] in two halves: the ruleset (and, below ABI 6, the signal guard's
/// compiled filter) built ahead, by a process that stays unrestricted, and entered by the
/// command's child with system calls alone: that child shares its shepherd's memory until
/// it execs ([`runner`](super::runner)), so it must not allocate.
pub struct ExecScope {
    ruleset: std::os::fd::OwnedFd,
    guard: Option<seccompiler::BpfProgram>,
}

impl ExecScope {
    pub fn build(exec: Option<&[PathBuf]>, guarded: &[i32]) -> Result<ExecScope, SandboxError> {
        let abi = probe_abi();
        if abi < MIN_ABI {
            return Err(unsupported("the kernel has no Landlock"));
        }
        let scoped = abi >= 6;
        let mut ruleset =
            landlock::Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
        // A domain must handle something: Execute, with every file allowed it when `exec`
        // is not given.
        ruleset = ruleset
            .handle_access(AccessFs::Execute)
            .map_err(rule_error)?;
        if scoped {
            ruleset = ruleset
                .scope(Scope::AbstractUnixSocket | Scope::Signal)
                .map_err(rule_error)?;
        }
        let mut created = ruleset.create().map_err(rule_error)?;
        let all = [PathBuf::from("/")];
        for p in exec.unwrap_or(&all) {
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
        // Hard requirement: a ruleset the kernel could not give in full is an error above,
        // so one with a descriptor is enforced in full once entered.
        let Some(ruleset) = Option::<std::os::fd::OwnedFd>::from(created) else {
            return Err(unsupported("the command's domain was not enforced"));
        };
        let guard = if scoped {
            None
        } else {
            Some(super::seccomp::guard_program(guarded)?)
        };
        Ok(ExecScope { ruleset, guard })
    }

    /// Restrict the calling thread: no_new_privs, the domain, then the signal guard where
    /// the kernel has no scoping. System calls only; the errno of a failure.
    pub fn enter(&self) -> Result<(), i32> {
        use std::os::fd::AsRawFd;
        // SAFETY: prctl and landlock_restrict_self take integers (a descriptor we hold).
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    self.ruleset.as_raw_fd(),
                    0u32,
                ) != 0
            {
                return Err(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EPERM));
            }
        }
        match &self.guard {
            Some(p) => super::seccomp::load_raw(p),
            None => Ok(()),
        }
    }
}

/// Restrict the calling thread and its future children to `rules`.
///
/// Refuses (`Unsupported`) when the kernel ABI is below [`MIN_ABI`] or anything requested is
/// not fully enforced; `Invalid` when a listed path cannot be opened.
pub fn apply(rules: &LandlockRules) -> Result<LandlockReport, SandboxError> {
    let kernel = probe_abi();
    if kernel < MIN_ABI {
        return Err(unsupported(
            "the kernel has no Landlock (Linux 5.13 or newer, with landlock in its lsm= list)",
        ));
    }
    let level = kernel.min(POLICY_ABI);
    let net_rules = level >= 4;
    let scoped = level >= 6;
    let truncate = level >= 3;
    if !truncate {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| SandboxError::sys(STEP, e))?;
        let writable: Vec<&Path> = rules
            .read_write
            .iter()
            .chain(&rules.read_write_noexec)
            .map(PathBuf::as_path)
            .collect();
        if let Some(at) = writable_mount_outside(&mountinfo, &writable) {
            return Err(unsupported(format!(
                "this kernel's Landlock (ABI {kernel}) cannot refuse truncating a read-only file, and the writable mount at {at} is outside the run's writable places; Linux 6.2 or newer refuses it"
            )));
        }
    }

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
        truncate,
    })
}

/// Filesystems whose files hold no data a truncation could destroy: their files ignore a
/// size change or are devices.
const NO_DATA: &[&str] = &["proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2"];

/// The first mount point of `mountinfo` that is writable, holds file data, and lies outside
/// every one of `writable` (where the caller may write, so also truncate, anyway).
fn writable_mount_outside(mountinfo: &str, writable: &[&Path]) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        let mut f = pre.split_whitespace();
        let point = f.nth(4)?;
        let options = f.next()?;
        let fstype = post.split_whitespace().next()?;
        let rw = options.split(',').any(|o| o == "rw");
        let point = unescape_octal(point);
        let inside = writable.iter().any(|w| Path::new(&point).starts_with(w));
        (rw && !NO_DATA.contains(&fstype) && !inside).then_some(point)
    })
}

/// mountinfo writes space, tab, newline and backslash in a path as `\ooo`.
pub(super) fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
            truncate: true,
        };
        assert_eq!(
            full.to_string(),
            "landlock abi=6 fs=enforced net=enforced scope=abstract-unix,signal"
        );
        let old = LandlockReport {
            abi: 2,
            net_rules: false,
            scoped: false,
            truncate: false,
        };
        assert_eq!(
            old.to_string(),
            "landlock abi=2 fs=enforced truncate=by-read-only-mounts net=by-seccomp(no-listener-but-airlock) scope=by-pid-namespaces-and-seccomp"
        );
    }

    #[test]
    fn without_truncate_control_a_writable_mount_must_be_a_writable_place() {
        let info = "\
22 1 0:21 / / ro,nosuid - ext4 /dev/vda rw
23 22 0:22 / /proc rw,nosuid,nodev,noexec - proc proc rw
24 22 0:23 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw
25 22 7:1 / /work\\040space rw,nosuid,nodev - ext4 /dev/loop1 rw
26 22 0:24 / /dev/pts rw,nosuid,noexec - devpts devpts rw
";
        fn w(v: &[&'static str]) -> Vec<&'static Path> {
            v.iter().map(|s| Path::new(*s)).collect()
        }
        // /proc and /dev/pts hold no data; the root is read-only.
        assert_eq!(
            writable_mount_outside(info, &w(&["/tmp", "/work space"])),
            None
        );
        assert_eq!(
            writable_mount_outside(info, &w(&["/tmp"])).as_deref(),
            Some("/work space")
        );
        assert_eq!(
            writable_mount_outside(info, &w(&["/tmp/x", "/work space"])).as_deref(),
            Some("/tmp")
        );
        assert_eq!(
            writable_mount_outside(info, &w(&["/", "/work space"])),
            None
        );
    }

    #[test]
    fn handled_rights_grow_with_level() {
        assert!(!handled_fs(1).contains(AccessFs::Refer));
        assert!(handled_fs(2).contains(AccessFs::Refer));
        assert!(!handled_fs(2).contains(AccessFs::Truncate));
        assert!(handled_fs(3).contains(AccessFs::Truncate));
        assert!(!handled_fs(4).contains(AccessFs::IoctlDev));
        assert!(handled_fs(5).contains(AccessFs::IoctlDev));
        assert!(!read_rights().contains(AccessFs::Execute));
        assert!(!read_rights().contains(AccessFs::WriteFile));
    }
}
