//! The jail's file system view, built from an allowlist on a fresh tmpfs: read-only system
//! directories, a filtered /etc, the workspace and home read-write, private /tmp and
//! /dev/shm, a minimal /dev, a fresh /proc with its dangerous parts read-only or masked, and
//! nothing else. Host sockets (/run), the state dir, other homes and /sys are simply absent.
//!
//! Known leak, accepted: `/proc/self/mountinfo` in the jail names, for each bind mount, the
//! directory it shows *within its filesystem* (field 4, e.g. the host path of the workspace
//! and the home under the state dir) and the backing device (`/dev/vda`). The kernel
//! derives that from the mount's dentry, so binding from an fd (as done here) or with
//! `move_mount` does not change it, and a per-process mountinfo cannot be masked without
//! masking all of /proc/self. It reveals path names only: the state dir itself is not
//! mounted in the jail, so nothing behind those names is reachable.

use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::spec::{ExecAllow, JailFile, MAX_JAIL_FILES, MAX_JAIL_FILES_BYTES, SYSTEM_DIRS};
use super::{RunSpec, SandboxError};
use nix::sched::{unshare, CloneFlags};

/// Where the new root is assembled (inside the run's private mount namespace only).
pub const BUILD_DIR: &str = "/run/airlock/jail";

/// Host /etc entries the jail may see (read-only). passwd, group, hosts and hostname are
/// generated instead, so host account names stay private. Nothing for logins (PAM,
/// login.defs): no_new_privs keeps setuid programs from gaining anything in the jail.
pub(super) const ETC_ALLOW: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "gai.conf",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "lsb-release",
    "mime.types",
    "networks",
    "nsswitch.conf",
    "os-release",
    "pki",
    "profile",
    "profile.d",
    "protocols",
    "resolv.conf",
    "services",
    "shells",
    "ssl",
    "terminfo",
    "timezone",
];

/// Device nodes made in the jail's /dev (name, major, minor; all mode 0666), the numbers
/// fixed by the kernel's devices.txt. No block devices, no kmsg, no mem.
const DEV_NODES: &[(&str, u64, u64)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// /proc entries masked entirely (files: when others may read them; the agent is never
/// root and has no capability, so an entry only root may read is closed already).
const PROC_MASK_FILES: &[&str] = &[
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kmsg",
];
const PROC_MASK_DIRS: &[&str] = &["acpi", "scsi", "asound"];

type Res = Result<(), SandboxError>;

fn sys(step: &'static str) -> impl Fn(nix::errno::Errno) -> SandboxError {
    move |e| SandboxError::errno(step, e)
}

fn io(step: &'static str) -> impl Fn(std::io::Error) -> SandboxError {
    move |e| SandboxError::sys(step, e)
}

/// Open a directory for binding, refusing symlinks in every component: a path component
/// swapped for a symlink between the supervisor's check and the mount cannot redirect the
/// bind. The returned O_PATH fd is what gets mounted.
pub fn open_dir_nofollow(path: &Path, step: &'static str) -> Result<OwnedFd, SandboxError> {
    let root = c"/";
    // SAFETY: open(2) with a static NUL-terminated path; the fd is owned right away.
    let fd = unsafe {
        libc::open(
            root.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(SandboxError::sys(step, std::io::Error::last_os_error()));
    }
    // SAFETY: fd was just returned by open and is not owned elsewhere.
    let mut cur = unsafe { OwnedFd::from_raw_fd(fd) };
    for c in path.components() {
        let name = match c {
            Component::RootDir => continue,
            Component::Normal(n) => n,
            _ => {
                return Err(SandboxError::Invalid {
                    step,
                    why: "path has . or .. components".to_string(),
                })
            }
        };
        let cname = std::ffi::CString::new(name.as_bytes()).map_err(|_| SandboxError::Invalid {
            step,
            why: "path contains a NUL byte".to_string(),
        })?;
        // SAFETY: openat on a directory fd we own, with a NUL-terminated name.
        let next = unsafe {
            libc::openat(
                cur.as_raw_fd(),
                cname.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if next < 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ENOTDIR) | Some(libc::ELOOP) => SandboxError::Invalid {
                    step,
                    why: "a path component is a symlink or not a directory".to_string(),
                },
                _ => SandboxError::sys(step, err),
            });
        }
        // SAFETY: next was just returned by openat.
        cur = unsafe { OwnedFd::from_raw_fd(next) };
    }
    Ok(cur)
}

fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn under(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

fn mkdir_p(p: &Path, step: &'static str) -> Res {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(io(step))
}

fn touch(p: &Path, step: &'static str) -> Res {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
        .map(|_| ())
        .map_err(io(step))
}

fn tmpfs(target: &Path, flags: MsFlags, data: &str, step: &'static str) -> Res {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(data)).map_err(sys(step))
}

/// Bind `src` on `target` with the source mount's flags, not recursive: mounts below a
/// system directory are not carried into the jail. Callers restrict it right after.
fn bind_plain(src: &Path, target: &Path, step: &'static str) -> Res {
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(sys(step))
}

/// Bind `src` on `target`, then remount the bind with `flags` (read-only, nosuid...).
/// Not recursive: mounts below a system directory are not carried into the jail.
fn bind(src: &Path, target: &Path, flags: MsFlags, step: &'static str) -> Res {
    bind_plain(src, target, step)?;
    remount_bind(target, flags, step)
}

fn remount_bind(target: &Path, flags: MsFlags, step: &'static str) -> Res {
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags,
        None::<&str>,
    )
    .map_err(sys(step))
}

/// Bind `p` onto itself read-only, nosuid, nodev and executable (a mount made noexec
/// before keeps its exec bit on the new bind only).
pub(super) fn bind_ro_exec(p: &Path, step: &'static str) -> Res {
    bind(p, p, ro(), step)
}

fn ro() -> MsFlags {
    MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV
}

fn remount_ro(target: &Path, extra: MsFlags, step: &'static str) -> Res {
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | extra,
        None::<&str>,
    )
    .map_err(sys(step))
}

