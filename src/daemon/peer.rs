//! The supplementary groups of a control-socket peer. Preferably from the kernel at connect
//! time (`SO_PEERGROUPS`, Linux 4.13+), which cannot race with the peer exiting and its pid
//! being reused; else from `/proc/<pid>/status` (`Groups:`) of the peer pid SO_PEERCRED gave.

use std::os::fd::AsRawFd;

/// Groups of the peer connected on `sock`; empty when neither source answers (the peer
/// then gets only what its primary gid and uid give it: fail closed).
pub fn groups(sock: &impl AsRawFd, pid: Option<i32>) -> Vec<u32> {
    match from_socket(sock) {
        Some(g) => g,
        None => pid.and_then(from_proc).unwrap_or_default(),
    }
}

fn from_socket(sock: &impl AsRawFd) -> Option<Vec<u32>> {
    let mut buf = vec![0 as libc::gid_t; 64];
    for _ in 0..4 {
        let mut len = (buf.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `buf` and updates `len`.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                buf.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            buf.truncate(n.min(buf.len()));
            return Some(buf);
        }
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) && n > buf.len()
        {
            buf.resize(n, 0);
            continue;
        }
        return None;
    }
    None
}

fn from_proc(pid: i32) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_groups(&text)
}

/// The `Groups:` line of a `/proc/<pid>/status` text.
pub fn parse_groups(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    line.split_whitespace()
        .map(|g| g.parse::<u32>().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_line() {
        let s = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNSpid:\t1\n";
        assert_eq!(parse_groups(s), Some(vec![4, 24, 27]));
        assert_eq!(parse_groups("Groups:\t\n"), Some(vec![]));
        assert_eq!(parse_groups("Groups:\tx\n"), None);
        assert_eq!(parse_groups("Uid:\t0\n"), None);
    }

    #[test]
    fn own_socket_pair_reports_our_groups() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mine = nix::unistd::getgroups().unwrap();
        let got = groups(&a, None);
        for g in mine {
            assert!(got.contains(&g.as_raw()));
        }
    }
}
