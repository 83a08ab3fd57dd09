//! The mount view of the command side's second runner, the one that runs commands with an
//! exec limit (git, [`crate::policy::git_overrides`]): a mount namespace of its own where
//! every mount is `noexec` but one read-only bind of each path of the exec limit onto
//! itself (git's programs, gpg, the loader) and of each folder of shared libraries.
//!
//! Why: such a command may execute the ELF loader (every dynamically linked git program
//! needs it as its interpreter, and Landlock checks the interpreter like the program), and
//! the loader run as a program loads whatever file it is given. A driver that git starts
//! with a path the run chose (a textconv's temporary copy of a blob, a work tree file) can
//! be the loader whatever key or attribute names it. Noexec on the run's writable mounts
//! alone keeps the run's own bytes from being mapped, but not a system program outside
//! the exec limit: the path can reach one through a link the run made (the work tree's
//! `d` a link to the system's bin folder), and an interpreter loaded that way runs the
//! run's files as scripts (Python reads the home's `.pth` files). With every mount
//! noexec, the loader maps nothing but git's programs and libraries, by any
//! configuration and any path. The view shares every file with the command side's own
//! (the same mounts, copied), only the exec bit of the mounts differs.
//!
//! Left loadable: programs inside the library folders (helpers such as
//! `gdk-pixbuf-query-loaders`), which the loader would start with no argument but the
//! path git gave it. None of them reads a script.

use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};

use super::SandboxError;

const STEP: &str = "make every mount but git's programs and libraries noexec";

/// In a process that is still root in the command side's mount namespace: unshare it,
/// make every mount noexec, bind each of `exec` (those that exist) onto itself
/// read-only and executable, then check that nothing else is left executable.
pub fn enter(exec: &[&str]) -> Result<(), SandboxError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| SandboxError::errno(STEP, e))?;
    // Private, so nothing mounted later on either side is shared with the other.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| SandboxError::errno(STEP, e))?;
    let keep = kept(exec);
    if !super::rootfs::set_tree_flags(Path::new("/"), MsFlags::MS_NOEXEC, STEP)? {
        return Err(SandboxError::Unsupported {
            step: STEP,
            why: "the kernel has no mount_setattr (Linux 5.12 or newer)".into(),
        });
    }
    for p in &keep {
        super::rootfs::bind_ro_exec(p, STEP)?;
    }
    let points: Vec<String> = keep.iter().map(|p| p.display().to_string()).collect();
    match stray(&mountinfo()?, &points).first() {
        None => Ok(()),
        Some(point) => Err(SandboxError::Invalid {
            step: STEP,
            why: format!("the mount at {point} is still executable"),
        }),
    }
}

/// The paths of `exec` that exist, as the kernel reaches them (links resolved), once each.
fn kept(exec: &[&str]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = exec
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    v.sort();
    v.dedup();
    v
}

fn mountinfo() -> Result<String, SandboxError> {
    std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| SandboxError::sys(STEP, e))
}

/// Every mount on top at its point (a path reaches no other) that is executable and is
/// not a read-only one at one of `kept`'s points.
fn stray(mountinfo: &str, kept: &[String]) -> Vec<String> {
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
            let point = super::landlock::unescape_octal(f.nth(4)?);
            let options: Vec<&str> = f.next()?.split(',').collect();
            let exec = !options.contains(&"noexec");
            let allowed = options.contains(&"ro") && kept.contains(&point);
            (exec && !allowed).then_some(point)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_mounts_at_kept_points_may_stay_executable() {
        let info = "\
22 1 0:21 / / ro,noexec,relatime - tmpfs jail rw
23 22 8:1 /usr /usr ro,nosuid,nodev,noexec,relatime - ext4 /dev/vda rw
24 22 8:1 /srv/ws /work\\040space rw,nosuid,nodev,noexec - ext4 /dev/vda rw
30 23 8:1 /usr/bin/git /usr/bin/git ro,nosuid,nodev,relatime - ext4 /dev/vda rw
31 23 8:1 /usr/lib/git-core /usr/lib/git-core rw,nosuid,nodev,relatime - ext4 /dev/vda rw
32 23 8:1 /usr/bin/python3.11 /usr/bin/python3.11 ro,nosuid,nodev,relatime - ext4 /dev/vda rw
26 22 0:31 / /dev/shm rw,nosuid,nodev,noatime - tmpfs shm rw
27 22 0:31 / /tmp rw,nosuid,nodev,noatime - tmpfs shm rw
28 22 0:32 / /tmp rw,nosuid,nodev,noexec - tmpfs shm rw
";
        let kept: Vec<String> = ["/usr/bin/git", "/usr/lib/git-core", "/dev/shm"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // git's bind is fine; a writable bind at a kept point is not, nor an executable
        // mount elsewhere; /tmp's lower mount is hidden under a noexec one.
        assert_eq!(
            stray(info, &kept),
            ["/usr/lib/git-core", "/usr/bin/python3.11", "/dev/shm"]
        );
    }
}
