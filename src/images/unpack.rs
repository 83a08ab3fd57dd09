//! Applying one layer (a tar, plain or gzip) onto a tree being built, the way umoci and
//! containerd do it: every entry's path is resolved inside the tree (a symlink met on the
//! way is followed as the image's own root would follow it, never onto the host), and what
//! a root filesystem for unprivileged commands has no use for is refused: `..` and absolute
//! entry names, links that point out of the tree, device nodes, FIFOs, setuid and setgid
//! files, file capabilities. Whiteouts (`.wh.NAME`, `.wh..wh..opq`) remove what lower
//! layers put there. Files are root's, with the layer's permission bits.
//!
//! The tree is a private directory of the store that only this process writes, so what is
//! checked stays true while it is used.

use std::collections::{HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::digest::{Digest, Hashing};
use super::ImageError;

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";
/// Symlinks followed while resolving one path (as the kernel's limit).
const MAX_HOPS: usize = 40;

/// What an unpack may still write: the bound (`images.max_bytes`) less what is used.
pub struct Budget {
    pub left: u64,
}

impl Budget {
    fn take(&mut self, n: u64) -> bool {
        match self.left.checked_sub(n) {
            Some(l) => {
                self.left = l;
                true
            }
            None => false,
        }
    }
}

/// The layer being applied, for errors.
struct Ctx<'a> {
    image: &'a str,
    layer: &'a Digest,
}

impl Ctx<'_> {
    fn err(&self, entry: &str, why: impl Into<String>) -> ImageError {
        ImageError::new(self.image, why)
            .layer(self.layer)
            .entry(entry)
    }
}

/// Apply the layer `blob` (its stored, already verified bytes) onto `root`. `diff_id`: the
/// digest the image's config gives the uncompressed layer, checked once it is read whole.
pub fn apply_layer(
    root: &Path,
    image: &str,
    layer: &Digest,
    blob: impl Read,
    diff_id: Option<&Digest>,
    budget: &mut Budget,
) -> Result<(), ImageError> {
    let ctx = Ctx { image, layer };
    let mut blob = BufReader::new(blob);
    let head = blob
        .fill_buf()
        .map_err(|e| ImageError::new(image, format!("cannot read: {e}")).layer(layer))?;
    let plain: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(blob))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Err(ImageError::new(
            image,
            "the layer is zstd-compressed, which Airlock does not unpack; convert the image to gzip layers (skopeo copy --dest-compress-format gzip)",
        )
        .layer(layer));
    } else {
        Box::new(blob)
    };
    let mut hashing = Hashing::new(plain);
    apply_tar(root, &ctx, &mut hashing, budget)?;
    let (got, _) = hashing
        .finish()
        .map_err(|e| ImageError::new(image, format!("cannot read: {e}")).layer(layer))?;
    if let Some(want) = diff_id {
        if &got != want {
            return Err(ImageError::new(
                image,
                format!(
                    "the uncompressed layer's digest is {got}, not the {want} its config names"
                ),
            )
            .layer(layer));
        }
    }
    Ok(())
}

