//! `airlockctl image import PATH --name NAME`: an OCI layout (a folder), an OCI archive (a
//! tar of one) or a `docker save` tar (plain or gzip) into the store. Every blob is copied
//! in and kept only when it hashes to the digest that names it; the layers are then
//! unpacked under `tmp/` and the tree renamed into place, so an import that fails or is
//! interrupted leaves nothing but what the next lock of the store clears.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::digest::Digest;
use super::layout::{self, Config, Descriptor, DockerImage, Index, Manifest};
use super::store::{valid_name, ImageRecord, Locked, Store};
use super::unpack::{self, Budget};
use super::ImageError;

/// What an image is made of, once its blobs are in the store.
pub struct Parts {
    pub manifest: Digest,
    pub config: Digest,
    pub layers: Vec<Digest>,
    pub diff_ids: Vec<Option<Digest>>,
    pub env: Vec<String>,
    /// Bytes of the blobs copied in.
    pub blob_bytes: u64,
}

/// Import `path` as `name`, the store bounded by `max_bytes`.
pub fn import(
    store: &Store,
    name: &str,
    path: &Path,
    max_bytes: u64,
) -> Result<ImageRecord, ImageError> {
    check_name(name)?;
    let lock = store.lock()?;
    let mut budget = Budget {
        left: max_bytes.saturating_sub(store.usage()?),
    };
    let meta = fs::metadata(path)
        .map_err(|e| ImageError::new(name, format!("cannot read {}: {e}", path.display())))?;
    let work = store.work_dir(&lock, "import")?;
    let dir = if meta.is_dir() {
        path.to_path_buf()
    } else {
        let src = work.path.join("src");
        fs::create_dir(&src)
            .map_err(|e| ImageError::new(name, format!("cannot create {}: {e}", src.display())))?;
        extract_outer(path, &src, name, max_bytes)?;
        src
    };
    let parts = if dir.join("oci-layout").is_file() && dir.join("index.json").is_file() {
        oci_layout(store, &lock, name, &dir, &mut budget)?
    } else if dir.join("manifest.json").is_file() {
        docker_archive(store, &lock, name, &dir, &mut budget)?
    } else {
        return Err(ImageError::new(
            name,
            format!(
                "{} is not an OCI layout, an OCI archive or a `docker save` archive (it has neither oci-layout with index.json nor manifest.json)",
                path.display()
            ),
        ));
    };
    drop(work);
    finish(
        store,
        &lock,
        name,
        &path.display().to_string(),
        parts,
        &mut budget,
    )
}

pub fn check_name(name: &str) -> Result<(), ImageError> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(ImageError::new(
            "-",
            "--name: an image name is 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
        ))
    }
}

/// Unpack the image's tree (once per manifest digest) and name it.
pub fn finish(
    store: &Store,
    lock: &Locked,
    name: &str,
    source: &str,
    parts: Parts,
    budget: &mut Budget,
) -> Result<ImageRecord, ImageError> {
    let tree = store.tree_path(&parts.manifest);
    let before = budget.left;
    if !tree.is_dir() {
        let work = store.work_dir(lock, "tree")?;
        let root = work.path.join("rootfs");
        fs::create_dir(&root)
            .map_err(|e| ImageError::new(name, format!("cannot create {}: {e}", root.display())))?;
        for (i, layer) in parts.layers.iter().enumerate() {
            let blob = store.open_blob(name, layer)?;
            let diff = parts.diff_ids.get(i).and_then(|d| d.as_ref());
            unpack::apply_layer(&root, name, layer, blob, diff, budget)?;
        }
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755))
            .map_err(|e| ImageError::new(name, format!("cannot set the tree's mode: {e}")))?;
        fs::rename(&root, &tree)
            .map_err(|e| ImageError::new(name, format!("cannot keep {}: {e}", tree.display())))?;
    }
    let rec = ImageRecord {
        digest: parts.manifest.to_string(),
        config: parts.config.to_string(),
        layers: parts.layers.iter().map(|l| l.to_string()).collect(),
        size: parts.blob_bytes + (before - budget.left),
        env: parts.env,
        source: source.to_string(),
        imported_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    store.name(lock, name, rec.clone())?;
    Ok(rec)
}

