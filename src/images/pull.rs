//! `airlockctl image pull REF --name NAME`: an image from a registry over the OCI
//! distribution API, into the same store and through the same unpacker as an import.
//! Every document and blob is checked against its digest before it is kept: the manifest
//! against the reference's digest (or the registry's `Docker-Content-Digest`), an index's
//! choice against the index, the config and layers against the manifest, each layer's
//! uncompressed bytes against the config's `diff_ids`. Sizes are bounded by the descriptor
//! that names them and by `images.max_bytes`. An index is resolved to linux on this host's
//! architecture (amd64 here), never to another platform.

use std::io::Read;
use std::path::PathBuf;

use super::auth::{self, Challenge};
use super::digest::Digest;
use super::http::{Client, Response};
use super::import::{self, check_name};
use super::layout::{self, Config, Descriptor, Index, Manifest};
use super::reference::Reference;
use super::store::{ImageRecord, Locked, Store};
use super::unpack::Budget;
use super::ImageError;

/// How to reach the registry: what `registries.HOST` holds, its secret already read.
#[derive(Default)]
pub struct Access {
    /// The credential's name (for errors) and its `USER:PASSWORD`.
    pub credential: Option<(String, String)>,
    pub ca_file: Option<PathBuf>,
}

const ACCEPT_MANIFEST: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// Pull `reference` as `name`, the store bounded by `max_bytes`.
pub fn pull(
    store: &Store,
    name: &str,
    reference: &str,
    access: &Access,
    max_bytes: u64,
) -> Result<ImageRecord, ImageError> {
    check_name(name)?;
    let r = Reference::parse(reference).map_err(|why| ImageError::new(name, why))?;
    let client = Client::new(access.ca_file.as_deref())
        .map_err(|why| ImageError::new(name, format!("registry {}: {why}", r.host)))?;
    let mut s = Session {
        client,
        image: name,
        r: &r,
        access,
        auth: None,
    };
    let lock = store.lock()?;
    let mut budget = Budget {
        left: max_bytes.saturating_sub(store.usage()?),
    };
    let mut bytes = 0;
    let mut want = r.digest.clone();
    let mut at = r.manifest_ref();
    // An index may name an index: at most two levels, as an import reads them.
    for _ in 0..3 {
        let (doc, digest) = s.manifest(&at, want.as_ref())?;
        bytes += store
            .put_blob(&lock, name, &doc[..], Some(&digest), &mut budget)?
            .1;
        let v: serde_json::Value = serde_json::from_slice(&doc).map_err(|e| {
            ImageError::new(name, format!("the manifest {digest} is not JSON: {e}"))
        })?;
        if v.get("manifests").is_some() {
            let index: Index = serde_json::from_value(v).map_err(|e| {
                ImageError::new(name, format!("{digest} is not an image index: {e}"))
            })?;
            let d = pick(name, &index.manifests)?;
            let next = Digest::parse(&d.digest).ok_or_else(|| {
                ImageError::new(
                    name,
                    format!("the index {digest} names a digest that is not sha256"),
                )
            })?;
            at = next.to_string();
            want = Some(next);
            continue;
        }
        if v.get("schemaVersion").and_then(|n| n.as_u64()) == Some(1) {
            return Err(ImageError::new(
                name,
                "a Docker schema 1 manifest, which Airlock does not read: push the image again with a current client",
            ));
        }
        let m: Manifest = serde_json::from_value(v).map_err(|e| {
            ImageError::new(name, format!("{digest} is not an image manifest: {e}"))
        })?;
        let parts = s.blobs(store, &lock, digest, &m, bytes, &mut budget)?;
        return import::finish(store, &lock, name, reference, parts, &mut budget);
    }
    Err(ImageError::new(
        name,
        "the registry's indexes nest more than two deep",
    ))
}

/// The manifest an index names for linux on this host's architecture; an index of one
/// manifest that names no platform is that manifest. Another platform is never taken.
fn pick(image: &str, ds: &[Descriptor]) -> Result<Descriptor, ImageError> {
    let arch = layout::host_architecture();
    if let [one] = ds {
        if one.platform.is_none() {
            return Ok(one.clone());
        }
    }
    ds.iter()
        .find(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == "linux" && p.architecture == arch)
        })
        .cloned()
        .ok_or_else(|| ImageError::new(image, format!("the index names no image for linux/{arch}")))
}

struct Session<'a> {
    client: Client,
    image: &'a str,
    r: &'a Reference,
    access: &'a Access,
    /// The Authorization value that worked, reused for every later request.
    auth: Option<String>,
}

