//! The image store, `<state_dir>/images/` (root's, 0700): `blobs/sha256/<hex>` (each kept
//! only once its bytes hash to its name), `trees/<hex>/` (an image's unpacked root, named by
//! its manifest digest, made under `tmp/` and renamed whole), `images.json` (image names
//! to records, written by temporary file and rename), `lock` (one import or removal at a
//! time) and `trees/<hex>.pin` (held shared by each live run of the image, so a removal
//! can tell).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::digest::{Digest, Hashing};
use super::unpack::Budget;
use super::ImageError;

/// One named image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageRecord {
    /// The manifest's digest (`sha256:...`): the image's identity.
    pub digest: String,
    /// The config blob's digest.
    pub config: String,
    pub layers: Vec<String>,
    /// Bytes of its blobs and its unpacked tree.
    pub size: u64,
    /// The image config's `Env`, applied to the command side.
    #[serde(default)]
    pub env: Vec<String>,
    /// Where it came from: the imported path or the pulled reference.
    pub source: String,
    /// Seconds since the epoch.
    pub imported_at: u64,
}

impl ImageRecord {
    pub fn manifest_digest(&self) -> Option<Digest> {
        Digest::parse(&self.digest)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Names {
    images: BTreeMap<String, ImageRecord>,
}

pub struct Store {
    root: PathBuf,
}

/// A folder under `tmp/`, removed when dropped unless kept.
pub struct WorkDir {
    pub path: PathBuf,
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The store's lock, held for an import or a removal.
pub struct Locked {
    _file: fs::File,
}

fn io_err(image: &str, what: &str, p: &Path, e: std::io::Error) -> ImageError {
    ImageError::new(image, format!("{what} {}: {e}", p.display()))
}

fn mkdir(p: &Path, mode: u32) -> std::io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(mode).create(p)
}

impl Store {
    /// The store under `state_dir`, its folders made when missing.
    pub fn open(state_dir: &Path) -> Result<Store, ImageError> {
        let root = state_dir.join("images");
        for d in [
            root.clone(),
            root.join("blobs/sha256"),
            root.join("trees"),
            root.join("tmp"),
        ] {
            mkdir(&d, 0o700).map_err(|e| io_err("-", "cannot create", &d, e))?;
        }
        Ok(Store { root })
    }

    /// The store under `state_dir` if it exists (for reading: `image ls`, launches).
    pub fn existing(state_dir: &Path) -> Store {
        Store {
            root: state_dir.join("images"),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(d.hex())
    }

    pub fn tree_path(&self, d: &Digest) -> PathBuf {
        self.root.join("trees").join(d.hex())
    }

    fn pin_path(&self, d: &Digest) -> PathBuf {
        self.root.join("trees").join(format!("{}.pin", d.hex()))
    }

    /// Take the store's lock (waits for another import or removal), and clear what an
    /// interrupted one left under `tmp/`.
    pub fn lock(&self) -> Result<Locked, ImageError> {
        let p = self.root.join("lock");
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&p)
            .map_err(|e| io_err("-", "cannot open", &p, e))?;
        flock(&f, libc::LOCK_EX).map_err(|e| io_err("-", "cannot lock", &p, e))?;
        let tmp = self.root.join("tmp");
        if let Ok(rd) = fs::read_dir(&tmp) {
            for e in rd.flatten() {
                let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
            }
        }
        Ok(Locked { _file: f })
    }

    /// A fresh folder under `tmp/` (under the lock).
    pub fn work_dir(&self, _lock: &Locked, tag: &str) -> Result<WorkDir, ImageError> {
        let p = self.root.join("tmp").join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|e| io_err("-", "cannot create", &p, e))?;
        Ok(WorkDir { path: p })
    }

    /// Copy a blob in, hashing it on the way; kept (renamed into `blobs/`) only when its
    /// digest is `expect` (when given). Returns its digest and size.
    pub fn put_blob(
        &self,
        lock: &Locked,
        image: &str,
        from: impl Read,
        expect: Option<&Digest>,
        budget: &mut Budget,
    ) -> Result<(Digest, u64), ImageError> {
        let work = self.work_dir(lock, "blob")?;
        let tmp = work.path.join("blob");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| io_err(image, "cannot write", &tmp, e))?;
        // One byte more than the budget: enough to tell it was exceeded.
        let mut hashing = Hashing::new(from.take(budget.left.saturating_add(1)));
        std::io::copy(&mut hashing, &mut f).map_err(|e| {
            let mut err = ImageError::new(image, format!("cannot copy a blob: {e}"));
            if let Some(d) = expect {
                err = err.layer(d);
            }
            err
        })?;
        let (got, n) = hashing
            .finish()
            .map_err(|e| ImageError::new(image, format!("cannot copy a blob: {e}")))?;
        if n > budget.left {
            let mut err =
                ImageError::new(image, "the image store would grow past images.max_bytes");
            if let Some(d) = expect {
                err = err.layer(d);
            }
            return Err(err);
        }
        if let Some(want) = expect {
            if &got != want {
                return Err(ImageError::new(
                    image,
                    format!("the blob's bytes hash to {got}, not to its name"),
                )
                .layer(want));
            }
        }
        budget.left -= n;
        f.sync_all()
            .map_err(|e| io_err(image, "cannot write", &tmp, e))?;
        let dest = self.blob_path(&got);
        fs::rename(&tmp, &dest).map_err(|e| io_err(image, "cannot keep", &dest, e))?;
        Ok((got, n))
    }

