//! DNS on the wire (RFC 1035), just enough to ask for a name's A or AAAA records and read
//! the answer: a query with a random id and EDNS0, and a total, bounded reader of the
//! response that checks it answers that query. Pure; [`super::resolve`] sends it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;
/// The EDNS0 payload size we offer (the DNS flag day's value: no fragmentation).
const EDNS_PAYLOAD: u16 = 1232;
/// Most addresses taken from one answer.
pub const MAX_ADDRESSES: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The addresses of the asked type (maybe none: the name has no such record), and the
    /// least TTL of their records, in seconds (0 when there are none).
    Addresses(Vec<IpAddr>, u32),
    /// NXDOMAIN.
    NoSuchName,
    /// The answer did not fit a datagram: ask again over TCP.
    Truncated,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Not an answer to our query (another id, question, or not a response): ignore it.
    NotOurs,
    /// The server failed (SERVFAIL, REFUSED, ...): its RCODE.
    Server(u8),
    Malformed,
}

/// A query for `name` (ASCII, labels of 1..=63 bytes, at most 253 bytes) of `qtype`.
pub fn query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let mut q = Vec::with_capacity(name.len() + 32);
    q.extend_from_slice(&id.to_be_bytes());
    // RD set; one question, one additional (OPT).
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1]);
    push_name(&mut q, name)?;
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    // OPT: root owner, type 41, class = payload size, ttl 0, no options.
    q.push(0);
    q.extend_from_slice(&TYPE_OPT.to_be_bytes());
    q.extend_from_slice(&EDNS_PAYLOAD.to_be_bytes());
    q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    Some(q)
}

fn push_name(q: &mut Vec<u8>, name: &str) -> Option<()> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return None;
    }
    for label in name.split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|l| (1..=63).contains(l))?;
        q.push(len);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    Some(())
}

