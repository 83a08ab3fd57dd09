//! The first bytes of a CONNECT tunnel must be a TLS ClientHello; its server name (SNI) is
//! what the client will verify the certificate against, so it must be the CONNECT target.
//! A small bounded parser of the handshake records (RFC 8446 §4.1.2, RFC 6066 §3), pure
//! and total: any bytes give an answer, never a panic, never an unbounded wait.

/// The most bytes read before a ClientHello must be complete (records and headers).
pub const MAX_HELLO_BYTES: usize = 32 << 10;

const RECORD_HEADER: usize = 5;
const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
/// TLSPlaintext.length may not exceed 2^14.
const MAX_RECORD: usize = 1 << 14;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    /// Not enough bytes yet: read more (up to [`MAX_HELLO_BYTES`]).
    NeedMore,
    /// Not a TLS ClientHello, or a malformed one: the reason.
    Refused(&'static str),
    /// A ClientHello, with its host name if it sent one (lower case, no trailing dot).
    Hello { server_name: Option<String> },
}

/// Parse what the client has sent so far.
pub fn parse(buf: &[u8]) -> Parse {
    match handshake_message(buf) {
        Ok(Some(msg)) => match client_hello(&msg) {
            Ok(server_name) => Parse::Hello { server_name },
            Err(why) => Parse::Refused(why),
        },
        Ok(None) if buf.len() >= MAX_HELLO_BYTES => Parse::Refused("the ClientHello is too large"),
        Ok(None) => Parse::NeedMore,
        Err(why) => Parse::Refused(why),
    }
}

/// The first handshake message, joined from as many records as it spans; `None` when
/// more bytes are needed.
fn handshake_message(buf: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
    let mut msg = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + RECORD_HEADER) else {
            // Judge what is there already: a wrong first byte need not wait for more.
            return match buf.get(at) {
                Some(&t) if t != CONTENT_HANDSHAKE => Err("not a TLS handshake"),
                _ => Ok(None),
            };
        };
        if header[0] != CONTENT_HANDSHAKE {
            return Err("not a TLS handshake");
        }
        if header[1] != 3 {
            return Err("not a TLS record version");
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD {
            return Err("a TLS record of invalid length");
        }
        let Some(fragment) = buf.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else {
            return Ok(None);
        };
        msg.extend_from_slice(fragment);
        at += RECORD_HEADER + len;
        if msg.len() >= 4 {
            if msg[0] != HANDSHAKE_CLIENT_HELLO {
                return Err("the first handshake message is not a ClientHello");
            }
            let body =
                (usize::from(msg[1]) << 16) | (usize::from(msg[2]) << 8) | usize::from(msg[3]);
            if body + 4 > MAX_HELLO_BYTES {
                return Err("the ClientHello is too large");
            }
            if msg.len() >= body + 4 {
                msg.truncate(body + 4);
                return Ok(Some(msg));
            }
        }
    }
}

/// A bounds-checked reader over a byte slice.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.b.len() {
            return Err("a truncated ClientHello");
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    /// A vector with a `width`-byte length prefix.
    fn vec(&mut self, width: usize) -> Result<Reader<'a>, &'static str> {
        let n = match width {
            1 => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        Ok(Reader { b: self.take(n)? })
    }
    fn done(&self) -> bool {
        self.b.is_empty()
    }
}

/// The server name of a ClientHello handshake message (type and length included).
fn client_hello(msg: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader {
        b: msg.get(4..).unwrap_or_default(),
    };
    let version = r.u16()?;
    if version >> 8 != 3 {
        return Err("not a TLS ClientHello version");
    }
    r.take(32)?; // random
    let session = r.vec(1)?;
    if session.b.len() > 32 {
        return Err("a ClientHello session id longer than 32 bytes");
    }
    let suites = r.vec(2)?;
    if suites.b.is_empty() || suites.b.len() % 2 != 0 {
        return Err("a ClientHello with malformed cipher suites");
    }
    if r.vec(1)?.done() {
        return Err("a ClientHello with no compression methods");
    }
    if r.done() {
        return Ok(None); // no extensions at all
    }
    let mut exts = r.vec(2)?;
    if !r.done() {
        return Err("bytes after a ClientHello's extensions");
    }
    let mut seen = Vec::new();
    let mut name = None;
    while !exts.done() {
        let kind = exts.u16()?;
        let mut data = exts.vec(2)?;
        if seen.contains(&kind) {
            return Err("a ClientHello repeats an extension");
        }
        seen.push(kind);
        if kind == EXT_SERVER_NAME {
            name = server_name(&mut data)?;
        }
    }
    Ok(name)
}

