//! Whether the supervisor of an open run is still there, and when it last was: one file
//! per open run, `<state_dir>/alive/<run>`, made before the run's opening record and
//! removed after its closing record.
//!
//! The supervisor holds an exclusive `flock` on the file for as long as it supervises the
//! run; the kernel drops it when the process dies, SIGKILL included, so "held" is exact and
//! needs no pid check. While it holds the file it touches its mtime every [`HEARTBEAT`], so
//! the mtime of a file nobody holds is when the run was last known alive (to within one
//! heartbeat). The file's body names the supervisor (kind and pid, for messages) and the
//! run's cgroup parent (for whoever cleans up after it).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::stat::futimens;
use nix::sys::time::TimeSpec;

/// The directory, inside the state directory.
pub const DIR: &str = "alive";

/// How often a supervisor touches its run's file.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// Longest body read back (a few short lines are written).
const MAX_BODY: u64 = 4096;

/// Who supervises a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supervisor {
    Airlockd,
    Standalone,
}

impl Supervisor {
    pub fn as_str(self) -> &'static str {
        match self {
            Supervisor::Airlockd => "airlockd",
            Supervisor::Standalone => "standalone",
        }
    }

    /// How a message names it.
    pub fn describe(self) -> &'static str {
        match self {
            Supervisor::Airlockd => "airlockd",
            Supervisor::Standalone => "airlockctl launch --standalone",
        }
    }
}

/// The run's directory entry in [`DIR`].
pub fn path(state_dir: &Path, run: &str) -> PathBuf {
    state_dir.join(DIR).join(run)
}

/// Make [`DIR`] (root only) if it is missing.
pub fn ensure_dir(state_dir: &Path) -> io::Result<()> {
    let dir = state_dir.join(DIR);
    match fs::DirBuilder::new().mode(0o700).create(&dir).map(|_| ()) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// The file of one run, held by its supervisor.
#[derive(Debug)]
pub struct Alive {
    path: PathBuf,
    file: Flock<File>,
}

impl Alive {
    /// Make and hold the run's file. Call before the run's opening record is appended: a
    /// crash in between leaves a file whose run the ledger does not have, which the next
    /// owner of the ledger removes.
    pub fn create(
        state_dir: &Path,
        run: &str,
        supervisor: Supervisor,
        cgroup_parent: Option<&Path>,
    ) -> io::Result<Alive> {
        let path = path(state_dir, run);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| named(&path, "create", e))?;
        let mut file = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            let _ = fs::remove_file(&path);
            named(&path, "lock", io::Error::from(e))
        })?;
        let mut body = format!(
            "supervisor={}\npid={}\n",
            supervisor.as_str(),
            std::process::id()
        );
        if let Some(p) = cgroup_parent.and_then(Path::to_str) {
            body.push_str(&format!("cgroup_parent={p}\n"));
        }
        if let Err(e) = file.write_all(body.as_bytes()) {
            let _ = fs::remove_file(&path);
            return Err(named(&path, "write", e));
        }
        Ok(Alive { path, file })
    }

    /// Say the run is alive now.
    pub fn touch(&self) -> io::Result<()> {
        let now = TimeSpec::UTIME_NOW;
        futimens(self.file.as_fd().as_raw_fd(), &now, &now)
            .map_err(|e| named(&self.path, "touch", io::Error::from(e)))
    }

    /// Touch it every [`HEARTBEAT`] from a task of the current runtime, until
    /// [`Beating::stop`].
    pub fn beat(self) -> io::Result<Beating> {
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let task = runtime.spawn(async move {
            let mut tick = tokio::time::interval(HEARTBEAT);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    // A touch (one futimens) that fails leaves an older mtime: the run is
                    // then told to have ended earlier than it did, never later, so failures
                    // are not fatal.
                    _ = tick.tick() => { let _ = self.touch(); }
                }
            }
            self
        });
        Ok(Beating {
            stop: Some(tx),
            task: Some(task),
        })
    }

    /// The run's closing record is durable: nothing is left to tell.
    pub fn remove(self) {
        let _ = fs::remove_file(&self.path);
    }

    /// The closing record could not be written: leave the file, touched now, for the next
    /// owner of the ledger to close the run with this time.
    pub fn leave(self) {
        let _ = self.touch();
    }
}

fn named(path: &Path, op: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: cannot {op}: {e}", path.display()))
}

/// An [`Alive`] being touched.
#[derive(Debug)]
pub struct Beating {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Alive>>,
}

impl Beating {
    /// Stop touching; the file stays held.
    pub async fn stop(mut self) -> Option<Alive> {
        drop(self.stop.take());
        match self.task.take() {
            Some(t) => t.await.ok(),
            None => None,
        }
    }
}

/// What the file of an open run says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Its supervisor holds it: the run is supervised.
    Held {
        supervisor: Option<Supervisor>,
        pid: Option<u32>,
    },
    /// Nobody holds it: the supervisor died (or could not close the record).
    Left(Left),
    /// No file: the run was started by a build that kept none, or it is not open.
    Missing,
}

