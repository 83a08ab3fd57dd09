//! Which jail helpers airlockd started ahead of their run's opening record (warm jails,
//! and a launch's own helper while its record syncs): one file per helper,
//! `<state_dir>/ahead/<run>`, made before the helper starts and removed once the helper is
//! done with ([`Mark`] is dropped with its [`Spawned`](super::process::Spawned)). The file's
//! body is the run's cgroup parent.
//!
//! Why: such a helper makes its run's cgroups at once, and removes them itself when it
//! ends. Killed together with airlockd (systemd's SIGKILL to the whole unit at a stop
//! timeout, `systemctl kill -s KILL`), it cannot, and the run has no ledger record for
//! crash recovery to go by. airlockd's next start [`sweep`]s what the files name. Only this
//! state directory's files are read: other daemons' runs under the same cgroup parent (the
//! test suite's) are left alone. A host's reboot clears cgroups and /run, not these files;
//! the sweep then finds nothing to remove.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sandbox::helper::Ahead;
use crate::sandbox::limits::RunCgroups;

/// The directory, inside the state directory.
pub const DIR: &str = "ahead";

/// Longest body read back (one path).
const MAX_BODY: u64 = 4096;

/// The file of one helper started ahead; removed when dropped.
#[derive(Debug)]
pub struct Mark {
    path: Option<PathBuf>,
}

impl Mark {
    /// Made before the helper for `ahead` starts. Best effort: a state directory that
    /// cannot take the file costs only the sweep after a crash, never the launch.
    pub fn make(state_dir: &Path, ahead: &Ahead) -> Mark {
        let dir = state_dir.join(DIR);
        let path = dir.join(&ahead.run_id);
        let body = ahead
            .cgroup_parent
            .as_ref()
            .map(|p| p.as_os_str().as_bytes().to_vec())
            .unwrap_or_default();
        let made = fs::create_dir_all(&dir).and_then(|()| fs::write(&path, body));
        Mark {
            path: made.is_ok().then_some(path),
        }
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// What a [`sweep`] found: runs whose cgroups were still there, each with why they could
/// not all be removed (`None`: removed).
pub type Swept = Vec<(String, Option<String>)>;

/// At airlockd's start, before any helper of its own: kill and remove the cgroups of every
/// run a marked helper was started for, and the marks.
pub fn sweep(state_dir: &Path) -> Swept {
    let Ok(entries) = fs::read_dir(state_dir.join(DIR)) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let run = e.file_name().to_string_lossy().into_owned();
        // Only a run id names a cgroup: anything else in the folder is not ours to follow.
        if crate::names::valid_run_id(&run) {
            let parent = read_parent(&path);
            let cgroups = RunCgroups::existing(parent.as_deref(), &run);
            if !cgroups.dirs.is_empty() {
                let failed = cgroups.kill_and_remove().err().map(|e| e.to_string());
                found.push((run, failed));
            }
        }
        let _ = fs::remove_file(&path);
    }
    found
}

fn read_parent(path: &Path) -> Option<PathBuf> {
    use std::io::Read;
    use std::os::unix::ffi::OsStringExt;
    let mut body = Vec::new();
    fs::File::open(path)
        .ok()?
        .take(MAX_BODY)
        .read_to_end(&mut body)
        .ok()?;
    (!body.is_empty()).then(|| PathBuf::from(std::ffi::OsString::from_vec(body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_names_its_run_and_parent_until_dropped_and_the_sweep_takes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let ahead = Ahead {
            run_id: "r-20261207-0a1b2c3d".into(),
            cgroup_parent: Some(PathBuf::from("/sys/fs/cgroup/airlock-test-none")),
        };
        let m = Mark::make(dir.path(), &ahead);
        let file = dir.path().join(DIR).join(&ahead.run_id);
        assert_eq!(read_parent(&file), ahead.cgroup_parent);
        drop(m);
        assert!(!file.exists());
        // Left by a crash: swept (no cgroup of that run exists, so none is reported), and
        // a stray file that names no run is removed without being followed.
        std::mem::forget(Mark::make(dir.path(), &ahead));
        fs::write(dir.path().join(DIR).join("Not_A_Run"), "/").unwrap();
        assert!(sweep(dir.path()).is_empty());
        assert_eq!(fs::read_dir(dir.path().join(DIR)).unwrap().count(), 0);
    }
}