    /// A stored blob, read back bounded (documents: manifests and configs).
    pub fn read_document(&self, image: &str, d: &Digest, max: u64) -> Result<Vec<u8>, ImageError> {
        let p = self.blob_path(d);
        let f = fs::File::open(&p).map_err(|e| io_err(image, "cannot read", &p, e))?;
        let mut out = Vec::new();
        f.take(max + 1)
            .read_to_end(&mut out)
            .map_err(|e| io_err(image, "cannot read", &p, e))?;
        if out.len() as u64 > max {
            return Err(ImageError::new(
                image,
                format!("the document {d} is larger than {max} bytes"),
            ));
        }
        Ok(out)
    }

    pub fn open_blob(&self, image: &str, d: &Digest) -> Result<fs::File, ImageError> {
        let p = self.blob_path(d);
        fs::File::open(&p).map_err(|e| io_err(image, "cannot read", &p, e).layer(d))
    }

    /// Every named image.
    pub fn list(&self) -> Result<BTreeMap<String, ImageRecord>, ImageError> {
        let p = self.root.join("images.json");
        match fs::read(&p) {
            Ok(bytes) => serde_json::from_slice::<Names>(&bytes)
                .map(|n| n.images)
                .map_err(|e| ImageError::new("-", format!("{} is damaged: {e}", p.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(io_err("-", "cannot read", &p, e)),
        }
    }

    pub fn get(&self, name: &str) -> Result<Option<ImageRecord>, ImageError> {
        Ok(self.list()?.remove(name))
    }

    fn save(
        &self,
        _lock: &Locked,
        images: BTreeMap<String, ImageRecord>,
    ) -> Result<(), ImageError> {
        let p = self.root.join("images.json");
        let tmp = self.root.join("images.json.tmp");
        let bytes = serde_json::to_vec_pretty(&Names { images })
            .map_err(|e| ImageError::new("-", format!("cannot encode the names: {e}")))?;
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| io_err("-", "cannot write", &tmp, e))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err("-", "cannot write", &tmp, e))?;
        fs::rename(&tmp, &p).map_err(|e| io_err("-", "cannot rename", &p, e))?;
        fs::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err("-", "cannot fsync", &self.root, e))
    }

    /// Name an image (replacing what the name named before).
    pub fn name(&self, lock: &Locked, name: &str, rec: ImageRecord) -> Result<(), ImageError> {
        let mut all = self.list()?;
        all.insert(name.to_string(), rec);
        self.save(lock, all)?;
        self.collect(lock)
    }

    /// Bytes the store holds for its named images (each image once).
    pub fn usage(&self) -> Result<u64, ImageError> {
        let mut seen = BTreeSet::new();
        Ok(self
            .list()?
            .values()
            .filter(|r| seen.insert(r.digest.clone()))
            .map(|r| r.size)
            .sum())
    }

    /// Hold the image's pin for a live run: a removal is refused while any is held.
    pub fn pin(&self, d: &Digest) -> Result<fs::File, ImageError> {
        let p = self.pin_path(d);
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&p)
            .map_err(|e| io_err("-", "cannot open", &p, e))?;
        flock(&f, libc::LOCK_SH | libc::LOCK_NB).map_err(|e| io_err("-", "cannot pin", &p, e))?;
        Ok(f)
    }

    /// Whether a live run holds the image's pin.
    pub fn pinned(&self, d: &Digest) -> bool {
        let Ok(f) = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.pin_path(d))
        else {
            return false;
        };
        flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_err()
    }

    /// Forget `name`; its blobs and tree go when no other name uses them and no run holds
    /// them. `users`: what else uses it (environments), refused when any.
    pub fn remove(&self, lock: &Locked, name: &str, users: &[String]) -> Result<(), ImageError> {
        let mut all = self.list()?;
        let Some(rec) = all.get(name).cloned() else {
            return Err(ImageError::new(
                name,
                "no image has this name (airlockctl image ls)",
            ));
        };
        if !users.is_empty() {
            return Err(ImageError::new(
                name,
                format!(
                    "in use by environments.{}: change environments in the config first",
                    users.join(", environments.")
                ),
            ));
        }
        if let Some(d) = rec.manifest_digest() {
            if self.pinned(&d) {
                return Err(ImageError::new(
                    name,
                    "a live run uses it: stop it first (airlockctl ps)",
                ));
            }
        }
        all.remove(name);
        self.save(lock, all)?;
        self.collect(lock)
    }

    /// Remove blobs and trees no name uses and no run holds.
    fn collect(&self, _lock: &Locked) -> Result<(), ImageError> {
        let all = self.list()?;
        let mut keep_blobs = BTreeSet::new();
        let mut keep_trees = BTreeSet::new();
        for r in all.values() {
            keep_trees.insert(r.digest.clone());
            keep_blobs.insert(r.digest.clone());
            keep_blobs.insert(r.config.clone());
            keep_blobs.extend(r.layers.iter().cloned());
        }
        if let Ok(rd) = fs::read_dir(self.root.join("trees")) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                let Some(d) = Digest::from_hex(&n) else {
                    continue;
                };
                if !keep_trees.contains(&d.to_string()) && !self.pinned(&d) {
                    let _ = fs::remove_dir_all(e.path());
                    let _ = fs::remove_file(self.pin_path(&d));
                }
            }
        }
        if let Ok(rd) = fs::read_dir(self.root.join("blobs/sha256")) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if !keep_blobs.contains(&format!("sha256:{n}")) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(())
    }
}

fn flock(f: &fs::File, op: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor this function borrows.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub use crate::config::images::valid_name;
