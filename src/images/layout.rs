//! The JSON documents of an image: an OCI index and manifest, the image config (only what
//! Airlock uses: the layers' uncompressed digests and `Env`), and `docker save`'s
//! manifest.json. Unknown fields are ignored: these come from other tools and grow.

use serde::{Deserialize, Serialize};

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// The largest manifest, index or config read (they are small JSON documents).
pub const MAX_DOCUMENT_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Index {
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct Config {
    #[serde(default)]
    pub config: Option<RunConfig>,
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct RunConfig {
    #[serde(rename = "Env", default)]
    pub env: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

/// One image of `docker save`'s manifest.json.
#[derive(Debug, Clone, Deserialize)]
pub struct DockerImage {
    #[serde(rename = "Config")]
    pub config: String,
    #[serde(rename = "Layers")]
    pub layers: Vec<String>,
}

/// This host's architecture as OCI names it.
pub fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The image's environment: `NAME=value` entries with a plain name, at most 256, each at
/// most 64 KiB (others dropped: the command side's environment is Airlock's to bound).
pub fn env_of(config: &Config) -> Vec<String> {
    let all = config
        .config
        .as_ref()
        .and_then(|c| c.env.clone())
        .unwrap_or_default();
    all.into_iter()
        .filter(|kv| {
            kv.len() <= 64 << 10
                && kv.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty()
                        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                        && !k.as_bytes()[0].is_ascii_digit()
                })
        })
        .take(256)
        .collect()
}
