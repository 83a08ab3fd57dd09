//! The reserve: no run starts while the state directory's filesystem has less free space
//! or fewer free inodes than `limits.reserve` keeps for the ledger, the journal's fallback
//! files and the runs' directories, counting what the bounded images already there may
//! still take (they are sparse) and what the new run's images may take. So a run's disks,
//! full, still leave the reserve; airlockd and `launch --standalone` both check it.

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
pub fn check(
    state_dir: &Path,
    free: Free,
    pending: u64,
    new_run: Bound,
    reserve: Bound,
) -> Result<(), String> {
    let left = free
        .bytes
        .saturating_sub(pending)
        .saturating_sub(new_run.bytes);
    if left < reserve.bytes {
        return Err(format!(
            "launch refused: the filesystem of the state directory {} has {} free, {} of it promised to the bounded disks of runs and homes there{}; that would leave {} of the {} that limits.reserve.disk_bytes keeps for the ledger and the journal. Free space there, or lower limits.workspace / limits.home",
            state_dir.display(),
            gib(free.bytes),
            gib(pending),
            if new_run.bytes > 0 {
                format!(" and {} to this run's", gib(new_run.bytes))
            } else {
                String::new()
            },
            gib(left),
            gib(reserve.bytes)
        ));
    }
    let inodes_left = free.inodes.saturating_sub(new_run.inodes);
    if inodes_left < reserve.inodes {
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
    fn a_launch_is_refused_below_the_reserve_counting_what_images_may_take() {
        let sd = Path::new("/var/lib/airlock");
        let r = Bound {
            bytes: 1 << 30,
            inodes: 100,
        };
        let free = Free {
            bytes: 4 << 30,
            inodes: 1000,
        };
        let none = Bound {
            bytes: 0,
            inodes: 0,
        };
        assert!(check(sd, free, 0, none, r).is_ok());
        let ws = Bound {
            bytes: 3 << 30,
            inodes: 1,
        };
        assert!(check(sd, free, 0, ws, r).is_ok());
        let e = check(sd, free, 1, ws, r).unwrap_err();
        assert!(e.contains("limits.reserve.disk_bytes"), "{e}");
        assert!(e.contains("/var/lib/airlock"), "{e}");
        let e = check(
            sd,
            Free {
                bytes: 4 << 30,
                inodes: 100,
            },
            0,
            ws,
            r,
        )
        .unwrap_err();
        assert!(e.contains("limits.reserve.disk_inodes"), "{e}");
        // Nothing overflows.
        assert!(check(sd, free, u64::MAX, ws, r).is_err());
    }
}
