//! The command side's own user namespace, so the two sides of a run share no per-user
//! kernel count.
//!
//! Both sides run as the instance's uid U. The kernel counts inotify instances and watches,
//! pending signals, POSIX message queue bytes and processes per user, and since Linux 5.14
//! per user *and user namespace* (ucounts): a process counts against (its namespace, its
//! uid) and, one level up, against (the parent namespace, the namespace's owner). So the
//! runner and every command live in a user namespace that maps U and the instance gid G
//! onto themselves (files on disk keep their owner: the workspace is shared with the agent)
//! and whose owner is a uid O that nothing ever runs as ([`owner_of`]). The agent side
//! counts as (init, U), the command side as (child, U) then (init, O): apart.
//!
//! O owning the namespace matters: processes of the parent namespace whose euid is the
//! owner hold every capability in it. The agent runs as U, not O, so it holds none over
//! the commands; no process ever runs as O.
//!
//! Not separated: pipe buffer pages (counted per kernel uid, not per namespace) and, on
//! kernels before 5.14, every count but inotify's.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use caps::CapSet;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::wait::waitpid;
use nix::unistd::{setresuid, ForkResult, Uid};

use super::SandboxError;

const STEP: &str = "give the command side a user namespace of its own";

/// The uid that owns the command side's user namespace of instance uid `uid`: `uid` with
/// the top bit set. Instance uids are below 2^31 (config::instances); 2^31 - 1 would give
/// 2^32 - 1, which is no uid (-1), so it has none.
pub fn owner_of(uid: u32) -> Option<u32> {
    (uid < (1 << 31) - 1).then_some(uid | 1 << 31)
}

/// Make the namespace (see the module's text) and return a descriptor of it, for
/// [`enter`]. In the runner, still root, single-threaded, in the command side's own mount
/// and pid namespaces with its /proc mounted.
pub fn make(uid: u32, gid: u32) -> Result<OwnedFd, SandboxError> {
    let owner = owner_of(uid).ok_or_else(|| SandboxError::Invalid {
        step: STEP,
        why: format!(
            "the instance uid {uid} leaves no owner uid (instance uids are below 2147483647)"
        ),
    })?;
    // The maps are written through /proc, which the side mounts read-only
    // (rootfs::proc): a read-write instance is stacked on it meanwhile.
    let proc = Path::new("/proc");
    mount(
        Some("proc"),
        proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| SandboxError::errno(STEP, e))?;
    let made = make_with_proc(owner, uid, gid);
    let unmounted = umount2(proc, MntFlags::MNT_DETACH).map_err(|e| SandboxError::errno(STEP, e));
    let fd = made?;
    unmounted?;
    Ok(fd)
}

/// What the child that makes the namespace tells its parent: 0 then nothing, or 1 then
/// the errno of the step that failed (4 bytes) and the step's index.
const MADE: u8 = 0;
const FAILED: u8 = 1;

fn make_with_proc(owner: u32, uid: u32, gid: u32) -> Result<OwnedFd, SandboxError> {
    let (report_r, report_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::errno(STEP, e))?;
    let (done_r, done_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SandboxError::errno(STEP, e))?;
    // SAFETY: the runner is single-threaded, so the child may run any code; it _exits.
    match unsafe { nix::unistd::fork() }.map_err(|e| SandboxError::errno(STEP, e))? {
        ForkResult::Child => {
            drop((report_r, done_w));
            let mut report = std::fs::File::from(report_w);
            let message = match unshare_as(owner) {
                Ok(()) => vec![MADE],
                Err((at, errno)) => {
                    let mut m = vec![FAILED, at];
                    m.extend_from_slice(&(errno as i32).to_ne_bytes());
                    m
                }
            };
            let _ = report.write_all(&message);
            drop(report);
            // Stay in the namespace until the parent holds it: its end of file.
            let mut b = [0u8; 1];
            let _ = std::fs::File::from(done_r).read(&mut b);
            // SAFETY: leave without running the runner's destructors.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            drop((report_w, done_r));
            let held = hold(child.as_raw(), report_r, uid, gid);
            drop(done_w);
            let _ = waitpid(child, None);
            held
        }
    }
}