/// `mount_setattr(2)` flags (linux/mount.h); libc has the syscall number only.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `struct mount_attr` of linux/mount.h (version 0, 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The `mount_setattr` bits that `flags` (MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC) name.
fn mount_attr_bits(flags: MsFlags) -> u64 {
    [
        (MsFlags::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (MsFlags::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (MsFlags::MS_NODEV, MOUNT_ATTR_NODEV),
        (MsFlags::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
    ]
    .iter()
    .filter(|(f, _)| flags.contains(*f))
    .fold(0, |acc, (_, a)| acc | a)
}

/// Add `flags` to the mount at `target` and to every mount below it, in one
/// `mount_setattr(AT_RECURSIVE)` call: all or nothing. Only sets flags, never clears one.
/// Ok(false) when the kernel has no `mount_setattr` (before 5.12): the caller then applies
/// the same flags mount by mount, so the result is never weaker.
pub(super) fn set_tree_flags(
    target: &Path,
    flags: MsFlags,
    step: &'static str,
) -> Result<bool, SandboxError> {
    let path = std::ffi::CString::new(target.as_os_str().as_bytes()).map_err(|_| {
        SandboxError::Invalid {
            step,
            why: "path contains a NUL byte".to_string(),
        }
    })?;
    let attr = MountAttr {
        attr_set: mount_attr_bits(flags),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr reads `attr` (size given) and the NUL-terminated path only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            (libc::AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW) as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENOSYS) {
        return Ok(false);
    }
    Err(SandboxError::sys(step, err))
}

/// The opened, checked bind sources of a run.
pub struct Sources {
    pub workspace: OwnedFd,
    pub home: OwnedFd,
}

impl Sources {
    pub fn open(spec: &RunSpec) -> Result<Sources, SandboxError> {
        Ok(Sources {
            workspace: open_dir_nofollow(&spec.workspace, "open workspace")?,
            home: open_dir_nofollow(&spec.home, "open home")?,
        })
    }
}

/// The part of the new root that is the same for every run: the root tmpfs, the system
/// directories, /etc with the host entries, /dev without /dev/shm, /proc, and the empty
/// directories. Runs as pid 1 of the new pid namespace, as root, in its private mount
/// namespace, before the run's spec is known; [`finish`] adds the run's part and switches
/// to the new root.
pub fn build_common() -> Res {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("make mounts private"))?;
    let root = Path::new(BUILD_DIR);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(io("create build dir"))?;
    tmpfs(
        root,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=0755,size=4m",
        "mount root tmpfs",
    )?;
    system_dirs(root)?;
    etc_host(root)?;
    dev(root)?;
    proc(root)?;
    for d in ["sys", "run", "home", "tmp"] {
        mkdir_p(&root.join(d), "create empty dirs")?;
    }
    Ok(())
}

/// The run's part of the new root (its /etc files, /tmp and /dev/shm at their sizes, home
/// and workspace). After [`build_common`]; [`switch_root`] enters it.
pub fn finish(spec: &RunSpec, src: &Sources) -> Res {
    let root = Path::new(BUILD_DIR);
    etc_run(root, spec)?;
    scratch(root, spec)?;
    let dev = root.join("dev");
    // /dev read-only: device nodes stay writable (/dev/null), a read-only file system
    // only refuses writes to files, folders and links.
    remount_ro(
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "make /dev read-only",
    )?;

    let rw = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let home = under(root, &spec.jail_home());
    mkdir_p(&home, "create home mount point")?;
    bind(&fd_path(&src.home), &home, rw, "bind home")?;
    let ws = under(root, &spec.jail_workspace());
    mkdir_p(&ws, "create workspace mount point")?;
    bind(&fd_path(&src.workspace), &ws, rw, "bind workspace")?;
    Ok(())
}

/// A private /tmp and /dev/shm at their sizes.
fn scratch(root: &Path, spec: &RunSpec) -> Res {
    tmpfs(
        &under(root, Path::new(SCRATCH_DIRS[0])),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode=1777,size={}", spec.limits.tmp_bytes),
        "mount /tmp",
    )?;
    tmpfs(
        &under(root, Path::new(SCRATCH_DIRS[1])),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        &format!("mode=1777,size={}", spec.limits.shm_bytes),
        "mount /dev/shm",
    )
}

/// In a side's first process, in the side's own mount namespace (after the switch to the
/// jail's root, still root): a /proc of the side's own pid namespace in place of the run's,
/// and with `own_scratch` a fresh /tmp and /dev/shm (the command side's; the agent side
/// keeps the ones pid 1 made, which no one else sees once the command side has its own).
/// Each tmpfs is charged to the memory cgroup of the side that writes it.
pub fn side_view(spec: &RunSpec, own_scratch: bool) -> Res {
    let root = Path::new("/");
    // Detached whole, with the masks mounted on it.
    umount2("/proc", MntFlags::MNT_DETACH).map_err(sys("unmount the run's /proc"))?;
    proc(root)?;
    if !own_scratch {
        return Ok(());
    }
    // The new ones cover the run's (unreachable from here on), and with them a workspace
    // or home that lies below: those are bound again on top, from handles taken first.
    let below: Vec<(PathBuf, OwnedFd)> = [spec.jail_workspace(), spec.jail_home()]
        .into_iter()
        .filter(|p| SCRATCH_DIRS.iter().any(|d| p.starts_with(d)))
        .map(|p| open_dir_nofollow(&p, "open workspace").map(|fd| (p, fd)))
        .collect::<Result<_, _>>()?;
    scratch(root, spec)?;
    for (p, fd) in below {
        mkdir_p(&p, "create workspace mount point")?;
        bind(
            &fd_path(&fd),
            &p,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            "bind workspace",
        )?;
    }
    Ok(())
}

/// Where each side's own scratch space is.
const SCRATCH_DIRS: &[&str] = &["/tmp", "/dev/shm"];

fn system_dirs(root: &Path) -> Res {
    for d in SYSTEM_DIRS.iter().filter(|d| **d != "/etc") {
        let host = Path::new(d);
        let meta = match fs::symlink_metadata(host) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && *d != "/usr" => continue,
            Err(e) => return Err(SandboxError::sys("inspect system dirs", e)),
        };
        let target = under(root, host);
        if meta.file_type().is_symlink() {
            // Merged /usr: /bin -> usr/bin. Recreate the link; it resolves inside the jail.
            let to = fs::read_link(host).map_err(io("read system dir link"))?;
            std::os::unix::fs::symlink(to, &target).map_err(io("link system dir"))?;
        } else if meta.is_dir() {
            mkdir_p(&target, "create system dir")?;
            bind(host, &target, ro(), "bind system dir read-only")?;
        }
    }
    Ok(())
}

/// Size of the jail's /etc tmpfs: 1 MiB for the generated account files, plus every jail
/// file rounded up to 64 KiB (the largest page size Linux uses) and one more 64 KiB each for
/// its folder. The spec bounds the files' count and total, so this stays small.
pub fn etc_tmpfs_bytes(files: &[JailFile]) -> u64 {
    const PAGE: u64 = 64 << 10;
    files.iter().fold(1 << 20, |acc: u64, f| {
        let len = f.contents.len() as u64;
        acc.saturating_add(len.div_ceil(PAGE).saturating_add(1).saturating_mul(PAGE))
    })
}

/// Size of the jail's /etc tmpfs, mounted before the run's files are known: what the largest
/// file set the spec allows needs (see [`etc_tmpfs_bytes`]). /etc is read-only before the
/// agent starts, so the bound only ever holds Airlock's own writes.
pub fn etc_tmpfs_max_bytes() -> u64 {
    const PAGE: u64 = 64 << 10;
    (1 << 20) + MAX_JAIL_FILES_BYTES as u64 + MAX_JAIL_FILES as u64 * 2 * PAGE
}

/// Write the spec's files into the jail's /etc while it is still writable: root-owned (the
/// helper is root), with the spec's mode, in root-owned 0755 folders. /etc is remounted
/// read-only right after, so the agent can read them and change nothing.
fn jail_files(root: &Path, files: &[JailFile]) -> Res {
    const STEP: &str = "write jail files";
    for f in files {
        let target = under(root, &f.path);
        // The spec checked the path (plain names under /etc/airlock, /etc/claude-code or
        // /etc/codex); this /etc is a fresh tmpfs that only this helper has written, so no
        // component can be a link. Create each folder with an exact mode, whatever the umask.
        let mut dir = PathBuf::from(root);
        let rel = f
            .path
            .strip_prefix("/")
            .map_err(|_| SandboxError::Invalid {
                step: STEP,
                why: "a jail file path is not absolute".to_string(),
            })?;
        let mut names: Vec<_> = rel.components().collect();
        names.pop();
        for name in names {
            dir.push(name);
            match fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() && !m.file_type().is_symlink() => continue,
                Ok(_) => {
                    return Err(SandboxError::Invalid {
                        step: STEP,
                        why: "a jail file's folder is not a folder".to_string(),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SandboxError::sys(STEP, e)),
            }
            fs::DirBuilder::new()
                .mode(0o755)
                .create(&dir)
                .map_err(io(STEP))?;
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(io(STEP))?;
        }
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(f.mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&target)
            .map_err(io(STEP))?;
        file.write_all(f.contents.as_bytes()).map_err(io(STEP))?;
        file.set_permissions(fs::Permissions::from_mode(f.mode))
            .map_err(io(STEP))?;
    }
    Ok(())
}

/// Host /etc files up to this size are copied into the jail's /etc; folders and larger
/// files are bound. A copy is no mount: every mount namespace of a run (pid 1's, each
/// side's, the noexec runner's) would otherwise copy and tear down one mount per file, about
/// twenty on a stock host, for files of a few KiB that the jail reads only.
const ETC_COPY_MAX: u64 = 256 << 10;

/// How a host /etc entry reaches the jail's /etc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EtcWay {
    Copy,
    Bind,
}

/// The way for an entry that is a folder (`dir`) or a file of `len` bytes; `None` for
/// anything else (a socket, a device: the host entry is left out).
fn etc_way(dir: bool, file: bool, len: u64) -> Option<EtcWay> {
    match (dir, file) {
        (true, _) => Some(EtcWay::Bind),
        (false, true) if len <= ETC_COPY_MAX => Some(EtcWay::Copy),
        (false, true) => Some(EtcWay::Bind),
        _ => None,
    }
}

/// Room for a copied file in a tmpfs: its size rounded up to 64 KiB, as in
/// [`etc_tmpfs_bytes`].
fn etc_copy_room(len: u64) -> u64 {
    const PAGE: u64 = 64 << 10;
    len.div_ceil(PAGE).max(1).saturating_mul(PAGE)
}

/// A host /etc entry the jail gets, and how.
struct EtcEntry {
    name: &'static str,
    meta: fs::Metadata,
    /// Open for a copy: what is copied is the file that was measured.
    copy: Option<fs::File>,
}

/// The host's entry `name`, if the jail may get it: a folder or a file, links followed.
fn etc_entry(name: &'static str) -> Option<EtcEntry> {
    let host = Path::new("/etc").join(name);
    let meta = fs::metadata(&host).ok()?;
    match etc_way(meta.is_dir(), meta.is_file(), meta.len())? {
        EtcWay::Bind => Some(EtcEntry {
            name,
            meta,
            copy: None,
        }),
        EtcWay::Copy => {
            // Non-blocking: an entry swapped for a FIFO meanwhile must not hang the build.
            let file = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(&host)
                .ok()?;
            let meta = file.metadata().ok()?;
            (etc_way(meta.is_dir(), meta.is_file(), meta.len()) == Some(EtcWay::Copy)).then_some(
                EtcEntry {
                    name,
                    meta,
                    copy: Some(file),
                },
            )
        }
    }
}

/// The jail's /etc as a tmpfs with the host entries it may see, copied or bound in (still
/// writable: [`etc_run`] adds the run's files and makes all of it read-only). The jail gets
/// what each host entry names (links followed), as its owner and mode on the host show it.
fn etc_host(root: &Path) -> Res {
    let etc = root.join("etc");
    mkdir_p(&etc, "create /etc")?;
    let entries: Vec<EtcEntry> = ETC_ALLOW.iter().filter_map(|n| etc_entry(n)).collect();
    let copies: u64 = entries
        .iter()
        .filter(|e| e.copy.is_some())
        .map(|e| etc_copy_room(e.meta.len()))
        .sum();
    tmpfs(
        &etc,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        &format!("mode=0755,size={}", etc_tmpfs_max_bytes() + copies),
        "mount /etc",
    )?;
    for e in entries {
        let target = etc.join(e.name);
        match e.copy {
            Some(file) => copy_etc_file(file, &e.meta, &target)?,
            None => {
                if e.meta.is_dir() {
                    mkdir_p(&target, "create /etc entry")?;
                } else {
                    touch(&target, "create /etc entry")?;
                }
                // Made read-only below, together with the rest of /etc, before anything
                // runs here.
                bind_plain(
                    &Path::new("/etc").join(e.name),
                    &target,
                    "bind /etc entry read-only",
                )?;
            }
        }
    }
    Ok(())
}

/// Copy a host /etc file into the jail's /etc with its owner, mode (no set-id bits) and
/// times. At most the size measured: a file growing meanwhile is copied as it was.
fn copy_etc_file(file: fs::File, meta: &fs::Metadata, target: &Path) -> Res {
    const STEP: &str = "copy /etc entry";
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(target)
        .map_err(io(STEP))?;
    std::io::copy(&mut std::io::Read::take(file, meta.len()), &mut out).map_err(io(STEP))?;
    let fd = out.as_raw_fd();
    nix::unistd::fchown(
        fd,
        Some(nix::unistd::Uid::from_raw(meta.uid())),
        Some(nix::unistd::Gid::from_raw(meta.gid())),
    )
    .map_err(sys(STEP))?;
    // After the chown, which clears set-id bits anyway.
    let mode = nix::sys::stat::Mode::from_bits_truncate(meta.mode() & 0o1777);
    nix::sys::stat::fchmod(fd, mode).map_err(sys(STEP))?;
    let time = |s: i64, ns: i64| nix::sys::time::TimeSpec::new(s, ns);
    nix::sys::stat::futimens(
        fd,
        &time(meta.atime(), meta.atime_nsec()),
        &time(meta.mtime(), meta.mtime_nsec()),
    )
    .map_err(sys(STEP))
}

/// The run's /etc files (accounts, host names, jail files), then /etc and every entry bound
/// into it read-only, nosuid, nodev and noexec.
fn etc_run(root: &Path, spec: &RunSpec) -> Res {
    let etc = root.join("etc");
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let home = spec.jail_home();
    let files = [
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\n{n}:x:{u}:{g}:airlock instance:{h}:{shell}\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                n = spec.instance,
                u = spec.uid,
                g = spec.gid,
                h = home.display()
            ),
        ),
        (
            "group",
            format!("root:x:0:\n{}:x:{}:\nnogroup:x:65534:\n", spec.instance, spec.gid),
        ),
        ("hostname", format!("{}\n", spec.run_id)),
        (
            "hosts",
            format!("127.0.0.1\tlocalhost {}\n::1\tlocalhost\n", spec.run_id),
        ),
    ];
    for (name, text) in files {
        let p = etc.join(name);
        fs::write(&p, text).map_err(io("write /etc files"))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644))
            .map_err(io("write /etc files"))?;
    }
    jail_files(root, &spec.files)?;
    let flags = ro() | MsFlags::MS_NOEXEC;
    if !set_tree_flags(&etc, flags, "make /etc read-only")? {
        // The bound entries: on another file system than /etc's tmpfs (the copies are on it).
        let own = fs::metadata(&etc).map_err(io("make /etc read-only"))?.dev();
        for name in ETC_ALLOW {
            let target = etc.join(name);
            if fs::metadata(&target).is_ok_and(|m| m.dev() != own) {
                remount_bind(&target, flags, "bind /etc entry read-only")?;
            }
        }
        remount_ro(
            &etc,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            "make /etc read-only",
        )?;
    }
    Ok(())
}

