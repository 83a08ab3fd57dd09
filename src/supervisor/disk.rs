//! Disk bounds of a run, the supervisor's side. The state directory's filesystem is shared
//! by every run, the ledger and the journal's fallback files, so a run's workspace and its
//! instance's home each get a filesystem of their own of fixed size: a sparse ext4 image
//! (`runs/<run>/workspace.img`, made per run and removed when it ends;
//! `homes/<instance>.img`, made on the instance's first bounded run and kept), attached
//! to a loop device with autoclear, mounted by the jail's pid 1 in the run's own mount
//! namespace (see [`crate::sandbox::disk`]). A write past the size or the inode count gets
//! ENOSPC from the kernel inside the jail; nothing is ever polled.
//!
//! Nothing is left behind by a run, even when its supervisor is killed: the mounts exist
//! only in the run's mount namespace and in the supervisor's detached holds (see
//! [`super::mount_hold`]) and go with the last of them, the loop devices detach themselves
//! once neither a mount nor a supervisor holds them, and the next owner of the ledger
//! removes a dead run's workspace image with its record ([`forget_run`]).
//!
//! Project quotas (XFS `prjquota`, ext4 with the project feature) would bound a directory
//! of the shared filesystem instead; [`project_quota_mount`] detects them for the run log.
//! The image is used in every case: it works on every filesystem with loop devices, the
//! only path hosts without CONFIG_QUOTA (this project's CI) can take.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use nix::fcntl::{Flock, FlockArg};

use super::as_user::{self, Ids};
use super::loopdev::{self, Loop};
use super::mount_hold::{KeptHomes, MountHold};
use crate::sandbox::spec::{DiskMount, DiskTarget};
use crate::tree;

pub use crate::config::limits::{
    Bound, DiskLimits, DEFAULT_HOME, DEFAULT_RESERVE, DEFAULT_WORKSPACE, MIN_BYTES, MIN_INODES,
};

/// An empty workspace image made ahead (see [`super::image_pool`]): the file, and when
/// they could be had, its loop device and the hold of its filesystem.
#[derive(Debug)]
pub struct Premade {
    pub image: PathBuf,
    pub lp: Option<Loop>,
    pub hold: Option<MountHold>,
}

/// `<run_dir>/workspace.img`.
pub fn workspace_image(run_dir: &Path) -> PathBuf {
    run_dir.join("workspace.img")
}

/// `<state_dir>/homes/<instance>.img`.
pub fn home_image(state_dir: &Path, instance: &str) -> PathBuf {
    state_dir.join("homes").join(format!("{instance}.img"))
}

/// What a run holds of its bounded filesystems until it ends: the open loop devices (they
/// stay attached while held) and its workspace image, removed on drop.
#[derive(Debug, Default)]
pub struct RunDisks {
    /// The superblocks held for the run (see [`mount_hold`]): its filesystems are written
    /// back when these go, after the run, not as its last process exits.
    holds: Vec<Arc<MountHold>>,
    loops: Vec<Loop>,
    workspace_image: Option<PathBuf>,
    /// The run's fresh workspace directory (`runs/<run>/workspace`) and its owner: what the
    /// run wrote there (unbounded) or its mount point (bounded), removed when the run ends.
    fresh_workspace: Option<(PathBuf, u32, u32)>,
    /// What pid 1 mounts, for the spec.
    pub mounts: Vec<DiskMount>,
    /// The run's directories under `<state>/runs` (its own, its stdio connectors'),
    /// removed when the run ends, after what is in them.
    dirs: Vec<PathBuf>,
}

impl Drop for RunDisks {
    fn drop(&mut self) {
        // The holds first (a workspace is written back now, a home kept for its next run),
        // then the loop devices: once nothing mounts them, they detach. The image's blocks
        // are freed when the last of them lets go of it.
        self.holds.clear();
        self.loops.clear();
        if let Some(img) = self.workspace_image.take() {
            let _ = fs::remove_file(img);
        }
        if let Some((dir, uid, gid)) = self.fresh_workspace.take() {
            let _ = remove_workspace(&dir, Some((uid, gid)));
        }
        for dir in self.dirs.drain(..) {
            remove_run_dir(&dir);
        }
    }
}