impl Session<'_> {
    fn err(&self, why: impl std::fmt::Display) -> ImageError {
        ImageError::new(self.image, format!("registry {}: {why}", self.r.host))
    }

    /// What the credential is, for errors: its key path and name, never its value.
    fn credential_key(&self) -> String {
        match &self.access.credential {
            Some((n, _)) => format!("registries.{}.credential (`{n}`)", self.r.host),
            None => format!("registries.{}.credential", self.r.host),
        }
    }

    /// GET a path under the repository, answering a 401's challenge once.
    fn get(&mut self, path: &str, accept: &[(&str, &str)]) -> Result<Response, ImageError> {
        let url = format!("https://{}/v2/{}/{path}", self.r.host, self.r.repository);
        let resp = self
            .client
            .get(&url, self.auth.as_deref(), accept)
            .map_err(|e| self.err(e))?;
        if resp.status != hyper::StatusCode::UNAUTHORIZED || self.auth.is_some() {
            return self.refused(resp);
        }
        let challenge = resp
            .header("www-authenticate")
            .and_then(auth::parse_challenge)
            .ok_or_else(|| {
                self.err("it asks for authentication in a way Airlock does not speak")
            })?;
        self.auth = Some(self.authenticate(challenge)?);
        let resp = self
            .client
            .get(&url, self.auth.as_deref(), accept)
            .map_err(|e| self.err(e))?;
        self.refused(resp)
    }

    /// A 401 or 403 after authenticating: the credential is wrong or may not pull this.
    fn refused(&self, resp: Response) -> Result<Response, ImageError> {
        match resp.status.as_u16() {
            401 | 403 if self.access.credential.is_none() => Err(self.err(format!(
                "it asks for a credential: name one in {}",
                self.credential_key()
            ))),
            401 | 403 => Err(self.err(format!(
                "it refused the credential {} for {}",
                self.credential_key(),
                self.r.repository
            ))),
            _ => Ok(resp),
        }
    }

    fn authenticate(&self, c: Challenge) -> Result<String, ImageError> {
        let basic = self
            .access
            .credential
            .as_ref()
            .map(|(_, secret)| auth::basic(secret));
        match c {
            Challenge::Basic => basic.ok_or_else(|| {
                self.err(format!(
                    "it asks for a credential: name one in {}",
                    self.credential_key()
                ))
            }),
            Challenge::Bearer {
                realm,
                service,
                scope,
            } => {
                let scope =
                    scope.unwrap_or_else(|| format!("repository:{}:pull", self.r.repository));
                let url =
                    auth::token_url(&realm, service.as_deref(), &scope).map_err(|e| self.err(e))?;
                let resp = self
                    .client
                    .get(&url, basic.as_deref(), &[])
                    .map_err(|e| self.err(format!("its token service: {e}")))?;
                if !resp.status.is_success() {
                    let status = resp.status.as_u16();
                    return Err(if self.access.credential.is_some() {
                        self.err(format!(
                            "its token service refused the credential {} ({status})",
                            self.credential_key()
                        ))
                    } else {
                        self.err(format!(
                            "its token service refused an anonymous pull ({status}): name a credential in {}",
                            self.credential_key()
                        ))
                    });
                }
                let body = self
                    .client
                    .read_small(resp, 1 << 20)
                    .map_err(|e| self.err(format!("its token service: {e}")))?;
                let token = auth::token_of(&body)
                    .ok_or_else(|| self.err("its token service answered no token"))?;
                Ok(format!("Bearer {token}"))
            }
        }
    }

    /// The manifest at `at` (a tag or digest), checked: against `want` when the digest is
    /// known, else against the registry's own Docker-Content-Digest when it sends one.
    fn manifest(
        &mut self,
        at: &str,
        want: Option<&Digest>,
    ) -> Result<(Vec<u8>, Digest), ImageError> {
        let resp = self.get(&format!("manifests/{at}"), &[("accept", ACCEPT_MANIFEST)])?;
        if !resp.status.is_success() {
            return Err(self.err(format!(
                "it has no manifest {at} in {} ({})",
                self.r.repository,
                resp.status.as_u16()
            )));
        }
        let claimed = resp
            .header("docker-content-digest")
            .map(|h| Digest::parse(h.trim()));
        let doc = self
            .client
            .read_small(resp, layout::MAX_DOCUMENT_BYTES)
            .map_err(|e| self.err(format!("the manifest {at}: {e}")))?;
        let got = Digest::of(&doc);
        let expect = match (want, claimed) {
            (Some(w), _) => Some(w.clone()),
            (None, Some(Some(c))) => Some(c),
            (None, Some(None)) => {
                return Err(self.err("its Docker-Content-Digest is not sha256:<64 hex digits>"))
            }
            (None, None) => None,
        };
        if let Some(w) = expect {
            if w != got {
                return Err(ImageError::new(
                    self.image,
                    format!(
                        "registry {}: the manifest's bytes hash to {got}, not to {w}",
                        self.r.host
                    ),
                ));
            }
        }
        Ok((doc, got))
    }

    /// The config and layers a manifest names, into the store, each checked.
    fn blobs(
        &mut self,
        store: &Store,
        lock: &Locked,
        manifest: Digest,
        m: &Manifest,
        mut bytes: u64,
        budget: &mut Budget,
    ) -> Result<import::Parts, ImageError> {
        let config = self.blob(store, lock, &m.config, "the manifest's config", budget)?;
        bytes += m.config.size;
        let cfg: Config = serde_json::from_slice(&store.read_document(
            self.image,
            &config,
            layout::MAX_DOCUMENT_BYTES,
        )?)
        .map_err(|e| {
            ImageError::new(self.image, format!("{config} is not an image config: {e}"))
        })?;
        let mut layers = Vec::new();
        for l in &m.layers {
            if l.media_type.contains("nondistributable") || l.media_type.contains("foreign") {
                return Err(ImageError::new(
                    self.image,
                    "a layer the registry may not serve (non-distributable): Airlock fetches nothing from elsewhere",
                )
                .entry(l.digest.as_str()));
            }
            layers.push(self.blob(store, lock, l, "the manifest's layer", budget)?);
            bytes += l.size;
        }
        import::parts(self.image, manifest, config, layers, &cfg, bytes)
    }

    /// One blob into the store, unless the store has it (it was checked when kept).
    fn blob(
        &mut self,
        store: &Store,
        lock: &Locked,
        d: &Descriptor,
        what: &str,
        budget: &mut Budget,
    ) -> Result<Digest, ImageError> {
        let digest = Digest::parse(&d.digest).ok_or_else(|| {
            ImageError::new(
                self.image,
                format!("{what} names a digest that is not sha256:<64 hex digits>"),
            )
        })?;
        if store.blob_path(&digest).is_file() {
            return Ok(digest);
        }
        if d.size > budget.left {
            return Err(ImageError::new(
                self.image,
                "the image store would grow past images.max_bytes",
            )
            .layer(&digest));
        }
        let resp = self.get(&format!("blobs/{digest}"), &[])?;
        if !resp.status.is_success() {
            return Err(ImageError::new(
                self.image,
                format!(
                    "registry {}: {what} names a blob it does not serve ({})",
                    self.r.host,
                    resp.status.as_u16()
                ),
            )
            .layer(&digest));
        }
        let body = Exactly {
            inner: self.client.reader(resp),
            left: d.size,
        };
        let (_, n) = store.put_blob(lock, self.image, body, Some(&digest), budget)?;
        if n != d.size {
            return Err(ImageError::new(
                self.image,
                format!(
                    "the blob is {n} bytes, not the {} its descriptor says",
                    d.size
                ),
            )
            .layer(&digest));
        }
        Ok(digest)
    }
}

