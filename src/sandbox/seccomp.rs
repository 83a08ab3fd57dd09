//! Seccomp layer of the jail: a filter for the native architecture that lets everything
//! through except the calls in [`seccomp_table`](super::seccomp_table). Each side of a run
//! gets its own ([`Side`]): the agent side's also refuses `memfd_create` (and so does the
//! command side's on a kernel without `vm.memfd_noexec`, before 6.3).
//!
//! Two stacked filters (the kernel runs both and takes the strictest verdict; each load
//! costs a run a JIT compile and a pass over every syscall number, so they are few):
//! 1. Hand-written: the native audit arch only (anything else kills the process); on x86_64
//!    syscalls of the x32 ABI, which share the x86_64 audit arch but carry bit 30 in their
//!    number, get ENOSYS, as on a kernel built without x32; `clone3` → ENOSYS (its flags sit
//!    in memory that seccomp cannot read, so libc is made to fall back to `clone`, whose
//!    flags filter 2 inspects); `socket` and `socketpair` with a family outside
//!    [`SOCKET_FAMILIES_ALLOWED`](super::seccomp_table::SOCKET_FAMILIES_ALLOWED) →
//!    EAFNOSUPPORT (an allowlist: families added by future kernels stay closed; the family
//!    is compared as 32 bits, as the kernel reads an `int`, so junk in the upper half of the
//!    register can neither smuggle a refused family through nor block an allowed one), an
//!    IPv4/IPv6 socket that is not a TCP stream → EPERM, a netlink protocol but
//!    NETLINK_ROUTE → EPROTONOSUPPORT (type and protocol compared as 32 bits too); `listen`
//!    → a user notification, answered by the jail's helper outside the jail
//!    ([`listen_notify`](super::listen_notify)): a unix socket may listen, an IPv4/IPv6 one
//!    may not (it would bind itself to a port, which Landlock does not see); then
//!    the unconditional deny list (EPERM), searched in sorted chunks of [`CHUNK`] numbers
//!    rather than one long chain. A chain of ~190 compares walked in full for every allowed
//!    call made each run pay about 0.2 ms in the kernel, which evaluates a new filter for
//!    every syscall number when it is loaded (the seccomp action cache), and every allowed
//!    syscall pays it at run time.
//! 2. Built with seccompiler, the conditional denials (EPERM): `clone` with a namespace flag
//!    (masked compare on the low 32 bits, where all those flags live), `ioctl` with a refused
//!    request (compared as 32 bits, as the kernel truncates it), `personality` other than
//!    default or query, `prlimit64` setting the limits of any process but the caller
//!    (pid 0), and the scheduling calls of [`SELF_ONLY`](super::seccomp_table::SELF_ONLY)
//!    on any process but the caller: a command could otherwise blind, kill or starve the
//!    shepherd that times it (RLIMIT_NOFILE 0, RLIMIT_AS, RLIMIT_CPU, SCHED_IDLE). The
//!    other side's processes it cannot even name: each side has a pid namespace of its own.
//!
//! The seccompiler filter starts with an architecture check that kills the process on any
//! other audit arch (e.g. 32-bit `int 0x80` calls on x86_64), so nothing runs unfiltered.
//!
//! `install` needs no_new_privs (or CAP_SYS_ADMIN); seccompiler sets `PR_SET_NO_NEW_PRIVS`
//! before loading a filter, so it holds afterwards whatever the caller did. Filters bind
//! the calling thread and its future children: call it in the single-threaded jail child,
//! last before `execve` (after Landlock, which itself needs no syscall refused here).

use std::collections::BTreeMap;
use std::os::fd::{OwnedFd, RawFd};

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::seccomp_table as table;
use super::SandboxError;

const STEP: &str = "seccomp";

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the seccomp layer supports x86_64 and aarch64 only");

fn build_error(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Invalid {
        step: STEP,
        why: format!("the filter could not be built: {e}"),
    }
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(build_error)
}

