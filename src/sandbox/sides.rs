//! The two sides of a run in its cgroups. Below the run's cgroup each side has its own,
//! `agent` and `cmd` (the runner, every command, a workflow role's command), with its own
//! process and memory limits carved from the run's: the command side gets the run's
//! limits minus what the agent side keeps for itself ([`Limits::agent_procs`],
//! [`Limits::agent_memory`]), so a command that forks or allocates to its limit gets
//! `EAGAIN` or its OOM kill on its own side, and the agent still has its floor. The run's
//! cgroup keeps the run's own limits over both.
//!
//! The helper makes them ([`RunCgroups::split`]) and tells pid 1 where they are
//! ([`CgroupWord`]); pid 1 opens them before it leaves the host's view ([`OpenSides`]),
//! each side's first process is born in its v2 cgroup (`CLONE_INTO_CGROUP`) and joins its
//! v1 ones itself, and the command side's are handed to the supervisor, which gives each
//! command a cgroup of its own below `cmd` ([`command_cgroup`](super::command_cgroup)).

use std::fs;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::limits::{limit_memory_v1, write_file, RunCgroups};
use super::spec::Limits;
use super::SandboxError;

/// Names of the sides' cgroups below the run's.
pub const AGENT: &str = "agent";
pub const COMMAND: &str = "cmd";

/// One side's cgroups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SideDirs {
    /// Its cgroup v2 (born there).
    pub v2: Option<PathBuf>,
    /// Its v1 cgroups (joined by its first process).
    pub v1: Vec<PathBuf>,
    /// Where its memory limit is and its OOM kills are counted (one of the above).
    pub memory: Option<PathBuf>,
    /// Where its process limit is and its refused forks are counted.
    pub pids: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sides {
    pub agent: SideDirs,
    pub command: SideDirs,
}

/// What limits each side, for the run log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitReport {
    lines: Vec<String>,
}

impl std::fmt::Display for SplitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sides: {}", self.lines.join("; "))
    }
}

fn how(v2: bool, v2_file: &str, v1_file: &str) -> String {
    if v2 {
        format!("cgroup v2 {v2_file}")
    } else {
        format!("cgroup v1 {v1_file}")
    }
}

impl RunCgroups {
    /// Make the sides' cgroups below the run's and set their limits (after
    /// [`RunCgroups::limit`]). Where no pids or memory controller limits the run, the
    /// sides share what does (`RLIMIT_NPROC`, nothing), and the report says so.
    pub fn split(&mut self, limits: &Limits) -> Result<(Sides, SplitReport), SandboxError> {
        let mut sides = Sides::default();
        let procs = [limits.max_procs, limits.command_procs()];
        let memory = limits.memory_bytes.map(|m| [m, limits.command_memory(m)]);
        if let Some(run) = self.v2.clone() {
            self.hand_down(&run)?;
            for (i, side) in [&mut sides.agent, &mut sides.command]
                .into_iter()
                .enumerate()
            {
                let dir = self.make_side(&run, i)?;
                if self.v2_pids {
                    write_file(
                        &dir.join("pids.max"),
                        &procs[i].to_string(),
                        "cgroup pids.max",
                    )?;
                    side.pids = Some(dir.clone());
                }
                if let Some(m) = memory.filter(|_| self.v2_memory) {
                    write_file(
                        &dir.join("memory.max"),
                        &m[i].to_string(),
                        "cgroup memory.max",
                    )?;
                    let swap = dir.join("memory.swap.max");
                    if swap.exists() {
                        write_file(&swap, "0", "cgroup memory.swap.max")?;
                    }
                    side.memory = Some(dir.clone());
                }
                side.v2 = Some(dir);
            }
        }
        if let Some(run) = self.v1_pids.clone().filter(|_| !self.v2_pids) {
            for (i, side) in [&mut sides.agent, &mut sides.command]
                .into_iter()
                .enumerate()
            {
                let dir = self.make_side(&run, i)?;
                write_file(
                    &dir.join("pids.max"),
                    &procs[i].to_string(),
                    "cgroup v1 pids.max",
                )?;
                side.pids = Some(dir.clone());
                side.v1.push(dir);
            }
        }
        if let (Some(run), Some(m)) = (self.v1_memory.clone(), memory) {
            for (i, side) in [&mut sides.agent, &mut sides.command]
                .into_iter()
                .enumerate()
            {
                let dir = self.make_side(&run, i)?;
                limit_memory_v1(&dir, &m[i].to_string())?;
                side.memory = Some(dir.clone());
                side.v1.push(dir);
            }
        }
        let report = self.split_report(limits, &sides);
        Ok((sides, report))
    }

