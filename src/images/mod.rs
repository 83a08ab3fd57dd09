//! OCI images for the command side of runs: a content-addressed store under the state
//! directory (each blob verified against its digest before it is kept), import of an OCI
//! layout, an OCI archive or a `docker save` tar, a pull from a registry over the OCI
//! distribution API, and safe unpacking of the layers into
//! one read-only tree per image, shared by every run that uses it.
//!
//! Architecture invariant: a service the supervisor and the CLI use; it imports only what
//! is below it (the config's image names), never the supervisor, sandbox or gateway. Nothing here follows a path out of
//! the tree being built: every entry is resolved inside it, as a container's root would
//! resolve it.

pub mod auth;
pub mod digest;
pub mod http;
pub mod import;
pub mod layout;
pub mod pull;
pub mod reference;
pub mod store;
pub mod unpack;

pub use digest::Digest;
pub use store::{ImageRecord, Store};

/// Default bound on the store (`images.max_bytes`): blobs and unpacked trees together.
pub use crate::config::images::DEFAULT_MAX_BYTES;

/// Why an image was refused: which image, which layer and which entry, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    pub image: String,
    pub layer: Option<String>,
    pub entry: Option<String>,
    pub why: String,
}

impl ImageError {
    pub fn new(image: &str, why: impl Into<String>) -> Self {
        ImageError {
            image: image.to_string(),
            layer: None,
            entry: None,
            why: why.into(),
        }
    }

    pub fn layer(mut self, layer: &Digest) -> Self {
        self.layer = Some(layer.to_string());
        self
    }

    pub fn entry(mut self, entry: impl Into<String>) -> Self {
        self.entry = Some(entry.into());
        self
    }
}

impl std::fmt::Display for ImageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "image `{}`", self.image)?;
        if let Some(l) = &self.layer {
            write!(f, ", layer {l}")?;
        }
        if let Some(e) = &self.entry {
            write!(f, ", entry `{e}`")?;
        }
        write!(f, ": {}", self.why)
    }
}

impl std::error::Error for ImageError {}