/// /dev with its device nodes, /dev/pts and the usual links; /dev/shm (sized per run) and
/// the read-only remount come in [`finish`].
fn dev(root: &Path) -> Res {
    let dev = root.join("dev");
    mkdir_p(&dev, "create /dev")?;
    tmpfs(
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=64k",
        "mount /dev",
    )?;
    for &(name, major, minor) in DEV_NODES {
        // Made here rather than bound from the host: a mknod and a chmod each instead of a
        // mount, and the jail's /dev holds no host inode. /dev is read-only below, so nothing
        // else can be created, and the agent has no CAP_MKNOD anyway.
        let target = dev.join(name);
        nix::sys::stat::mknod(
            &target,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(major, minor),
        )
        .map_err(sys("create device node"))?;
        // mknod applies the umask.
        fs::set_permissions(&target, fs::Permissions::from_mode(0o666))
            .map_err(io("create device node"))?;
    }
    mkdir_p(&dev.join("shm"), "create /dev/shm")?;
    let pts = dev.join("pts");
    mkdir_p(&pts, "create /dev/pts")?;
    // A private devpts instance: the jail's ptys are its own, never the host's terminals.
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(sys("mount /dev/pts"))?;
    for (link, to) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(to, dev.join(link)).map_err(io("create /dev links"))?;
    }
    Ok(())
}

