//! The `images`, `environments` and `registries` keys of airlockd's config: the OCI images
//! the host grants as the root of runs' command sides (a role file never names one).
//!
//! ```yaml
//! images:
//!   rust-dev: {ref: registry.example/acme/rust-dev:1.83}   # airlockctl image pull
//!   py312:    {path: /srv/images/py312.tar}                # airlockctl image import
//!   max_bytes: 20G                                         # the store's bound
//! environments: {code: rust-dev, test-engineer: py312}     # role name or class -> image
//! registries: {registry.example: {credential: registry-token}}
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml::Value;

use crate::diag::{key, Problem};

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// `ref: HOST/NAME[:TAG|@sha256:...]`, pulled by `airlockctl image pull`.
    Ref(String),
    /// `path: FILE_OR_DIR`, imported by `airlockctl image import`.
    Path(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImagesConf {
    pub images: BTreeMap<String, ImageSource>,
    /// `images.max_bytes`: blobs and unpacked trees together.
    pub max_bytes: u64,
    /// Role name or class -> image name.
    pub environments: BTreeMap<String, String>,
    /// Registry host -> how `image pull` reaches it.
    pub registries: BTreeMap<String, RegistryConf>,
}

/// `registries.HOST`: the credential sent to it (`USER:PASSWORD`, as `docker login` takes
/// it) and a private CA to verify it with instead of the system's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistryConf {
    pub credential: Option<String>,
    pub ca_file: Option<PathBuf>,
}