/// `clone` is refused when any namespace flag is set: one rule per flag, rules are ORed.
fn clone_rules() -> Result<Vec<SeccompRule>, SandboxError> {
    table::NAMESPACE_CLONE_FLAGS
        .iter()
        .map(|&(_, flag)| {
            // The flags are positive c_int constants; the cast is lossless.
            let bit = flag as u32 as u64;
            SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(bit), bit)?]).map_err(build_error)
        })
        .collect()
}

fn ioctl_rules() -> Result<Vec<SeccompRule>, SandboxError> {
    table::IOCTL_REQUESTS
        .iter()
        .map(|&(_, req)| {
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, req)?]).map_err(build_error)
        })
        .collect()
}

/// One rule: personality's argument differs from every allowed value (conditions are ANDed).
fn personality_rules() -> Result<Vec<SeccompRule>, SandboxError> {
    let conds = table::PERSONALITY_ALLOWED
        .iter()
        .map(|&v| cond(0, SeccompCmpOp::Ne, v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(vec![SeccompRule::new(conds).map_err(build_error)?])
}

/// `prlimit64(pid, resource, new, old)` with a pid other than 0 and a new limit: only a
/// process's own limits may be set (reads stay allowed: `prlimit --pid` shows them).
fn prlimit_rules() -> Result<Vec<SeccompRule>, SandboxError> {
    Ok(vec![SeccompRule::new(vec![
        cond(0, SeccompCmpOp::Ne, 0)?,
        SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)
            .map_err(build_error)?,
    ])
    .map_err(build_error)?])
}

/// The rules of a [`SelfOnly`](table::SelfOnly) call: its pid argument is not 0, or its
/// `which` names more than one process (rules are ORed).
fn not_self(pid: u8, which: Option<(u8, u64)>) -> Result<Vec<SeccompRule>, SandboxError> {
    let mut rules =
        vec![SeccompRule::new(vec![cond(pid, SeccompCmpOp::Ne, 0)?]).map_err(build_error)?];
    if let Some((arg, one)) = which {
        rules.push(SeccompRule::new(vec![cond(arg, SeccompCmpOp::Ne, one)?]).map_err(build_error)?);
    }
    Ok(rules)
}

/// Which side of a run a filter is for (the manual, docs/src/jail.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The agent program and what it forks: it may start no other program.
    Agent,
    /// The runner and the commands it starts (and a workflow role's command).
    Command,
}

/// What the running kernel lacks that the filters make up for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fallbacks {
    /// No `vm.memfd_noexec` (before Linux 6.3): neither side may make a memfd, so none
    /// exists in the run to be executed.
    pub no_memfd: bool,
    /// No Landlock scoping of abstract unix sockets (ABI below 6, before Linux 6.12): no
    /// unix datagram socket may be made (`socketpair` still may), so no abstract name can
    /// carry anything between the sides (a stream one needs `listen`, which
    /// [`listen_notify`](super::listen_notify) refuses on an abstract name there).
    pub no_unix_scope: bool,
}

impl Fallbacks {
    pub fn of_kernel() -> Fallbacks {
        Fallbacks {
            no_memfd: !super::namespaces::kernel_has_memfd_noexec(),
            no_unix_scope: super::landlock::probe_abi() < 6,
        }
    }
}

/// A filter that answers EPERM to every call its rules match and lets the rest through.
fn eperm_program(rules: BTreeMap<i64, Vec<SeccompRule>>) -> Result<BpfProgram, SandboxError> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(build_error)?;
    BpfProgram::try_from(filter).map_err(build_error)
}

/// The EPERM denials that look at arguments, as BPF.
pub fn deny_program(f: Fallbacks) -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    if f.no_unix_scope {
        // SOCK_SEQPACKET needs listen too; a datagram socket needs none.
        let rule = SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Eq, libc::AF_UNIX as u64)?,
            cond(1, SeccompCmpOp::MaskedEq(0xf), libc::SOCK_DGRAM as u64)?,
        ])
        .map_err(build_error)?;
        rules.insert(libc::SYS_socket, vec![rule]);
    }
    rules.insert(libc::SYS_clone, clone_rules()?);
    rules.insert(libc::SYS_ioctl, ioctl_rules()?);
    rules.insert(libc::SYS_personality, personality_rules()?);
    rules.insert(libc::SYS_prlimit64, prlimit_rules()?);
    for &(_, nr, pid, which) in table::SELF_ONLY {
        rules.insert(nr, not_self(pid, which)?);
    }
    eperm_program(rules)
}

