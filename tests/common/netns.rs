//! A network of the test's own for egress: a network namespace behind a veth pair whose
//! far end holds a public-looking address (routed from the host by a host route; there is
//! no internet here), servers started inside it, a DNS stub on the host's loopback that
//! airlockd's `egress.nameservers` names, and certificates from a CA of the test's own.
//! Removed on drop, even after a failure.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A DNS server on the host's loopback answering A queries from `names`; AAAA and other
/// types get an empty answer; other names NXDOMAIN. Serves until the test process ends.
pub fn dns_stub(names: Vec<(&'static str, Ipv4Addr)>) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind the DNS stub");
    let addr = sock.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            if let Some(reply) = dns_reply(&buf[..n], &names) {
                let _ = sock.send_to(&reply, from);
            }
        }
    });
    addr
}

fn dns_reply(q: &[u8], names: &[(&str, Ipv4Addr)]) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*q.get(at)?, *q.get(at + 1)?]);
    let qend = at + 4;
    let name = labels.join(".");
    let hits: Vec<Ipv4Addr> = names
        .iter()
        .filter(|(n, _)| *n == name)
        .map(|(_, a)| *a)
        .collect();
    let known = names.iter().any(|(n, _)| *n == name);
    let mut r = q.get(..qend)?.to_vec();
    r[2] = 0x81;
    r[3] = if known { 0x80 } else { 0x83 };
    let answers: Vec<Ipv4Addr> = if qtype == 1 { hits } else { Vec::new() };
    r[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
    r[8..12].copy_from_slice(&[0, 0, 0, 0]);
    for a in answers {
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4]);
        r.extend_from_slice(&a.octets());
    }
    Some(r)
}

static NEXT_NET: AtomicU32 = AtomicU32::new(1);

pub fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect(
        "iproute2's `ip` is needed for the egress tests' network namespace: run scripts/install-deps.sh",
    );
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

pub struct NetNs {
    pub ns: String,
    veth: String,
    /// The namespace's address, public-looking, routed from the host.
    pub public: Ipv4Addr,
    /// A public-looking address on the host's side: one of the host's own.
    pub own: Ipv4Addr,
    servers: Vec<Child>,
    pub dir: tempfile::TempDir,
}

impl NetNs {
    pub fn new() -> NetNs {
        super::require_root();
        let pid = std::process::id();
        let n = NEXT_NET.fetch_add(1, Ordering::SeqCst);
        // Unique per process and test: concurrent test runs do not collide.
        let net = NetNs {
            ns: format!("airlock-eg-{pid}-{n}"),
            veth: format!("aeg{}x{n}", pid % 100_000),
            public: Ipv4Addr::new(11, (pid >> 8) as u8, pid as u8, (10 + 2 * n) as u8),
            own: Ipv4Addr::new(11, (pid >> 8) as u8, pid as u8, (200 + n) as u8),
            servers: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        };
        let host_side = Ipv4Addr::new(10, 254, pid as u8, n as u8).to_string();
        let peer = format!("{}p", net.veth);
        let (ns, veth) = (net.ns.as_str(), net.veth.as_str());
        let (public, own) = (net.public.to_string(), net.own.to_string());
        ip(&["netns", "add", ns]);
        ip(&["link", "add", veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", ns]);
        ip(&["addr", "add", &format!("{host_side}/32"), "dev", veth]);
        ip(&["addr", "add", &format!("{own}/32"), "dev", veth]);
        ip(&["link", "set", veth, "up"]);
        ip(&["route", "add", &format!("{public}/32"), "dev", veth]);
        let inside = |args: &[&str]| {
            let mut a = vec!["-n", ns];
            a.extend_from_slice(args);
            ip(&a);
        };
        inside(&["link", "set", "lo", "up"]);
        inside(&["addr", "add", &format!("{public}/32"), "dev", &peer]);
        inside(&["link", "set", &peer, "up"]);
        inside(&["route", "add", &format!("{host_side}/32"), "dev", &peer]);
        inside(&["route", "add", &format!("{own}/32"), "dev", &peer]);
        net
    }

    /// `ip netns exec NS PROGRAM`, to start a server inside.
    pub fn exec(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, program]);
        c
    }

    /// Start a server inside and wait for its first stdout line to be `ready`; it is
    /// killed on drop.
    pub fn serve(&mut self, mut c: Command, what: &str) {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what} in the test's namespace: {e}"));
        let out = child.stdout.take().unwrap();
        self.servers.push(child);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{what} did not start");
    }

    /// Keep a server started otherwise; it is killed on drop.
    pub fn keep(&mut self, child: Child) {
        self.servers.push(child);
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        let quiet = |args: &[&str]| {
            let _ = Command::new("ip").args(args).stderr(Stdio::null()).status();
        };
        quiet(&["netns", "del", &self.ns]);
        quiet(&["link", "del", &self.veth]);
    }
}

/// A CA of the test's own and a server certificate from it for `names`, written under
/// `dir` as `ca.pem`, `cert.pem` and `key.pem`; returns their paths.
pub fn test_ca(dir: &Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Airlock egress test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, names[0]);
    let leaf = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    (paths.0, paths.1, paths.2)
}
