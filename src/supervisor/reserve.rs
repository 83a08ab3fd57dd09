//! The reserve: no run starts while the state directory's filesystem has less free space
//! or fewer free inodes than `limits.reserve` keeps for the ledger, the journal's fallback
//! files and the runs' directories; airlockd and `launch --standalone` both check it.
//!
//! The bounded images are sparse and are not counted at their full size: like thin
//! provisioning, the bounds of all runs together may exceed the disk (counting them whole
//! would refuse the second run of most hosts). Each run stays within its own bound; the
//! reserve keeps a nearly full disk from taking new runs at all.

use std::path::Path;

use super::disk::Bound;

/// What the state directory's filesystem has free now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Free {
    pub bytes: u64,
    pub inodes: u64,
}

/// `statvfs` of `path`: what an unprivileged writer could still use (root's reserved
/// blocks are not counted: airlockd must not depend on them).
pub fn free_under(path: &Path) -> Result<Free, String> {
    let s = nix::sys::statvfs::statvfs(path)
        .map_err(|e| format!("{}: statvfs: {e}", path.display()))?;
    Ok(Free {
        bytes: (s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64),
        inodes: s.files_available() as u64,
    })
}

fn gib(n: u64) -> String {
    format!("{:.2} GiB", n as f64 / f64::from(1u32 << 30))
}

/// Whether a run may start. `free`: now; `pending`: bytes the images already there may
/// still take; `new_run`: bytes and inodes the new run's images may take of the state
/// directory (its inodes: the image files, a few). Pure. `Err` says why, naming the key.
pub fn check(state_dir: &Path, free: Free, reserve: Bound) -> Result<(), String> {
    if free.bytes < reserve.bytes {
        return Err(format!(
            "launch refused: the filesystem of the state directory {} has {} free, below the {} that limits.reserve.disk_bytes keeps for the ledger and the journal. Free space there",
            state_dir.display(),
            gib(free.bytes),
            gib(reserve.bytes)
        ));
    }
    if free.inodes < reserve.inodes {
        return Err(format!(
            "launch refused: the filesystem of the state directory {} has {} free inodes, below the {} that limits.reserve.disk_inodes keeps for the ledger and the journal. Remove files there",
            state_dir.display(),
            free.inodes,
            reserve.inodes
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_is_refused_below_the_reserve() {
        let sd = Path::new("/var/lib/airlock");
        let r = Bound {
            bytes: 1 << 30,
            inodes: 100,
        };
        let free = |bytes, inodes| Free { bytes, inodes };
        assert!(check(sd, free(1 << 30, 100), r).is_ok());
        let e = check(sd, free((1 << 30) - 1, 1000), r).unwrap_err();
        assert!(e.contains("limits.reserve.disk_bytes"), "{e}");
        assert!(e.contains("/var/lib/airlock"), "{e}");
        let e = check(sd, free(4 << 30, 99), r).unwrap_err();
        assert!(e.contains("limits.reserve.disk_inodes"), "{e}");
    }
}