/// Unpack the outer archive's files and folders into `dest` (nothing else: an OCI archive
/// and a `docker save` tar hold only those).
fn extract_outer(path: &Path, dest: &Path, image: &str, max_bytes: u64) -> Result<(), ImageError> {
    let not_one = |why: String| {
        ImageError::new(
            image,
            format!(
                "{} is not an OCI archive or a `docker save` archive: {why}",
                path.display()
            ),
        )
    };
    let f = fs::File::open(path).map_err(|e| not_one(e.to_string()))?;
    let mut r = BufReader::new(f);
    let gz = r
        .fill_buf()
        .map_err(|e| not_one(e.to_string()))?
        .starts_with(&[0x1f, 0x8b]);
    let plain: Box<dyn Read> = if gz {
        Box::new(flate2::read::MultiGzDecoder::new(r))
    } else {
        Box::new(r)
    };
    let mut archive = tar::Archive::new(plain);
    let mut left = max_bytes;
    let entries = archive.entries().map_err(|e| not_one(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| not_one(format!("not a tar ({e})")))?;
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let comps = unpack::clean(&raw).map_err(|why| ImageError::new(image, why).entry(&shown))?;
        use tar::EntryType as T;
        match entry.header().entry_type() {
            T::Directory => {
                unpack::resolve(dest, &comps, true)
                    .map_err(|why| ImageError::new(image, why).entry(&shown))?;
            }
            T::Regular | T::Continuous => {
                let Some((name, parents)) = comps.split_last() else {
                    continue;
                };
                let size = entry.header().size().unwrap_or(u64::MAX);
                left = left.checked_sub(size).ok_or_else(|| {
                    ImageError::new(image, "the archive is larger than images.max_bytes")
                        .entry(&shown)
                })?;
                let parent = unpack::resolve(dest, parents, true)
                    .map_err(|why| ImageError::new(image, why).entry(&shown))?;
                let p = parent.join(name);
                let mut out = fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&p)
                    .map_err(|e| ImageError::new(image, format!("cannot write: {e}")).entry(&shown))?;
                std::io::copy(&mut entry, &mut out)
                    .map_err(|e| ImageError::new(image, format!("cannot write: {e}")).entry(&shown))?;
            }
            T::XGlobalHeader => {}
            other => {
                return Err(ImageError::new(
                    image,
                    format!(
                        "an entry of tar type {:?}: an OCI archive or `docker save` archive holds only files and folders",
                        other.as_byte() as char
                    ),
                )
                .entry(&shown))
            }
        }
    }
    Ok(())
}

fn read_small(image: &str, p: &Path) -> Result<Vec<u8>, ImageError> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .map_err(|e| ImageError::new(image, format!("cannot read {}: {e}", p.display())))?;
    let mut out = Vec::new();
    f.take(layout::MAX_DOCUMENT_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| ImageError::new(image, format!("cannot read {}: {e}", p.display())))?;
    if out.len() as u64 > layout::MAX_DOCUMENT_BYTES {
        return Err(ImageError::new(
            image,
            format!("{} is too large", p.display()),
        ));
    }
    Ok(out)
}

fn digest_of(image: &str, d: &Descriptor, what: &str) -> Result<Digest, ImageError> {
    Digest::parse(&d.digest).ok_or_else(|| {
        ImageError::new(
            image,
            format!("{what} names a digest that is not sha256:<64 hex digits>"),
        )
    })
}

/// The blob a layout names, copied into the store and checked.
fn take_blob(
    store: &Store,
    lock: &Locked,
    image: &str,
    dir: &Path,
    d: &Digest,
    what: &str,
    budget: &mut Budget,
) -> Result<u64, ImageError> {
    let p = dir.join("blobs/sha256").join(d.hex());
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&p)
        .map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                format!("the {what} names a blob the image does not contain")
            } else {
                format!("cannot read the {what}'s blob: {e}")
            };
            ImageError::new(image, why).layer(d)
        })?;
    let (_, n) = store.put_blob(lock, image, f, Some(d), budget)?;
    Ok(n)
}

fn oci_layout(
    store: &Store,
    lock: &Locked,
    image: &str,
    dir: &Path,
    budget: &mut Budget,
) -> Result<Parts, ImageError> {
    let index: Index = serde_json::from_slice(&read_small(image, &dir.join("index.json"))?)
        .map_err(|e| ImageError::new(image, format!("index.json is not an OCI index: {e}")))?;
    let mut manifests = index.manifests;
    let mut bytes = 0;
    // An index may name an index (a multi-platform image): at most two levels.
    for _ in 0..2 {
        let d = pick(image, &manifests)?;
        let digest = digest_of(image, &d, "index.json")?;
        bytes += take_blob(store, lock, image, dir, &digest, "index", budget)?;
        let doc = store.read_document(image, &digest, layout::MAX_DOCUMENT_BYTES)?;
        if d.media_type == layout::OCI_INDEX || d.media_type == layout::DOCKER_LIST {
            let inner: Index = serde_json::from_slice(&doc).map_err(|e| {
                ImageError::new(image, format!("{digest} is not an OCI index: {e}"))
            })?;
            manifests = inner.manifests;
            continue;
        }
        let m: Manifest = serde_json::from_slice(&doc).map_err(|e| {
            ImageError::new(image, format!("{digest} is not an image manifest: {e}"))
        })?;
        return from_manifest(store, lock, image, dir, digest, m, bytes, budget);
    }
    Err(ImageError::new(
        image,
        "index.json nests indexes more than two deep",
    ))
}

/// The image manifest an index names for this host: the only one, or the one for
/// linux on this architecture.
pub(super) fn pick(image: &str, ds: &[Descriptor]) -> Result<Descriptor, ImageError> {
    let usable: Vec<&Descriptor> = ds
        .iter()
        .filter(|d| {
            [
                layout::OCI_MANIFEST,
                layout::DOCKER_MANIFEST,
                layout::OCI_INDEX,
                layout::DOCKER_LIST,
                "",
            ]
            .contains(&d.media_type.as_str())
        })
        .collect();
    if usable.len() == 1 {
        return Ok(usable[0].clone());
    }
    usable
        .iter()
        .find(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == "linux" && p.architecture == layout::host_architecture())
        })
        .or(usable.first())
        .map(|d| (*d).clone())
        .ok_or_else(|| ImageError::new(image, "the index names no image manifest"))
}

