//! The control socket admits a second group: `admin_group` through a POSIX ACL entry, so an
//! admin who is not also an operator can connect (the socket's own group is the operator
//! group or `socket_group`). The ACL is written as the kernel's `system.posix_acl_access`
//! extended attribute (no libacl): owner rw, owning group rw, the admin group rw, mask rw,
//! others nothing, the same rights mode 0660 gives.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const XATTR: &std::ffi::CStr = c"system.posix_acl_access";
const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const UNDEFINED_ID: u32 = u32::MAX;
const RW: u16 = 0o6;

/// The attribute's bytes for owner, owning group and `extra` (each rw), nothing for others.
/// Entries in the order the kernel requires (by tag, then id).
pub fn encode(extra: &[u32]) -> Vec<u8> {
    let mut named: Vec<u32> = extra.to_vec();
    named.sort_unstable();
    named.dedup();
    let mut out = VERSION.to_le_bytes().to_vec();
    let mut entry = |tag: u16, perm: u16, id: u32| {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    };
    entry(USER_OBJ, RW, UNDEFINED_ID);
    entry(GROUP_OBJ, RW, UNDEFINED_ID);
    for g in &named {
        entry(GROUP, RW, *g);
    }
    entry(MASK, RW, UNDEFINED_ID);
    entry(OTHER, 0, UNDEFINED_ID);
    out
}

/// The named groups an ACL attribute gives write access to (what may connect).
pub fn decode_groups(bytes: &[u8]) -> Vec<u32> {
    if bytes.len() < 4 || bytes[..4] != VERSION.to_le_bytes() {
        return Vec::new();
    }
    bytes[4..]
        .chunks_exact(8)
        .filter_map(|e| {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            (tag == GROUP && perm & 0o2 != 0).then_some(id)
        })
        .collect()
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

/// Let `groups` connect to the socket at `path` (besides its owner and group), or, with no
/// groups, remove any ACL. Never follows a symlink at `path`.
pub fn admit(path: &Path, groups: &[u32]) -> io::Result<()> {
    let p = cpath(path)?;
    if groups.is_empty() {
        // SAFETY: NUL-terminated path and attribute name.
        let rc = unsafe { libc::lremovexattr(p.as_ptr(), XATTR.as_ptr()) };
        let e = io::Error::last_os_error();
        return match rc {
            0 => Ok(()),
            _ if e.raw_os_error() == Some(libc::ENODATA) => Ok(()),
            _ => Err(e),
        };
    }
    let v = encode(groups);
    // SAFETY: NUL-terminated path and name; `v` is valid for `v.len()` bytes.
    let rc = unsafe { libc::lsetxattr(p.as_ptr(), XATTR.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The named groups the socket's ACL admits (empty without one).
pub fn admitted(path: &Path) -> Vec<u32> {
    let Ok(p) = cpath(path) else {
        return Vec::new();
    };
    let mut buf = [0u8; 512];
    // SAFETY: NUL-terminated path and name; the kernel writes at most `buf.len()` bytes.
    let n = unsafe {
        libc::lgetxattr(
            p.as_ptr(),
            XATTR.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    match usize::try_from(n) {
        Ok(n) => decode_groups(&buf[..n.min(buf.len())]),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acl_names_its_groups_in_kernel_order() {
        let v = encode(&[902, 901, 902]);
        // Header, owner, group, two named groups, mask, other.
        assert_eq!(v.len(), 4 + 6 * 8);
        assert_eq!(decode_groups(&v), vec![901, 902]);
        let tags: Vec<u16> = v[4..]
            .chunks_exact(8)
            .map(|e| u16::from_le_bytes([e[0], e[1]]))
            .collect();
        assert_eq!(tags, vec![USER_OBJ, GROUP_OBJ, GROUP, GROUP, MASK, OTHER]);
        assert!(decode_groups(&[1, 0, 0, 0]).is_empty());
        assert!(decode_groups(&[]).is_empty());
    }
}