/// Read the response `buf` to the query (`id`, `name`, `qtype`).
pub fn answer(buf: &[u8], id: u16, name: &str, qtype: u16) -> Result<Answer, WireError> {
    let mut r = Reader { b: buf, at: 0 };
    if r.u16()? != id {
        return Err(WireError::NotOurs);
    }
    let flags = r.u16()?;
    let (qr, opcode, tc, rcode) = (
        flags & 0x8000 != 0,
        (flags >> 11) & 0xf,
        flags & 0x0200 != 0,
        (flags & 0xf) as u8,
    );
    if !qr || opcode != 0 {
        return Err(WireError::NotOurs);
    }
    let (qd, an) = (r.u16()?, r.u16()?);
    r.u16()?;
    r.u16()?;
    if qd != 1 {
        return Err(WireError::NotOurs);
    }
    let asked = r.name()?;
    let want = name.strip_suffix('.').unwrap_or(name);
    if !asked.eq_ignore_ascii_case(want) || r.u16()? != qtype || r.u16()? != CLASS_IN {
        return Err(WireError::NotOurs);
    }
    if tc {
        return Ok(Answer::Truncated);
    }
    match rcode {
        0 => {}
        3 => return Ok(Answer::NoSuchName),
        c => return Err(WireError::Server(c)),
    }
    let mut addrs = Vec::new();
    let mut ttl = u32::MAX;
    for _ in 0..an {
        r.skip_name()?;
        let (t, class) = (r.u16()?, r.u16()?);
        let (hi, lo) = (r.u16()?, r.u16()?);
        // RFC 2181: a TTL with the top bit set is read as 0.
        let rec_ttl = (u32::from(hi) << 16 | u32::from(lo)) & 0x7fff_ffff;
        let len = usize::from(r.u16()?);
        let data = r.take(len)?;
        if class != CLASS_IN || t != qtype || addrs.len() >= MAX_ADDRESSES {
            continue; // CNAMEs and the like: the addresses that follow are what counts
        }
        let ip = match (t, data.len()) {
            (TYPE_A, 4) => IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3])),
            (TYPE_AAAA, 16) => {
                let mut o = [0u8; 16];
                o.copy_from_slice(data);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            _ => return Err(WireError::Malformed),
        };
        addrs.push(ip);
        ttl = ttl.min(rec_ttl);
    }
    let ttl = if addrs.is_empty() { 0 } else { ttl };
    Ok(Answer::Addresses(addrs, ttl))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let s = self
            .b
            .get(self.at..self.at.saturating_add(n))
            .ok_or(WireError::Malformed)?;
        self.at += n;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A name, following compression pointers (bounded), as dotted text.
    fn name(&mut self) -> Result<String, WireError> {
        let mut out = String::new();
        let mut pos = self.at;
        let mut jumped = false;
        for _ in 0..128 {
            let len = *self.b.get(pos).ok_or(WireError::Malformed)?;
            match len {
                0 => {
                    if !jumped {
                        self.at = pos + 1;
                    }
                    return Ok(out);
                }
                1..=63 => {
                    let l = usize::from(len);
                    let label = self
                        .b
                        .get(pos + 1..pos + 1 + l)
                        .ok_or(WireError::Malformed)?;
                    if !out.is_empty() {
                        out.push('.');
                    }
                    // Bytes outside printable ASCII cannot match a name we asked for.
                    out.extend(label.iter().map(|&c| {
                        if c.is_ascii_graphic() {
                            char::from(c)
                        } else {
                            '\u{fffd}'
                        }
                    }));
                    if out.len() > 255 {
                        return Err(WireError::Malformed);
                    }
                    pos += 1 + l;
                }
                0xc0..=0xff => {
                    let lo = *self.b.get(pos + 1).ok_or(WireError::Malformed)?;
                    if !jumped {
                        self.at = pos + 2;
                    }
                    jumped = true;
                    pos = (usize::from(len & 0x3f) << 8) | usize::from(lo);
                }
                _ => return Err(WireError::Malformed),
            }
        }
        Err(WireError::Malformed)
    }

    fn skip_name(&mut self) -> Result<(), WireError> {
        self.name().map(|_| ())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A response to `q` with these answer records (type, rdata), the owner a pointer to
    /// the question.
    pub fn response(q: &[u8], rcode: u8, tc: bool, records: &[(u16, Vec<u8>)]) -> Vec<u8> {
        // The question ends 11 bytes before the end (the OPT record).
        let qend = q.len() - 11;
        let mut r = q[..qend].to_vec();
        r[2] = 0x81 | if tc { 0x02 } else { 0 };
        r[3] = 0x80 | rcode;
        r[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        r[10..12].copy_from_slice(&[0, 0]);
        for (t, data) in records {
            r.extend_from_slice(&[0xc0, 12]);
            r.extend_from_slice(&t.to_be_bytes());
            r.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
            r.extend_from_slice(&(data.len() as u16).to_be_bytes());
            r.extend_from_slice(data);
        }
        r
    }

    #[test]
    fn queries() {
        let q = query(0xabcd, "Example.com.", TYPE_A).unwrap();
        assert_eq!(&q[..2], &[0xab, 0xcd]);
        assert_eq!(&q[12..25], b"\x07Example\x03com\x00");
        assert!(query(1, "", TYPE_A).is_none());
        assert!(query(1, "a..b", TYPE_A).is_none());
        assert!(query(1, &"a".repeat(64), TYPE_A).is_none());
        assert!(query(1, &["a"; 130].join("."), TYPE_A).is_none());
    }

    #[test]
    fn answers() {
        let q = query(7, "x.test", TYPE_A).unwrap();
        let cname = b"\x01y\x04test\x00".to_vec();
        let ok = response(
            &q,
            0,
            false,
            &[
                (5, cname),
                (TYPE_A, vec![10, 0, 0, 1]),
                (TYPE_A, vec![11, 0, 0, 1]),
            ],
        );
        assert_eq!(
            answer(&ok, 7, "x.test", TYPE_A),
            Ok(Answer::Addresses(
                vec!["10.0.0.1".parse().unwrap(), "11.0.0.1".parse().unwrap()],
                60
            ))
        );
        // Case-insensitive question match (0x20-mixing resolvers).
        assert!(answer(&ok, 7, "X.TEST", TYPE_A).is_ok());
        assert_eq!(answer(&ok, 8, "x.test", TYPE_A), Err(WireError::NotOurs));
        assert_eq!(answer(&ok, 7, "z.test", TYPE_A), Err(WireError::NotOurs));
        assert_eq!(answer(&ok, 7, "x.test", TYPE_AAAA), Err(WireError::NotOurs));
        assert_eq!(
            answer(&q, 7, "x.test", TYPE_A),
            Err(WireError::NotOurs),
            "a query is no answer"
        );
        let nx = response(&q, 3, false, &[]);
        assert_eq!(answer(&nx, 7, "x.test", TYPE_A), Ok(Answer::NoSuchName));
        let fail = response(&q, 2, false, &[]);
        assert_eq!(
            answer(&fail, 7, "x.test", TYPE_A),
            Err(WireError::Server(2))
        );
        let tc = response(&q, 0, true, &[]);
        assert_eq!(answer(&tc, 7, "x.test", TYPE_A), Ok(Answer::Truncated));
        let bad = response(&q, 0, false, &[(TYPE_A, vec![1, 2, 3])]);
        assert_eq!(answer(&bad, 7, "x.test", TYPE_A), Err(WireError::Malformed));
        let q6 = query(9, "x.test", TYPE_AAAA).unwrap();
        let mut v6 = vec![0u8; 16];
        v6[0] = 0x20;
        v6[15] = 1;
        let ok6 = response(&q6, 0, false, &[(TYPE_AAAA, v6)]);
        assert_eq!(
            answer(&ok6, 9, "x.test", TYPE_AAAA),
            Ok(Answer::Addresses(vec!["2000::1".parse().unwrap()], 60))
        );
    }

    #[test]
    fn pointer_loops_end() {
        let q = query(7, "x.test", TYPE_A).unwrap();
        let mut r = response(&q, 0, false, &[(TYPE_A, vec![1, 1, 1, 1])]);
        // Make the answer's owner point at itself.
        let at = q.len() - 11;
        r[at] = 0xc0 | ((at >> 8) as u8);
        r[at + 1] = at as u8;
        assert_eq!(answer(&r, 7, "x.test", TYPE_A), Err(WireError::Malformed));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes(bytes: Vec<u8>) {
            let _ = answer(&bytes, 7, "x.test", TYPE_A);
        }

        #[test]
        fn any_mutation(at: usize, byte: u8) {
            let q = query(7, "x.test", TYPE_A).unwrap();
            let mut r = response(&q, 0, false, &[(TYPE_A, vec![1, 1, 1, 1])]);
            let i = at % r.len();
            r[i] = byte;
            let _ = answer(&r, 7, "x.test", TYPE_A);
        }
    }
}