/// For a command on a kernel without Landlock's signal scoping (before 6.12): a filter that
/// keeps it from signalling `guarded` (its shepherd and the runner, in its pid namespace)
/// and their process groups, every process at once (`kill(-1)`), and from aiming `SIGIO`
/// at them; `pidfd_send_signal` is refused outright (a pidfd or a `/proc/PID` descriptor
/// names its target where seccomp cannot read it; libraries fall back to `kill`). EPERM.
pub fn guard_signals(guarded: &[i32]) -> Result<(), SandboxError> {
    load(&guard_program(guarded)?)
}

pub(super) fn guard_program(guarded: &[i32]) -> Result<BpfProgram, SandboxError> {
    let eq = |arg: u8, v: i32| -> Result<SeccompRule, SandboxError> {
        // Compared as 32 bits, as the kernel reads a pid_t.
        SeccompRule::new(vec![cond(arg, SeccompCmpOp::Eq, v as u32 as u64)?]).map_err(build_error)
    };
    let targets = |arg: u8, groups: bool| -> Result<Vec<SeccompRule>, SandboxError> {
        let mut v = Vec::new();
        for &p in guarded {
            v.push(eq(arg, p)?);
            if groups {
                v.push(eq(arg, -p)?);
            }
        }
        if groups {
            v.push(eq(arg, -1)?);
        }
        Ok(v)
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_kill, targets(0, true)?);
    rules.insert(libc::SYS_tkill, targets(0, false)?);
    rules.insert(libc::SYS_tgkill, targets(0, false)?);
    rules.insert(libc::SYS_rt_sigqueueinfo, targets(0, false)?);
    rules.insert(libc::SYS_rt_tgsigqueueinfo, targets(0, false)?);
    rules.insert(libc::SYS_pidfd_open, targets(0, false)?);
    rules.insert(libc::SYS_pidfd_send_signal, Vec::new());
    // F_SETOWN names a pid or a group (negative); F_SETOWN_EX and the FIOSETOWN and
    // SIOCSPGRP ioctls name one through memory.
    let mut fcntl = Vec::new();
    for &p in guarded {
        for v in [p, -p] {
            fcntl.push(
                SeccompRule::new(vec![
                    cond(1, SeccompCmpOp::Eq, libc::F_SETOWN as u64)?,
                    cond(2, SeccompCmpOp::Eq, v as u32 as u64)?,
                ])
                .map_err(build_error)?,
            );
        }
    }
    // <asm-generic/fcntl.h> and <asm-generic/sockios.h>; libc does not export them.
    const F_SETOWN_EX: i32 = 15;
    const FIOSETOWN: i32 = 0x8901;
    const SIOCSPGRP: i32 = 0x8902;
    fcntl.push(eq(1, F_SETOWN_EX)?);
    rules.insert(libc::SYS_fcntl, fcntl);
    rules.insert(libc::SYS_ioctl, vec![eq(1, FIOSETOWN)?, eq(1, SIOCSPGRP)?]);
    eperm_program(rules)
}