/// In the child: become euid `owner` (real and saved stay 0, so the permitted set stays;
/// the effective set, cleared by the switch, is raised again from it, so Debian's
/// kernel.unprivileged_userns_clone=0 does not refuse the namespace), then unshare it.
/// The namespace's owner is the creator's euid.
fn unshare_as(owner: u32) -> Result<(), (u8, nix::errno::Errno)> {
    setresuid(Uid::from_raw(0), Uid::from_raw(owner), Uid::from_raw(0)).map_err(|e| (0, e))?;
    let permitted =
        caps::read(None, CapSet::Permitted).map_err(|_| (1, nix::errno::Errno::EPERM))?;
    caps::set(None, CapSet::Effective, &permitted).map_err(|_| (1, nix::errno::Errno::EPERM))?;
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| (2, e))
}

/// In the parent: wait for the child's namespace, write its maps (U and G onto
/// themselves, nothing else), and open it.
fn hold(child: i32, report: OwnedFd, uid: u32, gid: u32) -> Result<OwnedFd, SandboxError> {
    let mut message = Vec::new();
    let _ = std::fs::File::from(report).read_to_end(&mut message);
    match message.as_slice() {
        [MADE] => {}
        [FAILED, at, errno @ ..] if errno.len() == 4 => {
            let errno = i32::from_ne_bytes([errno[0], errno[1], errno[2], errno[3]]);
            let errno = nix::errno::Errno::from_raw(errno);
            let what = match (at, errno) {
                (0, _) => "switch to the namespace owner's uid",
                (1, _) => "raise the effective capabilities",
                (_, nix::errno::Errno::EPERM) => "unshare the user namespace (the kernel makes none for a chrooted process: run airlockd outside a chroot; or a seccomp filter or security module around airlockd forbids it)",
                (_, nix::errno::Errno::ENOSPC) => "unshare the user namespace (user.max_user_namespaces, or the owner's share of it, is reached)",
                _ => "unshare the user namespace",
            };
            return Err(SandboxError::Unsupported {
                step: STEP,
                why: format!("{what}: {}", errno.desc()),
            });
        }
        _ => {
            return Err(SandboxError::Invalid {
                step: STEP,
                why: "the child that makes it ended without a word".into(),
            })
        }
    }
    let dir = Path::new("/proc").join(child.to_string());
    for (file, id) in [("uid_map", uid), ("gid_map", gid)] {
        OpenOptions::new()
            .write(true)
            .open(dir.join(file))
            .and_then(|mut f| f.write_all(format!("{id} {id} 1\n").as_bytes()))
            .map_err(|e| SandboxError::sys(STEP, e))?;
    }
    let ns = std::fs::File::open(dir.join("ns/user")).map_err(|e| SandboxError::sys(STEP, e))?;
    Ok(OwnedFd::from(ns))
}

/// Join the namespace made by [`make`]; the caller then becomes the instance
/// ([`identity::become_instance`](super::identity::become_instance): U and G are mapped,
/// and setgroups is allowed since a privileged parent wrote the gid map). Still root,
/// single-threaded.
pub fn enter(ns: OwnedFd) -> Result<(), SandboxError> {
    setns(ns.as_fd(), CloneFlags::CLONE_NEWUSER).map_err(|e| SandboxError::errno(STEP, e))
}

#[cfg(test)]
mod tests {
    use super::owner_of;

    #[test]
    fn the_owner_is_the_uid_with_its_top_bit_and_never_minus_one() {
        assert_eq!(owner_of(1_880_000_001), Some(1_880_000_001 + (1 << 31)));
        assert_eq!(owner_of(1000), Some(1000 + 2_147_483_648));
        assert_eq!(owner_of((1 << 31) - 2), Some(u32::MAX - 1));
        assert_eq!(owner_of((1 << 31) - 1), None);
        assert_eq!(owner_of(1 << 31), None);
    }
}