fn apply_tar(
    root: &Path,
    ctx: &Ctx,
    plain: &mut impl Read,
    budget: &mut Budget,
) -> Result<(), ImageError> {
    let mut archive = tar::Archive::new(plain);
    // Paths (relative to `root`) this layer made: an opaque whiteout keeps them.
    let mut made: HashSet<PathBuf> = HashSet::new();
    let entries = archive
        .entries()
        .map_err(|e| ImageError::new(ctx.image, format!("not a tar: {e}")).layer(ctx.layer))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| {
            ImageError::new(ctx.image, format!("not a readable tar: {e}")).layer(ctx.layer)
        })?;
        let raw = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        if kind == tar::EntryType::XGlobalHeader {
            continue;
        }
        let comps = clean(&raw).map_err(|why| ctx.err(&shown, why))?;
        check_xattrs(&mut entry).map_err(|why| ctx.err(&shown, why))?;
        let Some((name, parents)) = comps.split_last() else {
            // The root itself (`./`): its mode is the store's.
            continue;
        };
        let parent = resolve(root, parents, true).map_err(|why| ctx.err(&shown, why))?;
        let name_s = name.to_string_lossy();
        if let Some(rest) = name_s.strip_prefix(WHITEOUT) {
            whiteout(root, &parent, name, rest, &made).map_err(|why| ctx.err(&shown, why))?;
            continue;
        }
        let dest = parent.join(name);
        let mode = entry
            .header()
            .mode()
            .map_err(|e| ctx.err(&shown, format!("unreadable mode: {e}")))?;
        use tar::EntryType as T;
        match kind {
            T::Directory => {
                // A setgid folder only passes on its group; the tree is root's alone.
                make_dir(&dest, mode & 0o1777).map_err(|why| ctx.err(&shown, why))?;
            }
            T::Regular | T::Continuous => {
                if mode & 0o6000 != 0 {
                    return Err(ctx.err(&shown, "a setuid or setgid file is refused"));
                }
                let size = entry
                    .header()
                    .size()
                    .map_err(|e| ctx.err(&shown, format!("unreadable size: {e}")))?;
                if !budget.take(size) {
                    return Err(ctx.err(&shown, "the image store would grow past images.max_bytes"));
                }
                write_file(&dest, mode & 0o777, &mut entry).map_err(|why| ctx.err(&shown, why))?;
            }
            T::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| ctx.err(&shown, "a symlink without a target"))?
                    .into_owned();
                symlink_inside(parents, &target).map_err(|why| ctx.err(&shown, why))?;
                replace(&dest).map_err(|why| ctx.err(&shown, why))?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &dest)
                    .map_err(|e| ctx.err(&shown, format!("cannot make the symlink: {e}")))?;
            }
            T::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| ctx.err(&shown, "a hard link without a target"))?
                    .into_owned();
                let tcomps = clean(&target).map_err(|why| {
                    ctx.err(
                        &shown,
                        format!("the hard link points out of the tree: {why}"),
                    )
                })?;
                let Some((tname, tparents)) = tcomps.split_last() else {
                    return Err(ctx.err(&shown, "a hard link to the root"));
                };
                let tparent = resolve(root, tparents, false).map_err(|why| {
                    ctx.err(
                        &shown,
                        format!("the hard link's target is not in the tree: {why}"),
                    )
                })?;
                let real = tparent.join(tname);
                match fs::symlink_metadata(&real) {
                    Ok(m) if m.file_type().is_file() => {}
                    Ok(_) => {
                        return Err(ctx.err(&shown, "a hard link to something not a plain file"))
                    }
                    Err(_) => {
                        return Err(ctx.err(&shown, "the hard link's target is not in the tree"))
                    }
                }
                if real != dest {
                    replace(&dest).map_err(|why| ctx.err(&shown, why))?;
                    fs::hard_link(&real, &dest)
                        .map_err(|e| ctx.err(&shown, format!("cannot make the hard link: {e}")))?;
                }
            }
            T::Char | T::Block => {
                return Err(ctx.err(&shown, "a device node is refused"));
            }
            T::Fifo => return Err(ctx.err(&shown, "a FIFO is refused")),
            other => {
                return Err(ctx.err(
                    &shown,
                    format!(
                        "an entry of tar type {:?} is refused",
                        other.as_byte() as char
                    ),
                ))
            }
        }
        if let Ok(rel) = dest.strip_prefix(root) {
            made.insert(rel.to_path_buf());
        }
    }
    Ok(())
}

/// An entry's path as components: `./` and empty parts dropped; absolute names, `..` and
/// NUL refused.
pub fn clean(raw: &[u8]) -> Result<Vec<OsString>, String> {
    if raw.first() == Some(&b'/') {
        return Err("an absolute path is refused".into());
    }
    if raw.contains(&0) {
        return Err("a path with a NUL byte is refused".into());
    }
    let mut out = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("a path with `..` is refused".into()),
            p => out.push(OsString::from_vec(p.to_vec())),
        }
    }
    Ok(out)
}

/// File capabilities would survive into the tree; other extended attributes are dropped.
fn check_xattrs<R: Read>(entry: &mut tar::Entry<R>) -> Result<(), String> {
    let Ok(Some(exts)) = entry.pax_extensions() else {
        return Ok(());
    };
    for ext in exts {
        let ext = ext.map_err(|e| format!("unreadable extended header: {e}"))?;
        let key = ext.key_bytes();
        if key.ends_with(b"xattr.security.capability") {
            return Err("file capabilities (security.capability) are refused".into());
        }
    }
    Ok(())
}

