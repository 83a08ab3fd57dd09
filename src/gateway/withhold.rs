//! The run's secrets kept out of what upstreams answer: an upstream (a provider, GitHub)
//! that echoes a credential Airlock sent it (in a header, in an error message, anywhere in
//! a body) must not hand it to the agent. Every copy, in headers and body, streamed or
//! not, is replaced by [`MARK`] as the answer passes, and the exchange's end journals that
//! it happened (`AIRLOCK_EVENT=withheld`).
//!
//! A stream is scanned as it comes, never held back: only a frame's tail that could be the
//! start of a secret (a secret split across two frames) waits for the next frame.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderValue};

use super::CallLog;

/// What an echoed secret becomes.
pub const MARK: &str = "[withheld by Airlock]";

/// Shortest secret looked for: a shorter one would match ordinary text.
const MIN_LEN: usize = 4;

/// Shortest run of base64 looked for: a shorter one would match ordinary text.
const MIN_B64_LEN: usize = 12;

/// Every spelling of `secret` an upstream could hand back: as sent, as a JSON string
/// carries it, and as base64 (standard and URL-safe) would carry it inside a longer text,
/// such as `Basic` of `user:secret`: for each of the three alignments the secret can have
/// in that text, the characters made of its bytes alone.
pub fn forms(secret: &str) -> Vec<Vec<u8>> {
    let mut out = vec![secret.as_bytes().to_vec()];
    if let Ok(q) = serde_json::to_string(secret) {
        // Only the outer quotes go: an escaped quote at either end stays.
        let inner = &q[1..q.len() - 1];
        out.push(inner.as_bytes().to_vec());
    }
    let b = secret.as_bytes();
    for lead in 0..3usize {
        let mut data = vec![0u8; lead];
        data.extend_from_slice(b);
        // Character i holds bits 6i..6i+6: those wholly inside the secret's bytes.
        let first = (8 * lead).div_ceil(6);
        let last = 8 * (lead + b.len()) / 6;
        if last < first + MIN_B64_LEN {
            continue;
        }
        for enc in [
            crate::credentials::github_app::b64std(&data),
            crate::credentials::github_app::b64url(&data),
        ] {
            out.push(enc.as_bytes()[first..last].to_vec());
        }
    }
    out
}

/// Every secret of one run in every spelling [`forms`] names. Shows none of them in Debug.
#[derive(Clone, Default)]
pub struct Secrets {
    forms: Arc<Vec<Vec<u8>>>,
    find: Option<Arc<regex::bytes::Regex>>,
    /// The same, blind to case: a header's name reaches the agent lower-cased.
    find_any_case: Option<Arc<regex::bytes::Regex>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} forms withheld)", self.forms.len())
    }
}

