//! Loop devices for the runs' bounded filesystems: attach an image file with autoclear (the
//! kernel detaches the device once nothing has it open or mounted, so a supervisor that
//! dies leaves none behind), or find the device an image is attached to already (the
//! home of an instance with a run going on: one device, so one superblock, for every run
//! of it; two devices on one image would corrupt it).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// The kernel's `struct loop_info64`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// The kernel's `struct loop_config` (LOOP_CONFIGURE, Linux 5.8).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

fn zero_info() -> LoopInfo64 {
    LoopInfo64 {
        lo_device: 0,
        lo_inode: 0,
        lo_rdevice: 0,
        lo_offset: 0,
        lo_sizelimit: 0,
        lo_number: 0,
        lo_encrypt_type: 0,
        lo_encrypt_key_size: 0,
        lo_flags: 0,
        lo_file_name: [0; 64],
        lo_crypt_name: [0; 64],
        lo_encrypt_key: [0; 32],
        lo_init: [0; 2],
    }
}

/// An open loop device. The device stays attached at least as long as this (or a clone of
/// it: every run of an instance holds its home's) is held; once all are dropped, it
/// detaches when its filesystem's last mount is gone.
#[derive(Debug, Clone)]
pub struct Loop {
    pub path: PathBuf,
    file: Arc<File>,
}

/// The devices this process holds, by their image's device and inode: a launch finds its
/// instance's home here without reading every loop device in /sys/block (one per live run).
type Held = HashMap<(u64, u64), (PathBuf, Weak<File>)>;

fn held() -> std::sync::MutexGuard<'static, Held> {
    static HELD: OnceLock<Mutex<Held>> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Remember `lp` as the device of the image with this device and inode.
fn hold(key: (u64, u64), lp: &Loop) {
    let mut h = held();
    // Forget devices gone meanwhile, so the map stays as small as what is held.
    h.retain(|_, (_, f)| f.strong_count() > 0);
    h.insert(key, (lp.path.clone(), Arc::downgrade(&lp.file)));
}

fn open_dev(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// How often an attach asks for another free device after losing one to another program.
const ATTACH_TRIES: usize = 64;

/// Block until this descriptor holds an exclusive lock on its file.
fn flock_exclusive(f: &File) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Attach `image` to a free loop device, with autoclear.
pub fn attach(image: &Path) -> Result<Loop, String> {
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(image)
        .map_err(|e| format!("{}: cannot open the image: {e}", image.display()))?;
    let ctl = open_dev(Path::new("/dev/loop-control")).map_err(|e| {
        format!("/dev/loop-control: {e} (loop devices are needed for the disk bounds; load the loop module, or set limits.workspace and limits.home to null)")
    })?;
    // Launches attach at once: without a lock, all of them are told the same free device
    // and all but one lose it. Every attach of Airlock's (airlockd's, a standalone
    // launch's) holds an exclusive lock on the control device from asking to configuring;
    // the lock goes with the descriptor.
    flock_exclusive(&ctl)
        .map_err(|e| format!("/dev/loop-control: cannot lock it for the attach: {e}"))?;
    // A program that does not take the lock (losetup) may still win a device between
    // asking and configuring: ask again, as `losetup --find` does.
    let mut last = String::new();
    for _ in 0..ATTACH_TRIES {
        // SAFETY: an ioctl without an argument on an fd we own.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(format!(
                "no free loop device: {}",
                std::io::Error::last_os_error()
            ));
        }
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let dev = match open_dev(&path) {
            Ok(f) => f,
            Err(e) => {
                last = format!("{}: {e}", path.display());
                continue;
            }
        };
        let mut info = zero_info();
        info.lo_flags = LO_FLAGS_AUTOCLEAR;
        let cfg = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 0,
            info,
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads one struct loop_config we own for the call.
        let rc = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &cfg) };
        if rc == 0 {
            let lp = Loop {
                path,
                file: Arc::new(dev),
            };
            if let Ok(m) = backing.metadata() {
                hold((m.dev(), m.ino()), &lp);
            }
            return Ok(lp);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(format!("{}: cannot attach the image: {e}", path.display()));
        }
        last = format!("{}: taken meanwhile", path.display());
    }
    Err(format!("no loop device could be attached ({last})"))
}

/// The loop device `image` is attached to now, opened (so it stays), if any. Checked by
/// the backing file's device and inode, not only its name.
pub fn find(image: &Path) -> Option<Loop> {
    let meta = std::fs::metadata(image).ok()?;
    let key = (meta.dev(), meta.ino());
    // One this process holds: attached, with this backing file, for as long as it is held.
    if let Some((path, file)) = held()
        .get(&key)
        .and_then(|(p, f)| Some((p.clone(), f.upgrade()?)))
    {
        return Some(Loop { path, file });
    }
    // The device it was attached to last, as recorded beside it, else each attached one
    // whose backing file has the image's name: either checked against the image itself.
    let by_record = || {
        let path = recorded(image)?;
        attached_to(&path, &meta).map(|dev| (path, dev))
    };
    let by_scan = || {
        let want = image.to_str()?;
        loop_devices()?.into_iter().find_map(|name| {
            let backing = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"));
            if backing.ok().as_deref().map(str::trim) != Some(want) {
                return None;
            }
            let path = PathBuf::from(format!("/dev/{name}"));
            attached_to(&path, &meta).map(|dev| (path, dev))
        })
    };
    let (path, dev) = by_record().or_else(by_scan)?;
    let lp = Loop {
        path,
        file: Arc::new(dev),
    };
    hold(key, &lp);
    Some(lp)
}