/// Resolve `comps` (folders below `root`) inside `root`: a symlink on the way is followed
/// as if `root` were `/` (an absolute target starts again at `root`, `..` stops there).
/// With `create`, missing folders are made (0755). The result is a real folder under
/// `root` reached through no symlink.
pub fn resolve(root: &Path, comps: &[OsString], create: bool) -> Result<PathBuf, String> {
    let mut cur: Vec<OsString> = Vec::new();
    let mut todo: VecDeque<OsString> = comps.iter().cloned().collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match c.as_bytes() {
            b"" | b"." => continue,
            b".." => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        let here: PathBuf = cur.iter().fold(root.to_path_buf(), |p, c| p.join(c));
        let p = here.join(&c);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err("too many symlinks on the path".into());
                }
                let t = fs::read_link(&p).map_err(|e| format!("cannot read a symlink: {e}"))?;
                let tb = t.as_os_str().as_bytes();
                if tb.first() == Some(&b'/') {
                    cur.clear();
                }
                for part in tb.split(|b| *b == b'/').rev() {
                    todo.push_front(OsString::from_vec(part.to_vec()));
                }
            }
            Ok(m) if m.is_dir() => cur.push(c),
            Ok(_) => return Err("a folder on the path is not a folder".into()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                fs::create_dir(&p).map_err(|e| format!("cannot make a folder: {e}"))?;
                fs::set_permissions(&p, fs::Permissions::from_mode(0o755))
                    .map_err(|e| format!("cannot set a folder's mode: {e}"))?;
                cur.push(c);
            }
            Err(e) => return Err(format!("cannot resolve the path: {e}")),
        }
    }
    Ok(cur.iter().fold(root.to_path_buf(), |p, c| p.join(c)))
}

/// A symlink in folder `parents` with `target`: an absolute target stays in the image (it
/// is resolved against the image's root wherever the tree is used), a relative one must not
/// climb above the root.
fn symlink_inside(parents: &[OsString], target: &[u8]) -> Result<(), String> {
    if target.is_empty() || target.contains(&0) {
        return Err("a symlink with an empty or NUL target is refused".into());
    }
    if target.first() == Some(&b'/') {
        return Ok(());
    }
    let mut depth = parents.len() as i64;
    for part in target.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return Err("the symlink points out of the tree".into());
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// `.wh.NAME` removes NAME from the layers below; `.wh..wh..opq` empties the folder of
/// what the layers below put there (this layer's own entries stay).
fn whiteout(
    root: &Path,
    parent: &Path,
    name: &OsStr,
    rest: &str,
    made: &HashSet<PathBuf>,
) -> Result<(), String> {
    if name == OPAQUE {
        let rd = match fs::read_dir(parent) {
            Ok(rd) => rd,
            Err(e) => return Err(format!("cannot read the opaque folder: {e}")),
        };
        for child in rd {
            let child = child.map_err(|e| format!("cannot read the opaque folder: {e}"))?;
            let p = child.path();
            let keep = p.strip_prefix(root).is_ok_and(|rel| made.contains(rel));
            if !keep {
                remove(&p)?;
            }
        }
        return Ok(());
    }
    if rest.is_empty() || rest == "." || rest == ".." || rest.contains('/') {
        return Err("a whiteout that names no entry is refused".into());
    }
    remove(&parent.join(OsStr::from_bytes(&name.as_bytes()[WHITEOUT.len()..])))
}

/// Remove whatever is at `p` (never following a symlink).
fn remove(p: &Path) -> Result<(), String> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .map_err(|e| format!("cannot remove what the entry replaces: {e}"))
}

/// Make room for a new non-folder entry at `p`.
fn replace(p: &Path) -> Result<(), String> {
    remove(p)
}

fn make_dir(p: &Path, mode: u32) -> Result<(), String> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            remove(p)?;
            fs::create_dir(p).map_err(|e| format!("cannot make the folder: {e}"))?;
        }
        Err(_) => fs::create_dir(p).map_err(|e| format!("cannot make the folder: {e}"))?,
    }
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the folder's mode: {e}"))
}

fn write_file(p: &Path, mode: u32, from: &mut impl Read) -> Result<(), String> {
    replace(p)?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
        .map_err(|e| format!("cannot write the file: {e}"))?;
    std::io::copy(from, &mut f).map_err(|e| format!("cannot write the file: {e}"))?;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the file's mode: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_dotdot_or_a_leading_slash_are_refused() {
        assert!(clean(b"/etc/passwd").is_err());
        assert!(clean(b"usr/../../x").is_err());
        assert!(clean(b"a\0b").is_err());
        assert_eq!(clean(b"./usr//bin/").expect("clean").len(), 2);
        assert!(clean(b"./").expect("root").is_empty());
    }

    #[test]
    fn relative_symlinks_may_not_climb_above_the_root() {
        let p = |s: &str| s.split('/').map(OsString::from).collect::<Vec<_>>();
        assert!(symlink_inside(&p("usr/bin"), b"../lib/x").is_ok());
        assert!(symlink_inside(&p("usr/bin"), b"../../etc").is_ok());
        assert!(symlink_inside(&p("usr/bin"), b"../../../etc").is_err());
        assert!(symlink_inside(&[], b"..").is_err());
        assert!(symlink_inside(&[], b"/etc/passwd").is_ok());
        assert!(symlink_inside(&[], b"").is_err());
    }
}
