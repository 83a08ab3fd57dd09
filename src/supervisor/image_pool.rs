//! Workspace images made ahead of the launches that need them: airlockd keeps a few empty,
//! formatted images of the size `limits.workspace` says in `<state_dir>/pool/`, each
//! attached to its loop device with its filesystem held (see [`super::mount_hold`]), so a
//! launch takes one (a rename into its run directory) instead of running mke2fs, attaching
//! and reading the filesystem in while its client waits; one is made again on the blocking
//! pool after each take, its mke2fs at idle CPU priority so that it never competes with a
//! run. Only
//! what does not depend on the launch is made ahead: an image is empty, its root directory
//! root's until the jail's pid 1 gives it to the run's uid once mounted
//! ([`crate::sandbox::disk`]), and a run that starts with `run.clone` repositories still
//! gets an image made with them.
//!
//! Nothing in the pool is ever a run's: images live in a directory only root opens, are
//! complete before they are named `*.img` (made as `*.tmp`, then renamed), and are removed
//! when airlockd starts, whatever an earlier one left (their loop devices and holds went
//! with it).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::disk::{empty_template, image_from, make_empty, Bound, Premade, Priority};
use super::loopdev;
use super::mount_hold::MountHold;

/// Images kept ready: a burst of launches takes these, then makes its own until the pool
/// is full again. Each costs a few MiB of disk (the images are sparse).
pub const POOL_IMAGES: usize = 4;

/// Images copied from one formatted template before a new one is made. A template saves
/// each image its own mke2fs (about a third of the CPU a launch of `/bin/true` costs with
/// a bounded workspace); its copies share the filesystem's UUID and directory hash seed,
/// which say nothing of any run, and a new template bounds how many do.
pub const TEMPLATE_USES: u32 = 32;

/// The pool's directory under the state directory.
pub const DIR: &str = "pool";

