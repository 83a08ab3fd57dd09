//! An image reference as `image pull` takes it: `HOST[:PORT]/PATH[:TAG][@sha256:HEX]`. The
//! registry host is always written out (Airlock assumes no default registry); a reference
//! without tag or digest means the tag `latest`, as other clients read it.

use super::digest::Digest;
use crate::config::images::ref_host;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `name.example` or `name.example:5000`: what `registries` is keyed by.
    pub host: String,
    /// The repository path (`acme/rust-dev`).
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parse `r`; the error says what is wrong (never repeating the text, which is the
    /// operator's own argument but may be pasted from anywhere).
    pub fn parse(r: &str) -> Result<Reference, String> {
        if r.len() > 512 || r.contains(char::is_whitespace) {
            return Err("an image reference is at most 512 characters, without spaces".into());
        }
        let host = ref_host(r).ok_or(
            "an image reference names its registry host first (registry.example/team/image:tag); no default registry is assumed",
        )?;
        let rest = &r[host.len() + 1..];
        let (rest, digest) = match rest.split_once('@') {
            Some((n, d)) => (
                n,
                Some(Digest::parse(d).ok_or("the digest after @ must be sha256:<64 hex digits>")?),
            ),
            None => (rest, None),
        };
        // A tag follows the last ':' after the last '/'.
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, Some(t)),
            _ => (rest, None),
        };
        if !valid_repository(repository) {
            return Err(
                "the repository path is lowercase components of a-z, 0-9 and . _ - separated by /"
                    .into(),
            );
        }
        if let Some(t) = tag {
            if !valid_tag(t) {
                return Err(
                    "a tag is 1 to 128 of A-Z a-z 0-9 _ . -, not starting with . or -".into(),
                );
            }
        }
        let tag = match (tag, &digest) {
            (None, None) => Some("latest".to_string()),
            (t, _) => t.map(str::to_string),
        };
        Ok(Reference {
            host: host.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }

    /// What the manifest is asked for by: the digest when given (it is then checked), else
    /// the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".into(),
        }
    }
}

fn valid_repository(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 255
        && p.split('/').all(|c| {
            let b = c.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || b"._-".contains(x))
        })
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|x| x.is_ascii_alphanumeric() || b"._-".contains(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_host_repository_tag_and_digest() {
        let r = Reference::parse("registry.example/acme/rust-dev:1.83").unwrap();
        assert_eq!(
            (r.host.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("registry.example", "acme/rust-dev", Some("1.83"))
        );
        let r = Reference::parse("registry.example:5000/acme/tools").unwrap();
        assert_eq!(r.host, "registry.example:5000");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        let h = "ab".repeat(32);
        let r = Reference::parse(&format!("r.example/a/b@sha256:{h}")).unwrap();
        assert_eq!(r.tag, None);
        assert_eq!(r.manifest_ref(), format!("sha256:{h}"));
        let r = Reference::parse(&format!("r.example/a/b:1@sha256:{h}")).unwrap();
        assert_eq!(r.tag.as_deref(), Some("1"));
        assert_eq!(r.manifest_ref(), format!("sha256:{h}"));
    }

    #[test]
    fn bad_references_are_refused_without_repeating_them() {
        for bad in [
            "ubuntu:24.04",
            "acme/app",
            "r.example/",
            "r.example/Acme/app",
            "r.example/a//b",
            "r.example/a/../b",
            "r.example/a:-x",
            "r.example/a@sha256:nothex",
            "r.example/a@md5:00",
            "r.example/a b",
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(!e.contains(bad), "{bad}: {e}");
        }
    }
}
