//! The mount view of the command side's second runner, the one that runs commands with an
//! exec limit (git, [`crate::policy::git_overrides`]): a mount namespace of its own where
//! every mount the run could write (workspace, home, /tmp, /dev/shm and any other writable
//! one, found in mountinfo rather than by name) is `noexec`.
//!
//! Why: such a command may execute the ELF loader (every dynamically linked git program
//! needs it as its interpreter, and Landlock checks the interpreter like the program), and
//! the loader run as a program loads whatever file it is given. A driver that git starts
//! with a path the run chose (a textconv's temporary copy of a blob, a work tree file) can
//! be the loader whatever key or attribute names it. On a noexec mount the kernel refuses
//! the loader's executable mappings, so a file whose bytes the run wrote never runs there,
//! by any configuration. The view shares every file with the command side's own (the same
//! mounts, copied), only the exec bit of the mounts differs.

use nix::mount::{mount, MsFlags};

use super::SandboxError;

const STEP: &str = "make the run's writable mounts noexec";

/// In a process that is still root in the command side's mount namespace: unshare it and
/// remount every writable mount noexec, then check that none is left executable.
pub fn enter() -> Result<(), SandboxError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| SandboxError::errno(STEP, e))?;
    // Remounting changes per-mount flags only, which never propagate; private anyway, so
    // nothing mounted later on either side is shared with the other.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| SandboxError::errno(STEP, e))?;
    for (point, flags) in writable(&mountinfo()?) {
        mount(
            None::<&str>,
            point.as_str(),
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOEXEC | flags,
            None::<&str>,
        )
        .map_err(|e| SandboxError::errno(STEP, e))?;
    }
    // A mount point hidden under another is out of reach by path; the one on top is what
    // a path finds, and it must be noexec now.
    match writable(&mountinfo()?).first() {
        None => Ok(()),
        Some((point, _)) => Err(SandboxError::Invalid {
            step: STEP,
            why: format!("the writable mount at {point} is still executable after its remount"),
        }),
    }
}

fn mountinfo() -> Result<String, SandboxError> {
    std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| SandboxError::sys(STEP, e))
}

/// Every mount of `mountinfo` that is writable and executable, with the per-mount flags
/// it keeps when remounted (nosuid, nodev, its atime rule).
fn writable(mountinfo: &str) -> Vec<(String, MsFlags)> {
    // Only the mount on top at each point: a path reaches no other.
    let lines: Vec<&str> = mountinfo.lines().collect();
    let point_of = |l: &str| l.split_whitespace().nth(4).map(str::to_string);
    lines
        .iter()
        .enumerate()
        .filter(|(i, l)| {
            let p = point_of(l);
            !lines[i + 1..].iter().any(|m| point_of(m) == p)
        })
        .filter_map(|(_, line)| {
            let mut f = line.split_whitespace();
            let point = f.nth(4)?;
            let options: Vec<&str> = f.next()?.split(',').collect();
            if !options.contains(&"rw") || options.contains(&"noexec") {
                return None;
            }
            let mut flags = MsFlags::empty();
            for o in &options {
                flags |= match *o {
                    "nosuid" => MsFlags::MS_NOSUID,
                    "nodev" => MsFlags::MS_NODEV,
                    "noatime" => MsFlags::MS_NOATIME,
                    "nodiratime" => MsFlags::MS_NODIRATIME,
                    "relatime" => MsFlags::MS_RELATIME,
                    _ => MsFlags::empty(),
                };
            }
            if !flags.intersects(MsFlags::MS_NOATIME | MsFlags::MS_RELATIME) {
                flags |= MsFlags::MS_STRICTATIME;
            }
            Some((super::landlock::unescape_octal(point), flags))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_executable_mounts_are_found_with_the_flags_they_keep() {
        let info = "\
22 1 0:21 / / rw,relatime - tmpfs jail rw
23 22 8:1 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/vda rw
24 22 8:1 /srv/ws /work\\040space rw,nosuid,nodev - ext4 /dev/vda rw
25 22 0:30 / /tmp rw,nosuid,nodev,noexec,relatime - tmpfs tmp rw
26 22 0:31 / /dev/shm rw,nosuid,nodev,noatime - tmpfs shm rw
";
        let found = writable(info);
        let points: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(points, ["/", "/work space", "/dev/shm"]);
        assert_eq!(found[0].1, MsFlags::MS_RELATIME);
        assert_eq!(
            found[1].1,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_STRICTATIME
        );
        assert_eq!(
            found[2].1,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOATIME
        );
    }
}
