//! Who the agent is: the instance's uid and gid, no supplementary groups, no capabilities in
//! any set (bounding and ambient included), and no_new_privs so no exec can gain any back.

use caps::{CapSet, Capability, CapsHashSet};
use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};

use super::SandboxError;

fn caps_err(step: &'static str, e: caps::errors::CapsError) -> SandboxError {
    SandboxError::Invalid {
        step,
        why: e.to_string(),
    }
}

/// Drop every capability from the bounding set, up to the kernel's last one (which may be
/// newer than the `caps` crate knows): loop until the kernel says the number is invalid.
fn drop_bounding_set() -> Result<(), SandboxError> {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                return Ok(());
            }
            return Err(SandboxError::sys("drop bounding capabilities", err));
        }
    }
    Ok(())
}

/// Clear ambient and inheritable sets (setuid does not clear inheritable).
fn clear_ambient_inheritable() -> Result<(), SandboxError> {
    caps::clear(None, CapSet::Ambient).map_err(|e| caps_err("clear ambient capabilities", e))?;
    caps::clear(None, CapSet::Inheritable)
        .map_err(|e| caps_err("clear inheritable capabilities", e))
}

/// Become the instance: no groups, gid, uid (real, effective, saved), every capability set
/// empty, no_new_privs. Must run as root with CAP_SETUID/SETGID/SETPCAP.
pub fn become_instance(uid: u32, gid: u32) -> Result<(), SandboxError> {
    drop_bounding_set()?;
    clear_ambient_inheritable()?;
    setgroups(&[]).map_err(|e| SandboxError::errno("drop supplementary groups", e))?;
    let g = Gid::from_raw(gid);
    setresgid(g, g, g).map_err(|e| SandboxError::errno("set gid", e))?;
    let u = Uid::from_raw(uid);
    setresuid(u, u, u).map_err(|e| SandboxError::errno("set uid", e))?;
    // setresuid from 0 clears permitted and effective; make sure, and fail if not.
    caps::clear(None, CapSet::Effective).map_err(|e| caps_err("clear capabilities", e))?;
    caps::clear(None, CapSet::Permitted).map_err(|e| caps_err("clear capabilities", e))?;
    no_new_privs()?;
    verify_no_caps()
}

/// Refuse to go on if any capability survived. Three reads: effective, permitted and
/// inheritable empty imply an empty ambient set (the kernel keeps ambient within permitted
/// and inheritable), and the bounding set was emptied call by call, each one checked.
fn verify_no_caps() -> Result<(), SandboxError> {
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        let have = caps::read(None, set).map_err(|e| caps_err("verify capabilities", e))?;
        if !have.is_empty() {
            return Err(SandboxError::Unsupported {
                step: "verify capabilities",
                why: "a capability set is not empty after dropping".to_string(),
            });
        }
    }
    Ok(())
}

pub fn no_new_privs() -> Result<(), SandboxError> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| SandboxError::errno("set no_new_privs", e))
}

/// Pid 1 of the run keeps exactly CAP_KILL (to forward SIGTERM to processes of the instance
/// uid) and nothing else, and is not dumpable, so the agent can neither ptrace it nor read
/// its /proc entries.
pub fn reduce_init() -> Result<(), SandboxError> {
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| SandboxError::errno("init not dumpable", e))?;
    drop_bounding_set()?;
    clear_ambient_inheritable()?;
    let mut keep = CapsHashSet::new();
    keep.insert(Capability::CAP_KILL);
    caps::set(None, CapSet::Effective, &keep)
        .map_err(|e| caps_err("reduce init capabilities", e))?;
    caps::set(None, CapSet::Permitted, &keep)
        .map_err(|e| caps_err("reduce init capabilities", e))?;
    no_new_privs()
}