/// RFC 6066 §3: a list of (type, name); one host_name (type 0) at most.
fn server_name(data: &mut Reader<'_>) -> Result<Option<String>, &'static str> {
    let mut list = data.vec(2)?;
    if !data.done() {
        return Err("bytes after a server_name list");
    }
    let mut host = None;
    while !list.done() {
        let kind = list.u8()?;
        let name = list.vec(2)?;
        if kind != 0 {
            continue;
        }
        if host.is_some() {
            return Err("a ClientHello with two host names");
        }
        host = Some(name.b);
    }
    let Some(host) = host else {
        return Ok(None);
    };
    let text = std::str::from_utf8(host).map_err(|_| "a server name that is not ASCII")?;
    let text = text.strip_suffix('.').unwrap_or(text);
    // Labels must not be empty (`a..b`, `.a`, `a..`): such a name is no host name, and
    // one trailing dot is all a fully qualified name may carry.
    if text.is_empty()
        || text.len() > 253
        || text.split('.').any(str::is_empty)
        || !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err("a server name that is not a host name");
    }
    Ok(Some(text.to_ascii_lowercase()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ClientHello with these extensions (type, data), in one record.
    pub fn hello(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]);
        body.extend_from_slice(&[1, 0]);
        let mut e = Vec::new();
        for (t, d) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(d.len() as u16).to_be_bytes());
            e.extend_from_slice(d);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        msg.extend_from_slice(&body);
        records(&msg, MAX_RECORD)
    }

    /// `msg` split into handshake records of at most `size` bytes.
    pub fn records(msg: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in msg.chunks(size) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    pub fn sni(names: &[(u8, &[u8])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (t, n) in names {
            list.push(*t);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n);
        }
        let mut d = (list.len() as u16).to_be_bytes().to_vec();
        d.extend_from_slice(&list);
        d
    }

    fn name(s: &str) -> Parse {
        Parse::Hello {
            server_name: Some(s.to_string()),
        }
    }

    #[test]
    fn server_names() {
        let cases: Vec<(Vec<u8>, Parse)> = vec![
            (
                hello(&[(0, sni(&[(0, b"example.com")]))]),
                name("example.com"),
            ),
            (
                hello(&[(0, sni(&[(0, b"Example.COM.")]))]),
                name("example.com"),
            ),
            (
                hello(&[
                    (10, vec![0, 2, 0, 29]),
                    (0, sni(&[(0, b"a.b")])),
                    (16, vec![0, 0]),
                ]),
                name("a.b"),
            ),
            (hello(&[]), Parse::Hello { server_name: None }),
            (
                hello(&[(10, vec![0, 2, 0, 29])]),
                Parse::Hello { server_name: None },
            ),
            (
                hello(&[(0, sni(&[(0, b"a.com"), (0, b"b.com")]))]),
                Parse::Refused("a ClientHello with two host names"),
            ),
            (
                hello(&[(0, sni(&[(0, b"a.com")])), (0, sni(&[(0, b"b.com")]))]),
                Parse::Refused("a ClientHello repeats an extension"),
            ),
            (
                hello(&[(0, sni(&[(0, b"a b")]))]),
                Parse::Refused("a server name that is not a host name"),
            ),
            (
                hello(&[(0, sni(&[(0, b"")]))]),
                Parse::Refused("a server name that is not a host name"),
            ),
            // Found by the egress_front fuzz target: two trailing dots kept one.
            (
                hello(&[(0, sni(&[(0, b"a.example..")]))]),
                Parse::Refused("a server name that is not a host name"),
            ),
            (
                hello(&[(0, sni(&[(0, b"a..example")]))]),
                Parse::Refused("a server name that is not a host name"),
            ),
            (
                hello(&[(0, sni(&[(0, "é.com".as_bytes())]))]),
                Parse::Refused("a server name that is not a host name"),
            ),
            (
                hello(&[(0, vec![0, 9, 0])]),
                Parse::Refused("a truncated ClientHello"),
            ),
            (
                b"GET / HTTP/1.1\r\n".to_vec(),
                Parse::Refused("not a TLS handshake"),
            ),
            (b"G".to_vec(), Parse::Refused("not a TLS handshake")),
            (vec![22, 3], Parse::NeedMore),
            (vec![], Parse::NeedMore),
            (
                vec![22, 2, 0, 0, 5],
                Parse::Refused("not a TLS record version"),
            ),
            (
                vec![22, 3, 1, 0, 0],
                Parse::Refused("a TLS record of invalid length"),
            ),
            (
                vec![22, 3, 1, 0x40, 1],
                Parse::Refused("a TLS record of invalid length"),
            ),
            (
                records(&[2, 0, 0, 1, 0], 100),
                Parse::Refused("the first handshake message is not a ClientHello"),
            ),
            (
                vec![21, 3, 3, 0, 2, 2, 40],
                Parse::Refused("not a TLS handshake"),
            ),
        ];
        for (i, (bytes, want)) in cases.iter().enumerate() {
            assert_eq!(&parse(bytes), want, "case {i}");
        }
    }

    #[test]
    fn a_hello_split_over_records_and_reads() {
        let one = hello(&[(0, sni(&[(0, b"split.example")]))]);
        let msg = one[5..].to_vec();
        let split = records(&msg, 7);
        for cut in 0..split.len() {
            assert_eq!(parse(&split[..cut]), Parse::NeedMore, "cut at {cut}");
        }
        assert_eq!(parse(&split), name("split.example"));
        // Bytes after the ClientHello (early data) do not change the answer.
        let mut more = split.clone();
        more.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
        assert_eq!(parse(&more), name("split.example"));
    }

    #[test]
    fn an_oversized_hello_is_refused_not_awaited() {
        let mut msg = vec![1, 0xff, 0xff, 0xff];
        msg.extend_from_slice(&[0; 100]);
        assert_eq!(
            parse(&records(&msg, 100)),
            Parse::Refused("the ClientHello is too large")
        );
    }

    proptest::proptest! {
        /// Any bytes: an answer, never a panic; a refusal never turns into a hello with
        /// more bytes.
        #[test]
        fn any_bytes(bytes: Vec<u8>) {
            let _ = parse(&bytes);
        }

        #[test]
        fn any_bytes_behind_a_record_header(tail: Vec<u8>) {
            let mut b = vec![22, 3, 1];
            b.extend_from_slice(&(tail.len().min(MAX_RECORD) as u16).to_be_bytes());
            b.extend_from_slice(&tail);
            let _ = parse(&b);
        }

        /// Any mutation of one byte of a real hello parses to something without panic.
        #[test]
        fn mutated_hellos(at: usize, byte: u8) {
            let mut h = hello(&[(10, vec![0, 2, 0, 29]), (0, sni(&[(0, b"example.com")]))]);
            let i = at % h.len();
            h[i] = byte;
            let _ = parse(&h);
        }
    }
}
