//! Content codings on a checked destination: its answer is scanned for the credential the
//! gateway added, and a compressed body hides it from a scan, so a body in gzip, deflate or
//! br is decoded here and goes on decoded (its `Content-Encoding` and `Content-Length`
//! removed: the client gets what it would have had after decoding itself). The request
//! asks only for the codings read here; an answer in any other is refused.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING};

/// A content coding decoded here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Deflate,
    Brotli,
}

fn coding(token: &str) -> Option<Coding> {
    match token {
        "gzip" | "x-gzip" => Some(Coding::Gzip),
        "deflate" => Some(Coding::Deflate),
        "br" => Some(Coding::Brotli),
        _ => None,
    }
}

/// An answer's `Content-Encoding` that is not read here, or more than one stacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unread;

/// The answer's coding: `None` for none (or `identity`).
pub fn of(headers: &HeaderMap) -> Result<Option<Coding>, Unread> {
    let mut tokens = Vec::new();
    for v in headers.get_all(CONTENT_ENCODING) {
        let v = v.to_str().map_err(|_| Unread)?;
        for t in v.split(',') {
            let t = t.trim().to_ascii_lowercase();
            if !t.is_empty() && t != "identity" {
                tokens.push(t);
            }
        }
    }
    match tokens.as_slice() {
        [] => Ok(None),
        [one] => coding(one).map(Some).ok_or(Unread),
        _ => Err(Unread),
    }
}

/// What the request's `Accept-Encoding` becomes: the client's own list less every coding
/// not read here (and `*`); `identity` when nothing is left or it sent none (no header
/// would let a server choose any coding).
pub fn accepted(headers: &HeaderMap) -> HeaderValue {
    let mut kept: Vec<String> = Vec::new();
    for v in headers.get_all(ACCEPT_ENCODING) {
        let Ok(v) = v.to_str() else { continue };
        for item in v.split(',') {
            let item = item.trim();
            let name = item
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if coding(&name).is_some() || name == "identity" {
                kept.push(item.to_string());
            }
        }
    }
    if kept.is_empty() {
        return HeaderValue::from_static("identity");
    }
    HeaderValue::from_str(&kept.join(", ")).unwrap_or(HeaderValue::from_static("identity"))
}

/// Input decoded at a time: bounds what one step can expand to.
const SLICE: usize = 1 << 10;
/// Most output one [`SLICE`] may decode to (gzip's deflate tops out near 1,032 to 1);
/// more is a decompression bomb, and the answer is cut.
const MAX_OUT_PER_SLICE: usize = 8 << 20;

/// Where a decoder writes: refuses to grow past [`MAX_OUT_PER_SLICE`] between drains.
#[derive(Default)]
struct Out(Vec<u8>);

impl Write for Out {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + b.len() > MAX_OUT_PER_SLICE {
            return Err(std::io::Error::other("the answer expands too far"));
        }
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum State {
    /// Deflate, until its first two bytes say zlib (RFC 9110's) or raw (what some send).
    Sniff(Vec<u8>),
    Gzip(flate2::write::MultiGzDecoder<Out>),
    Zlib(flate2::write::ZlibDecoder<Out>),
    Raw(flate2::write::DeflateDecoder<Out>),
    Brotli(Box<brotli_decompressor::DecompressorWriter<Out>>),
}

/// One body's decoder: [`Decoder::push`] its bytes, then [`Decoder::finish`].
pub struct Decoder {
    state: State,
    /// Whether any byte came: an empty body (HEAD, 304) is no stream at all.
    seen: bool,
}

fn bad() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "the destination's compressed answer could not be decoded",
    )
}

impl Decoder {
    pub fn new(c: Coding) -> Decoder {
        let state = match c {
            Coding::Gzip => State::Gzip(flate2::write::MultiGzDecoder::new(Out::default())),
            Coding::Deflate => State::Sniff(Vec::new()),
            Coding::Brotli => State::Brotli(Box::new(
                brotli_decompressor::DecompressorWriter::new(Out::default(), 4096),
            )),
        };
        Decoder { state, seen: false }
    }

