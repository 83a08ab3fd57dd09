//! A request path as a destination's `paths` judge it: percent-decoded again and again
//! until nothing changes, since a server (or a proxy before it) may decode more than once
//! and must not find a path other than the one checked. Pure.

/// Why a path cannot be judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not absolute (`/...`).
    NotAbsolute,
    /// A segment is `.` or `..`, as sent or once decoded.
    DotSegment,
    /// A segment decodes to `/` or `\` (a separator the checked path did not have), or
    /// to `?` or `#` (which would end the path where a server decodes it).
    EncodedSeparator,
    /// A segment decodes to a control character (NUL, CR, LF and the like).
    ControlCharacter,
}

impl Refused {
    pub fn reason(self) -> &'static str {
        match self {
            Refused::NotAbsolute => "the path must start with /",
            Refused::DotSegment => {
                "the path has a dot segment (. or ..), as sent or once percent-decoded"
            }
            Refused::EncodedSeparator => {
                "the path has an encoded separator (/, \\, ? or #) inside a segment, as sent or once percent-decoded"
            }
            Refused::ControlCharacter => "the path decodes to a control character",
        }
    }
}

/// One round of percent-decoding; `%` not followed by two hex digits stays as it is.
fn decode_once(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// `s` percent-decoded until stable. Each round that changes anything shortens it, so
/// this ends.
pub fn decode_fully(s: &[u8]) -> Vec<u8> {
    let mut cur = s.to_vec();
    loop {
        let next = decode_once(&cur);
        if next == cur {
            return cur;
        }
        cur = next;
    }
}

/// Every form the path takes as it is decoded, the first as sent and the last decoded
/// until stable: a server may decode any number of times, so a destination's `paths` must
/// take each one. Refused when a segment (split on the `/` the request has) is or becomes
/// a dot segment, or decodes to a separator, `?`, `#` or a control character.
pub fn judged(path: &str) -> Result<Vec<Vec<u8>>, Refused> {
    let rest = path.strip_prefix('/').ok_or(Refused::NotAbsolute)?;
    for seg in rest.split('/') {
        // A raw backslash is a separator to some servers: the same as an encoded one.
        let d = decode_fully(seg.as_bytes());
        if d == b"." || d == b".." {
            return Err(Refused::DotSegment);
        }
        if d.iter().any(|&b| matches!(b, b'/' | b'\\' | b'?' | b'#')) {
            return Err(Refused::EncodedSeparator);
        }
        if d.iter().any(|&b| b < 0x20 || b == 0x7f) {
            return Err(Refused::ControlCharacter);
        }
    }
    // No segment decodes to a separator, so decoding the whole path is decoding each.
    let mut stages = vec![path.as_bytes().to_vec()];
    loop {
        let next = decode_once(&stages[stages.len() - 1]);
        if &next == stages.last().unwrap_or(&next) {
            return Ok(stages);
        }
        stages.push(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_repeats_until_stable() {
        assert_eq!(decode_fully(b"%252e%252e"), b"..");
        assert_eq!(decode_fully(b"%25252F"), b"/");
        assert_eq!(decode_fully(b"a%2"), b"a%2");
        assert_eq!(decode_fully(b"%zz%"), b"%zz%");
        assert_eq!(decode_fully(b"%2541"), b"A");
        assert_eq!(decode_fully(b"100%"), b"100%");
    }

    #[test]
    fn paths_are_judged_as_the_last_decoder_sees_them() {
        let ok = |p: &str| -> Vec<String> {
            judged(p)
                .unwrap()
                .into_iter()
                .map(|s| String::from_utf8(s).unwrap())
                .collect()
        };
        assert_eq!(ok("/pkg/left-pad"), ["/pkg/left-pad"]);
        assert_eq!(ok("/"), ["/"]);
        assert_eq!(ok("/pkg/a%2eb"), ["/pkg/a%2eb", "/pkg/a.b"]);
        assert_eq!(ok("/%2570kg/x"), ["/%2570kg/x", "/%70kg/x", "/pkg/x"]);
        assert_eq!(ok("/pkg/..."), ["/pkg/..."]);
        assert_eq!(ok("/pkg//x"), ["/pkg//x"]);
        assert_eq!(ok("/pkg/x%20y"), ["/pkg/x%20y", "/pkg/x y"]);
        let no = |p: &str| judged(p).unwrap_err();
        assert_eq!(no("pkg/x"), Refused::NotAbsolute);
        assert_eq!(no(""), Refused::NotAbsolute);
        for p in [
            "/pkg/../admin",
            "/pkg/./x",
            "/pkg/%2e%2e/admin",
            "/pkg/%2E./admin",
            "/pkg/%252e%252e/admin",
            "/pkg/%25252e%25252E/admin",
            "/pkg/..",
            "/pkg/%2e",
        ] {
            assert_eq!(no(p), Refused::DotSegment, "{p}");
        }
        for p in [
            "/pkg/..%2fadmin",
            "/pkg/a%2Fb",
            "/pkg/a%252fb",
            "/pkg/a%5cb",
            "/pkg/a\\b",
            "/pkg/..%255c..%255cadmin",
            "/pkg/x%253f/y",
            "/pkg/x%23y",
        ] {
            assert_eq!(no(p), Refused::EncodedSeparator, "{p}");
        }
        for p in ["/pkg/x%00", "/pkg/x%250d%250a", "/pkg/%7f"] {
            assert_eq!(no(p), Refused::ControlCharacter, "{p}");
        }
    }
}