    /// Before the spec, in a helper told its run ahead: make every cgroup [`split`] and a
    /// v1 memory limit would make, so that after the spec only their limits are written
    /// (each mkdir takes the kernel's cgroup lock; a memory cgroup's costs the most). Those
    /// the run does not use (no memory limit, no command side) stay empty and are removed
    /// with the rest.
    ///
    /// [`split`]: RunCgroups::split
    pub fn make_ahead(&mut self) -> Result<(), SandboxError> {
        let mut parents = Vec::new();
        if let Some(run) = self.v2.clone() {
            self.hand_down(&run)?;
            parents.push(run);
        }
        parents.extend(self.v1_pids.clone().filter(|_| !self.v2_pids));
        parents.extend(self.make_v1_memory_ahead()?);
        for run in parents {
            for side in 0..2 {
                let dir = self.make_side(&run, side)?;
                self.sides_ahead.push(dir);
            }
        }
        Ok(())
    }

    /// Where the run's own processes live in `init`, let the v2 cgroup's controllers reach
    /// the sides' cgroups below it.
    fn hand_down(&mut self, run: &Path) -> Result<(), SandboxError> {
        if self.v2_init.is_none() || self.handed_down {
            return Ok(());
        }
        for (has, c) in [(self.v2_pids, "+pids"), (self.v2_memory, "+memory")] {
            if has {
                write_file(
                    &run.join("cgroup.subtree_control"),
                    c,
                    "cgroup subtree_control",
                )?;
            }
        }
        self.handed_down = true;
        Ok(())
    }

    fn make_side(&mut self, run: &Path, side: usize) -> Result<PathBuf, SandboxError> {
        let dir = run.join([AGENT, COMMAND][side]);
        if self.sides_ahead.contains(&dir) {
            return Ok(dir);
        }
        fs::create_dir(&dir).map_err(|e| SandboxError::sys("create side cgroup", e))?;
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    fn split_report(&self, limits: &Limits, sides: &Sides) -> SplitReport {
        let procs = |n: u64| match self.pids_dir() {
            Some((_, v2)) => format!("{n} processes by {}", how(v2, "pids.max", "pids.max")),
            None => "processes shared with the other side (RLIMIT_NPROC)".to_string(),
        };
        let memory = |n: Option<u64>| match (n, self.memory_dir()) {
            (None, _) => "no memory limit".to_string(),
            (Some(n), Some((_, v2))) => format!(
                "{n} bytes by {}",
                how(v2, "memory.max", "memory.limit_in_bytes")
            ),
            (Some(_), None) => "no memory controller".to_string(),
        };
        let kill = if sides.command.v2.is_some() {
            "each command in a cgroup of its own, ended whole by cgroup v2 cgroup.kill"
        } else {
            "each command ended by its shepherd (no cgroup v2 for a cgroup per command)"
        };
        let agent_mem = limits.memory_bytes;
        let cmd_mem = limits.memory_bytes.map(|m| limits.command_memory(m));
        SplitReport {
            lines: vec![
                format!(
                    "agent side: {}, {}",
                    procs(limits.max_procs),
                    memory(agent_mem)
                ),
                format!(
                    "command side: {}, {} (the agent keeps {} processes{})",
                    procs(limits.command_procs()),
                    memory(cmd_mem),
                    limits.agent_procs(),
                    match limits.memory_bytes {
                        Some(m) => format!(" and {} bytes", limits.agent_memory(m)),
                        None => String::new(),
                    }
                ),
                kill.to_string(),
            ],
        }
    }
}

/// What the helper tells pid 1 once the run's cgroups are limited and pid 1 is in the v2
/// one: whether a cgroup limits the run's processes or `RLIMIT_NPROC` must, the run's v1
/// cgroups pid 1 joins itself, and the sides' cgroups. Encoded as one byte, then lines
/// `<tag> <path>`, then [`END`]: a word cut short is refused, never read as fewer cgroups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupWord {
    pub nproc: bool,
    pub join: Vec<PathBuf>,
    pub sides: Option<Sides>,
}

const LIMITED: u8 = b'c';
const NPROC: u8 = b'n';
const END: &[u8] = b".\n";

impl CgroupWord {
    pub fn encode(&self) -> Vec<u8> {
        let mut word = vec![if self.nproc { NPROC } else { LIMITED }];
        let mut line = |tag: &str, p: &Path| {
            word.extend_from_slice(tag.as_bytes());
            word.push(b' ');
            word.extend_from_slice(p.as_os_str().as_bytes());
            word.push(b'\n');
        };
        for d in &self.join {
            line("j", d);
        }
        if let Some(s) = &self.sides {
            line("s", Path::new("/"));
            for (side, dirs) in [("a", &s.agent), ("c", &s.command)] {
                let one = [("2", &dirs.v2), ("m", &dirs.memory), ("p", &dirs.pids)];
                for (kind, d) in one {
                    if let Some(d) = d {
                        line(&format!("{side}{kind}"), d);
                    }
                }
                for d in &dirs.v1 {
                    line(&format!("{side}1"), d);
                }
            }
        }
        word.extend_from_slice(END);
        word
    }