impl Secrets {
    /// `secrets`: each as the upstream was sent it (a bearer token, a Basic credential's
    /// encoding, a key).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Secrets {
        let mut forms: Vec<Vec<u8>> = Vec::new();
        for s in secrets.into_iter().filter(|s| s.len() >= MIN_LEN) {
            forms.extend(self::forms(s));
        }
        // The longest first, so one that holds another is withheld whole.
        forms.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        forms.dedup();
        let pattern = forms
            .iter()
            .map(|f| f.iter().map(|b| format!("\\x{b:02x}")).collect::<String>())
            .collect::<Vec<_>>()
            .join("|");
        let build = |flags: &str| {
            (!forms.is_empty())
                .then(|| {
                    regex::bytes::RegexBuilder::new(&format!("(?{flags}:{pattern})"))
                        .size_limit(64 << 20)
                        .build()
                        .ok()
                })
                .flatten()
                .map(Arc::new)
        };
        let find = build("-u");
        let find_any_case = build("i-u");
        Secrets {
            forms: Arc::new(forms),
            find,
            find_any_case,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// `text` with every secret replaced by [`MARK`], and how many were.
    pub fn text(&self, text: &str) -> (String, usize) {
        let (out, n) = self.replace(text.as_bytes());
        // The mark is ASCII and every form is whole UTF-8 or ASCII base64: cutting one out
        // leaves valid UTF-8; should it not, nothing of the text goes on.
        match String::from_utf8(out) {
            Ok(s) => (s, n),
            Err(_) => (MARK.to_string(), n.max(1)),
        }
    }

    /// `text` with every secret replaced, and how many were.
    fn replace(&self, text: &[u8]) -> (Vec<u8>, usize) {
        let Some(re) = &self.find else {
            return (text.to_vec(), 0);
        };
        let mut out = Vec::with_capacity(text.len());
        let (mut at, mut n) = (0, 0);
        for m in re.find_iter(text) {
            out.extend_from_slice(&text[at..m.start()]);
            out.extend_from_slice(MARK.as_bytes());
            at = m.end();
            n += 1;
        }
        out.extend_from_slice(&text[at..]);
        (out, n)
    }

    /// How many bytes at the end of `tail` could be the start of a secret.
    fn pending(&self, tail: &[u8]) -> usize {
        let firsts = |b: u8| self.forms.iter().any(|f| f[0] == b);
        let longest = self.forms.first().map_or(0, Vec::len);
        let most = longest.saturating_sub(1).min(tail.len());
        (1..=most)
            .rev()
            .find(|&k| {
                let end = &tail[tail.len() - k..];
                firsts(end[0]) && self.forms.iter().any(|f| f.len() > k && f.starts_with(end))
            })
            .unwrap_or(0)
    }

    /// The headers with every secret in their values replaced, and every header whose
    /// name holds one (in any case) dropped; how many were.
    pub fn headers(&self, h: &mut HeaderMap) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut n = 0;
        if let Some(re) = &self.find_any_case {
            let named: Vec<_> = h
                .keys()
                .filter(|k| re.is_match(k.as_str().as_bytes()))
                .cloned()
                .collect();
            for k in named {
                n += h.get_all(&k).iter().count();
                h.remove(&k);
            }
        }
        for v in h.values_mut() {
            let (text, k) = self.replace(v.as_bytes());
            if k > 0 {
                n += k;
                // The mark is visible ASCII: what was a valid value still is.
                *v = HeaderValue::from_bytes(&text)
                    .unwrap_or_else(|_| HeaderValue::from_static(MARK));
            }
        }
        n
    }

    /// A streaming scanner for one body.
    pub fn scanner(&self) -> Scanner {
        Scanner {
            secrets: self.clone(),
            carry: Vec::new(),
            found: 0,
        }
    }
}

/// One body's bytes as they pass: [`Scanner::push`] each chunk, then [`Scanner::end`].
pub struct Scanner {
    secrets: Secrets,
    /// The end of the last chunk that could be the start of a secret.
    carry: Vec<u8>,
    /// Secrets withheld so far.
    pub found: usize,
}

impl Scanner {
    /// What of `chunk` may go on now (`chunk` itself when nothing is held or withheld).
    pub fn push(&mut self, chunk: Bytes) -> Bytes {
        let Some(re) = &self.secrets.find else {
            return chunk;
        };
        if self.carry.is_empty() && !re.is_match(&chunk) && self.secrets.pending(&chunk) == 0 {
            return chunk;
        }
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(&chunk);
        // Held back: the longest end that could start a secret, and a secret found whole
        // that runs into it (it is withheld with the next chunk, when what follows it is
        // known: a longer secret may start the same way).
        let mut cut = buf.len() - self.secrets.pending(&buf);
        if let Some(m) = re
            .find_iter(&buf)
            .find(|m| m.start() < cut && m.end() > cut)
        {
            cut = m.start();
        }
        self.carry = buf.split_off(cut);
        let (out, n) = self.secrets.replace(&buf);
        self.found += n;
        Bytes::from(out)
    }