impl ImagesConf {
    /// The image the host grants a role: by its name, then by its class.
    pub fn environment_of(&self, role: &str, class: &str) -> Option<(&str, &str)> {
        self.environments
            .get_key_value(role)
            .or_else(|| self.environments.get_key_value(class))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The environments that name `image`.
    pub fn users_of(&self, image: &str) -> Vec<String> {
        self.environments
            .iter()
            .filter(|(_, v)| *v == image)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// `1073741824`, `512M`, `20G`, `1T` (powers of 1024).
fn bytes(v: &Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let s = v.as_str()?.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'K') => (&s[..i], 1u64 << 10),
        (i, 'M') => (&s[..i], 1 << 20),
        (i, 'G') => (&s[..i], 1 << 30),
        (i, 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// A registry host: a DNS name with a dot or `localhost`, an optional port.
fn registry_host(h: &str) -> bool {
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (h, None),
    };
    let port_ok = port.map_or(true, |p| p.parse::<u16>().is_ok_and(|n| n > 0));
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && (name.contains('.') || name == "localhost")
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    port_ok && name_ok
}

/// The registry host of an image reference, or `None` when it names none (`ubuntu:24.04`,
/// `acme/app`): Airlock never guesses a default registry.
pub fn ref_host(r: &str) -> Option<&str> {
    let (first, rest) = r.split_once('/')?;
    (registry_host(first) && !rest.is_empty()).then_some(first)
}

fn is_name(k: &str) -> bool {
    valid_name(k)
}

/// Default bound on the image store (`images.max_bytes`): blobs and unpacked trees.
pub const DEFAULT_MAX_BYTES: u64 = 20 << 30;

/// An image name: `[a-z0-9][a-z0-9._-]*`, at most 64 characters.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

fn who(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 64
        && k.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// A CA file whoever writes decides which registries are trusted: root's (or this
/// process's user's), a regular file no one else may write.
fn ca_file_ok(p: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    p.starts_with('/')
        && !p.contains('\0')
        && std::fs::metadata(p).is_ok_and(|m| {
            m.is_file()
                && (m.uid() == 0 || m.uid() == nix::unistd::geteuid().as_raw())
                && m.mode() & 0o022 == 0
        })
}

/// Parse the three keys (each absent or null: none), adding what is wrong to `problems`.
pub fn parse(
    file: &std::path::Path,
    images: Option<&Value>,
    environments: Option<&Value>,
    registries: Option<&Value>,
    credential: &dyn Fn(&str) -> bool,
    problems: &mut Vec<Problem>,
) -> ImagesConf {
    let mut out = ImagesConf {
        max_bytes: DEFAULT_MAX_BYTES,
        ..Default::default()
    };
    let mut problem = |path: &str, msg: &str| problems.push(Problem::new(file, path, msg));
    if let Some(m) = images.filter(|v| !v.is_null()) {
        match m.as_mapping() {
            None => problem(
                "images",
                "must be a mapping of image names to {ref: ...} or {path: ...}, and max_bytes",
            ),
            Some(m) => {
                for (k, v) in m {
                    let Some(name) = k.as_str() else {
                        problem("images.<key>", "must be an image name");
                        continue;
                    };
                    if name == "max_bytes" {
                        match bytes(v) {
                            Some(n) if n > 0 => out.max_bytes = n,
                            _ => problem(
                                "images.max_bytes",
                                "must be a positive number of bytes, or one with K, M, G or T",
                            ),
                        }
                        continue;
                    }
                    let at = key("images", name);
                    if !is_name(name) {
                        problem(
                            "images.<key>",
                            "an image name is 1 to 64 of a-z, 0-9, '.', '_' and '-'",
                        );
                        continue;
                    }
                    let entry = v.as_mapping();
                    let get = |f: &str| entry.and_then(|e| e.get(Value::from(f)));
                    let extra = entry.is_some_and(|e| {
                        e.keys()
                            .any(|k| !matches!(k.as_str(), Some("ref" | "path")))
                    });
                    match (get("ref").and_then(Value::as_str), get("path").and_then(Value::as_str)) {
                        _ if entry.is_none() || extra => {
                            problem(&at, "must be {ref: HOST/NAME:TAG} or {path: /absolute/path}")
                        }
                        (Some(r), None) => match ref_host(r) {
                            Some(_) if r.len() <= 512 && !r.contains(char::is_whitespace) => {
                                out.images.insert(name.into(), ImageSource::Ref(r.into()));
                            }
                            _ => problem(
                                &key(&at, "ref"),
                                "must name its registry host first (registry.example/team/image:tag); no default registry is assumed",
                            ),
                        },
                        (None, Some(p)) if p.starts_with('/') && !p.contains('\0') => {
                            out.images.insert(name.into(), ImageSource::Path(p.into()));
                        }
                        (None, Some(_)) => problem(&key(&at, "path"), "must be an absolute path"),
                        _ => problem(&at, "must have exactly one of ref and path"),
                    }
                }
            }
        }
    }
    if let Some(m) = environments.filter(|v| !v.is_null()) {
        match m.as_mapping() {
            None => problem(
                "environments",
                "must be a mapping of role names or classes to names of images",
            ),
            Some(m) => {
                for (k, v) in m {
                    let Some(role) = k.as_str().filter(|k| who(k)) else {
                        problem("environments.<key>", "must be a role name or a class");
                        continue;
                    };
                    match v.as_str() {
                        Some(img) if out.images.contains_key(img) => {
                            out.environments.insert(role.into(), img.into());
                        }
                        _ => problem(&key("environments", role), "names no entry of images"),
                    }
                }
            }
        }
    }
    if let Some(m) = registries.filter(|v| !v.is_null()) {
        match m.as_mapping() {
            None => problem(
                "registries",
                "must be a mapping of registry hosts to {credential: NAME, ca_file: /PATH}",
            ),
            Some(m) => {
                for (k, v) in m {
                    let Some(host) = k.as_str().filter(|h| registry_host(h)) else {
                        problem(
                            "registries.<key>",
                            "must be a registry host (name.example[:port])",
                        );
                        continue;
                    };
                    let at = key("registries", host);
                    let Some(entry) = v.as_mapping() else {
                        problem(
                            &at,
                            "must be {credential: NAME, ca_file: /PATH} (either or both)",
                        );
                        continue;
                    };
                    let mut conf = RegistryConf::default();
                    for (k, v) in entry {
                        match (k.as_str(), v.as_str()) {
                            (Some("credential"), Some(c)) if credential(c) => {
                                conf.credential = Some(c.into())
                            }
                            (Some("credential"), _) => {
                                problem(&key(&at, "credential"), "names no entry of credentials")
                            }
                            (Some("ca_file"), Some(p)) if ca_file_ok(p) => {
                                conf.ca_file = Some(p.into())
                            }
                            (Some("ca_file"), _) => problem(
                                &key(&at, "ca_file"),
                                "must be an absolute path to a PEM file of CA certificates that only root may write",
                            ),
                            _ => problem(&at, "takes only credential and ca_file"),
                        }
                    }
                    out.registries.insert(host.into(), conf);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(images: &str, envs: &str, regs: &str) -> (ImagesConf, Vec<String>) {
        let y = |s: &str| serde_yaml::from_str::<Value>(s).expect("yaml");
        let (i, e, r) = (y(images), y(envs), y(regs));
        let mut p = Vec::new();
        let c = parse(
            std::path::Path::new("/etc/airlock/airlock.yaml"),
            Some(&i),
            Some(&e),
            Some(&r),
            &|c| c == "registry-token",
            &mut p,
        );
        (c, p.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn images_environments_and_registries_parse() {
        let (c, p) = run(
            "{rust-dev: {ref: registry.example/acme/rust-dev:1.83}, py312: {path: /srv/images/py312.tar}, max_bytes: 2G}",
            "{code: rust-dev, test-engineer: py312}",
            "{registry.example: {credential: registry-token}, 'localhost:5000': {credential: registry-token}}",
        );
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c.max_bytes, 2 << 30);
        assert_eq!(c.environment_of("code", "code"), Some(("code", "rust-dev")));
        assert_eq!(
            c.environment_of("x", "test-engineer"),
            Some(("test-engineer", "py312"))
        );
        assert_eq!(c.users_of("py312"), vec!["test-engineer"]);
        assert_eq!(
            c.registries["localhost:5000"].credential.as_deref(),
            Some("registry-token")
        );
    }

    #[test]
    fn bad_entries_name_the_key_never_the_value() {
        for (i, e, r, want) in [
            (
                "{a: {ref: 'ubuntu:24.04'}}",
                "{}",
                "{}",
                "images.a.ref: must name its registry host",
            ),
            (
                "{a: {ref: 'acme/app:1'}}",
                "{}",
                "{}",
                "images.a.ref: must name its registry host",
            ),
            (
                "{a: {path: relative.tar}}",
                "{}",
                "{}",
                "images.a.path: must be an absolute path",
            ),
            (
                "{a: {ref: r.example/x, path: /x}}",
                "{}",
                "{}",
                "images.a: must have exactly one",
            ),
            (
                "{a: {url: r.example/x}}",
                "{}",
                "{}",
                "images.a: must be {ref",
            ),
            ("{max_bytes: lots}", "{}", "{}", "images.max_bytes"),
            (
                "{}",
                "{code: sk-ant-api03-secretvalue}",
                "{}",
                "environments.code: names no entry of images",
            ),
            (
                "{}",
                "{}",
                "{r.example: {credential: sk-ant-api03-secretvalue}}",
                "registries.r.example.credential: names no entry of credentials",
            ),
            (
                "{}",
                "{}",
                "{r.example: {ca_file: relative.pem}}",
                "registries.r.example.ca_file: must be an absolute path",
            ),
            (
                "{}",
                "{}",
                "{r.example: {token: sk-ant-api03-secretvalue}}",
                "registries.r.example: takes only credential and ca_file",
            ),
        ] {
            let (_, p) = run(i, e, r);
            assert!(p.iter().any(|m| m.contains(want)), "{want}: {p:?}");
            assert!(!p.iter().any(|m| m.contains("sk-ant")), "{p:?}");
        }
    }
}