    /// What was decoded since the last call.
    fn drain(&mut self) -> Vec<u8> {
        let out = match &mut self.state {
            State::Sniff(_) => return Vec::new(),
            State::Gzip(d) => d.get_mut(),
            State::Zlib(d) => d.get_mut(),
            State::Raw(d) => d.get_mut(),
            State::Brotli(d) => d.get_mut(),
        };
        std::mem::take(&mut out.0)
    }

    /// The decoded bytes of `input` (at most [`SLICE`] of it at a time is wise).
    pub fn push(&mut self, input: &[u8]) -> std::io::Result<Vec<u8>> {
        if input.is_empty() {
            return Ok(Vec::new());
        }
        self.seen = true;
        let input = match &mut self.state {
            State::Sniff(head) => {
                head.extend_from_slice(input);
                if head.len() < 2 {
                    return Ok(Vec::new());
                }
                let (b0, b1) = (head[0], head[1]);
                let zlib = b0 & 0x0f == 8 && (u16::from(b0) << 8 | u16::from(b1)) % 31 == 0;
                let head = std::mem::take(head);
                self.state = if zlib {
                    State::Zlib(flate2::write::ZlibDecoder::new(Out::default()))
                } else {
                    State::Raw(flate2::write::DeflateDecoder::new(Out::default()))
                };
                return self.push(&head);
            }
            _ => input,
        };
        let r = match &mut self.state {
            State::Sniff(_) => Ok(()),
            State::Gzip(d) => d.write_all(input),
            State::Zlib(d) => d.write_all(input),
            State::Raw(d) => d.write_all(input),
            State::Brotli(d) => d.write_all(input),
        };
        r.map_err(|_| bad())?;
        Ok(self.drain())
    }

    /// What is left once the body ended; an error when the stream was cut short.
    pub fn finish(&mut self) -> std::io::Result<Vec<u8>> {
        if !self.seen {
            return Ok(Vec::new());
        }
        let r = match &mut self.state {
            State::Sniff(_) => Err(bad()),
            State::Gzip(d) => d.try_finish(),
            State::Zlib(d) => d.try_finish(),
            State::Raw(d) => d.try_finish(),
            State::Brotli(d) => d.close().map_err(|_| bad()),
        };
        r.map_err(|_| bad())?;
        Ok(self.drain())
    }
}

/// A body decoded as it comes, a [`SLICE`] at a time; trailers do not go on.
pub struct Decoded<B> {
    inner: B,
    dec: Decoder,
    pending: Bytes,
    ended: bool,
}

impl<B> Decoded<B> {
    pub fn new(inner: B, c: Coding) -> Decoded<B> {
        Decoded {
            inner,
            dec: Decoder::new(c),
            pending: Bytes::new(),
            ended: false,
        }
    }
}

