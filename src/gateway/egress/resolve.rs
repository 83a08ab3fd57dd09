//! Airlock resolves every egress destination itself, with the nameservers airlockd's
//! config names (`egress.nameservers`, else those of the host's /etc/resolv.conf): A and
//! AAAA at once over UDP, TCP when the answer is truncated, each server in turn. No search
//! list: a name means exactly itself, and the addresses returned are the ones checked and
//! dialled. Each run's egress keeps the answers it got for their TTL ([`Cache`]), so a
//! name dialled again costs no query.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dns::{self, Answer, WireError};

/// How long one server gets for one query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no nameserver is configured (airlockd's egress.nameservers, or /etc/resolv.conf)")]
    NoServer,
    #[error("no such name")]
    NoSuchName,
    #[error("the name has no address")]
    NoAddress,
    #[error("not a name that can be resolved")]
    BadName,
    #[error("no nameserver answered")]
    NoAnswer,
}

/// The nameservers of a resolv.conf: `nameserver ADDR` lines, port 53.
pub fn resolv_conf_servers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        // A link-local server may carry a zone (`fe80::1%eth0`): not usable as given.
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// Longest an answer is kept, whatever its TTL: a run does not dial for long an address
/// its name has left.
pub const MAX_TTL: Duration = Duration::from_secs(300);
/// Most names a run's cache keeps.
pub const CACHE_NAMES: usize = 256;

/// A run's answers, by name, until their TTL (at most [`MAX_TTL`]) runs out. Failures are
/// not kept: the next dial asks again.
#[derive(Default)]
pub struct Cache {
    names: Mutex<HashMap<String, (Vec<IpAddr>, Instant)>>,
}

impl Cache {
    /// Every A and AAAA address of `name`, from the cache while its answer lives.
    pub async fn resolve(
        &self,
        servers: &[SocketAddr],
        name: &str,
    ) -> Result<Vec<IpAddr>, ResolveError> {
        let key = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        let now = Instant::now();
        if let Some((addrs, _)) = self
            .names
            .lock()
            .ok()
            .and_then(|m| m.get(&key).filter(|(_, until)| *until > now).cloned())
        {
            return Ok(addrs);
        }
        let (addrs, ttl) = resolve_with_ttl(servers, name).await?;
        if ttl > 0 {
            let until = now + MAX_TTL.min(Duration::from_secs(u64::from(ttl)));
            if let Ok(mut m) = self.names.lock() {
                if m.len() >= CACHE_NAMES && !m.contains_key(&key) {
                    m.retain(|_, (_, u)| *u > now);
                    // Still full: the answer that would go first makes room.
                    if m.len() >= CACHE_NAMES {
                        if let Some(k) = m
                            .iter()
                            .min_by_key(|(_, (_, u))| *u)
                            .map(|(k, _)| k.clone())
                        {
                            m.remove(&k);
                        }
                    }
                }
                m.insert(key, (addrs.clone(), until));
            }
        }
        Ok(addrs)
    }
}

/// Every A and AAAA address of `name`.
pub async fn resolve(servers: &[SocketAddr], name: &str) -> Result<Vec<IpAddr>, ResolveError> {
    resolve_with_ttl(servers, name).await.map(|(a, _)| a)
}

/// Every A and AAAA address of `name`, and how long the answers may be kept (the least TTL
/// of the two families' that have addresses).
async fn resolve_with_ttl(
    servers: &[SocketAddr],
    name: &str,
) -> Result<(Vec<IpAddr>, u32), ResolveError> {
    if servers.is_empty() {
        return Err(ResolveError::NoServer);
    }
    for server in servers {
        let (a, aaaa) = tokio::join!(
            ask(*server, name, dns::TYPE_A),
            ask(*server, name, dns::TYPE_AAAA)
        );
        match (a, aaaa) {
            (Err(Fail::BadName), _) | (_, Err(Fail::BadName)) => return Err(ResolveError::BadName),
            (Ok(Answer::NoSuchName), Ok(Answer::NoSuchName)) => {
                return Err(ResolveError::NoSuchName)
            }
            (Ok(a), Ok(b)) => {
                let mut all = Vec::new();
                let mut ttl = u32::MAX;
                for ans in [a, b] {
                    if let Answer::Addresses(v, t) = ans {
                        if !v.is_empty() {
                            ttl = ttl.min(t);
                        }
                        all.extend(v);
                    }
                }
                return if all.is_empty() {
                    Err(ResolveError::NoAddress)
                } else {
                    Ok((all, ttl))
                };
            }
            // One of the two failed here: the next server may answer both; an address we
            // did not learn is one we will not dial either.
            _ => continue,
        }
    }
    Err(ResolveError::NoAnswer)
}

enum Fail {
    BadName,
    Other,
}

fn random_id() -> u16 {
    let mut b = [0u8; 2];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Still unpredictable enough for an id: the answer is checked against the question.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        return t as u16;
    }
    u16::from_ne_bytes(b)
}

