//! A cgroup of its own for each command of a run, below the command side's (`cmd`), made
//! and ended by the supervisor, outside the jail. The command's process joins it before it
//! execs (writing 0 to its `cgroup.procs`, opened here: the kernel checks the opener, not
//! the writer), and so does everything it ever starts; `cgroup.kill` ends them all at once.
//! The shepherd uses it when the command exits, times out or is cancelled, and the
//! supervisor again when the call is over, whatever the shepherd did or could do: nothing
//! a command does to its own limits, its descriptors or its shepherd hides a descendant.
//!
//! It also reads what the command side's limits refused (OOM kills, forks past `pids.max`),
//! so the bash tool can say what happened to a command.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::fds::openat;
use super::sides::CommandSideFds;

/// What the command side's limits have refused so far (each counter the kernel keeps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Processes the OOM killer ended on the command side.
    pub oom_kills: Option<u64>,
    /// Forks refused at the command side's process limit.
    pub forks: Option<u64>,
}

impl Refusals {
    /// What a command's call should say about what the limits did meanwhile.
    pub fn since(&self, before: &Refusals) -> Vec<&'static str> {
        let more = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if a > b);
        let mut v = Vec::new();
        if more(self.oom_kills, before.oom_kills) {
            v.push("killed: out of memory (the command side reached its memory limit; the OOM killer ended a process of it)");
        }
        if more(self.forks, before.forks) {
            v.push("fork failed: process limit (the command side reached its process limit; a fork got EAGAIN)");
        }
        v
    }
}

/// The command side's cgroups, as the supervisor holds them.
#[derive(Debug)]
pub struct CommandCgroups {
    side: Option<Arc<OwnedFd>>,
    /// The counter files of [`Refusals`], opened once and read again from their start.
    oom_kills: Option<Counter>,
    forks: Option<Counter>,
    next: AtomicU64,
    /// The next command's cgroup, made while the previous command ran
    /// ([`CommandCgroups::prepare`]).
    ready: Mutex<Option<CommandCgroup>>,
    /// Commands' cgroups killed, to remove (the next [`CommandCgroups::prepare`] does, and
    /// the run's end removes whatever is left).
    pending: Mutex<Vec<CString>>,
}

/// One counter of a cgroup's flat keyed file, its file held open.
#[derive(Debug)]
struct Counter {
    file: std::fs::File,
    key: &'static str,
}

