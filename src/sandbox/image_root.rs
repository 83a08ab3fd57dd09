//! A side rooted in an OCI image (the command side, and a workflow role's command): the
//! image's `/usr`, `/bin`, `/sbin`, `/lib*` and `/opt` and the allowlisted entries of its
//! `/etc` read-only, in place of the host's; the run's generated `/etc` files, `/dev`,
//! `/proc`, `/tmp`, the workspace and the home exactly as the side had them.
//!
//! The image's unpacked tree is on the host, under the state directory, which the jail's
//! root no longer shows once pid 1 has switched into it. So pid 1 takes a detached copy of
//! the tree's mount before the switch (`open_tree(OPEN_TREE_CLONE)`, one per side that needs
//! it), and the side attaches it in its own mount namespace, builds a new root on a small
//! tmpfs from it and from its current root, and pivots into that. Nothing of the image is
//! writable, setuid or a device (the binds are read-only, nosuid, nodev; the store refused
//! setuid files and device nodes when it unpacked the image).

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::{RunSpec, SandboxError};

/// The image's directories a side gets (when the image has them).
pub const IMAGE_DIRS: &[&str] = &[
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt",
];

/// Where the new root is assembled: the jail root's empty /run, in the side's own mount
/// namespace only.
const NEW_ROOT: &str = "/run";
const IMAGE_AT: &str = ".image";

type Res = Result<(), SandboxError>;

fn sys(step: &'static str) -> impl Fn(nix::errno::Errno) -> SandboxError {
    move |e| SandboxError::errno(step, e)
}

fn io(step: &'static str) -> impl Fn(std::io::Error) -> SandboxError {
    move |e| SandboxError::sys(step, e)
}

fn cpath(p: &Path, step: &'static str) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| SandboxError::Invalid {
        step,
        why: "path contains a NUL byte".into(),
    })
}

/// In pid 1, before the switch to the jail's root: a detached copy of the image tree's
/// mount, for one side to attach. The tree must be a root-owned folder no one else may
/// write (the store's), reached through no symlink.
pub fn open_tree(spec: &RunSpec) -> Result<Option<OwnedFd>, SandboxError> {
    const STEP: &str = "open the image's tree";
    let Some(image) = &spec.image else {
        return Ok(None);
    };
    let meta = fs::symlink_metadata(&image.tree).map_err(io(STEP))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(SandboxError::Invalid {
            step: STEP,
            why: format!(
                "{} is not a root-owned folder that only root may write",
                image.tree.display()
            ),
        });
    }
    let path = cpath(&image.tree, STEP)?;
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    // SAFETY: open_tree reads the NUL-terminated path; the result is a new descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE
                | libc::O_CLOEXEC as libc::c_uint
                | (libc::AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW) as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

fn attach(tree: OwnedFd, target: &Path) -> Res {
    const STEP: &str = "attach the image's tree";
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    let to = cpath(target, STEP)?;
    // SAFETY: move_mount of a descriptor this function owns onto a NUL-terminated path.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(SandboxError::sys(STEP, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn ro() -> MsFlags {
    MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV
}

fn bind(src: &Path, target: &Path, flags: MsFlags, recursive: bool, step: &'static str) -> Res {
    let rec = if recursive {
        MsFlags::MS_REC
    } else {
        MsFlags::empty()
    };
    mount(
        Some(src),
        target,
        None::<&str>,
        MsFlags::MS_BIND | rec,
        None::<&str>,
    )
    .map_err(sys(step))?;
    if flags.is_empty() {
        return Ok(());
    }
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags,
        None::<&str>,
    )
    .map_err(sys(step))
}

fn mkdir(p: &Path, step: &'static str) -> Res {
    match fs::create_dir(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(SandboxError::sys(step, e)),
    }
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

/// Bind `src` (a file or folder, or recreate a symlink) at `target`, read-only.
fn place(src: &Path, target: &Path, step: &'static str) -> Res {
    place_with(src, target, ro(), step)
}

/// [`place`] with the bind's own flags (each bind mount carries its own: the /etc tmpfs's
/// noexec does not reach the files bound onto it).
fn place_with(src: &Path, target: &Path, flags: MsFlags, step: &'static str) -> Res {
    let Ok(meta) = fs::symlink_metadata(src) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        // Resolved in the new root, against the image's own folders.
        let to = fs::read_link(src).map_err(io(step))?;
        return std::os::unix::fs::symlink(to, target).map_err(io(step));
    }
    if meta.is_dir() {
        mkdir(target, step)?;
    } else if meta.is_file() {
        touch(target, step)?;
    } else {
        return Ok(());
    }
    bind(src, target, flags, false, step)
}

