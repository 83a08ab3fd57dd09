//! Superblocks held for the runs' bounded filesystems. A hold is a detached mount of a
//! loop device's ext4 filesystem, made with the new mount API (fsopen, fsmount): attached
//! nowhere, in no mount table, and gone with the descriptor (so with the process). While
//! one is held, the jail's pid 1 mounting the same device gets that superblock at once
//! instead of reading the filesystem in, and the run's last process exits without writing
//! it back: that happens when the hold is dropped, off the run's path. A workspace's hold
//! is made ahead with its pool image and dropped after the run's end is answered; an
//! instance's home stays held between its runs until none has used it for [`LINGER`].
//!
//! Only the superblock's life changes: pid 1 still mounts the device in the run's own
//! mount namespace with the same options, so what the run sees is what it saw before; a
//! kept home the kernel turned read-only (`errors=remount-ro`) is let go rather than given
//! to the next run, which then mounts it afresh. A kernel without the new mount API
//! (before 5.2) holds nothing and pid 1 mounts as before. A held filesystem is in no mount
//! table (`findmnt` does not show it): an image must not be restored in place while
//! airlockd runs.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::loopdev::Loop;
use crate::sandbox::disk::EXT4_OPTIONS;

// include/uapi/linux/mount.h
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOUNT_ATTR_NOSUID: libc::c_uint = 0x2;
const MOUNT_ATTR_NODEV: libc::c_uint = 0x4;
const MOUNT_ATTR_NOEXEC: libc::c_uint = 0x8;

/// How long an instance's home stays held after its last run (give or take the sweep's
/// period, which marks a home in use): a next run within it mounts at once; after it, the
/// filesystem is written back and its loop device let go.
pub const LINGER: Duration = Duration::from_secs(60);

/// A detached mount holding one filesystem's superblock.
#[derive(Debug)]
pub struct MountHold {
    root: OwnedFd,
}

fn cstr(s: &[u8]) -> Result<CString, String> {
    CString::new(s).map_err(|_| "a NUL byte in a mount parameter".to_string())
}