/// Remove a run's directory under `<state>/runs`: its workspace the way any the run
/// wrote is (by root, through descriptors), then the rest, root's own (std's
/// `remove_dir_all` never follows a link either).
fn remove_run_dir(dir: &Path) {
    let _ = remove_workspace(&dir.join("workspace"), None);
    let _ = fs::remove_dir_all(dir);
}

/// Remove a run's fresh workspace directory and what it holds. The run wrote it, links
/// included, so it is emptied through descriptors that never follow one (see [`tree`]), as
/// its owner when known (see [`as_user`]) and by root for whatever that left; its parent is
/// the run's directory, root's alone, so the directory itself cannot be swapped.
pub fn remove_workspace(dir: &Path, owner: Option<(u32, u32)>) -> Result<(), String> {
    let named = |what: &str, e: &dyn std::fmt::Display| format!("{}: {what}: {e}", dir.display());
    let fd: OwnedFd = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
    {
        Ok(f) => f.into(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(named("cannot open", &e)),
    };
    if let Some((uid, gid)) = owner {
        let ids = Ids {
            uid,
            gid,
            groups: Vec::new(),
        };
        let _ = as_user::run_as(&ids, || tree::empty_tree(fd.as_fd()));
    }
    tree::empty_tree(fd.as_fd()).map_err(|e| named("cannot empty", &e))?;
    fs::remove_dir(dir).map_err(|e| named("cannot remove", &e))
}

impl RunDisks {
    /// Remove `dir`, one of the run's directories under `<state>/runs`, when the run ends.
    pub fn remove_at_end(&mut self, dir: PathBuf) {
        self.dirs.push(dir);
    }

    /// Make (or take `premade`, an empty image of `bound` from the
    /// [`image_pool`](super::image_pool)) and attach the run's workspace filesystem (a fresh
    /// workspace only: an operator's `--workspace DIR` keeps the host's limits). Owned by
    /// `uid:gid` once the jail mounts it.
    pub fn add_workspace(
        &mut self,
        run_dir: &Path,
        bound: Bound,
        (uid, gid): (u32, u32),
        populate: Option<&Path>,
        premade: Option<Premade>,
    ) -> Result<(), String> {
        let img = workspace_image(run_dir);
        // Recorded first, so a failure below still removes what was made.
        self.workspace_image = Some(img.clone());
        let (lp, hold) = match (premade, populate) {
            // Renamed with its loop device attached: the device follows the file.
            (Some(p), None) => {
                fs::rename(&p.image, &img).map_err(|e| {
                    let _ = fs::remove_file(&p.image);
                    format!("{}: cannot take a ready image: {e}", img.display())
                })?;
                (p.lp, p.hold)
            }
            // A workspace lives for one run: no journal (faster to make, less to write),
            // and made in memory when it starts empty (its root is the run's once pid 1
            // mounts it). It may start with what `populate` holds (the run.clone
            // repositories), formatted in place: a clone can be large.
            (premade, populate) => {
                if let Some(p) = premade {
                    let _ = fs::remove_file(&p.image);
                }
                match populate {
                    None => make_empty(&img, bound, Priority::Normal)?,
                    Some(_) => make_image(&img, bound, uid, gid, false, populate)?,
                }
                (None, None)
            }
        };
        let lp = match lp {
            Some(lp) => lp,
            None => loopdev::attach(&img)?,
        };
        // Held here when not made ahead, so the run's end does not wait for its write-back.
        if let Some(h) = hold.or_else(|| MountHold::of(&lp.path).ok()) {
            self.holds.push(Arc::new(h));
        }
        self.push(DiskTarget::Workspace, lp, bound);
        Ok(())
    }

    /// Attach the instance's home filesystem, made now on its first bounded run (with
    /// what its home directory held copied in as the instance, then removed from the shared
    /// filesystem, see [`populate_home`]). Every run of the instance uses the one loop
    /// device (see [`loopdev`]); with `kept` (airlockd's), it stays attached and held
    /// between runs.
    pub fn add_home(
        &mut self,
        state_dir: &Path,
        instance: &str,
        home: &Path,
        bound: Bound,
        (uid, gid): (u32, u32),
        kept: Option<&KeptHomes>,
    ) -> Result<(), String> {
        let img = home_image(state_dir, instance);
        let _lock = lock_image(&img)?;
        let (made, fresh) = match fs::symlink_metadata(&img) {
            // Made on an earlier run: its own size, whatever the config says now.
            Ok(m) if m.is_file() => (
                read_bound(&img).unwrap_or(Bound {
                    bytes: m.len(),
                    inodes: bound.inodes,
                }),
                false,
            ),
            Ok(_) => return Err(format!("{}: not a regular file", img.display())),
            Err(_) => {
                if let Err(e) = make_image(&img, bound, uid, gid, true, None) {
                    let _ = fs::remove_file(&img);
                    return Err(e);
                }
                (bound, true)
            }
        };
        // Held since an earlier run: attached, its filesystem read in.
        if let Some((lp, hold)) = kept.and_then(|k| k.get(&img)) {
            self.holds.push(hold);
            self.push(DiskTarget::Home, lp, made);
            return Ok(());
        }
        let lp = match loopdev::find(&img) {
            Some(l) => l,
            None => {
                let lp = loopdev::attach(&img)?;
                loopdev::remember(&img, &lp);
                lp
            }
        };
        if fresh && dir_has_entries(home)? {
            if let Err(e) = populate_home(&lp.path, home, uid, gid) {
                drop(lp);
                let _ = fs::remove_file(&img);
                loopdev::forget(&img);
                return Err(e);
            }
        }
        if let Ok(hold) = MountHold::of(&lp.path) {
            let hold = Arc::new(hold);
            if let Some(k) = kept {
                k.keep(&img, &lp, hold.clone());
            }
            self.holds.push(hold);
        }
        self.push(DiskTarget::Home, lp, made);
        Ok(())
    }

    /// The run's fresh workspace directory, owned by `uid:gid`: removed with what it holds
    /// when the run ends, bounded or not ([`remove_workspace`]).
    pub fn fresh_workspace(&mut self, dir: &Path, uid: u32, gid: u32) {
        self.fresh_workspace = Some((dir.to_path_buf(), uid, gid));
    }

    fn push(&mut self, target: DiskTarget, lp: Loop, bound: Bound) {
        self.mounts.push(DiskMount {
            target,
            device: lp.path.clone(),
            bytes: bound.bytes,
            inodes: bound.inodes,
        });
        self.loops.push(lp);
    }
}

/// An exclusive lock on `<image>.lock` while an image is looked up, made or attached.
fn lock_image(img: &Path) -> Result<Flock<File>, String> {
    let path = img.with_extension("img.lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Flock::lock(f, FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("{}: cannot lock: {e}", path.display()))
}

fn dir_has_entries(dir: &Path) -> Result<bool, String> {
    let mut it = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(it.next().is_some())
}

/// Copy what the instance's home directory holds into its new filesystem (on `device`),
/// then empty the directory: what stayed on the shared filesystem would be hidden under
/// the mount and still take its space.
///
/// The home is the instance's, and a live run of it (with an unbounded home) may be
/// swapping links in it as this runs, so root never reads it: the filesystem is mounted
/// in a mount namespace of this thread's alone (gone with the thread, whatever happens),
/// and the copy runs on a thread acting as the instance (see [`as_user`]), through
/// descriptors that never follow a link (see [`tree`]). What the instance could not read
/// stays out, as it would have been unreadable to it anyway.
fn populate_home(device: &Path, home: &Path, uid: u32, gid: u32) -> Result<(), String> {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    let named = |what: &str, e: &dyn std::fmt::Display| format!("{}: {what}: {e}", home.display());
    // The home's parent is root's alone (homes/, 0700): the directory itself cannot be
    // swapped, only what it holds.
    let src: OwnedFd = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(home)
        .map_err(|e| named("cannot open", &e))?
        .into();
    let ids = Ids {
        uid,
        gid,
        groups: Vec::new(),
    };
    std::thread::scope(|s| {
        s.spawn(|| -> Result<(), String> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
                .map_err(|e| named("cannot make a mount namespace for the copy", &e))?;
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .map_err(|e| named("cannot make the copy's mounts private", &e))?;
            // Over the home itself, in this namespace only: `src` still reaches what is
            // underneath.
            mount(
                Some(device),
                home,
                Some("ext4"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .map_err(|e| named("cannot mount the new home filesystem", &e))?;
            let copied = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(home)
                .map_err(|e| named("cannot open the new home filesystem", &e))
                .and_then(|dst| {
                    let dst = OwnedFd::from(dst);
                    as_user::run_as(&ids, || {
                        tree::copy_tree(src.as_fd(), dst.as_fd())?;
                        tree::empty_tree(src.as_fd())
                    })
                    .and_then(|r| r)
                    .map_err(|e| named("cannot copy the home as the instance", &e))
                });
            // Unmounted now so the filesystem is clean before a run mounts it.
            let unmounted = umount2(home, MntFlags::empty())
                .map_err(|e| named("cannot unmount the new home filesystem", &e));
            copied.and(unmounted)
        })
        .join()
        .unwrap_or_else(|_| Err(named("the copy failed", &"its thread panicked")))
    })
}

/// The size and inode count an ext4 image was made with, from its superblock (at byte
/// 1024: `s_inodes_count`, `s_blocks_count_lo`, then `s_log_block_size` at 24).
fn read_bound(img: &Path) -> Option<Bound> {
    use std::io::{Seek, SeekFrom};
    let mut f = File::open(img).ok()?;
    f.seek(SeekFrom::Start(1024)).ok()?;
    let mut sb = [0u8; 28];
    f.read_exact(&mut sb).ok()?;
    let u32_at = |o: usize| u32::from_le_bytes([sb[o], sb[o + 1], sb[o + 2], sb[o + 3]]);
    let log = u32_at(24);
    if log > 6 {
        return None;
    }
    Some(Bound {
        bytes: u64::from(u32_at(4)) << (10 + log),
        inodes: u64::from(u32_at(0)),
    })
}

/// mke2fs, from the system directories only.
fn mke2fs() -> Result<&'static str, String> {
    ["/usr/sbin/mke2fs", "/sbin/mke2fs"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| "mke2fs not found (install e2fsprogs)".to_string())
}

/// Make a sparse image of `bound.bytes` holding an ext4 filesystem with at least
/// `bound.inodes` inodes, no blocks reserved for root, its root directory owned by
/// `uid:gid`; `populate`: a directory whose contents are copied in.
pub fn make_image(
    img: &Path,
    bound: Bound,
    uid: u32,
    gid: u32,
    journal: bool,
    populate: Option<&Path>,
) -> Result<(), String> {
    drop(new_image(img, bound)?);
    mke2fs_on(
        img,
        img,
        bound,
        (uid, gid),
        journal,
        populate,
        Priority::Normal,
    )
}

/// How mke2fs runs: at the caller's CPU priority, or (the pool's, made ahead) at idle
/// priority, on CPU time no run wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    Normal,
    Idle,
}

/// Make an empty workspace image (root's root directory, no journal) as [`make_image`]
/// does, but formatted in memory and then written to `img` without a flush: mke2fs
/// flushes the file it writes four times, and on the state directory's filesystem each
/// flush waits for the journal commit a launch's ledger record waits for too. The image
/// needs no durability: a workspace lives for one run, and whatever a crash leaves of one
/// (in the pool or a run's directory) is removed at the next start.
fn make_image_in_memory(img: &Path, bound: Bound, priority: Priority) -> Result<(), String> {
    let mem = empty_template(bound, priority)?;
    image_from(&mem, img, bound)
}

/// An empty workspace filesystem of `bound`, formatted in memory (a memfd): what
/// [`image_from`] copies into an image file. Errors name no file: nothing is on disk yet.
pub fn empty_template(bound: Bound, priority: Priority) -> Result<File, String> {
    // SAFETY: memfd_create with a NUL-terminated name; the fd it returns is ours.
    let raw = unsafe { libc::memfd_create(c"airlock-image".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(format!(
            "cannot make an image in memory: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a new descriptor nothing else owns.
    let mem = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    mem.set_len(bound.bytes)
        .map_err(|e| format!("cannot size an image in memory: {e}"))?;
    // mke2fs (root) opens it through /proc, so the descriptor stays close-on-exec: no
    // program this process starts meanwhile inherits it.
    let at = PathBuf::from(format!("/proc/{}/fd/{raw}", std::process::id()));
    let named = Path::new("a workspace image in memory");
    mke2fs_on(&at, named, bound, (0, 0), false, None, priority)?;
    Ok(mem)
}

/// A new image file at `img` holding what `template` (an [`empty_template`] of the same
/// bound) holds: only its data ranges are written, without a flush.
pub fn image_from(template: &File, img: &Path, bound: Bound) -> Result<(), String> {
    let out = new_image(img, bound)?;
    copy_data(template, &out).map_err(|e| format!("{}: cannot write the image: {e}", img.display()))
}

/// An empty workspace image: made in memory, or in place where that cannot be done (no
/// /proc); its root is root's until pid 1 gives it to the run.
pub fn make_empty(img: &Path, bound: Bound, priority: Priority) -> Result<(), String> {
    make_image_in_memory(img, bound, priority).or_else(|_| {
        let _ = fs::remove_file(img);
        drop(new_image(img, bound)?);
        mke2fs_on(img, img, bound, (0, 0), false, None, priority)
    })
}

/// Copy what `from` holds, hole for hole: only its data ranges are read and written.
fn copy_data(from: &File, to: &File) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let end = from.metadata()?.len();
    let fd = from.as_raw_fd();
    let mut buf = vec![0u8; 128 << 10];
    let mut at: u64 = 0;
    while at < end {
        let off = libc::off_t::try_from(at).map_err(std::io::Error::other)?;
        // SAFETY: lseek on a descriptor we hold.
        let data = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            // ENXIO: no data past `at`.
            return if e.raw_os_error() == Some(libc::ENXIO) {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (mut pos, stop) = (data as u64, hole as u64);
        while pos < stop {
            let n = usize::try_from(stop - pos).map_or(buf.len(), |n| n.min(buf.len()));
            from.read_exact_at(&mut buf[..n], pos)?;
            to.write_all_at(&buf[..n], pos)?;
            pos += n as u64;
        }
        at = stop;
    }
    Ok(())
}

/// A new image file of `bound.bytes`, sparse: the host's space is taken only as the run
/// writes.
fn new_image(img: &Path, bound: Bound) -> Result<File, String> {
    let f = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(img)
        .map_err(|e| format!("{}: cannot create the image: {e}", img.display()))?;
    f.set_len(bound.bytes)
        .map_err(|e| format!("{}: cannot size the image: {e}", img.display()))?;
    Ok(f)
}

/// Format `target` (sized already) as ext4; `img` names it in errors.
fn mke2fs_on(
    target: &Path,
    img: &Path,
    bound: Bound,
    (uid, gid): (u32, u32),
    journal: bool,
    populate: Option<&Path>,
    priority: Priority,
) -> Result<(), String> {
    let mut cmd = Command::new(mke2fs()?);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["-q", "-F", "-t", "ext4", "-m", "0", "-b", "4096"])
        .arg("-N")
        .arg(bound.inodes.to_string())
        // The image reads as zeros already: nothing to discard or zero.
        .arg("-E")
        .arg(format!(
            "nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner={uid}:{gid}"
        ));
    if !journal {
        // A run's workspace: no journal, and no blocks reserved for growing the filesystem
        // while mounted (none is ever grown), which leaves 228 KiB of metadata to write
        // instead of 4.3 MiB for the default 10 GiB bound.
        cmd.args(["-O", "^has_journal,^resize_inode"]);
    }
    if let Some(dir) = populate {
        cmd.arg("-d").arg(dir);
    }
    cmd.arg(target)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = spawn_at(&mut cmd, priority).map_err(|e| format!("cannot run mke2fs: {e}"))?;
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot run mke2fs: {e}"))?;
    if !status.success() {
        let first = err.lines().next().unwrap_or("").trim().to_string();
        return Err(format!(
            "mke2fs failed for {} ({status}): {first}",
            img.display()
        ));
    }
    Ok(())
}

/// Start `cmd`; at [`Priority::Idle`], lowered to `SCHED_IDLE` once it runs its program.
/// Never before: between fork and exec the child holds a copy of every descriptor of
/// airlockd's (the ledger's lock among them, closed only by exec), and a child at idle
/// priority on a busy host could wait there for seconds, past airlockd's own exit, so that
/// the next airlockd found its ledger held. `spawn` returns once the program is running;
/// a failure to lower leaves it at normal priority.
fn spawn_at(cmd: &mut Command, priority: Priority) -> std::io::Result<std::process::Child> {
    let child = cmd.spawn()?;
    if priority == Priority::Idle {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler on our own unreaped child's pid, with a valid param.
        unsafe { libc::sched_setscheduler(child.id() as libc::pid_t, libc::SCHED_IDLE, &param) };
    }
    Ok(child)
}

/// Remove what a run whose supervisor died left of its disks: its workspace image (its
/// mounts and loop devices went with its processes) and its fresh workspace directory. For the next owner of the ledger.
pub fn forget_run(state_dir: &Path, run: &str) {
    if crate::sandbox::spec::valid_run_id(run) {
        let run_dir = state_dir.join("runs").join(run);
        let _ = fs::remove_file(workspace_image(&run_dir));
        // An unbounded fresh workspace: what the dead run wrote goes too (by root, through
        // descriptors: the run's uid is not known here), then the directory itself.
        remove_run_dir(&run_dir);
    }
}

/// Remove every run directory under `state_dir/runs` (a run's, `RUN`, or one of its stdio
/// connectors', `RUN-NAME`) whose run no live supervisor holds (`held`: its alive file is
/// locked): what a supervisor killed before it cleaned up left. Call holding the ledger
/// lock, which every launch holds from making its directories until its alive file exists
/// (airlockd: at its start).
pub fn sweep(state_dir: &Path, held: impl Fn(&str) -> bool) {
    let Ok(runs) = fs::read_dir(state_dir.join("runs")) else {
        return;
    };
    for e in runs.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(run) = run_of_dir(name) else {
            continue;
        };
        if !held(run) {
            let _ = fs::remove_file(workspace_image(&e.path()));
            remove_run_dir(&e.path());
        }
    }
}

/// The run a directory under `<state>/runs` belongs to: `RUN` or `RUN-CONNECTOR`, a run id
/// being `r-YYYYMMDD-XXXXXXXX` (see `launch::new_run_id`).
fn run_of_dir(name: &str) -> Option<&str> {
    let run = match name.match_indices('-').nth(2) {
        Some((i, _)) => &name[..i],
        None => name,
    };
    let mut parts = run.split('-');
    let ok = parts.next() == Some("r")
        && parts
            .next()
            .is_some_and(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_digit()))
        && parts
            .next()
            .is_some_and(|x| x.len() == 8 && x.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then_some(run)
}

/// Whether the filesystem holding `path` has project quotas switched on, from
/// `/proc/self/mountinfo`'s text: XFS `prjquota`/`pquota`, ext4 `prjquota`. Pure.
pub fn project_quota_mount(mountinfo: &str, path: &Path) -> bool {
    let mut best: Option<(usize, bool)> = None;
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let Some(point) = pre.split_whitespace().nth(4) else {
            continue;
        };
        let mut post = post.split_whitespace();
        let (Some(fstype), Some(_src), Some(opts)) = (post.next(), post.next(), post.next()) else {
            continue;
        };
        if !path.starts_with(point) {
            continue;
        }
        let quota = matches!(fstype, "xfs" | "ext4")
            && opts
                .split(',')
                .any(|o| matches!(o, "prjquota" | "pquota" | "pqnoenforce"));
        let depth = point.len();
        if best.map_or(true, |(d, _)| depth >= d) {
            best = Some((depth, quota));
        }
    }
    best.is_some_and(|(_, q)| q)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_image_made_in_memory_is_a_whole_sparse_filesystem_of_its_bound() {
        use super::{make_image_in_memory, read_bound, Bound, MountHold};
        use std::os::unix::fs::MetadataExt;
        crate::require_root("this test makes an ext4 image with mke2fs and mounts it");
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("w.img");
        let bound = Bound {
            bytes: 256 << 20,
            inodes: 4096,
        };
        make_image_in_memory(&img, bound, super::Priority::Normal).expect("made in memory");
        let m = std::fs::metadata(&img).expect("image");
        assert_eq!(m.len(), bound.bytes);
        // Only what mke2fs wrote takes space: a few MiB, not the bound.
        assert!(
            m.blocks() * 512 < 16 << 20,
            "{} bytes taken",
            m.blocks() * 512
        );
        let got = read_bound(&img).expect("an ext4 superblock");
        assert_eq!(got.bytes, bound.bytes);
        assert!(got.inodes >= bound.inodes);
        // And the kernel takes it: attached and mounted (nowhere), it reads as ext4.
        let lp = super::loopdev::attach(&img).expect("attach");
        MountHold::of(&lp.path).expect("mounts as ext4");
    }

    #[test]
    fn a_run_directory_is_told_by_its_run() {
        use super::run_of_dir;
        let run = "r-20261202-5f157ee9";
        assert_eq!(run_of_dir(run), Some(run));
        assert_eq!(run_of_dir("r-20261202-5f157ee9-bench"), Some(run));
        assert_eq!(run_of_dir("r-20261202-5f157ee9-a-b"), Some(run));
        for other in [
            "pool",
            "r-2026-5f157ee9",
            "r-20261202-5f15",
            "x-20261202-5f157ee9",
        ] {
            assert_eq!(run_of_dir(other), None, "{other}");
        }
    }

    use super::*;

    /// The idle child runs its program at `SCHED_IDLE` (policy 5 in /proc/PID/stat), and
    /// holds none of the spawner's descriptors by then (each was close-on-exec).
    #[test]
    fn an_idle_child_is_lowered_after_exec_holding_no_descriptor_of_ours() {
        let held = fs::File::open("/proc/self/stat").unwrap();
        let mut cmd = Command::new("/bin/sleep");
        cmd.arg("5");
        let mut child = spawn_at(&mut cmd, Priority::Idle).unwrap();
        let pid = child.id();
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // Field 41 (policy), counted after the parenthesized command name.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let policy = after.split(' ').nth(38).unwrap();
        let fds: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|e| fs::read_link(e.path()).ok())
            .map(|p| p.display().to_string())
            .collect();
        child.kill().unwrap();
        child.wait().unwrap();
        drop(held);
        assert_eq!(policy, libc::SCHED_IDLE.to_string(), "{stat}");
        assert!(
            !fds.iter()
                .any(|f| f.contains("/proc/") && f.ends_with("/stat")),
            "{fds:?}"
        );
    }

    #[test]
    fn project_quotas_are_read_from_the_mount_of_the_path() {
        let mi = "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n\
                  30 22 254:1 / /var/lib rw - xfs /dev/vdb rw,attr2,inode64,prjquota\n\
                  31 22 254:2 / /srv rw - ext4 /dev/vdc rw,prjquota\n";
        assert!(!project_quota_mount(mi, Path::new("/work/state")));
        assert!(project_quota_mount(mi, Path::new("/var/lib/airlock")));
        assert!(project_quota_mount(mi, Path::new("/srv/a")));
        assert!(!project_quota_mount(mi, Path::new("/var/libx")));
    }
}