/// Empty workspace images made ahead of launches.
#[derive(Debug)]
pub struct ImagePool {
    dir: PathBuf,
    ready: Mutex<Vec<(Bound, Premade)>>,
    /// One refill at a time.
    filling: AtomicBool,
    next: AtomicU64,
    /// The empty filesystem the images are copied from (in memory), its bound, and how
    /// many images it has made. Used by the one refill under way only.
    template: Mutex<Option<(Bound, std::fs::File, u32)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ImagePool {
    /// The pool of `state_dir`, emptied of what an earlier airlockd left there (made for
    /// another size, or cut short by a crash). Blocking.
    pub fn open(state_dir: &Path) -> std::io::Result<ImagePool> {
        let dir = state_dir.join(DIR);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        for e in fs::read_dir(&dir)?.flatten() {
            if e.file_type().is_ok_and(|t| t.is_file()) {
                let _ = fs::remove_file(e.path());
            }
        }
        Ok(ImagePool {
            dir,
            ready: Mutex::new(Vec::new()),
            filling: AtomicBool::new(false),
            next: AtomicU64::new(0),
            template: Mutex::new(None),
        })
    }

    /// A ready image of `bound`, now the caller's to rename into place; `None` when the
    /// pool has none of that size.
    pub fn take(&self, bound: Bound) -> Option<Premade> {
        let mut ready = lock(&self.ready);
        let i = ready.iter().position(|(b, _)| *b == bound)?;
        Some(ready.swap_remove(i).1)
    }

    /// Images ready now.
    pub fn len(&self) -> usize {
        lock(&self.ready).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Make images of `bound` until [`POOL_IMAGES`] are ready, dropping any of another size
    /// (the config changed). Returns at once when another refill is going on. Blocking
    /// (mke2fs): call on the blocking pool. An image that cannot be made ends the refill;
    /// the launches then make their own, as they would without a pool.
    pub fn refill(&self, bound: Bound) {
        if self.filling.swap(true, Ordering::AcqRel) {
            return;
        }
        let stale: Vec<Premade> = {
            let mut ready = lock(&self.ready);
            let (keep, stale): (Vec<_>, Vec<_>) = ready.drain(..).partition(|(b, _)| *b == bound);
            *ready = keep;
            stale.into_iter().map(|(_, p)| p).collect()
        };
        drop_all(stale);
        while self.len() < POOL_IMAGES {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let tmp = self.dir.join(format!("{n}.tmp"));
            let img = self.dir.join(format!("{n}.img"));
            // mke2fs at idle CPU priority: it alone, none of the writes or locks here that a
            // launch may wait on.
            let made = self.make(&tmp, bound);
            let made = made.and_then(|()| fs::rename(&tmp, &img).map_err(|e| e.to_string()));
            if made.is_err() {
                let _ = fs::remove_file(&tmp);
                break;
            }
            // Without its device or hold, an image is still worth having: the launch that
            // takes it attaches and holds it then.
            let lp = loopdev::attach(&img).ok();
            let hold = lp.as_ref().and_then(|l| MountHold::of(&l.path).ok());
            if let Some(h) = &hold {
                h.remove_lost_found();
            }
            let premade = Premade {
                image: img,
                lp,
                hold,
            };
            lock(&self.ready).push((bound, premade));
        }
        self.filling.store(false, Ordering::Release);
    }

    /// Remove every ready image (airlockd is stopping).
    /// An empty image at `img`: a copy of the template, made first (or again) when there
    /// is none of this bound or it has made [`TEMPLATE_USES`] images; without a template
    /// (no memfd), made in place.
    fn make(&self, img: &Path, bound: Bound) -> Result<(), String> {
        let mut t = lock(&self.template);
        let fresh = matches!(&*t, Some((b, _, uses)) if *b == bound && *uses < TEMPLATE_USES);
        if !fresh {
            *t = empty_template(bound, Priority::Idle)
                .ok()
                .map(|f| (bound, f, 0));
        }
        match t.as_mut() {
            Some((_, file, uses)) => {
                *uses += 1;
                image_from(file, img, bound)
            }
            None => make_empty(img, bound, Priority::Idle),
        }
    }

    pub fn clear(&self) {
        *lock(&self.template) = None;
        let all: Vec<Premade> = lock(&self.ready).drain(..).map(|(_, p)| p).collect();
        drop_all(all);
    }
}

/// Let go of images: each one's hold and loop device, then its file.
fn drop_all(images: Vec<Premade>) {
    for p in images {
        let Premade { image, lp, hold } = p;
        drop(hold);
        drop(lp);
        let _ = fs::remove_file(image);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Bound = Bound {
        bytes: 32 << 20,
        inodes: 256,
    };

    #[test]
    fn a_pool_hands_out_images_of_the_size_asked_for_and_makes_more() {
        crate::require_root("this test makes ext4 images with mke2fs");
        let state = tempfile::tempdir().expect("tempdir");
        // What an earlier airlockd left is removed.
        fs::create_dir(state.path().join(DIR)).expect("mkdir");
        fs::write(state.path().join(DIR).join("7.tmp"), b"torn").expect("write");
        let pool = ImagePool::open(state.path()).expect("pool");
        assert!(fs::read_dir(state.path().join(DIR))
            .expect("dir")
            .next()
            .is_none());
        assert!(pool.take(SMALL).is_none());
        pool.refill(SMALL);
        assert_eq!(pool.len(), POOL_IMAGES);
        // One mke2fs made them all: each is a copy of the template.
        assert!(
            matches!(&*lock(&pool.template), Some((b, _, n)) if *b == SMALL && *n as usize == POOL_IMAGES),
            "the images were not copied from one template"
        );
        let img = pool.take(SMALL).expect("an image");
        assert_eq!(
            fs::metadata(&img.image).expect("image").len(),
            SMALL.bytes,
            "sparse, of the bound's size"
        );
        // Attached and held ahead: the device holds this image's filesystem.
        let lp = img.lp.as_ref().expect("a loop device");
        let backing = fs::read_to_string(format!(
            "/sys/block/{}/loop/backing_file",
            lp.path.file_name().and_then(|n| n.to_str()).expect("name")
        ))
        .expect("backing file");
        assert_eq!(backing.trim(), img.image.to_str().expect("path"));
        assert!(img.hold.is_some(), "its filesystem is held");
        drop(img);
        assert_eq!(pool.len(), POOL_IMAGES - 1);
        // Another size: none ready, and a refill for it drops the old ones.
        let other = Bound {
            bytes: 48 << 20,
            inodes: 256,
        };
        assert!(pool.take(other).is_none());
        pool.refill(other);
        assert!(pool.take(SMALL).is_none());
        assert_eq!(pool.len(), POOL_IMAGES);
        assert!(
            matches!(&*lock(&pool.template), Some((b, _, n)) if *b == other && *n as usize == POOL_IMAGES),
            "a template of the old size made images of the new one"
        );
        pool.clear();
        assert!(pool.is_empty());
        assert!(
            lock(&pool.template).is_none(),
            "the template outlived clear"
        );
    }
}
