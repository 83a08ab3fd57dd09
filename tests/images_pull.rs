//! `airlockctl image pull`, for real: Debian's `docker-registry` (the CNCF distribution
//! server) on loopback behind TLS from a CA of the test's own, with token auth (the
//! distribution token protocol, served by tests/registries/token_server.py, whose tokens the
//! real registry verifies) or htpasswd basic auth; an image the test builds with umoci,
//! pushed with `skopeo copy`; `registry.example` resolved to 127.0.0.1 by a hosts file bound
//! over /etc/hosts in a mount namespace of the pushing and pulling commands alone.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::oci::*;
use common::tls::{free_port, spawn_listening, wait_listening, Proc, TestCa};
use common::*;
use serde_json::Value;

const USER: &str = "airlock-puller";
const PASSWORD: &str = "pw-9f2c41d7e6b3a8";
const REPO_NAME: &str = "acme/tools";

enum Auth {
    Token,
    Basic,
}

/// A registry at `registry.example:<port>` with its own storage, CA and auth.
struct Registry {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    host: String,
    ca: PathBuf,
    hosts: PathBuf,
    storage: PathBuf,
    token_log: PathBuf,
    _procs: Vec<Proc>,
}

impl Registry {
    fn start(auth: Auth) -> Registry {
        for p in [
            "/usr/bin/docker-registry",
            "/usr/bin/skopeo",
            "/usr/bin/umoci",
        ] {
            assert!(
                Path::new(p).exists(),
                "{p} is missing: run scripts/install-deps.sh"
            );
        }
        let d = tempfile::tempdir_in("/var/tmp").unwrap();
        let dir = d.path().to_path_buf();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ca = TestCa::new(&dir);
        let leaf = ca.leaf("registry", &["registry.example", "auth.registry.example"]);
        let port = free_port();
        let host = format!("registry.example:{port}");
        let hosts = dir.join("hosts");
        std::fs::write(
            &hosts,
            "127.0.0.1 localhost registry.example auth.registry.example\n",
        )
        .unwrap();
        std::fs::set_permissions(&hosts, std::fs::Permissions::from_mode(0o644)).unwrap();
        let storage = dir.join("storage");
        let token_log = dir.join("token.log");
        std::fs::write(&token_log, "").unwrap();
        let mut procs = Vec::new();
        let auth_conf = match auth {
            Auth::Token => {
                let tport = free_port();
                let signer = dir.join("signer.pem");
                procs.push(spawn_listening(
                    Command::new("/usr/bin/python3")
                        .arg(Path::new(REPO).join("tests/registries/token_server.py"))
                        .arg(tport.to_string())
                        .arg(&leaf.0)
                        .arg(&leaf.1)
                        .arg(format!("{USER}:{PASSWORD}"))
                        .arg("airlock-test-issuer")
                        .arg("registry.example")
                        .arg(&signer)
                        .arg(&token_log)
                        .stdin(Stdio::null()),
                ));
                format!(
                    "auth:\n  token:\n    realm: https://auth.registry.example:{tport}/token\n    service: registry.example\n    issuer: airlock-test-issuer\n    rootcertbundle: {}\n",
                    signer.display()
                )
            }
            Auth::Basic => {
                let o = Command::new("/usr/bin/python3")
                    .args([
                        "-c",
                        "import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
                        PASSWORD,
                    ])
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", stderr(&o));
                let pw = dir.join("htpasswd");
                std::fs::write(&pw, format!("{USER}:{}", stdout(&o).trim())).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: airlock-test\n    path: {}\n",
                    pw.display()
                )
            }
        };
        let conf = dir.join("registry.yml");
        std::fs::write(
            &conf,
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: airlock-test-secret\n  tls: {{certificate: {}, key: {}}}\n{auth_conf}",
                storage.display(),
                leaf.0.display(),
                leaf.1.display()
            ),
        )
        .unwrap();
        let child = Command::new("/usr/bin/docker-registry")
            .arg("serve")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        procs.push(Proc(child));
        wait_listening(port);
        Registry {
            _dir: d,
            dir,
            host,
            ca: ca.ca_pem.clone(),
            hosts,
            storage,
            token_log,
            _procs: procs,
        }
    }

    /// `program args...` in a mount namespace whose /etc/hosts is the registry's.
    fn with_hosts(&self, program: &str) -> Command {
        let mut c = Command::new("/usr/bin/unshare");
        c.args(["-m", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
            .arg(&self.hosts)
            .arg(program);
        c
    }

    /// Push the OCI layout `layout` (tag `t`) as `REPO_NAME:tag` with skopeo.
    fn push(&self, layout: &Path, tag: &str) {
        let certs = self.dir.join("skopeo-certs");
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::copy(&self.ca, certs.join("ca.crt")).unwrap();
        let o = self
            .with_hosts("/usr/bin/skopeo")
            .args(["--insecure-policy", "copy", "--dest-creds"])
            .arg(format!("{USER}:{PASSWORD}"))
            .arg("--dest-cert-dir")
            .arg(&certs)
            .arg(format!("oci:{}:t", layout.display()))
            .arg(format!("docker://{}/{REPO_NAME}:{tag}", self.host))
            .output()
            .unwrap();
        assert!(o.status.success(), "skopeo copy: {}", stderr(&o));
    }

    /// The stored bytes of blob `hex` (the registry's filesystem storage).
    fn blob_data(&self, hex: &str) -> PathBuf {
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// A host whose `code` role's environment is `tools`, pulled from here with the
    /// credential `secret`.
    fn host(&self, secret: &str, prefixes: &[&str]) -> Host {
        let cred = self.dir.join(format!("cred-{}", free_port()));
        std::fs::write(&cred, format!("{secret}\n")).unwrap();
        std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
        let h = Host::new(
            &[("tess", "code")],
            &format!(
                "credentials: {{registry-token: {}}}\nimages: {{tools: {{ref: {}/{REPO_NAME}:1}}}}\nenvironments: {{code: tools}}\nregistries: {{'{}': {{credential: registry-token, ca_file: {}}}}}\n",
                cred.display(),
                self.host,
                self.host,
                self.ca.display()
            ),
        );
        let lines: String = prefixes.iter().map(|p| format!("    - {p}\n")).collect();
        h.local_role("code", |t| {
            t.replacen("  bash:\n", &format!("  bash:\n{lines}"), 1)
        });
        h
    }

    /// `airlockctl image pull REF --name NAME` on `h`, resolving through the hosts file.
    fn pull(&self, h: &Host, reference: &str, name: &str) -> Output {
        self.with_hosts(env!("CARGO_BIN_EXE_airlockctl"))
            .arg("--config")
            .arg(&h.cfg)
            .args(["image", "pull", reference, "--name", name])
            .output()
            .unwrap()
    }
}

/// The OCI layout of a busybox image with Env, and its layer's digest (hex).
fn built_image(work: &Path) -> (PathBuf, String) {
    let root = work.join("root");
    busybox_root(&root);
    let layout = umoci_image(
        work,
        &root,
        &["PATH=/bin", "IMAGE_MARK=pulled-from-the-registry"],
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let m = index["manifests"][0]["digest"].as_str().unwrap();
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(layout.join("blobs/sha256").join(&m["sha256:".len()..])).unwrap(),
    )
    .unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap()["sha256:".len()..].to_string();
    (layout, layer)
}

fn ls(h: &Host) -> Value {
    let o = h.ctl(&["--json", "image", "ls"]);
    assert!(o.status.success(), "image ls: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_pulled_image_with_token_auth_roots_the_command_side() {
    require_journald();
    let reg = Registry::start(Auth::Token);
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let (layout, _) = built_image(work.path());
    reg.push(&layout, "1");
    let h = reg.host(
        &format!("{USER}:{PASSWORD}"),
        &[
            "cat /etc/os-release",
            "cat /proc/self/environ",
            "ls /usr/bin",
        ],
    );
    let reference = format!("{}/{REPO_NAME}:1", reg.host);
    let o = reg.pull(&h, &reference, "tools");
    assert!(o.status.success(), "pull: {}\n{}", stdout(&o), stderr(&o));
    // The token service was asked, with Basic credentials, for a pull scope.
    let log = std::fs::read_to_string(&reg.token_log).unwrap();
    assert!(
        log.lines().any(|l| l.contains("\"auth\": \"Basic\"")
            && l.contains(&format!("repository:{REPO_NAME}:pull"))),
        "{log}"
    );
    let listed = ls(&h);
    let img = &listed["images"][0];
    assert_eq!(img["name"], "tools", "{listed}");
    assert_eq!(img["source"], reference.as_str(), "{listed}");
    assert_eq!(img["roles"][0], "code", "{listed}");
    let digest = img["digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:"), "{listed}");

    let o = h
        .launch(
            "code",
            "tess",
            &["--max-seconds", "120"],
            &[
                "/usr/bin/python3",
                "-c",
                AGENT,
                "cat /etc/os-release",
                "cat /proc/self/environ",
                "ls /usr/bin",
            ],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.len(), 3, "{out}");
    assert!(
        r[0]["result"]["stdout"]
            .as_str()
            .unwrap_or("")
            .contains("ID=airlock-test-image"),
        "{}",
        r[0]
    );
    assert!(
        r[1]["result"]["stdout"]
            .as_str()
            .unwrap_or("")
            .split('\0')
            .any(|v| v == "IMAGE_MARK=pulled-from-the-registry"),
        "{}",
        r[1]
    );
    assert_ne!(r[2]["result"]["exit_code"], 0, "{}", r[2]);
    let show = h.show(&run_id_of(&o));
    assert!(show.contains(&format!("tools ({digest})")), "{show}");

    // Pulled by digest, the same image: the digest is checked against the manifest.
    let by_digest = format!("{}/{REPO_NAME}@{digest}", reg.host);
    let o = reg.pull(&h, &by_digest, "tools-pinned");
    assert!(o.status.success(), "pull by digest: {}", stderr(&o));
    let listed = ls(&h);
    let pinned = listed["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "tools-pinned")
        .cloned()
        .unwrap_or_default();
    assert_eq!(pinned["digest"], digest.as_str(), "{listed}");
}

#[test]
fn a_tampered_blob_is_refused_naming_it_and_nothing_is_kept() {
    let reg = Registry::start(Auth::Basic);
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let (layout, layer) = built_image(work.path());
    reg.push(&layout, "1");
    // The registry now serves other bytes under the layer's digest.
    let data = reg.blob_data(&layer);
    let mut bytes = std::fs::read(&data).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();

    let h = reg.host(&format!("{USER}:{PASSWORD}"), &[]);
    let o = reg.pull(&h, &format!("{}/{REPO_NAME}:1", reg.host), "tools");
    let e = stderr(&o);
    assert!(!o.status.success(), "a tampered layer was pulled: {e}");
    assert!(
        e.contains(&format!("sha256:{layer}")) && e.contains("hash"),
        "{e}"
    );
    assert_eq!(ls(&h)["images"].as_array().map(Vec::len), Some(0));
    let store = h.state.join("images");
    assert!(
        !store.join("blobs/sha256").join(&layer).exists(),
        "the tampered blob was kept"
    );
    let trees: Vec<_> = std::fs::read_dir(store.join("trees"))
        .unwrap()
        .flatten()
        .collect();
    assert!(trees.is_empty(), "{trees:?}");
    let tmp: Vec<_> = std::fs::read_dir(store.join("tmp"))
        .unwrap()
        .flatten()
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}

#[test]
fn a_wrong_credential_is_refused_naming_the_registry_never_the_secret() {
    for auth in [Auth::Token, Auth::Basic] {
        let reg = Registry::start(auth);
        let work = tempfile::tempdir_in("/var/tmp").unwrap();
        let (layout, _) = built_image(work.path());
        reg.push(&layout, "1");
        let wrong = "airlock-puller:wrong-secret-7d1e5b";
        let h = reg.host(wrong, &[]);
        let o = reg.pull(&h, &format!("{}/{REPO_NAME}:1", reg.host), "tools");
        let e = stderr(&o);
        assert!(!o.status.success(), "pulled with a wrong credential: {e}");
        assert!(
            e.contains(&reg.host) && e.contains("registries.") && e.contains("registry-token"),
            "{e}"
        );
        assert!(!e.contains("wrong-secret") && !e.contains(PASSWORD), "{e}");
        assert_eq!(ls(&h)["images"].as_array().map(Vec::len), Some(0));
    }
    // A registry not served over verified TLS is refused: the test CA unnamed.
    let reg = Registry::start(Auth::Basic);
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let (layout, _) = built_image(work.path());
    reg.push(&layout, "1");
    let h = Host::new(
        &[("tess", "code")],
        &format!("images: {{tools: {{ref: {}/{REPO_NAME}:1}}}}\n", reg.host),
    );
    let o = reg.pull(&h, &format!("{}/{REPO_NAME}:1", reg.host), "tools");
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains(&reg.host), "{e}");
}