fn check(rc: libc::c_long, what: &str, device: &Path) -> Result<libc::c_long, String> {
    if rc < 0 {
        return Err(format!(
            "{}: {what}: {}",
            device.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(rc)
}

impl MountHold {
    /// Mount the ext4 filesystem on `device` nowhere, with the options the jail's pid 1
    /// uses ([`EXT4_OPTIONS`]). Blocking: the filesystem is read in.
    pub fn of(device: &Path) -> Result<MountHold, String> {
        let ext4 = cstr(b"ext4")?;
        // SAFETY: fsopen with a NUL-terminated name; the fd it returns is ours.
        let fs = check(
            unsafe { libc::syscall(libc::SYS_fsopen, ext4.as_ptr(), FSOPEN_CLOEXEC) },
            "fsopen",
            device,
        )?;
        // SAFETY: a new descriptor nothing else owns.
        let fs = unsafe { OwnedFd::from_raw_fd(fs as i32) };
        let set = |cmd: libc::c_uint, key: Option<&CString>, value: Option<&CString>| {
            // SAFETY: fsconfig on our fs context, with NUL-terminated strings or nulls.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_fsconfig,
                    fs.as_raw_fd(),
                    cmd,
                    key.map_or(std::ptr::null(), |k| k.as_ptr()),
                    value.map_or(std::ptr::null(), |v| v.as_ptr()),
                    0,
                )
            };
            check(rc, "fsconfig", device)
        };
        let source = cstr(device.as_os_str().as_bytes())?;
        set(FSCONFIG_SET_STRING, Some(&cstr(b"source")?), Some(&source))?;
        for (key, value) in EXT4_OPTIONS {
            let key = cstr(key.as_bytes())?;
            match value {
                Some(v) => set(FSCONFIG_SET_STRING, Some(&key), Some(&cstr(v.as_bytes())?))?,
                None => set(FSCONFIG_SET_FLAG, Some(&key), None)?,
            };
        }
        set(FSCONFIG_CMD_CREATE, None, None)?;
        // SAFETY: fsmount of our configured context; the fd it returns is ours.
        let root = check(
            unsafe {
                libc::syscall(
                    libc::SYS_fsmount,
                    fs.as_raw_fd(),
                    FSMOUNT_CLOEXEC,
                    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                )
            },
            "fsmount",
            device,
        )?;
        // SAFETY: as above.
        let root = unsafe { OwnedFd::from_raw_fd(root as i32) };
        Ok(MountHold { root })
    }

    /// Whether the kernel has made the filesystem read-only (an error, `errors=remount-ro`).
    fn read_only(&self) -> bool {
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: fstatvfs on the mount's root, which we hold, into a struct we own.
        let rc = unsafe { libc::fstatvfs(self.root.as_raw_fd(), st.as_mut_ptr()) };
        // SAFETY: fstatvfs filled it in when it returned 0.
        rc != 0 || unsafe { st.assume_init() }.f_flag & libc::ST_RDONLY != 0
    }

    /// Remove the empty `lost+found` mke2fs makes (a fresh workspace must look empty),
    /// so pid 1 finds nothing to remove.
    pub fn remove_lost_found(&self) {
        // SAFETY: unlinkat relative to the mount's root, which we hold.
        unsafe {
            libc::unlinkat(
                self.root.as_raw_fd(),
                c"lost+found".as_ptr(),
                libc::AT_REMOVEDIR,
            );
        }
    }
}

/// An instance's home held between its runs: its loop device and superblock.
#[derive(Debug)]
struct Kept {
    lp: Loop,
    hold: Arc<MountHold>,
    /// When a run last had it.
    seen: Instant,
}

/// The homes airlockd holds between their instances' runs, by their image's device and
/// inode (unique while held: the loop device keeps the image's inode alive). A launch that
/// is not airlockd's (`launch --standalone`) keeps none: its process ends with its run.
#[derive(Debug, Default)]
pub struct KeptHomes {
    kept: Mutex<HashMap<(u64, u64), Kept>>,
}

fn key(image: &Path) -> Option<(u64, u64)> {
    let m = std::fs::metadata(image).ok()?;
    Some((m.dev(), m.ino()))
}

impl KeptHomes {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), Kept>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The loop device and hold of the home image `image`, when it is held still and
    /// writable (one the kernel made read-only is let go: a run could not mount it).
    pub fn get(&self, image: &Path) -> Option<(Loop, Arc<MountHold>)> {
        let k = key(image)?;
        let mut h = self.map();
        let kept = h.get_mut(&k)?;
        if kept.hold.read_only() {
            let gone = h.remove(&k);
            drop(h);
            drop(gone);
            return None;
        }
        kept.seen = Instant::now();
        Some((kept.lp.clone(), kept.hold.clone()))
    }

    /// Hold the home image `image` (attached to `lp`, its filesystem held by `hold`, which
    /// the run has too) from now on.
    pub fn keep(&self, image: &Path, lp: &Loop, hold: Arc<MountHold>) {
        let Some(k) = key(image) else { return };
        let old = self.map().insert(
            k,
            Kept {
                lp: lp.clone(),
                hold,
                seen: Instant::now(),
            },
        );
        drop(old);
    }

    /// Let go of the homes no run has had for `linger` (a run that holds one marks it
    /// seen). Blocking: each one let go is written back. Returns how many.
    pub fn sweep(&self, linger: Duration) -> usize {
        let gone: Vec<Kept> = {
            let mut h = self.map();
            let now = Instant::now();
            for k in h.values_mut() {
                if Arc::strong_count(&k.hold) > 1 {
                    k.seen = now;
                }
            }
            let idle: Vec<(u64, u64)> = h
                .iter()
                .filter(|(_, k)| now.duration_since(k.seen) >= linger)
                .map(|(key, _)| *key)
                .collect();
            idle.iter().filter_map(|key| h.remove(key)).collect()
        };
        // Dropped outside the lock: writing a filesystem back takes a while.
        gone.len()
    }

    /// Let go of every home held (airlockd is stopping; a run still going keeps its own).
    pub fn clear(&self) -> usize {
        self.sweep(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::disk::{make_empty, Bound, Priority};
    use crate::supervisor::loopdev;

    #[test]
    fn a_kept_home_is_given_while_it_lingers_and_let_go_after() {
        crate::require_root("this test makes, attaches and mounts an ext4 image");
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("h.img");
        let bound = Bound {
            bytes: 32 << 20,
            inodes: 256,
        };
        make_empty(&img, bound, Priority::Normal).expect("image");
        let lp = loopdev::attach(&img).expect("attach");
        let hold = Arc::new(MountHold::of(&lp.path).expect("hold"));
        let homes = KeptHomes::default();
        homes.keep(&img, &lp, hold.clone());
        drop((lp, hold));
        // A run has it: swept however long ago it was seen, it stays.
        let (lp, run) = homes.get(&img).expect("kept");
        assert!(!run.read_only());
        assert_eq!(homes.sweep(Duration::from_millis(1)), 0, "in use");
        drop(run);
        // No run has it: kept within the linger, let go after it.
        assert_eq!(homes.sweep(Duration::from_secs(3600)), 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(homes.sweep(Duration::from_millis(10)), 1);
        assert!(homes.get(&img).is_none());
        drop(lp);
        // Written back and let go: its loop device detaches itself.
        let detached = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            loopdev::attached_under(dir.path()).is_empty()
        });
        assert!(detached, "{:?}", loopdev::attached_under(dir.path()));
    }
}
