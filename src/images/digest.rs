//! Content addresses: `sha256:<64 lowercase hex>`, and readers that hash what passes
//! through them so a blob is checked while it is copied or unpacked, never trusted first.

use std::fmt;
use std::io::Read;

use sha2::{Digest as _, Sha256};

/// A sha256 content address (only sha256: the algorithm OCI images use in practice; any
/// other is refused rather than trusted unchecked).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(String);

impl Digest {
    /// `sha256:<64 lowercase hex>`, or `None`.
    pub fn parse(s: &str) -> Option<Digest> {
        let hex = s.strip_prefix("sha256:")?;
        Self::from_hex(hex)
    }

    /// 64 lowercase hex digits, or `None`.
    pub fn from_hex(hex: &str) -> Option<Digest> {
        let ok = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Digest(hex.to_string()))
    }

    pub fn of(bytes: &[u8]) -> Digest {
        Digest(hex(&Sha256::digest(bytes)))
    }

    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, for tables.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A reader that hashes and counts what is read through it.
pub struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    n: u64,
}

impl<R: Read> Hashing<R> {
    pub fn new(inner: R) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
            n: 0,
        }
    }

    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Read what is left (a tar reader stops at its end-of-archive blocks; the padding
    /// after them is part of the blob), then the digest of everything.
    pub fn finish(mut self) -> std::io::Result<(Digest, u64)> {
        std::io::copy(&mut self, &mut std::io::sink())?;
        Ok((Digest(hex(&self.hasher.finalize())), self.n))
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_only_sha256_lowercase_hex() {
        let h = "a".repeat(64);
        assert!(Digest::parse(&format!("sha256:{h}")).is_some());
        assert!(Digest::parse(&format!("sha512:{h}")).is_none());
        assert!(Digest::parse(&format!("sha256:{}", "A".repeat(64))).is_none());
        assert!(Digest::parse(&format!("sha256:{}", "a".repeat(63))).is_none());
        assert!(Digest::parse("sha256:../../etc").is_none());
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn hashing_reader_hashes_everything_read() {
        let r = Hashing::new(&b"abc"[..]);
        let (d, n) = r.finish().expect("read");
        assert_eq!(n, 3);
        assert_eq!(d, Digest::of(b"abc"));
    }
}