    /// None when the word is not whole or not one [`CgroupWord::encode`] makes.
    pub fn decode(word: &[u8]) -> Option<CgroupWord> {
        let (first, rest) = word.split_first()?;
        let nproc = match *first {
            LIMITED => false,
            NPROC => true,
            _ => return None,
        };
        let body = rest.strip_suffix(END)?;
        let mut w = CgroupWord {
            nproc,
            ..CgroupWord::default()
        };
        for l in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let sp = l.iter().position(|b| *b == b' ')?;
            let (tag, path) = (&l[..sp], &l[sp + 1..]);
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
            if tag == b"j" {
                w.join.push(path);
                continue;
            }
            if tag == b"s" {
                w.sides = Some(Sides::default());
                continue;
            }
            let sides = w.sides.as_mut()?;
            let (side, kind) = match tag {
                [s, k] => (*s, *k),
                _ => return None,
            };
            let dirs = match side {
                b'a' => &mut sides.agent,
                b'c' => &mut sides.command,
                _ => return None,
            };
            match kind {
                b'2' => dirs.v2 = Some(path),
                b'1' => dirs.v1.push(path),
                b'm' => dirs.memory = Some(path),
                b'p' => dirs.pids = Some(path),
                _ => return None,
            }
        }
        Some(w)
    }
}

/// One side's cgroups, opened by pid 1 while the host's cgroup file systems are still in
/// its view: the v2 directory its first process is born in, and the `tasks` files of its
/// v1 ones, which that process writes itself.
#[derive(Debug, Default)]
pub struct SideFds {
    v2: Option<OwnedFd>,
    tasks: Vec<OwnedFd>,
}

/// The command side's cgroups as the supervisor gets them (see
/// [`command_cgroup`](super::command_cgroup)): its v2 directory (each command's cgroup
/// goes below it), and where its memory and process limits count what they refused.
#[derive(Debug, Default)]
pub struct CommandSideFds {
    pub v2: Option<OwnedFd>,
    pub memory: Option<OwnedFd>,
    pub pids: Option<OwnedFd>,
}

impl CommandSideFds {
    /// The hand-over's tag byte of each descriptor present, with the descriptors, in order.
    pub fn tagged(&self) -> (Vec<u8>, Vec<RawFd>) {
        let mut tags = Vec::new();
        let mut fds = Vec::new();
        for (tag, fd) in [(b'k', &self.v2), (b'm', &self.memory), (b'p', &self.pids)] {
            if let Some(fd) = fd {
                tags.push(tag);
                fds.push(fd.as_raw_fd());
            }
        }
        (tags, fds)
    }

    /// The inverse of [`CommandSideFds::tagged`]; None when tags and descriptors disagree.
    pub fn from_tagged(tags: &[u8], fds: Vec<OwnedFd>) -> Option<CommandSideFds> {
        if tags.len() != fds.len() {
            return None;
        }
        let mut out = CommandSideFds::default();
        for (tag, fd) in tags.iter().zip(fds) {
            let slot = match tag {
                b'k' => &mut out.v2,
                b'm' => &mut out.memory,
                b'p' => &mut out.pids,
                _ => return None,
            };
            if slot.replace(fd).is_some() {
                return None;
            }
        }
        Some(out)
    }
}

/// Both sides' cgroups, open.
#[derive(Debug, Default)]
pub struct OpenSides {
    pub agent: SideFds,
    pub command: SideFds,
    pub handover: CommandSideFds,
}

fn open(path: &Path, flags: libc::c_int, step: &'static str) -> Result<OwnedFd, SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .read(flags & libc::O_PATH != 0)
        .write(flags & libc::O_PATH == 0)
        .custom_flags(flags | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| SandboxError::sys(step, e))?;
    Ok(f.into())
}

fn open_dir(path: &Path) -> Result<OwnedFd, SandboxError> {
    open(path, libc::O_PATH | libc::O_DIRECTORY, "open side cgroup")
}