    /// What was held back, at the body's end: withheld where it is a secret.
    pub fn end(&mut self) -> Bytes {
        let (out, n) = self.secrets.replace(&std::mem::take(&mut self.carry));
        self.found += n;
        Bytes::from(out)
    }
}

/// One journal record: an upstream's answer echoed the run's secrets, and they were
/// withheld (`AIRLOCK_EVENT=withheld`). No values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithheldRecord {
    /// `provider claude`, `github api`, `github git`.
    pub route: String,
    /// `POST /v1/messages`.
    pub endpoint: String,
    /// Copies withheld from the headers, and from the body.
    pub in_headers: u64,
    pub in_body: u64,
}

/// An answer's body on its way to the agent with every secret withheld; at its end (or
/// when the agent goes away) what was withheld is journaled, once.
pub struct Withheld<B> {
    inner: B,
    scan: Scanner,
    /// The inner body has ended; what was held back is out.
    ended: bool,
    report: Option<(WithheldRecord, Arc<dyn CallLog>)>,
}

impl<B> Withheld<B> {
    /// `record`: the exchange, with the copies already withheld from its headers.
    pub fn new(
        inner: B,
        secrets: &Secrets,
        record: WithheldRecord,
        log: Arc<dyn CallLog>,
    ) -> Withheld<B> {
        Withheld {
            inner,
            scan: secrets.scanner(),
            ended: false,
            report: Some((record, log)),
        }
    }
}

impl<B> Body for Withheld<B>
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
            if this.ended {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers could carry an echo too, and HTTP/1 clients rarely take
                    // them: only data goes on.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let out = this.scan.push(data);
                    // An empty chunk would end a chunked body early: wait for more.
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                Poll::Ready(None) => {
                    this.ended = true;
                    let rest = this.scan.end();
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        // Withholding changes the length.
        SizeHint::default()
    }
}