/// A body that may be no longer than its descriptor's size (an error past it, so a
/// registry cannot fill the disk).
struct Exactly<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exactly<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            let mut one = [0u8; 1];
            return match self.inner.read(&mut one)? {
                0 => Ok(0),
                _ => Err(std::io::Error::other(
                    "the registry sent more bytes than the descriptor's size",
                )),
            };
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(arch: &str, os: &str) -> Descriptor {
        Descriptor {
            media_type: layout::OCI_MANIFEST.into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 1,
            platform: Some(layout::Platform {
                architecture: arch.into(),
                os: os.into(),
            }),
        }
    }

    #[test]
    fn an_index_resolves_to_linux_on_this_architecture_only() {
        let arch = layout::host_architecture();
        let other = if arch == "amd64" { "arm64" } else { "amd64" };
        let got = pick(
            "i",
            &[
                desc(other, "linux"),
                desc(arch, "windows"),
                desc(arch, "linux"),
            ],
        )
        .unwrap();
        assert_eq!(got.platform.unwrap().os, "linux");
        let e = pick("i", &[desc(other, "linux")]).unwrap_err();
        assert!(e.why.contains(&format!("linux/{arch}")), "{e}");
    }

    #[test]
    fn a_body_longer_than_its_descriptor_is_an_error() {
        let mut out = Vec::new();
        let r = Exactly {
            inner: &b"abcd"[..],
            left: 3,
        }
        .read_to_end(&mut out);
        assert!(r.is_err());
        let mut out = Vec::new();
        Exactly {
            inner: &b"abc"[..],
            left: 3,
        }
        .read_to_end(&mut out)
        .unwrap();
        assert_eq!(out, b"abc");
    }
}
