//! Seccomp layer of the jail: a filter for the native architecture that lets everything
//! through except the calls in [`seccomp_table`](super::seccomp_table).
//!
//! Stacked filters (the kernel runs all and takes the strictest verdict):
//! 1. Hand-written: the native audit arch only (anything else kills the process); on x86_64
//!    syscalls of the x32 ABI, which share the x86_64 audit arch but carry bit 30 in their
//!    number, get ENOSYS, as on a kernel built without x32; then the unconditional deny list
//!    (EPERM), searched in sorted chunks of [`CHUNK`] numbers rather than one long chain. A
//!    chain of ~190 compares walked in full for every allowed call made each run pay about
//!    0.2 ms in the kernel, which evaluates a new filter for every syscall number when it is
//!    loaded (the seccomp action cache), and every allowed syscall pays it at run time.
//! 2. The conditional denials (EPERM): `clone` with a namespace flag (masked compare on the
//!    low 32 bits, where all those flags live), `ioctl` with a refused request (compared as 32
//!    bits, as the kernel truncates it) and `personality` other than default or query.
//! 3. `clone3` → ENOSYS: its flags sit in memory that seccomp cannot read, so libc is made to
//!    fall back to `clone`, whose flags filter 2 inspects.
//! 4. `socket` and `socketpair` with a family outside
//!    [`SOCKET_FAMILIES_ALLOWED`](super::seccomp_table::SOCKET_FAMILIES_ALLOWED) →
//!    EAFNOSUPPORT (an allowlist: families added by future kernels stay closed). The family
//!    is compared as 32 bits, as the kernel reads an `int`, so junk in the upper half of the
//!    register can neither smuggle a refused family through nor block an allowed one.
//!
//! Each seccompiler filter starts with an architecture check that kills the process on any
//! other audit arch (e.g. 32-bit `int 0x80` calls on x86_64), so nothing runs unfiltered.
//!
//! `install` needs no_new_privs (or CAP_SYS_ADMIN); seccompiler sets `PR_SET_NO_NEW_PRIVS`
//! before loading each filter, so it holds afterwards whatever the caller did. Filters bind
//! the calling thread and its future children: call it in the single-threaded jail child,
//! last before `execve` (after Landlock, which itself needs no syscall refused here).

use std::collections::BTreeMap;

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

/// The EPERM denials that look at arguments, as BPF.
pub fn deny_program() -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_clone, clone_rules()?);
    rules.insert(libc::SYS_ioctl, ioctl_rules()?);
    rules.insert(libc::SYS_personality, personality_rules()?);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(build_error)?;
    BpfProgram::try_from(filter).map_err(build_error)
}

/// `clone3` → ENOSYS as BPF.
pub fn clone3_program() -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_clone3, Vec::new());
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )
    .map_err(build_error)?;
    BpfProgram::try_from(filter).map_err(build_error)
}

/// `socket`/`socketpair` with a family not on the allowlist → EAFNOSUPPORT, as BPF.
pub fn socket_program() -> Result<BpfProgram, SandboxError> {
    // One rule whose conditions are ANDed: the family differs from every allowed one.
    let not_allowed = || -> Result<SeccompRule, SandboxError> {
        let conds = table::SOCKET_FAMILIES_ALLOWED
            .iter()
            // The families are small positive c_int constants; the cast is lossless.
            .map(|&(_, af)| cond(0, SeccompCmpOp::Ne, af as u32 as u64))
            .collect::<Result<Vec<_>, _>>()?;
        SeccompRule::new(conds).map_err(build_error)
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, vec![not_allowed()?]);
    rules.insert(libc::SYS_socketpair, vec![not_allowed()?]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        ARCH,
    )
    .map_err(build_error)?;
    BpfProgram::try_from(filter).map_err(build_error)
}

// Classic BPF opcodes, seccomp_data offsets and return values from <linux/filter.h>,
// <linux/seccomp.h> and <linux/audit.h>.
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
#[cfg(target_arch = "x86_64")]
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
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

/// Filter 1 of the module doc: native arch only, x32 → ENOSYS (x86_64), the unconditional
/// deny list → EPERM, everything else passes to the next filter.
pub fn arch_and_numbers_program() -> Result<BpfProgram, SandboxError> {
    let mut nrs = table::unconditional()
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

fn load(program: &BpfProgram) -> Result<(), SandboxError> {
    seccompiler::apply_filter(program).map_err(|e| match e {
        seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => {
            SandboxError::sys(STEP, io)
        }
        other => build_error(other),
    })
}

/// Install the jail's filters on the calling thread (inherited by its children and kept
/// across `execve`). Sets no_new_privs. All programs are built before any is loaded, so a
/// build error leaves the thread unfiltered and the caller refuses the run.
pub fn install() -> Result<(), SandboxError> {
    let numbers = arch_and_numbers_program()?;
    let deny = deny_program()?;
    let clone3 = clone3_program()?;
    let socket = socket_program()?;
    load(&numbers)?;
    load(&deny)?;
    load(&clone3)?;
    load(&socket)?;
    Ok(())
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

    /// Run a program of the opcodes [`arch_and_numbers_program`] uses on one call.
    fn eval(p: &[sock_filter], arch: u32, nr: u32) -> u32 {
        let mut pc = 0;
        let mut acc = 0u32;
        loop {
            let i = &p[pc];
            pc += 1;
            let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
            match i.code {
                LD_W_ABS if i.k == OFF_ARCH => acc = arch,
                LD_W_ABS if i.k == OFF_NR => acc = nr,
                JEQ_K => pc += jump(acc == i.k),
                JGT_K => pc += jump(acc > i.k),
                #[cfg(target_arch = "x86_64")]
                JGE_K => pc += jump(acc >= i.k),
                RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn number_filter_denies_exactly_the_table() {
        let p = arch_and_numbers_program().unwrap();
        let denied: Vec<u32> = table::unconditional()
            .iter()
            .map(|&(_, n)| n as u32)
            .collect();
        let eperm = RET_ERRNO | libc::EPERM as u32;
        for nr in 0..2048u32 {
            let want = if denied.contains(&nr) {
                eperm
            } else {
                RET_ALLOW
            };
            assert_eq!(eval(&p, AUDIT_ARCH, nr), want, "syscall {nr}");
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
        assert!(p.len() <= 7 + denied.len() + 3 * chunks, "{}", p.len());
    }

    #[test]
    fn programs_build_and_fit() {
        let deny = deny_program().unwrap();
        // Arch check (3) + number load + one block per conditionally denied call.
        assert!(deny.len() > 4 + 3);
        assert!(deny.len() < 4096);
        assert!(!clone3_program().unwrap().is_empty());
        assert!(!socket_program().unwrap().is_empty());
    }

    #[test]
    fn table_has_no_duplicates() {
        let all = table::unconditional();
        let mut nrs: Vec<_> = all.iter().map(|&(_, n)| n).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), all.len());
        for special in [
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_ioctl,
            libc::SYS_personality,
            libc::SYS_socket,
            libc::SYS_socketpair,
        ] {
            assert!(!nrs.contains(&special));
        }
    }
}