#[allow(clippy::too_many_arguments)]
fn from_manifest(
    store: &Store,
    lock: &Locked,
    image: &str,
    dir: &Path,
    manifest: Digest,
    m: Manifest,
    mut bytes: u64,
    budget: &mut Budget,
) -> Result<Parts, ImageError> {
    let config = digest_of(image, &m.config, "the manifest's config")?;
    bytes += take_blob(
        store,
        lock,
        image,
        dir,
        &config,
        "manifest's config",
        budget,
    )?;
    let cfg: Config =
        serde_json::from_slice(&store.read_document(image, &config, layout::MAX_DOCUMENT_BYTES)?)
            .map_err(|e| ImageError::new(image, format!("{config} is not an image config: {e}")))?;
    let mut layers = Vec::new();
    for l in &m.layers {
        let d = digest_of(image, l, "the manifest's layer")?;
        bytes += take_blob(store, lock, image, dir, &d, "manifest", budget)?;
        layers.push(d);
    }
    parts(image, manifest, config, layers, &cfg, bytes)
}

pub(super) fn parts(
    image: &str,
    manifest: Digest,
    config: Digest,
    layers: Vec<Digest>,
    cfg: &Config,
    blob_bytes: u64,
) -> Result<Parts, ImageError> {
    if cfg.rootfs.diff_ids.len() != layers.len() {
        return Err(ImageError::new(
            image,
            format!(
                "the config names {} layers and the manifest {}",
                cfg.rootfs.diff_ids.len(),
                layers.len()
            ),
        ));
    }
    let diff_ids = cfg
        .rootfs
        .diff_ids
        .iter()
        .map(|d| {
            Digest::parse(d).map(Some).ok_or_else(|| {
                ImageError::new(
                    image,
                    "the config's rootfs.diff_ids has a digest that is not sha256",
                )
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Parts {
        manifest,
        config,
        layers,
        diff_ids,
        env: layout::env_of(cfg),
        blob_bytes,
    })
}

fn docker_archive(
    store: &Store,
    lock: &Locked,
    image: &str,
    dir: &Path,
    budget: &mut Budget,
) -> Result<Parts, ImageError> {
    let images: Vec<DockerImage> =
        serde_json::from_slice(&read_small(image, &dir.join("manifest.json"))?).map_err(|e| {
            ImageError::new(
                image,
                format!("manifest.json is not a `docker save` manifest: {e}"),
            )
        })?;
    let [one] = images.as_slice() else {
        return Err(ImageError::new(
            image,
            format!(
                "manifest.json holds {} images; save exactly one",
                images.len()
            ),
        ));
    };
    let member = |rel: &str| -> Result<PathBuf, ImageError> {
        let comps = unpack::clean(rel.as_bytes())
            .map_err(|why| ImageError::new(image, format!("manifest.json: {why}")).entry(rel))?;
        Ok(comps.iter().fold(dir.to_path_buf(), |p, c| p.join(c)))
    };
    let cfg_bytes = read_small(image, &member(&one.config)?)?;
    let config = Digest::of(&cfg_bytes);
    let mut bytes = store
        .put_blob(lock, image, &cfg_bytes[..], Some(&config), budget)?
        .1;
    let cfg: Config = serde_json::from_slice(&cfg_bytes).map_err(|e| {
        ImageError::new(image, format!("{} is not an image config: {e}", one.config))
    })?;
    let mut layers = Vec::new();
    let mut descs = Vec::new();
    for rel in &one.layers {
        let p = member(rel)?;
        let f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&p)
            .map_err(|e| {
                ImageError::new(
                    image,
                    format!("manifest.json names a layer the archive lacks: {e}"),
                )
                .entry(rel.as_str())
            })?;
        let (d, n) = store.put_blob(lock, image, f, None, budget)?;
        bytes += n;
        descs.push(Descriptor {
            media_type: layout::OCI_LAYER.into(),
            digest: d.to_string(),
            size: n,
            platform: None,
        });
        layers.push(d);
    }
    // `docker save` has no manifest: one is written for it, so the image has an identity
    // like any other.
    let m = Manifest {
        schema_version: 2,
        media_type: Some(layout::OCI_MANIFEST.into()),
        config: Descriptor {
            media_type: layout::OCI_CONFIG.into(),
            digest: config.to_string(),
            size: cfg_bytes.len() as u64,
            platform: None,
        },
        layers: descs,
    };
    let doc = serde_json::to_vec(&m)
        .map_err(|e| ImageError::new(image, format!("cannot write its manifest: {e}")))?;
    let manifest = Digest::of(&doc);
    bytes += store
        .put_blob(lock, image, &doc[..], Some(&manifest), budget)?
        .1;
    parts(image, manifest, config, layers, &cfg, bytes)
}