/// One query to one server: UDP, then TCP if truncated.
async fn ask(server: SocketAddr, name: &str, qtype: u16) -> Result<Answer, Fail> {
    let id = random_id();
    let q = dns::query(id, name, qtype).ok_or(Fail::BadName)?;
    let udp = tokio::time::timeout(QUERY_TIMEOUT, udp(server, &q, id, name, qtype)).await;
    match udp {
        Ok(Ok(Answer::Truncated)) => {}
        Ok(Ok(a)) => return Ok(a),
        _ => return Err(Fail::Other),
    }
    match tokio::time::timeout(QUERY_TIMEOUT, tcp(server, &q, id, name, qtype)).await {
        Ok(Ok(Answer::Truncated)) | Ok(Err(_)) | Err(_) => Err(Fail::Other),
        Ok(Ok(a)) => Ok(a),
    }
}

async fn udp(
    server: SocketAddr,
    q: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
) -> std::io::Result<Answer> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = tokio::net::UdpSocket::bind(local).await?;
    // Connected: the kernel drops datagrams from anyone but the server.
    sock.connect(server).await?;
    sock.send(q).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = sock.recv(&mut buf).await?;
        match dns::answer(&buf[..n], id, name, qtype) {
            Ok(a) => return Ok(a),
            // A stray or spoofed datagram: keep waiting (the timeout bounds it).
            Err(WireError::NotOurs) => continue,
            Err(_) => return Err(std::io::Error::other("a bad DNS answer")),
        }
    }
}

async fn tcp(
    server: SocketAddr,
    q: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
) -> std::io::Result<Answer> {
    let mut s = tokio::net::TcpStream::connect(server).await?;
    let len = u16::try_from(q.len()).map_err(std::io::Error::other)?;
    let mut msg = len.to_be_bytes().to_vec();
    msg.extend_from_slice(q);
    s.write_all(&msg).await?;
    let n = usize::from(s.read_u16().await?);
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).await?;
    dns::answer(&buf, id, name, qtype).map_err(|_| std::io::Error::other("a bad DNS answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf() {
        let text = "# comment\nsearch corp.example\nnameserver 127.0.0.53\nnameserver ::1\nnameserver fe80::1%eth0\nnameserver\noptions edns0\n";
        assert_eq!(
            resolv_conf_servers(text),
            vec![
                "127.0.0.53:53".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
    }

    /// A one-shot UDP server answering with `reply(query)`.
    async fn server(reply: impl Fn(&[u8]) -> Vec<Vec<u8>> + Send + 'static) -> SocketAddr {
        let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = s.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let Ok((n, from)) = s.recv_from(&mut buf).await else {
                    return;
                };
                for r in reply(&buf[..n]) {
                    let _ = s.send_to(&r, from).await;
                }
            }
        });
        addr
    }

    fn qtype_of(q: &[u8]) -> u16 {
        let end = q.len() - 11;
        u16::from_be_bytes([q[end - 4], q[end - 3]])
    }

    #[tokio::test(flavor = "current_thread")]
    async fn both_families_spoofs_ignored() {
        use crate::gateway::egress::dns::tests::response;
        let addr = server(|q| {
            let mut spoof = response(q, 0, false, &[(dns::TYPE_A, vec![10, 9, 9, 9])]);
            spoof[0] ^= 0xff; // another id: ignored
            let real = match qtype_of(q) {
                dns::TYPE_A => response(q, 0, false, &[(dns::TYPE_A, vec![11, 0, 0, 1])]),
                _ => response(q, 0, false, &[]),
            };
            vec![spoof, real]
        })
        .await;
        let got = resolve(&[addr], "a.test").await;
        assert_eq!(got, Ok(vec!["11.0.0.1".parse().unwrap()]));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_cache_answers_within_the_ttl_and_keeps_no_failure() {
        use crate::gateway::egress::dns::tests::response;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let asked = Arc::new(AtomicUsize::new(0));
        let n = asked.clone();
        let addr = server(move |q| {
            n.fetch_add(1, Ordering::SeqCst);
            match (qtype_of(q), q[13]) {
                // "nx.test": NXDOMAIN.
                (_, b'n') => vec![response(q, 3, false, &[])],
                (dns::TYPE_A, _) => {
                    vec![response(q, 0, false, &[(dns::TYPE_A, vec![11, 0, 0, 1])])]
                }
                _ => vec![response(q, 0, false, &[])],
            }
        })
        .await;
        let cache = Cache::default();
        let one = cache.resolve(&[addr], "a.test").await;
        assert_eq!(one, Ok(vec!["11.0.0.1".parse().unwrap()]));
        assert_eq!(asked.load(Ordering::SeqCst), 2, "A and AAAA");
        // Again, in another spelling: from the cache (the stand-in's TTL is 60 s).
        assert_eq!(cache.resolve(&[addr], "A.Test.").await, one);
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        for _ in 0..2 {
            assert_eq!(
                cache.resolve(&[addr], "nx.test").await,
                Err(ResolveError::NoSuchName)
            );
        }
        assert_eq!(asked.load(Ordering::SeqCst), 6, "a failure is asked again");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn nxdomain_and_no_server() {
        use crate::gateway::egress::dns::tests::response;
        let addr = server(|q| vec![response(q, 3, false, &[])]).await;
        assert_eq!(
            resolve(&[addr], "nx.test").await,
            Err(ResolveError::NoSuchName)
        );
        assert_eq!(resolve(&[], "nx.test").await, Err(ResolveError::NoServer));
        assert_eq!(resolve(&[addr], "a..b").await, Err(ResolveError::BadName));
    }
}