impl<B> Drop for Withheld<B> {
    fn drop(&mut self) {
        if let Some((mut rec, log)) = self.report.take() {
            rec.in_body = self.scan.found as u64;
            if rec.in_headers + rec.in_body > 0 {
                log.withheld(rec);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-standin-0123456789abcdef";

    fn scan_all(s: &Secrets, text: &[u8], chunk: usize) -> (Vec<u8>, usize) {
        let mut sc = s.scanner();
        let mut out = Vec::new();
        for c in text.chunks(chunk) {
            out.extend(sc.push(Bytes::copy_from_slice(c)));
        }
        out.extend(sc.end());
        (out, sc.found)
    }

    #[test]
    fn every_copy_is_withheld_however_the_stream_is_cut() {
        let s = Secrets::new([KEY, "ghs_token\"with\\quotes"]);
        let text = format!(
            "data: {{\"echo\":\"{KEY}\"}}\n\nmiddle {KEY}{KEY} and ghs_token\\\"with\\\\quotes end sk-stand"
        );
        let want =
            format!("data: {{\"echo\":\"{MARK}\"}}\n\nmiddle {MARK}{MARK} and {MARK} end sk-stand");
        for chunk in [1, 2, 3, 7, 16, 4096] {
            let (out, n) = scan_all(&s, text.as_bytes(), chunk);
            assert_eq!(String::from_utf8(out).unwrap(), want, "chunk {chunk}");
            assert_eq!(n, 4, "chunk {chunk}");
        }
    }

    #[test]
    fn secrets_that_start_alike_or_overlap_are_each_withheld_whole() {
        // One secret the start of another, and one whose end could start another.
        let s = Secrets::new(["tokenAB", "tokenABCDEF", "abcd", "cdxy"]);
        for (text, want) in [
            ("x tokenABCDEF y", format!("x {MARK} y")),
            ("x tokenAB y", format!("x {MARK} y")),
            ("zabcd q", format!("z{MARK} q")),
            ("tokenABC", format!("{MARK}C")),
            ("tokenA", "tokenA".to_string()),
        ] {
            for chunk in 1..=text.len() {
                let (out, _) = scan_all(&s, text.as_bytes(), chunk);
                assert_eq!(String::from_utf8(out).unwrap(), want, "{text} by {chunk}");
            }
        }
    }

    #[test]
    fn a_header_named_after_a_secret_is_dropped_whatever_its_case() {
        let s = Secrets::new(["TokenABC-0123"]);
        let mut h = HeaderMap::new();
        h.insert("x-tokenabc-0123-seen", HeaderValue::from_static("1"));
        h.append("x-tokenabc-0123-seen", HeaderValue::from_static("2"));
        h.insert("x-echo", HeaderValue::from_static("Bearer TokenABC-0123"));
        h.insert("x-other", HeaderValue::from_static("tokenabc-0123"));
        assert_eq!(s.headers(&mut h), 3);
        assert!(!h.contains_key("x-tokenabc-0123-seen"));
        assert_eq!(h["x-echo"], format!("Bearer {MARK}").as_str());
        // A value keeps its case: only the secret as sent is withheld there.
        assert_eq!(h["x-other"], "tokenabc-0123");
    }

    #[test]
    fn nothing_is_held_back_that_cannot_start_a_secret() {
        let s = Secrets::new([KEY]);
        let mut sc = s.scanner();
        // An event's end goes on at once: a stream's first words are not delayed.
        let b = |s: &'static [u8]| Bytes::from_static(s);
        assert_eq!(
            sc.push(b(b"data: {\"a\":1}\n\n")),
            b(b"data: {\"a\":1}\n\n")
        );
        // A possible start waits, and goes on with the next chunk when it is not one.
        assert_eq!(sc.push(b(b"x sk-st")), b(b"x "));
        assert_eq!(sc.push(b(b"op\n")), b(b"sk-stop\n"));
        assert_eq!(sc.found, 0);
        let none = Secrets::new(["abc"]);
        assert!(none.is_empty(), "too short to look for");
        assert_eq!(none.scanner().push(b(b"abc")), b(b"abc"));
    }

    #[test]
    fn a_secret_is_found_json_escaped_and_inside_base64_at_any_alignment() {
        let tok = "tok\"en\\with-quotes-0123456789";
        let s = Secrets::new([tok]);
        let json = serde_json::to_string(&serde_json::json!({"t": tok})).unwrap();
        assert!(!s.text(&json).0.contains("with-quotes"), "{json}");
        // Ending in an escaped quote: only the outer quotes are not part of the form.
        let ends = "abcdefgh\"";
        let e = Secrets::new([ends]);
        let (out, n) = e.text(&serde_json::to_string(ends).unwrap());
        assert_eq!((out.as_str(), n), (format!("\"{MARK}\"").as_str(), 1));
        use crate::credentials::github_app::{b64std, b64url};
        for user in ["", "u", "us", "user", "client-id"] {
            let basic = b64std(format!("{user}:{tok}").as_bytes());
            let (out, n) = s.text(&format!("Basic {basic}"));
            assert!(n >= 1, "{user}: {out}");
            let url = b64url(format!("{user}{tok}").as_bytes());
            assert!(s.text(&url).1 >= 1, "{user}: url-safe");
        }
        // Ordinary base64 of other text is left alone.
        let other = b64std(b"nothing secret in here at all");
        assert_eq!(s.text(&other), (other.clone(), 0));
    }

    #[test]
    fn header_values_are_withheld() {
        let s = Secrets::new([KEY]);
        let mut h = HeaderMap::new();
        h.insert(
            "x-echo",
            HeaderValue::from_str(&format!("key={KEY}")).unwrap(),
        );
        h.insert("x-other", HeaderValue::from_static("fine"));
        assert_eq!(s.headers(&mut h), 1);
        assert_eq!(h["x-echo"], format!("key={MARK}").as_str());
        assert_eq!(h["x-other"], "fine");
        assert!(!format!("{s:?}").contains("sk-"));
    }
}
