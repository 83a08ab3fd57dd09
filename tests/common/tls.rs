//! TLS partners for the https connector tests: a CA made in the test (rcgen), leaves it
//! signs, and a real stunnel4 terminating TLS in front of a plain server on the loopback
//! (the SDK reference server, say).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_listening(port: u16) {
    let end = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "nothing listened on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A CA of the test's own, its certificate at `ca_pem` (root-owned, 0644: a connector's
/// `ca_file` must be writable by no one else).
pub struct TestCa {
    pub dir: PathBuf,
    pub ca_pem: PathBuf,
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    pub fn new(dir: &Path) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.distinguished_name
            .push(DnType::CommonName, "Airlock https connector test CA");
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = p.self_signed(&key).unwrap();
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, cert.pem()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ca_pem, std::fs::Permissions::from_mode(0o644)).unwrap();
        TestCa {
            dir: dir.to_path_buf(),
            ca_pem,
            cert,
            key,
        }
    }

    /// A leaf for `names`, as `<file>.crt` and `<file>.key` in the CA's folder.
    pub fn leaf(&self, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        let (c, k) = (
            self.dir.join(format!("{file}.crt")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A real stunnel4 on 127.0.0.1:<returned port>, TLS with `leaf` in front of the plain
/// server on 127.0.0.1:`to`.
pub fn stunnel(ca: &TestCa, leaf: &(PathBuf, PathBuf), to: u16) -> (Proc, u16) {
    let port = free_port();
    (stunnel_at(ca, leaf, to, port), port)
}

/// [`stunnel`] on a port chosen beforehand.
pub fn stunnel_at(ca: &TestCa, leaf: &(PathBuf, PathBuf), to: u16, port: u16) -> Proc {
    assert!(
        Path::new("/usr/bin/stunnel4").exists(),
        "stunnel4 is not installed: run scripts/install-deps.sh as root"
    );
    let conf = ca.dir.join(format!("stunnel-{port}.conf"));
    std::fs::write(
        &conf,
        format!(
            "foreground = yes\npid =\ndebug = 3\n[mcp]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{to}\ncert = {}\nkey = {}\n",
            leaf.0.display(),
            leaf.1.display()
        ),
    )
    .unwrap();
    let child = Command::new("/usr/bin/stunnel4")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_listening(port);
    p
}

/// Start `c`, a server that says `listening` on its stdout once it listens, and wait for
/// that line.
pub fn spawn_listening(c: &mut Command) -> Proc {
    use std::io::{BufRead, BufReader};
    let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening"), "{line}");
    Proc(child)
}

/// The SDK reference server (tests/agents/reference_server.js) on a free loopback port.
pub fn reference_server() -> (Proc, u16) {
    reference_server_with(&[])
}

/// The reference server with these arguments after its port (`resumable`).
pub fn reference_server_with(args: &[&str]) -> (Proc, u16) {
    super::require_npm("@modelcontextprotocol/sdk");
    let port = free_port();
    let p = spawn_listening(
        Command::new("node")
            .arg(Path::new(super::REPO).join("tests/agents/reference_server.js"))
            .arg(port.to_string())
            .args(args)
            .stderr(Stdio::inherit()),
    );
    (p, port)
}