/// The file of a run whose supervisor is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// Unix milliseconds of the last heartbeat.
    pub last_alive_ms: u64,
    pub supervisor: Option<Supervisor>,
    pub pid: Option<u32>,
    pub cgroup_parent: Option<PathBuf>,
}

/// Look at one run's file. Taking the lock to probe it is harmless: it is let go at once,
/// and a supervisor only ever locks its file when it makes it.
pub fn probe(state_dir: &Path, run: &str) -> io::Result<Liveness> {
    let path = path(state_dir, run);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Liveness::Missing),
        Err(e) => return Err(named(&path, "open", e)),
    };
    let meta = file.metadata().map_err(|e| named(&path, "stat", e))?;
    let mut body = String::new();
    let _ = (&file).take(MAX_BODY).read_to_string(&mut body);
    let fields = parse_body(&body);
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Err((_, Errno::EWOULDBLOCK)) => Ok(Liveness::Held {
            supervisor: fields.supervisor,
            pid: fields.pid,
        }),
        Err((_, e)) => Err(named(&path, "lock", io::Error::from(e))),
        Ok(_released_on_drop) => Ok(Liveness::Left(Left {
            last_alive_ms: mtime_ms(&meta),
            supervisor: fields.supervisor,
            pid: fields.pid,
            cgroup_parent: fields.cgroup_parent,
        })),
    }
}

fn mtime_ms(meta: &fs::Metadata) -> u64 {
    let secs = u64::try_from(meta.mtime()).unwrap_or(0);
    let nanos = u64::try_from(meta.mtime_nsec()).unwrap_or(0);
    secs.saturating_mul(1000).saturating_add(nanos / 1_000_000)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Body {
    supervisor: Option<Supervisor>,
    pid: Option<u32>,
    cgroup_parent: Option<PathBuf>,
}

/// The body's `key=value` lines; anything unknown or malformed is left out (a torn body
/// costs only the details of a message and a cgroup to clean up).
fn parse_body(text: &str) -> Body {
    let mut b = Body::default();
    for line in text.lines() {
        match line.split_once('=') {
            Some(("supervisor", "airlockd")) => b.supervisor = Some(Supervisor::Airlockd),
            Some(("supervisor", "standalone")) => b.supervisor = Some(Supervisor::Standalone),
            Some(("pid", p)) => b.pid = p.parse().ok(),
            // Only an absolute path under the cgroup file system is ever acted on.
            Some(("cgroup_parent", p))
                if p.starts_with("/sys/fs/cgroup/") && !p.contains("/..") =>
            {
                b.cgroup_parent = Some(PathBuf::from(p))
            }
            _ => {}
        }
    }
    b
}

/// The runs with a file, in name order.
pub fn list(state_dir: &Path) -> io::Result<Vec<String>> {
    let dir = state_dir.join(DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(named(&dir, "read", e)),
    };
    let mut runs: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| crate::journal::valid_run_id(n))
        .collect();
    runs.sort();
    Ok(runs)
}

/// Remove a run's file once its record is closed (or was never opened).
pub fn forget(state_dir: &Path, run: &str) {
    let _ = fs::remove_file(path(state_dir, run));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_file_is_held_and_a_dropped_one_is_left_with_its_last_touch() {
        let dir = tempfile::tempdir().unwrap();
        ensure_dir(dir.path()).unwrap();
        let a = Alive::create(dir.path(), "r-1", Supervisor::Standalone, None).unwrap();
        match probe(dir.path(), "r-1").unwrap() {
            Liveness::Held { supervisor, pid } => {
                assert_eq!(supervisor, Some(Supervisor::Standalone));
                assert_eq!(pid, Some(std::process::id()));
            }
            other => panic!("{other:?}"),
        }
        // A second supervisor of the same run is refused.
        assert!(Alive::create(dir.path(), "r-1", Supervisor::Airlockd, None).is_err());
        a.leave();
        match probe(dir.path(), "r-1").unwrap() {
            Liveness::Left(l) => {
                assert!(l.last_alive_ms > 0);
                assert!(l.last_alive_ms <= crate::supervisor::ledger::now_ms() + 1000);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(list(dir.path()).unwrap(), vec!["r-1".to_string()]);
        forget(dir.path(), "r-1");
        assert_eq!(probe(dir.path(), "r-1").unwrap(), Liveness::Missing);
        assert!(list(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn the_body_keeps_only_what_it_understands() {
        let b = parse_body(
            "supervisor=airlockd\npid=42\ncgroup_parent=/sys/fs/cgroup/airlock\nextra=1\n",
        );
        assert_eq!(b.supervisor, Some(Supervisor::Airlockd));
        assert_eq!(b.pid, Some(42));
        assert_eq!(
            b.cgroup_parent,
            Some(PathBuf::from("/sys/fs/cgroup/airlock"))
        );
        let b = parse_body("supervisor=x\npid=-1\ncgroup_parent=/etc\n");
        assert_eq!(b, Body::default());
        let b = parse_body("cgroup_parent=/sys/fs/cgroup/../../etc\n");
        assert_eq!(b.cgroup_parent, None);
    }
}