// Classic BPF opcodes, seccomp_data offsets and return values from <linux/filter.h>,
// <linux/seccomp.h> and <linux/audit.h>.
const LD_W_ABS: u16 = 0x20;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
#[cfg(target_arch = "x86_64")]
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// The low 32 bits of the first three arguments (`args[i]` is a u64 at 16 + 8 i).
#[cfg(target_endian = "little")]
const OFF_ARG0_LOW: u32 = 16;
#[cfg(target_endian = "little")]
const OFF_ARG1_LOW: u32 = 24;
#[cfg(target_endian = "little")]
const OFF_ARG2_LOW: u32 = 32;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Numbers per chunk of the unconditional deny list: a call is compared with at most
/// (chunks + CHUNK) numbers, and every jump stays far below BPF's 255-instruction reach.
pub const CHUNK: usize = 16;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Where a jump of the socket block goes (see [`socket_block`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Allow,
    Inet,
    Netlink,
    RefuseInet,
}

/// The checks of `socket` and `socketpair`, entered with the syscall number in A: family,
/// then for IPv4/IPv6 the type and protocol, for netlink the protocol. Every path ends in
/// a return.
fn socket_block() -> Result<Vec<sock_filter>, SandboxError> {
    let fam = |v: &[(&str, libc::c_int)]| v.iter().map(|&(_, x)| x as u32).collect::<Vec<_>>();
    let inet = [libc::AF_INET as u32, libc::AF_INET6 as u32];
    // (code, k, jump if true, jump if false) with symbolic targets, then labels resolved.
    let mut code: Vec<(Option<To>, u16, u32, To, To)> = Vec::new();
    let mut at = |label: Option<To>, c: u16, k: u32, t: To, f: To| code.push((label, c, k, t, f));
    at(None, LD_W_ABS, OFF_ARG0_LOW, To::Next, To::Next);
    for af in fam(table::SOCKET_FAMILIES_ALLOWED) {
        let to = if inet.contains(&af) {
            To::Inet
        } else if af == libc::AF_NETLINK as u32 {
            To::Netlink
        } else {
            To::Allow
        };
        at(None, JEQ_K, af, to, To::Next);
    }
    at(
        None,
        RET_K,
        RET_ERRNO | libc::EAFNOSUPPORT as u32,
        To::Next,
        To::Next,
    );
    // The type's low bits (SOCK_NONBLOCK and SOCK_CLOEXEC sit above them).
    at(Some(To::Inet), LD_W_ABS, OFF_ARG1_LOW, To::Next, To::Next);
    at(None, AND_K, 0xf, To::Next, To::Next);
    let types = fam(table::INET_TYPES_ALLOWED);
    for (i, &t) in types.iter().enumerate() {
        let miss = if i + 1 == types.len() {
            To::RefuseInet
        } else {
            To::Next
        };
        at(None, JEQ_K, t, To::Next, miss);
    }
    at(None, LD_W_ABS, OFF_ARG2_LOW, To::Next, To::Next);
    for p in fam(table::INET_PROTOCOLS_ALLOWED) {
        at(None, JEQ_K, p, To::Allow, To::Next);
    }
    at(
        Some(To::RefuseInet),
        RET_K,
        RET_ERRNO | libc::EPERM as u32,
        To::Next,
        To::Next,
    );
    at(
        Some(To::Netlink),
        LD_W_ABS,
        OFF_ARG2_LOW,
        To::Next,
        To::Next,
    );
    for p in fam(table::NETLINK_PROTOCOLS_ALLOWED) {
        at(None, JEQ_K, p, To::Allow, To::Next);
    }
    at(
        None,
        RET_K,
        RET_ERRNO | libc::EPROTONOSUPPORT as u32,
        To::Next,
        To::Next,
    );
    at(Some(To::Allow), RET_K, RET_ALLOW, To::Next, To::Next);
    let pos = |to: To| code.iter().position(|c| c.0 == Some(to));
    let mut out = Vec::with_capacity(code.len());
    for (i, &(_, c, k, t, f)) in code.iter().enumerate() {
        let off = |to: To| -> Result<u8, SandboxError> {
            if to == To::Next {
                return Ok(0);
            }
            let target = pos(to).ok_or_else(|| build_error("a socket check has no target"))?;
            u8::try_from(target - (i + 1)).map_err(build_error)
        };
        out.push(ins(c, off(t)?, off(f)?, k));
    }
    Ok(out)
}

/// Filter 1 of the module doc: native arch only, x32 → ENOSYS (x86_64), clone3 → ENOSYS,
/// socket families, types and protocols outside the allowlists refused, the unconditional
/// deny list (and for the agent side its own) → EPERM, everything else passes to the next
/// filter.
pub fn arch_and_numbers_program(side: Side, f: Fallbacks) -> Result<BpfProgram, SandboxError> {
    let mut denied = table::unconditional();
    if side == Side::Agent || f.no_memfd {
        denied.extend_from_slice(table::AGENT_ONLY);
    }
    let mut nrs = denied
        .into_iter()
        .map(|(_, nr)| u32::try_from(nr).map_err(build_error))
        .collect::<Result<Vec<u32>, _>>()?;
    nrs.sort_unstable();
    nrs.dedup();
    let mut p = vec![
        ins(LD_W_ABS, 0, 0, OFF_ARCH),
        ins(JEQ_K, 1, 0, AUDIT_ARCH),
        ins(RET_K, 0, 0, RET_KILL_PROCESS),
        ins(LD_W_ABS, 0, 0, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    p.extend([
        ins(JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
    ]);
    p.extend([
        ins(JEQ_K, 0, 1, libc::SYS_clone3 as u32),
        ins(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
    ]);
    p.extend([
        ins(JEQ_K, 0, 1, libc::SYS_listen as u32),
        ins(RET_K, 0, 0, RET_USER_NOTIF),
    ]);
    // socket/socketpair enter the block; other calls jump over it with the number still
    // loaded.
    let block = socket_block()?;
    let skip = u8::try_from(block.len()).map_err(build_error)?;
    p.push(ins(JEQ_K, 1, 0, libc::SYS_socket as u32));
    p.push(ins(JEQ_K, 0, skip, libc::SYS_socketpair as u32));
    p.extend(block);
    // Chunk layout (k numbers, ascending; smaller numbers were ruled out by the chunks
    // before): `JGT last → next chunk`, k × `JEQ n → EPERM`, `RET ALLOW`, `RET EPERM`.
    for chunk in nrs.chunks(CHUNK) {
        let k = chunk.len();
        let last = chunk[k - 1];
        // k <= CHUNK, so every offset below fits in a u8.
        p.push(ins(JGT_K, (k + 2) as u8, 0, last));
        for (j, &nr) in chunk.iter().enumerate() {
            p.push(ins(JEQ_K, (k - j) as u8, 0, nr));
        }
        p.push(ins(RET_K, 0, 0, RET_ALLOW));
        p.push(ins(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32));
    }
    p.push(ins(RET_K, 0, 0, RET_ALLOW));
    Ok(p)
}

/// Load `program` with system calls only (no allocation, for a child that shares its
/// parent's memory); the errno of a failure.
pub(super) fn load_raw(program: &BpfProgram) -> Result<(), i32> {
    if program.is_empty() {
        return Err(libc::EINVAL);
    }
    let Ok(len) = u16::try_from(program.len()) else {
        return Err(libc::E2BIG);
    };
    let prog = libc::sock_fprog {
        len,
        // seccompiler's sock_filter is the kernel's struct, field for field.
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl takes integers; the kernel copies `prog` and its program, alive here.
    let rc = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            -1
        } else {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &prog as *const libc::sock_fprog,
            )
        }
    };
    if rc != 0 {
        return Err(nix::errno::Errno::last_raw());
    }
    Ok(())
}

fn load(program: &BpfProgram) -> Result<(), SandboxError> {
    seccompiler::apply_filter(program).map_err(|e| match e {
        seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => {
            SandboxError::sys(STEP, io)
        }
        other => build_error(other),
    })
}

/// Load `program` and return the descriptor its user notifications arrive on.
fn load_with_listener(program: &BpfProgram) -> Result<OwnedFd, SandboxError> {
    const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;
    const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
    super::identity::no_new_privs()?;
    let len = u16::try_from(program.len()).map_err(build_error)?;
    let prog = libc::sock_fprog {
        len,
        // seccompiler's sock_filter is the kernel's struct, field for field.
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the kernel reads `prog` and the program it points to, both alive here.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor; we own it.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as RawFd) })
}

/// Install the jail's filters on the calling thread (inherited by its children and kept
/// across `execve`). Sets no_new_privs. All programs are built before any is loaded, so a
/// build error leaves the thread unfiltered and the caller refuses the run. Returns the
/// descriptor of the filter's user notifications (`listen`): the caller hands it to the
/// helper and closes it (without a listener, `listen` fails with ENOSYS).
pub fn install(side: Side) -> Result<OwnedFd, SandboxError> {
    let f = Fallbacks::of_kernel();
    let numbers = arch_and_numbers_program(side, f)?;
    let deny = deny_program(f)?;
    let listener = load_with_listener(&numbers)?;
    load(&deny)?;
    Ok(listener)
}

/// The calling thread's `Seccomp:` mode (0 off, 1 strict, 2 filter), for logs and tests.
/// Reads /proc/thread-self: filters bind threads, and /proc/self shows the main thread.
pub fn seccomp_mode_of_self() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a program of the opcodes [`arch_and_numbers_program`] uses on one call whose
    /// arguments are 0.
    fn eval(p: &[sock_filter], arch: u32, nr: u32) -> u32 {
        eval_args(p, arch, nr, [0; 3])
    }

    fn eval_args(p: &[sock_filter], arch: u32, nr: u32, args: [u64; 3]) -> u32 {
        let mut pc = 0;
        let mut acc = 0u32;
        loop {
            let i = &p[pc];
            pc += 1;
            let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
            match i.code {
                LD_W_ABS if i.k == OFF_ARCH => acc = arch,
                LD_W_ABS if i.k == OFF_NR => acc = nr,
                LD_W_ABS if i.k == OFF_ARG0_LOW => acc = args[0] as u32,
                LD_W_ABS if i.k == OFF_ARG1_LOW => acc = args[1] as u32,
                LD_W_ABS if i.k == OFF_ARG2_LOW => acc = args[2] as u32,
                AND_K => acc &= i.k,
                JEQ_K => pc += jump(acc == i.k),
                JGT_K => pc += jump(acc > i.k),
                #[cfg(target_arch = "x86_64")]
                JGE_K => pc += jump(acc >= i.k),
                RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    /// Run `probe` in a forked child (a filter binds the process for good) and return its
    /// exit code: 0 when every check held.
    fn in_child(probe: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child only makes syscalls and leaves by _exit.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let code = probe();
                // SAFETY: leave without running the test harness's destructors.
                unsafe { libc::_exit(code) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                match nix::sys::wait::waitpid(child, None).unwrap() {
                    nix::sys::wait::WaitStatus::Exited(_, code) => code,
                    other => panic!("the probe did not exit: {other:?}"),
                }
            }
        }
    }

    /// 0 when every (got, wanted) errno pair agrees, else 20 + the first that does not.
    fn first_wrong(checks: &[(i32, i32)]) -> i32 {
        checks
            .iter()
            .position(|(got, want)| got != want)
            .map_or(0, |i| 20 + i as i32)
    }

    fn errno_of(rc: libc::c_long) -> i32 {
        if rc < 0 {
            nix::errno::Errno::last_raw()
        } else {
            0
        }
    }

    #[test]
    fn a_guarded_command_cannot_signal_its_shepherd_but_can_its_own() {
        let code = in_child(|| {
            // SAFETY: getppid has no arguments.
            let shepherd = unsafe { libc::getppid() };
            if guard_signals(&[shepherd, 1]).is_err() {
                return 10;
            }
            // SAFETY: signal 0 only checks; the fcntl and syscalls take integers.
            let checks = unsafe {
                let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0);
                [
                    (errno_of(libc::kill(shepherd, 0).into()), libc::EPERM),
                    (errno_of(libc::kill(-shepherd, 0).into()), libc::EPERM),
                    (errno_of(libc::kill(-1, 0).into()), libc::EPERM),
                    (
                        errno_of(libc::syscall(libc::SYS_tgkill, shepherd, shepherd, 0)),
                        libc::EPERM,
                    ),
                    (
                        errno_of(libc::syscall(libc::SYS_pidfd_open, shepherd, 0)),
                        libc::EPERM,
                    ),
                    (
                        errno_of(libc::syscall(libc::SYS_pidfd_send_signal, pidfd, 0, 0, 0)),
                        libc::EPERM,
                    ),
                    (
                        errno_of(libc::fcntl(0, libc::F_SETOWN, shepherd).into()),
                        libc::EPERM,
                    ),
                    (errno_of(libc::kill(libc::getpid(), 0).into()), 0),
                    (errno_of(libc::kill(0, 0).into()), 0),
                ]
            };
            first_wrong(&checks)
        });
        assert_eq!(code, 0, "check {} of the guard failed", code - 20);
    }

    #[test]
    fn without_unix_scoping_no_unix_datagram_socket_is_made_but_a_pair_is() {
        let code = in_child(|| {
            let f = Fallbacks {
                no_unix_scope: true,
                ..Fallbacks::default()
            };
            if deny_program(f).and_then(|p| load(&p)).is_err() {
                return 10;
            }
            let mut pair = [0; 2];
            // SAFETY: socket and socketpair with integer arguments and a two-int array.
            let checks = unsafe {
                [
                    (
                        errno_of(
                            libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
                                .into(),
                        ),
                        libc::EPERM,
                    ),
                    (
                        errno_of(libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0).into()),
                        0,
                    ),
                    (
                        errno_of(
                            libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, pair.as_mut_ptr())
                                .into(),
                        ),
                        0,
                    ),
                ]
            };
            first_wrong(&checks)
        });
        assert_eq!(code, 0, "check {} failed", code - 20);
    }

    #[test]
    fn number_filter_denies_exactly_the_table() {
        for side in [Side::Agent, Side::Command] {
            let p = arch_and_numbers_program(side, Fallbacks::default()).unwrap();
            let mut table = table::unconditional();
            if side == Side::Agent {
                table.extend_from_slice(table::AGENT_ONLY);
            }
            let denied: Vec<u32> = table.iter().map(|&(_, n)| n as u32).collect();
            let eperm = RET_ERRNO | libc::EPERM as u32;
            let enosys = RET_ERRNO | libc::ENOSYS as u32;
            let socket_calls = [libc::SYS_socket as u32, libc::SYS_socketpair as u32];
            for nr in 0..2048u32 {
                let want = if denied.contains(&nr) {
                    eperm
                } else if nr == libc::SYS_listen as u32 {
                    RET_USER_NOTIF
                } else if nr == libc::SYS_clone3 as u32 {
                    enosys
                } else if socket_calls.contains(&nr) {
                    // Family 0 (AF_UNSPEC) is not on the allowlist.
                    RET_ERRNO | libc::EAFNOSUPPORT as u32
                } else {
                    RET_ALLOW
                };
                assert_eq!(eval(&p, AUDIT_ARCH, nr), want, "{side:?}: syscall {nr}");
            }
            #[cfg(not(target_arch = "x86_64"))]
            assert_eq!(eval(&p, AUDIT_ARCH, u32::MAX), RET_ALLOW);
            assert_eq!(eval(&p, 0x4000_0003, 0), RET_KILL_PROCESS, "i386");
            assert_eq!(eval(&p, 0, 1), RET_KILL_PROCESS);
            #[cfg(target_arch = "x86_64")]
            for nr in [0x4000_0000, 0x4000_0000 + libc::SYS_mount as u32, u32::MAX] {
                assert_eq!(eval(&p, AUDIT_ARCH, nr), RET_ERRNO | libc::ENOSYS as u32);
            }
            // Short: the kernel evaluates it for every syscall number when loading it.
            let chunks = denied.len().div_ceil(CHUNK);
            let fixed = 13 + socket_block().unwrap().len();
            assert!(p.len() <= fixed + denied.len() + 3 * chunks, "{}", p.len());
        }
        let memfd = libc::SYS_memfd_create as u32;
        let refused = RET_ERRNO | libc::EPERM as u32;
        let on = |side, no_memfd| {
            let f = Fallbacks {
                no_memfd,
                ..Fallbacks::default()
            };
            let p = arch_and_numbers_program(side, f).unwrap();
            eval(&p, AUDIT_ARCH, memfd)
        };
        assert_eq!(on(Side::Agent, false), refused);
        assert_eq!(on(Side::Command, false), RET_ALLOW);
        // A kernel without vm.memfd_noexec: no memfd on either side.
        assert_eq!(on(Side::Agent, true), refused);
        assert_eq!(on(Side::Command, true), refused);
    }

    #[test]
    fn socket_families_types_and_protocols_outside_the_allowlists_are_refused() {
        let p = arch_and_numbers_program(Side::Command, Fallbacks::default()).unwrap();
        let no_family = RET_ERRNO | libc::EAFNOSUPPORT as u32;
        let refused = RET_ERRNO | libc::EPERM as u32;
        let no_protocol = RET_ERRNO | libc::EPROTONOSUPPORT as u32;
        let (unix, inet, inet6, netlink) = (
            libc::AF_UNIX as u64,
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
            libc::AF_NETLINK as u64,
        );
        let stream = libc::SOCK_STREAM as u64;
        let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
        for call in [libc::SYS_socket as u32, libc::SYS_socketpair as u32] {
            let ev = |a: [u64; 3]| eval_args(&p, AUDIT_ARCH, call, a);
            for af in 0..64u64 {
                let allowed = [unix, inet, inet6, netlink].contains(&af);
                if !allowed {
                    assert_eq!(ev([af, stream, 0]), no_family, "{call} {af}");
                }
            }
            // Junk in the upper halves changes nothing: the kernel reads ints.
            let junk = 0xdead_beef_u64 << 32;
            assert_eq!(ev([junk | libc::AF_VSOCK as u64, stream, 0]), no_family);
            for ty in 0..16u64 {
                let want = if ty == stream { RET_ALLOW } else { refused };
                for fam in [inet, inet6] {
                    assert_eq!(ev([fam, ty, 0]), want, "{call} {fam} type {ty}");
                    assert_eq!(ev([fam | junk, ty | flags | junk, junk]), want);
                }
                assert_eq!(ev([unix, ty | flags, 0]), RET_ALLOW, "unix type {ty}");
            }
            for proto in 0..300u64 {
                let want = if proto == 0 || proto == libc::IPPROTO_TCP as u64 {
                    RET_ALLOW
                } else {
                    refused
                };
                assert_eq!(ev([inet, stream, proto]), want, "inet proto {proto}");
                let nl = if proto == libc::NETLINK_ROUTE as u64 {
                    RET_ALLOW
                } else {
                    no_protocol
                };
                assert_eq!(ev([netlink, libc::SOCK_RAW as u64, proto]), nl);
                assert_eq!(ev([netlink, libc::SOCK_DGRAM as u64, proto | junk]), nl);
            }
            assert_eq!(
                ev([
                    netlink,
                    libc::SOCK_RAW as u64,
                    libc::NETLINK_KOBJECT_UEVENT as u64
                ]),
                no_protocol
            );
        }
        // Other calls are not looked at by argument here.
        assert_eq!(
            eval_args(&p, AUDIT_ARCH, libc::SYS_read as u32, [40, 2, 3]),
            RET_ALLOW
        );
    }

    #[test]
    fn programs_build_and_fit() {
        let deny = deny_program(Fallbacks::default()).unwrap();
        // Arch check (3) + number load + one block per conditionally denied call.
        assert!(deny.len() > 4 + 3);
        assert!(deny.len() < 4096);
    }

    #[test]
    fn table_has_no_duplicates() {
        let mut all = table::unconditional();
        all.extend_from_slice(table::AGENT_ONLY);
        let mut nrs: Vec<_> = all.iter().map(|&(_, n)| n).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), all.len());
        for special in [
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_ioctl,
            libc::SYS_listen,
            libc::SYS_personality,
            libc::SYS_prlimit64,
            libc::SYS_socket,
            libc::SYS_socketpair,
        ]
        .into_iter()
        .chain(table::SELF_ONLY.iter().map(|s| s.1))
        {
            assert!(!nrs.contains(&special));
        }
    }
}
