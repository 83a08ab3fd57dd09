//! Root never follows a run's links. Each test races a link swap the way a live run can
//! in a directory its instance uid writes: a thread with that uid's kernel credentials
//! swaps a file and a symlink to a root-only secret with renameat2(RENAME_EXCHANGE) in a
//! loop, while root does its work there; nothing of root's may reach the run.

mod common;

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use airlock::supervisor::disk::{Bound, RunDisks};

/// An instance uid no account uses.
const UID: u32 = 1_880_093_931;
const PAIRS: usize = 48;
const TRIES: usize = 12;

/// Swaps `a<i>` and `b<i>` in `dir` until dropped, as `UID`.
struct Racer {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Racer {
    fn start(dir: &Path) -> Racer {
        let fd: OwnedFd = std::fs::File::open(dir).unwrap().into();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), swaps.clone());
        let thread = std::thread::spawn(move || {
            // SAFETY: raw credential syscalls on this thread only; it never acts as root again.
            unsafe {
                assert_eq!(
                    libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()),
                    0
                );
                assert_eq!(libc::syscall(libc::SYS_setresgid, UID, UID, UID), 0);
                assert_eq!(libc::syscall(libc::SYS_setresuid, UID, UID, UID), 0);
            }
            let names: Vec<(CString, CString)> = (0..PAIRS)
                .map(|i| {
                    (
                        CString::new(format!("a{i}")).unwrap(),
                        CString::new(format!("b{i}")).unwrap(),
                    )
                })
                .collect();
            while !s.load(Ordering::Relaxed) {
                for (a, b) in &names {
                    // SAFETY: renameat2 on a live fd with NUL-terminated names.
                    let rc = unsafe {
                        libc::renameat2(
                            fd.as_raw_fd(),
                            a.as_ptr(),
                            fd.as_raw_fd(),
                            b.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                    if rc == 0 {
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Racer {
            stop,
            swaps,
            thread: Some(thread),
        }
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A root-only secret outside anything the run owns.
fn secret(dir: &Path) -> (PathBuf, String) {
    let p = dir.join("root-secret");
    // As long as the run's own files: a copy that sized the file by what it saw first
    // still copies all of it.
    let text = format!("ROOT-ONLY-{:022}", std::process::id());
    std::fs::write(&p, &text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    (p, text)
}

/// `a<i>` a file of the run's, `b<i>` its link to the secret, all the instance's.
fn plant(dir: &Path, secret: &Path) {
    for i in 0..PAIRS {
        let (a, b) = (dir.join(format!("a{i}")), dir.join(format!("b{i}")));
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
        std::fs::write(&a, "the run's own file, 32 bytes lon").unwrap();
        std::os::unix::fs::symlink(secret, &b).unwrap();
        std::os::unix::fs::lchown(&a, Some(UID), Some(UID)).unwrap();
        std::os::unix::fs::lchown(&b, Some(UID), Some(UID)).unwrap();
    }
}

/// Every regular file under `dir`, with its contents.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                todo.push(e.path());
            } else if m.is_file() {
                out.push((e.path(), std::fs::read(e.path()).unwrap(), m.uid()));
            }
        }
    }
    out
}

/// A look at a filesystem image, unmounted on drop. Not read-only: the run's disks hold
/// its superblock read-write (a detached mount), and a mount shares it.
struct Look(PathBuf);

impl Look {
    fn mount(device: &Path, at: &Path) -> Look {
        std::fs::create_dir_all(at).unwrap();
        nix::mount::mount(
            Some(device),
            at,
            Some("ext4"),
            nix::mount::MsFlags::MS_NOSUID
                | nix::mount::MsFlags::MS_NODEV
                | nix::mount::MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .unwrap();
        Look(at.to_path_buf())
    }
}

impl Drop for Look {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn a_home_made_from_a_live_runs_home_holds_nothing_of_roots() {
    common::require_root();
    let t = tempfile::tempdir().unwrap();
    let (secret, text) = secret(t.path());
    let state = t.path().join("state");
    std::fs::create_dir_all(state.join("homes")).unwrap();
    std::fs::set_permissions(state.join("homes"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let home = state.join("homes/hx");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(UID), Some(UID)).unwrap();
    let bound = Bound {
        bytes: 32 << 20,
        inodes: 2048,
    };
    let img = state.join("homes/hx.img");
    let (mut copied, mut swaps) = (0, 0);
    for n in 0..TRIES {
        let _ = std::fs::remove_file(&img);
        plant(&home, &secret);
        // The live run (an unbounded home) swaps its links while the next launch makes
        // the bounded home from the directory.
        let racer = Racer::start(&home);
        let mut disks = RunDisks::default();
        let made = disks.add_home(&state, "hx", &home, bound, (UID, UID), None);
        swaps += racer.swaps.load(Ordering::Relaxed);
        drop(racer);
        made.unwrap();
        let device = disks.mounts[0].device.clone();
        let look = Look::mount(&device, &t.path().join(format!("look{n}")));
        for (path, body, uid) in files(&look.0) {
            assert!(
                !String::from_utf8_lossy(&body).contains("ROOT-ONLY") && body != text.as_bytes(),
                "try {n}: {} in the new home holds root's secret",
                path.display()
            );
            assert_eq!(uid, UID, "{}", path.display());
            copied += 1;
        }
        drop(look);
        drop(disks);
    }
    assert!(swaps > 0, "the racer never swapped");
    assert!(copied > 0, "nothing was copied");
    // The secret is untouched and still root's.
    let m = std::fs::metadata(&secret).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600));
}

#[test]
fn giving_a_tree_to_the_instance_never_gives_away_what_a_link_leads_to() {
    common::require_root();
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("roots");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), "root's").unwrap();
    let tree = t.path().join("repos");
    std::fs::create_dir(&tree).unwrap();
    std::os::unix::fs::chown(&tree, Some(UID), Some(UID)).unwrap();
    for n in 0..TRIES {
        for i in 0..PAIRS {
            let (a, b) = (tree.join(format!("a{i}")), tree.join(format!("b{i}")));
            let _ = std::fs::remove_dir_all(&a);
            let _ = std::fs::remove_file(&b);
            let _ = std::fs::remove_dir_all(&b);
            std::fs::create_dir(&a).unwrap();
            std::fs::write(a.join("f"), "x").unwrap();
            std::os::unix::fs::symlink(&outside, &b).unwrap();
            std::os::unix::fs::lchown(&b, Some(UID), Some(UID)).unwrap();
            std::os::unix::fs::chown(&a, Some(UID), Some(UID)).unwrap();
        }
        let racer = Racer::start(&tree);
        let dir = std::fs::File::open(&tree).unwrap();
        let r = airlock::tree::chown_tree(std::os::fd::AsFd::as_fd(&dir), UID, UID);
        drop(racer);
        r.unwrap();
        for p in [outside.clone(), outside.join("keep")] {
            assert_eq!(
                std::fs::metadata(&p).unwrap().uid(),
                0,
                "try {n}: {} was given to the instance",
                p.display()
            );
        }
    }
}
