//! Agent output shown on an operator's terminal. The agent is adversarial: escape
//! sequences in its output could rewrite the screen, set the window title, or write the
//! clipboard (OSC 52). When the destination is a terminal, control characters (except
//! newline and tab), DEL, C1 controls and bidirectional overrides are shown as `\u{..}`.
//! When it is a pipe or a file, the bytes pass unchanged: programs get the exact output.

pub mod filter;

use std::io::{self, IsTerminal, Write};

pub struct TerminalSafe<W: Write> {
    inner: W,
    escape: bool,
    /// Bytes of a UTF-8 sequence split across two writes.
    pending: Vec<u8>,
}

/// How a run's output is shown on this process's stdout and stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Show {
    /// Escaped where it is a terminal, exact into a pipe or file.
    #[default]
    Safe,
    /// Exact everywhere (`--raw`): the operator asked for the agent's bytes.
    Raw,
}

impl TerminalSafe<io::Stdout> {
    pub fn stdout(show: Show) -> Self {
        let out = io::stdout();
        let escape = show == Show::Safe && out.is_terminal();
        TerminalSafe::new(out, escape)
    }
}

impl TerminalSafe<io::Stderr> {
    pub fn stderr(show: Show) -> Self {
        let err = io::stderr();
        let escape = show == Show::Safe && err.is_terminal();
        TerminalSafe::new(err, escape)
    }
}

/// `line` as it may reach a terminal: what [`escape_into`] makes of it.
pub fn escaped(line: &str) -> String {
    let mut out = Vec::with_capacity(line.len());
    escape_into(line.as_bytes(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

impl<W: Write> TerminalSafe<W> {
    pub fn new(inner: W, escape: bool) -> Self {
        TerminalSafe {
            inner,
            escape,
            pending: Vec::new(),
        }
    }
}

/// Whether `c` must not reach a terminal as itself (newline and tab may).
pub fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Escape `bytes` for a terminal, appending to `out`. Invalid UTF-8 bytes become `\xNN`.
/// Returns how many trailing bytes were held back as an unfinished UTF-8 sequence.
pub fn escape_into(bytes: &[u8], out: &mut Vec<u8>) -> usize {
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                push_str(s, out);
                return 0;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                // SAFETY-free: `good` is valid UTF-8 by construction.
                push_str(std::str::from_utf8(good).unwrap_or_default(), out);
                match e.error_len() {
                    Some(n) => {
                        for b in &bad[..n] {
                            out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                        }
                        rest = &bad[n..];
                    }
                    // An incomplete sequence at the end: the next write may finish it.
                    None => return bad.len(),
                }
            }
        }
    }
}

fn push_str(s: &str, out: &mut Vec<u8>) {
    for c in s.chars() {
        if unsafe_char(c) {
            out.extend_from_slice(format!("\\u{{{:x}}}", c as u32).as_bytes());
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
}

impl<W: Write> Write for TerminalSafe<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.escape {
            return self.inner.write(buf);
        }
        let mut input = std::mem::take(&mut self.pending);
        input.extend_from_slice(buf);
        let mut out = Vec::with_capacity(input.len());
        let held = escape_into(&input, &mut out);
        self.pending = input[input.len() - held..].to_vec();
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(bytes: &[u8]) -> String {
        let mut out = Vec::new();
        let held = escape_into(bytes, &mut out);
        assert_eq!(held, 0);
        String::from_utf8(out).expect("escaped output is UTF-8")
    }

    #[test]
    fn escapes_what_could_drive_a_terminal() {
        assert_eq!(esc(b"plain text\n\tok"), "plain text\n\tok");
        assert_eq!(esc(b"\x1b]52;c;aGk=\x07"), "\\u{1b}]52;c;aGk=\\u{7}");
        assert_eq!(esc(b"a\rb\x7f"), "a\\u{d}b\\u{7f}");
        assert_eq!(esc("x\u{202e}y\u{9b}z".as_bytes()), "x\\u{202e}y\\u{9b}z");
        assert_eq!(esc(b"\xff\xfe ok"), "\\xff\\xfe ok");
        assert_eq!(esc("naïve ☂".as_bytes()), "naïve ☂");
    }

    #[test]
    fn a_sequence_split_across_writes_is_kept_whole() {
        let mut w = TerminalSafe::new(Vec::new(), true);
        let umbrella = "☂".as_bytes();
        w.write_all(&umbrella[..1]).expect("write");
        w.write_all(&umbrella[1..]).expect("write");
        assert_eq!(String::from_utf8(w.inner).expect("utf8"), "☂");
    }

    #[test]
    fn pipes_get_the_exact_bytes() {
        let mut w = TerminalSafe::new(Vec::new(), false);
        w.write_all(b"\x1b[2J\xff").expect("write");
        assert_eq!(w.inner, b"\x1b[2J\xff");
    }
}