impl<B> Body for Decoded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(SLICE);
                let slice = this.pending.split_to(n);
                match this.dec.push(&slice) {
                    Ok(out) if out.is_empty() => continue,
                    Ok(out) => return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out))))),
                    Err(e) => {
                        this.ended = true;
                        this.pending = Bytes::new();
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.pending = data;
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    match this.dec.finish() {
                        Ok(out) if out.is_empty() => return Poll::Ready(None),
                        Ok(out) => return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out))))),
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.pending.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    use flate2::Compression;

    const TEXT: &[u8] = b"a registry's answer, Bearer tok-0123456789, and more of it\n";

    fn decode_all(c: Coding, data: &[u8], chunk: usize) -> std::io::Result<Vec<u8>> {
        let mut d = Decoder::new(c);
        let mut out = Vec::new();
        for piece in data.chunks(chunk) {
            out.extend(d.push(piece)?);
        }
        out.extend(d.finish()?);
        Ok(out)
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// One stored brotli meta-block (window 16), then the last, empty one.
    fn br(data: &[u8]) -> Vec<u8> {
        let bits = ((data.len() as u32 - 1) << 4) | (1 << 20);
        let mut out = bits.to_le_bytes()[..3].to_vec();
        out.extend_from_slice(data);
        out.push(0x03);
        out
    }

    #[test]
    fn every_coding_decodes_however_it_is_cut() {
        let mut zlib = ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(TEXT).unwrap();
        let mut raw = DeflateEncoder::new(Vec::new(), Compression::default());
        raw.write_all(TEXT).unwrap();
        let two = [gz(TEXT), gz(TEXT)].concat();
        for (c, data, want) in [
            (Coding::Gzip, gz(TEXT), TEXT.to_vec()),
            (Coding::Gzip, two, TEXT.repeat(2)),
            (Coding::Deflate, zlib.finish().unwrap(), TEXT.to_vec()),
            (Coding::Deflate, raw.finish().unwrap(), TEXT.to_vec()),
            (Coding::Brotli, br(TEXT), TEXT.to_vec()),
        ] {
            for chunk in [1, 2, 3, 7, 1024] {
                assert_eq!(
                    decode_all(c, &data, chunk).unwrap(),
                    want,
                    "{c:?} by {chunk}"
                );
            }
        }
        // No body at all (HEAD, 304): nothing, and no error.
        assert_eq!(decode_all(Coding::Gzip, b"", 1).unwrap(), b"");
    }

    #[test]
    fn a_cut_or_broken_stream_is_an_error_never_a_shorter_answer() {
        let z = gz(TEXT);
        assert!(decode_all(Coding::Gzip, &z[..z.len() - 4], 5).is_err());
        assert!(decode_all(Coding::Gzip, &z[..z.len() / 2], 5).is_err());
        assert!(decode_all(Coding::Gzip, b"not gzip at all", 5).is_err());
        let b = br(TEXT);
        assert!(decode_all(Coding::Brotli, &b[..b.len() - 1], 5).is_err());
        assert!(decode_all(Coding::Deflate, b"x", 5).is_err());
        let mut zlib = ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(TEXT).unwrap();
        let zlib = zlib.finish().unwrap();
        assert!(decode_all(Coding::Deflate, &zlib[..zlib.len() - 2], 5).is_err());
        let mut raw = DeflateEncoder::new(Vec::new(), Compression::default());
        raw.write_all(TEXT).unwrap();
        let raw = raw.finish().unwrap();
        assert!(decode_all(Coding::Deflate, &raw[..raw.len() / 2], 5).is_err());
    }

    #[test]
    fn a_decompression_bomb_is_cut() {
        let zeros = vec![0u8; 64 << 20];
        let z = gz(&zeros);
        assert!(z.len() < 128 << 10, "{}", z.len());
        // Fed whole, one push would expand past the bound.
        assert!(decode_all(Coding::Gzip, &z, z.len()).is_err());
        // A slice at a time, it decodes (deflate cannot outgrow the bound per slice).
        assert_eq!(
            decode_all(Coding::Gzip, &z, SLICE).unwrap().len(),
            zeros.len()
        );
    }

    #[test]
    fn codings_read_and_asked_for() {
        let h = |v: &[&str]| {
            let mut m = HeaderMap::new();
            for x in v {
                m.append(CONTENT_ENCODING, HeaderValue::from_str(x).unwrap());
            }
            m
        };
        assert_eq!(of(&h(&[])), Ok(None));
        assert_eq!(of(&h(&["identity"])), Ok(None));
        assert_eq!(of(&h(&["GZIP"])), Ok(Some(Coding::Gzip)));
        assert_eq!(of(&h(&["br"])), Ok(Some(Coding::Brotli)));
        assert_eq!(of(&h(&["deflate"])), Ok(Some(Coding::Deflate)));
        assert_eq!(of(&h(&["zstd"])), Err(Unread));
        assert_eq!(of(&h(&["gzip, br"])), Err(Unread));
        assert_eq!(of(&h(&["gzip", "gzip"])), Err(Unread));
        let a = |v: Option<&str>| {
            let mut m = HeaderMap::new();
            if let Some(v) = v {
                m.insert(ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            }
            accepted(&m).to_str().unwrap().to_string()
        };
        assert_eq!(a(None), "identity");
        assert_eq!(a(Some("gzip, deflate, br, zstd")), "gzip, deflate, br");
        assert_eq!(a(Some("zstd;q=1, gzip;q=0.5")), "gzip;q=0.5");
        assert_eq!(a(Some("*")), "identity");
        assert_eq!(a(Some("compress")), "identity");
    }
}