/// In the side's first process, in its own mount namespace, after [`super::rootfs::side_view`]:
/// build the image-rooted view and pivot into it. `tree`: from [`open_tree`].
pub fn enter(tree: OwnedFd) -> Res {
    let new = Path::new(NEW_ROOT);
    mount(
        Some("tmpfs"),
        new,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=1m"),
    )
    .map_err(sys("mount the image root's tmpfs"))?;
    let image = new.join(IMAGE_AT);
    mkdir(&image, "create the image's mount point")?;
    attach(tree, &image)?;
    for d in IMAGE_DIRS {
        place(&image.join(d), &new.join(d), "bind the image's folders")?;
    }
    etc(&image, new)?;
    // Everything else of the side's current root, as it is: /dev, /proc, /tmp, /home, the
    // workspace, with whatever is mounted below them.
    let skip = |n: &str| IMAGE_DIRS.contains(&n) || n == "etc" || n == "run";
    for entry in fs::read_dir("/").map_err(io("read the jail's root"))? {
        let entry = entry.map_err(io("read the jail's root"))?;
        let name = entry.file_name();
        let Some(n) = name.to_str() else { continue };
        if skip(n) {
            continue;
        }
        let from = Path::new("/").join(n);
        let meta = fs::symlink_metadata(&from).map_err(io("read the jail's root"))?;
        if meta.is_dir() {
            let to = new.join(n);
            mkdir(&to, "create the image root's folders")?;
            bind(
                &from,
                &to,
                MsFlags::empty(),
                true,
                "bind the side's folders",
            )?;
        }
    }
    mkdir(&new.join("run"), "create the image root's folders")?;
    pivot(new)
}

/// The image root's /etc: a small tmpfs with the image's allowlisted entries and the run's
/// own files (accounts, host names, the jail files: whatever of the jail's /etc is not a
/// host entry), all read-only.
fn etc(image: &Path, new: &Path) -> Res {
    let etc = new.join("etc");
    mkdir(&etc, "create the image's /etc")?;
    mount(
        Some("tmpfs"),
        &etc,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )
    .map_err(sys("mount the image's /etc"))?;
    // The image's /etc resolved inside the image (it may be a symlink in the image).
    let image_etc = resolve_in(image, Path::new("etc"));
    for name in super::rootfs::ETC_ALLOW {
        if let Some(src) = &image_etc {
            place_with(
                &src.join(name),
                &etc.join(name),
                ro() | MsFlags::MS_NOEXEC,
                "bind the image's /etc entries",
            )?;
        }
    }
    for entry in fs::read_dir("/etc").map_err(io("read the jail's /etc"))? {
        let entry = entry.map_err(io("read the jail's /etc"))?;
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| super::rootfs::ETC_ALLOW.contains(&n))
        {
            continue;
        }
        place_with(
            &Path::new("/etc").join(&name),
            &etc.join(&name),
            ro() | MsFlags::MS_NOEXEC,
            "bind the run's /etc files",
        )?;
    }
    mount(
        None::<&str>,
        &etc,
        None::<&str>,
        MsFlags::MS_REMOUNT | ro() | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(sys("make the image's /etc read-only"))
}

/// `rel` inside `root`, following symlinks as the image would (absolute targets start at
/// `root`), or `None` when it is not a folder there.
fn resolve_in(root: &Path, rel: &Path) -> Option<PathBuf> {
    let mut cur = root.to_path_buf();
    let mut todo: Vec<std::ffi::OsString> = rel
        .components()
        .map(|c| c.as_os_str().to_os_string())
        .rev()
        .collect();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        if c == "." || c.is_empty() || c == "/" {
            continue;
        }
        if c == ".." {
            if cur != root {
                cur.pop();
            }
            continue;
        }
        let p = cur.join(&c);
        let meta = fs::symlink_metadata(&p).ok()?;
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return None;
            }
            let t = fs::read_link(&p).ok()?;
            if t.is_absolute() {
                cur = root.to_path_buf();
            }
            for part in t.components().rev() {
                todo.push(part.as_os_str().to_os_string());
            }
        } else if meta.is_dir() {
            cur = p;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// pivot_root into `new`, detach the old root and the image's own mount, make the root
/// tmpfs read-only.
fn pivot(new: &Path) -> Res {
    nix::unistd::chdir(new).map_err(sys("enter the image root"))?;
    nix::unistd::pivot_root(".", ".").map_err(sys("pivot_root into the image root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(sys("detach the jail's root"))?;
    nix::unistd::chdir("/").map_err(sys("enter the image root"))?;
    let image = Path::new("/").join(IMAGE_AT);
    umount2(&image, MntFlags::MNT_DETACH).map_err(sys("detach the image's mount"))?;
    fs::remove_dir(&image).map_err(io("remove the image's mount point"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | ro(),
        None::<&str>,
    )
    .map_err(sys("make the image root read-only"))
}
