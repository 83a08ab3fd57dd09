//! Seccomp layer of the jail: a filter for the native architecture that lets everything
//! through except the calls in [`seccomp_table`](super::seccomp_table).
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
//!    register can neither smuggle a refused family through nor block an allowed one); then
//!    the unconditional deny list (EPERM), searched in sorted chunks of [`CHUNK`] numbers
//!    rather than one long chain. A chain of ~190 compares walked in full for every allowed
//!    call made each run pay about 0.2 ms in the kernel, which evaluates a new filter for
//!    every syscall number when it is loaded (the seccomp action cache), and every allowed
//!    syscall pays it at run time.
//! 2. Built with seccompiler, the conditional denials (EPERM): `clone` with a namespace flag
//!    (masked compare on the low 32 bits, where all those flags live), `ioctl` with a refused
//!    request (compared as 32 bits, as the kernel truncates it) and `personality` other than
//!    default or query.
//!
//! The seccompiler filter starts with an architecture check that kills the process on any
//! other audit arch (e.g. 32-bit `int 0x80` calls on x86_64), so nothing runs unfiltered.
//!
//! `install` needs no_new_privs (or CAP_SYS_ADMIN); seccompiler sets `PR_SET_NO_NEW_PRIVS`
//! before loading a filter, so it holds afterwards whatever the caller did. Filters bind
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
/// The low 32 bits of the first argument (`args[0]` is a u64 at offset 16).
#[cfg(target_endian = "little")]
const OFF_ARG0_LOW: u32 = 16;
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

/// Filter 1 of the module doc: native arch only, x32 → ENOSYS (x86_64), clone3 → ENOSYS,
/// socket families outside the allowlist → EAFNOSUPPORT, the unconditional deny list →
/// EPERM, everything else passes to the next filter.
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
    p.extend([
        ins(JEQ_K, 0, 1, libc::SYS_clone3 as u32),
        ins(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
    ]);
    // socket/socketpair: `LD arg0`, one `JEQ family → allow` per allowed family, `RET
    // EAFNOSUPPORT`, `RET ALLOW`; other calls jump over the block with the number still
    // loaded.
    let families = table::SOCKET_FAMILIES_ALLOWED;
    let k = families.len();
    let block = u8::try_from(k + 3).map_err(build_error)?;
    p.push(ins(JEQ_K, 1, 0, libc::SYS_socket as u32));
    p.push(ins(JEQ_K, 0, block, libc::SYS_socketpair as u32));
    p.push(ins(LD_W_ABS, 0, 0, OFF_ARG0_LOW));
    for (j, &(_, af)) in families.iter().enumerate() {
        // The families are small positive c_int constants; the cast is lossless.
        p.push(ins(JEQ_K, (k - j) as u8, 0, af as u32));
    }
    p.push(ins(RET_K, 0, 0, RET_ERRNO | libc::EAFNOSUPPORT as u32));
    p.push(ins(RET_K, 0, 0, RET_ALLOW));
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
    load(&numbers)?;
    load(&deny)
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
    /// first argument is 0.
    fn eval(p: &[sock_filter], arch: u32, nr: u32) -> u32 {
        eval_arg(p, arch, nr, 0)
    }

    fn eval_arg(p: &[sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
        let mut pc = 0;
        let mut acc = 0u32;
        loop {
            let i = &p[pc];
            pc += 1;
            let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
            match i.code {
                LD_W_ABS if i.k == OFF_ARCH => acc = arch,
                LD_W_ABS if i.k == OFF_NR => acc = nr,
                LD_W_ABS if i.k == OFF_ARG0_LOW => acc = arg0 as u32,
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
        let enosys = RET_ERRNO | libc::ENOSYS as u32;
        let socket_calls = [libc::SYS_socket as u32, libc::SYS_socketpair as u32];
        for nr in 0..2048u32 {
            let want = if denied.contains(&nr) {
                eperm
            } else if nr == libc::SYS_clone3 as u32 {
                enosys
            } else if socket_calls.contains(&nr) {
                // Family 0 (AF_UNSPEC) is not on the allowlist.
                RET_ERRNO | libc::EAFNOSUPPORT as u32
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
        let fixed = 7 + 2 + 5 + table::SOCKET_FAMILIES_ALLOWED.len();
        assert!(p.len() <= fixed + denied.len() + 3 * chunks, "{}", p.len());
    }

    #[test]
    fn socket_families_outside_the_allowlist_are_refused() {
        let p = arch_and_numbers_program().unwrap();
        let refused = RET_ERRNO | libc::EAFNOSUPPORT as u32;
        let allowed: Vec<u32> = table::SOCKET_FAMILIES_ALLOWED
            .iter()
            .map(|&(_, af)| af as u32)
            .collect();
        for call in [libc::SYS_socket as u32, libc::SYS_socketpair as u32] {
            for af in 0..64u32 {
                let want = if allowed.contains(&af) {
                    RET_ALLOW
                } else {
                    refused
                };
                assert_eq!(
                    eval_arg(&p, AUDIT_ARCH, call, af as u64),
                    want,
                    "{call} {af}"
                );
                // Junk in the upper half changes nothing: the kernel reads an int.
                let junk = (0xdead_beef_u64 << 32) | af as u64;
                assert_eq!(
                    eval_arg(&p, AUDIT_ARCH, call, junk),
                    want,
                    "{call} {af} junk"
                );
            }
            assert_eq!(
                eval_arg(&p, AUDIT_ARCH, call, libc::AF_VSOCK as u64),
                refused
            );
        }
        // Other calls are not looked at by argument here.
        assert_eq!(
            eval_arg(&p, AUDIT_ARCH, libc::SYS_read as u32, 40),
            RET_ALLOW
        );
    }

    #[test]
    fn programs_build_and_fit() {
        let deny = deny_program().unwrap();
        // Arch check (3) + number load + one block per conditionally denied call.
        assert!(deny.len() > 4 + 3);
        assert!(deny.len() < 4096);
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