impl Counter {
    /// The first of `files` (name, key) in `dir` that opens.
    fn open(dir: Option<&OwnedFd>, files: &[(&CStr, &'static str)]) -> Option<Counter> {
        let dir = dir?;
        files.iter().find_map(|(f, key)| {
            let fd = openat(dir, f, libc::O_RDONLY | libc::O_CLOEXEC).ok()?;
            Some(Counter {
                file: std::fs::File::from(fd),
                key,
            })
        })
    }

    /// The counter now: a read from offset 0 makes the kernel write the file anew.
    fn read(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 4096];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        keyed(std::str::from_utf8(buf.get(..n)?).ok()?, self.key)
    }
}

/// One command's cgroup.
#[derive(Debug)]
pub struct CommandCgroup {
    side: Arc<OwnedFd>,
    name: CString,
    procs: OwnedFd,
    kill: OwnedFd,
}

/// The value of `key` in a cgroup's flat keyed file (`oom_kill 3`).
pub(super) fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

impl CommandCgroups {
    pub fn new(fds: CommandSideFds) -> CommandCgroups {
        CommandCgroups {
            side: fds.v2.map(Arc::new),
            // v2 memory.events, v1 memory.oom_control.
            oom_kills: Counter::open(
                fds.memory.as_ref(),
                &[
                    (c"memory.events", "oom_kill"),
                    (c"memory.oom_control", "oom_kill"),
                ],
            ),
            forks: Counter::open(fds.pids.as_ref(), &[(c"pids.events", "max")]),
            next: AtomicU64::new(0),
            ready: Mutex::new(None),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// None: the host gave no command side cgroups (standalone runs of old supervisors,
    /// hosts without them).
    pub fn none() -> CommandCgroups {
        CommandCgroups::new(CommandSideFds::default())
    }

    /// The next command's cgroup: the one made ahead, else one made now; None when there
    /// is no cgroup v2 to make it in.
    pub fn command(&self) -> std::io::Result<Option<CommandCgroup>> {
        if let Some(cg) = self.ready.lock().ok().and_then(|mut r| r.take()) {
            return Ok(Some(cg));
        }
        self.make()
    }

    /// Off a command's path (while one runs): remove the cgroups of commands that ended,
    /// and make the next command's cgroup. A failure here is met again, and refused, by
    /// [`CommandCgroups::command`].
    pub fn prepare(&self) {
        self.sweep();
        let Ok(mut ready) = self.ready.lock() else {
            return;
        };
        if ready.is_none() {
            *ready = self.make().ok().flatten();
        }
    }

    fn make(&self) -> std::io::Result<Option<CommandCgroup>> {
        let Some(side) = &self.side else {
            return Ok(None);
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let name = CString::new(format!("c{n}")).map_err(std::io::Error::other)?;
        // SAFETY: mkdirat on a descriptor we hold with a NUL-terminated name.
        if unsafe { libc::mkdirat(side.as_raw_fd(), name.as_ptr(), 0o755) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let opened = (|| {
            let dir = openat(side, &name, libc::O_PATH | libc::O_DIRECTORY)?;
            Ok::<_, std::io::Error>((
                openat(&dir, c"cgroup.procs", libc::O_WRONLY)?,
                openat(&dir, c"cgroup.kill", libc::O_WRONLY)?,
            ))
        })();
        match opened {
            Ok((procs, kill)) => Ok(Some(CommandCgroup {
                side: side.clone(),
                name,
                procs,
                kill,
            })),
            Err(e) => {
                rmdir_at(side, &name);
                Err(e)
            }
        }
    }

    /// What the command side's limits have refused so far.
    pub fn refusals(&self) -> Refusals {
        Refusals {
            oom_kills: self.oom_kills.as_ref().and_then(Counter::read),
            forks: self.forks.as_ref().and_then(Counter::read),
        }
    }

    /// End a command's cgroup: kill everything in it now; its folder is removed by the
    /// next [`CommandCgroups::prepare`] (once its processes are gone) or the run's end.
    pub fn end(&self, cg: CommandCgroup) {
        cg.kill();
        if let Ok(mut p) = self.pending.lock() {
            p.push(cg.name);
        } else {
            rmdir_at(&cg.side, &cg.name);
        }
    }

    fn sweep(&self) {
        let Some(side) = &self.side else { return };
        if let Ok(mut p) = self.pending.lock() {
            p.retain(|name| !rmdir_at(side, name));
        }
    }
}

impl CommandCgroup {
    /// The descriptors the command's shepherd gets: `cgroup.procs` (its command writes 0
    /// there before it execs) and `cgroup.kill`.
    pub fn fds(&self) -> [RawFd; 2] {
        [self.procs.as_raw_fd(), self.kill.as_raw_fd()]
    }

    /// SIGKILL to every process in the cgroup and below.
    pub fn kill(&self) {
        let _ = nix::unistd::write(&self.kill, b"1");
    }
}

/// Remove an empty cgroup; false while it still holds a process (EBUSY). Gone already
/// counts as removed.
fn rmdir_at(dir: &OwnedFd, name: &CStr) -> bool {
    // SAFETY: unlinkat on a descriptor we hold with a NUL-terminated name.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_the_kernels_keyed_files() {
        let v2 = "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(keyed(v2, "oom_kill"), Some(2));
        assert_eq!(keyed(v2, "max"), Some(7));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n";
        assert_eq!(keyed(v1, "oom_kill"), Some(5));
        assert_eq!(keyed(v1, "nope"), None);
        assert_eq!(keyed("max x\n", "max"), None);
    }

    #[test]
    fn a_call_says_what_the_limits_refused_meanwhile() {
        let before = Refusals {
            oom_kills: Some(1),
            forks: Some(0),
        };
        let same = before;
        assert!(same.since(&before).is_empty());
        let after = Refusals {
            oom_kills: Some(2),
            forks: Some(3),
        };
        let said = after.since(&before);
        assert!(said[0].starts_with("killed: out of memory"), "{said:?}");
        assert!(
            said[1].starts_with("fork failed: process limit"),
            "{said:?}"
        );
        // A counter that cannot be read says nothing.
        assert!(Refusals::default().since(&before).is_empty());
    }
}