/// The names of the loop devices that may be attached: those `/proc/partitions` lists
/// (the kernel lists a device only while it has a size, so only attached ones, however many
/// a host made over time), or every `loopN` of `/sys/block` where it cannot be read.
fn loop_devices() -> Option<Vec<String>> {
    let is_loop = |n: &str| {
        n.strip_prefix("loop")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    if let Ok(text) = std::fs::read_to_string("/proc/partitions") {
        return Some(
            text.lines()
                .filter_map(|l| l.split_whitespace().nth(3))
                .filter(|n| is_loop(n))
                .map(str::to_string)
                .collect(),
        );
    }
    let entries = std::fs::read_dir("/sys/block").ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| is_loop(n))
            .collect(),
    )
}

/// The device at `path`, opened, when it is attached to the file `meta` describes.
fn attached_to(path: &Path, meta: &std::fs::Metadata) -> Option<File> {
    let dev = open_dev(path).ok()?;
    let mut info = zero_info();
    // SAFETY: LOOP_GET_STATUS64 writes one struct loop_info64 we own.
    let rc = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_GET_STATUS64 as _, &mut info) };
    // A device being torn down answers ENXIO: not usable.
    (rc == 0 && info.lo_inode == meta.ino() && info.lo_device == meta.dev()).then_some(dev)
}

/// `<image>.loop`: the device an image shared by runs (a home) was attached to last, so
/// that another process finds it without reading the attached loop devices (one per live
/// run). A hint only: [`find`] checks the device is attached to it.
fn record_path(image: &Path) -> PathBuf {
    image.with_extension("img.loop")
}

fn recorded(image: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(record_path(image)).ok()?;
    let path = PathBuf::from(text.trim());
    crate::sandbox::spec::valid_loop_device(&path).then_some(path)
}

/// Remove the record of `image`'s device (the image is gone).
pub fn forget(image: &Path) {
    let _ = std::fs::remove_file(record_path(image));
}

/// Record `lp` as the device `image` is attached to (for [`find`] in other processes).
/// Best effort: without the record, `find` reads the loop devices instead.
pub fn remember(image: &Path, lp: &Loop) {
    let _ = std::fs::write(record_path(image), format!("{}\n", lp.path.display()));
}

/// Loop devices whose backing file is under `dir` now, for tests and clean-up checks.
pub fn attached_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let b = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            let b = PathBuf::from(b.trim().trim_end_matches(" (deleted)"));
            b.starts_with(dir).then_some(b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn losetup(args: &[&str]) -> String {
        let out = std::process::Command::new("losetup")
            .args(args)
            .output()
            .expect("losetup");
        assert!(out.status.success(), "losetup {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn another_processs_device_is_found_from_its_record_and_a_wrong_record_is_not_believed() {
        crate::require_root("this test attaches loop devices");
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("h.img");
        File::create(&img)
            .and_then(|f| f.set_len(1 << 20))
            .expect("image");
        let other = dir.path().join("o.img");
        File::create(&other)
            .and_then(|f| f.set_len(1 << 20))
            .expect("image");
        // Attached by another program, as another airlockd or launch would have.
        let dev = losetup(&["--find", "--show", img.to_str().expect("path")]);
        let wrong = losetup(&["--find", "--show", other.to_str().expect("path")]);
        std::fs::write(record_path(&img), format!("{dev}\n")).expect("record");
        // The record is read, and the device it names checked against the image.
        let meta = std::fs::metadata(&img).expect("image");
        assert_eq!(recorded(&img), Some(PathBuf::from(&dev)));
        assert!(attached_to(Path::new(&dev), &meta).is_some());
        assert!(attached_to(Path::new(&wrong), &meta).is_none());
        let found = find(&img).map(|l| l.path);
        // A record naming a device attached to another file is not taken: the devices are
        // read instead, and the right one found.
        let img2 = dir.path().join("h2.img");
        File::create(&img2)
            .and_then(|f| f.set_len(1 << 20))
            .expect("image");
        let dev2 = losetup(&["--find", "--show", img2.to_str().expect("path")]);
        std::fs::write(record_path(&img2), format!("{wrong}\n")).expect("record");
        let found2 = find(&img2).map(|l| l.path);
        for d in [&dev, &wrong, &dev2] {
            losetup(&["-d", d]);
        }
        assert_eq!(found, Some(PathBuf::from(&dev)));
        assert_eq!(found2, Some(PathBuf::from(&dev2)));
    }
}