fn proc(root: &Path) -> Res {
    let proc = root.join("proc");
    mkdir_p(&proc, "create /proc")?;
    // Read-only as a whole (/proc/sys, sysrq-trigger, /proc/self/mem and the rest): one
    // mount instead of a read-only bind per entry. hidepid=2: processes of other uids (pid 1
    // of the run) are invisible to the agent.
    mount(
        Some("proc"),
        &proc,
        Some("proc"),
        ro() | MsFlags::MS_NOEXEC,
        Some("hidepid=2"),
    )
    .map_err(sys("mount /proc"))?;
    if !proc.join("sys").exists() {
        return Err(SandboxError::Unsupported {
            step: "mount /proc",
            why: "expected /proc entry sys is missing".to_string(),
        });
    }
    let null = root.join("dev/null");
    for name in PROC_MASK_FILES {
        let p = proc.join(name);
        let others_read = fs::metadata(&p).is_ok_and(|m| m.mode() & 0o004 != 0);
        if others_read {
            mount(
                Some(&null),
                &p,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(sys("mask /proc files"))?;
            // Read-only like the /proc it covers. A writable bind here is a writable mount
            // outside the run's writable places, which a kernel whose Landlock cannot
            // refuse truncation (before 6.2: Debian 12's 6.1) makes the run refuse.
            // /dev/null stays a device: reading it still gives nothing.
            remount_bind(
                &p,
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
                "mask /proc files read-only",
            )?;
        }
    }
    for name in PROC_MASK_DIRS {
        let p = proc.join(name);
        if p.is_dir() {
            tmpfs(
                &p,
                ro() | MsFlags::MS_NOEXEC,
                "size=4k,mode=0555",
                "mask /proc dirs",
            )?;
        }
    }
    Ok(())
}

/// The agent side's view of the jail, in the agent child (still root, before it becomes the
/// instance): a mount namespace of its own where every mount is noexec, except one
/// read-only bind of each file of its exec set onto itself. The kernel then refuses to
/// execute or map executable anything else: another program, the loader run on another
/// file, a file the agent wrote, a library it dropped in /tmp.
pub fn agent_view(exec: &ExecAllow) -> Res {
    unshare(CloneFlags::CLONE_NEWNS).map_err(sys("unshare the agent's mount namespace"))?;
    const STEP: &str = "make the agent's mounts noexec";
    if !set_tree_flags(Path::new("/"), MsFlags::MS_NOEXEC, STEP)? {
        return Err(SandboxError::Unsupported {
            step: STEP,
            why: "the kernel has no mount_setattr (Linux 5.12 or newer)".into(),
        });
    }
    for f in exec
        .programs
        .iter()
        .chain(&exec.libraries)
        .chain(&exec.trees)
    {
        bind(f, f, ro(), "bind the agent's executable files")?;
    }
    Ok(())
}

/// pivot_root into the new root (built by [`build_common`] and [`finish`]), detach the old
/// one, and make the root tmpfs read-only.
pub fn switch_root() -> Res {
    nix::unistd::chdir(BUILD_DIR).map_err(sys("enter new root"))?;
    // pivot_root(".", "."): the old root ends up stacked on the new one, then detached.
    nix::unistd::pivot_root(".", ".").map_err(sys("pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(sys("detach old root"))?;
    nix::unistd::chdir("/").map_err(sys("enter new root"))?;
    remount_ro(
        Path::new("/"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "make root read-only",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::JAIL_FILE_DIRS;

    #[test]
    fn jail_file_folders_never_shadow_host_etc_entries() {
        for d in JAIL_FILE_DIRS {
            let name = Path::new(d)
                .strip_prefix("/etc")
                .expect("jail file folders are in /etc");
            let first = name.components().next().expect("a folder below /etc");
            let first = first.as_os_str().to_str().expect("ASCII");
            assert!(!ETC_ALLOW.contains(&first), "{d} is taken from the host");
            assert!(
                !["passwd", "group", "hostname", "hosts"].contains(&first),
                "{d} is generated"
            );
        }
    }

    #[test]
    fn small_etc_files_are_copied_and_folders_and_large_files_bound() {
        assert_eq!(etc_way(true, false, 4096), Some(EtcWay::Bind));
        assert_eq!(etc_way(false, true, 0), Some(EtcWay::Copy));
        assert_eq!(etc_way(false, true, ETC_COPY_MAX), Some(EtcWay::Copy));
        assert_eq!(etc_way(false, true, ETC_COPY_MAX + 1), Some(EtcWay::Bind));
        assert_eq!(etc_way(false, false, 0), None);
        // An empty file still takes a page; the room is whole 64 KiB pages.
        assert_eq!(etc_copy_room(0), 64 << 10);
        assert_eq!(etc_copy_room(64 << 10), 64 << 10);
        assert_eq!(etc_copy_room((64 << 10) + 1), 128 << 10);
    }

    #[test]
    fn mount_attr_bits_match_the_ms_flags() {
        assert_eq!(mount_attr_bits(ro() | MsFlags::MS_NOEXEC), 0xf);
        assert_eq!(
            mount_attr_bits(MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC),
            0xa
        );
        assert_eq!(mount_attr_bits(MsFlags::MS_RDONLY), MOUNT_ATTR_RDONLY);
        // Flags with no mount attribute are not turned into one.
        assert_eq!(mount_attr_bits(MsFlags::MS_BIND | MsFlags::MS_REC), 0);
        assert_eq!(std::mem::size_of::<MountAttr>(), 32);
    }

    #[test]
    fn etc_tmpfs_fits_the_largest_file_set() {
        let file = |n: usize| JailFile {
            path: "/etc/airlock/f".into(),
            contents: "x".repeat(n),
            mode: 0o444,
        };
        assert_eq!(etc_tmpfs_bytes(&[]), 1 << 20);
        assert_eq!(etc_tmpfs_bytes(&[file(1)]), (1 << 20) + (128 << 10));
        let all: Vec<JailFile> = (0..MAX_JAIL_FILES)
            .map(|i| file(if i == 0 { MAX_JAIL_FILES_BYTES } else { 0 }))
            .collect();
        let n = etc_tmpfs_bytes(&all);
        assert!(n >= (1 << 20) + MAX_JAIL_FILES_BYTES as u64 + (MAX_JAIL_FILES as u64) * 4096);
        assert!(n <= etc_tmpfs_max_bytes(), "{n}");
        assert!(etc_tmpfs_max_bytes() <= 8 << 20);
    }
}
