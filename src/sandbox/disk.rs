//! The run's bounded filesystems, pid 1's side: mount each [`DiskMount`] (an ext4
//! filesystem on a loop device the supervisor attached) over the host path of the
//! workspace or home, in the run's private mount namespace, before the bind sources are
//! opened. The binds then show the bounded filesystem, and the kernel answers a write past
//! its size or inode count with ENOSPC. Nothing of it is visible on the host; it goes when
//! the run's last process does.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use nix::mount::{mount, MsFlags};

use super::rootfs::open_dir_nofollow;
use super::spec::{DiskMount, DiskTarget, RunSpec};
use super::SandboxError;

/// The options of every mount of a run's bounded filesystem, pid 1's here and airlockd's
/// hold of it ([`crate::supervisor::mount_hold`]), which must agree: a corrupted filesystem
/// stops taking writes instead of guessing; the image reads as zeros, so its inode tables
/// need no zeroing in the background.
pub const EXT4_OPTIONS: [(&str, Option<&str>); 2] =
    [("errors", Some("remount-ro")), ("noinit_itable", None)];

/// [`EXT4_OPTIONS`] as mount(2) takes them.
fn ext4_options() -> String {
    EXT4_OPTIONS
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => (*k).to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Mount every disk of the spec over its target. Fails closed: a bound the spec asks for
/// that cannot be mounted stops the run before anything of it starts.
pub fn mount_all(spec: &RunSpec) -> Result<(), SandboxError> {
    for d in &spec.disks {
        let target = match d.target {
            DiskTarget::Workspace => &spec.workspace,
            DiskTarget::Home => &spec.home,
        };
        mount_one(d, target, (spec.uid, spec.gid))?;
    }
    Ok(())
}

fn mount_one(d: &DiskMount, target: &Path, owner: (u32, u32)) -> Result<(), SandboxError> {
    let step = match d.target {
        DiskTarget::Workspace => "mount the workspace's bounded filesystem",
        DiskTarget::Home => "mount the home's bounded filesystem",
    };
    let meta = std::fs::metadata(&d.device).map_err(|e| SandboxError::sys(step, e))?;
    if !meta.file_type().is_block_device() {
        return Err(SandboxError::Invalid {
            step,
            why: format!("{} is not a block device", d.device.display()),
        });
    }
    // Mounted on the directory opened without following any symlink (the home directory
    // is the agent's: it must not redirect root's mount).
    let dir = open_dir_nofollow(target, step)?;
    let at = format!("/proc/self/fd/{}", dir.as_raw_fd());
    mount(
        Some(&d.device),
        at.as_str(),
        Some("ext4"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(ext4_options().as_str()),
    )
    .map_err(|e| SandboxError::errno(step, e))?;
    // mke2fs always makes lost+found; an empty workspace must look empty (`git clone .`).
    // e2fsck makes it again if it ever needs one.
    let root = open_dir_nofollow(target, step)?;
    let lf = format!("/proc/self/fd/{}/lost+found", root.as_raw_fd());
    let _ = std::fs::remove_dir(lf);
    // A fresh workspace may come from airlockd's pool of images made ahead, whose root is
    // root's: it is the run's from here on. (A home's root is its instance's already.)
    if d.target == DiskTarget::Workspace {
        // SAFETY: fchownat on a descriptor we hold, of the directory itself (empty path).
        let rc = unsafe {
            libc::fchownat(
                root.as_raw_fd(),
                c"".as_ptr(),
                owner.0,
                owner.1,
                libc::AT_EMPTY_PATH,
            )
        };
        if rc != 0 {
            return Err(SandboxError::sys(step, std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