impl SideFds {
    fn open(dirs: &SideDirs) -> Result<SideFds, SandboxError> {
        Ok(SideFds {
            v2: dirs.v2.as_deref().map(open_dir).transpose()?,
            tasks: dirs
                .v1
                .iter()
                .map(|d| open(&d.join("tasks"), 0, "open side cgroup"))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The v2 directory to be born in.
    pub fn v2(&self) -> Option<BorrowedFd<'_>> {
        self.v2.as_ref().map(AsFd::as_fd)
    }

    /// In the side's first process (single-threaded): join its v1 cgroups (a thread that
    /// moves itself takes no global lock), and its v2 one unless it was born there.
    pub fn enter(&self, born_in_v2: bool) -> Result<(), SandboxError> {
        const STEP: &str = "join side cgroup";
        if let (false, Some(dir)) = (born_in_v2, &self.v2) {
            let procs = super::fds::openat(dir, c"cgroup.procs", libc::O_WRONLY)
                .map_err(|e| SandboxError::sys(STEP, e))?;
            write_zero(&procs).map_err(|e| SandboxError::sys(STEP, e))?;
        }
        for t in &self.tasks {
            write_zero(t).map_err(|e| SandboxError::sys(STEP, e))?;
        }
        Ok(())
    }

    pub fn raw_fds(&self) -> Vec<RawFd> {
        self.v2
            .iter()
            .chain(&self.tasks)
            .map(AsRawFd::as_raw_fd)
            .collect()
    }
}

impl OpenSides {
    pub fn open(sides: &Sides) -> Result<OpenSides, SandboxError> {
        let c = &sides.command;
        Ok(OpenSides {
            agent: SideFds::open(&sides.agent)?,
            command: SideFds::open(c)?,
            handover: CommandSideFds {
                v2: c.v2.as_deref().map(open_dir).transpose()?,
                memory: c.memory.as_deref().map(open_dir).transpose()?,
                pids: c.pids.as_deref().map(open_dir).transpose()?,
            },
        })
    }

    pub fn raw_fds(&self) -> Vec<RawFd> {
        let (_, handed) = self.handover.tagged();
        let mut v = self.agent.raw_fds();
        v.extend(self.command.raw_fds());
        v.extend(handed);
        v
    }
}

/// Write "0" (the writer itself) to a cgroup's `cgroup.procs` or `tasks`.
pub fn write_zero(fd: &OwnedFd) -> std::io::Result<()> {
    let n = nix::unistd::write(fd, b"0").map_err(std::io::Error::from)?;
    if n == 1 {
        Ok(())
    } else {
        Err(std::io::Error::other("short write"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_word_cut_short_is_refused() {
        let word = CgroupWord {
            nproc: true,
            join: vec![
                PathBuf::from("/sys/fs/cgroup/pids/airlock/r-1"),
                PathBuf::from("/sys/fs/cgroup/memory/m/airlock/r-1"),
            ],
            sides: Some(Sides {
                agent: SideDirs {
                    v2: Some("/sys/fs/cgroup/unified/airlock/r-1/agent".into()),
                    v1: vec!["/sys/fs/cgroup/pids/airlock/r-1/agent".into()],
                    memory: None,
                    pids: Some("/sys/fs/cgroup/pids/airlock/r-1/agent".into()),
                },
                command: SideDirs {
                    v2: Some("/sys/fs/cgroup/unified/airlock/r-1/cmd".into()),
                    v1: vec![],
                    memory: Some("/sys/fs/cgroup/memory/m/airlock/r-1/cmd".into()),
                    pids: None,
                },
            }),
        };
        let bytes = word.encode();
        assert_eq!(CgroupWord::decode(&bytes), Some(word.clone()));
        let plain = CgroupWord::default();
        assert_eq!(CgroupWord::decode(&plain.encode()), Some(plain));
        for cut in 0..bytes.len() {
            assert_eq!(
                CgroupWord::decode(&bytes[..cut]),
                None,
                "a word cut at byte {cut} was taken"
            );
        }
    }

    #[test]
    fn the_hand_over_tags_name_each_descriptor_once() {
        let fd = || -> OwnedFd { fs::File::open("/dev/null").unwrap().into() };
        let h = CommandSideFds {
            v2: Some(fd()),
            memory: None,
            pids: Some(fd()),
        };
        let (tags, raw) = h.tagged();
        assert_eq!(tags, b"kp");
        assert_eq!(raw.len(), 2);
        let back = CommandSideFds::from_tagged(b"kp", vec![fd(), fd()]).unwrap();
        assert!(back.v2.is_some() && back.memory.is_none() && back.pids.is_some());
        assert!(CommandSideFds::from_tagged(b"kk", vec![fd(), fd()]).is_none());
        assert!(CommandSideFds::from_tagged(b"k", vec![fd(), fd()]).is_none());
        assert!(CommandSideFds::from_tagged(b"x", vec![fd()]).is_none());
    }
}
