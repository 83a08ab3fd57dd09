//! What an agent's pseudo-terminal may send to a person's terminal (`launch --tty`,
//! `attach`). A TUI needs cursor movement, colours, erasing, scroll regions, the alternate
//! screen, bracketed paste and mouse modes; it does not need, and an adversarial agent must
//! not get, a way to write the clipboard (OSC 52), set the title, or make the terminal
//! answer into the agent's own input (device status, attributes, mode and window reports,
//! XTVERSION, ENQ's answerback).
//!
//! A streaming state machine over bytes: a sequence is emitted only once it is complete
//! and allowed, so chunk boundaries never matter. Escape sequences are judged by an allow
//! list (anything not known to be safe is dropped whole):
//!
//! - C0: BEL, BS, HT, LF, CR pass; ESC starts a sequence; every other C0 (ENQ, SO, SI, VT,
//!   FF, ...) is dropped.
//! - C1 controls, 8-bit (a byte 0x80..0x9F that is not inside a UTF-8 character) or
//!   UTF-8-encoded (U+0080..U+009F), are dropped: some terminals read them as CSI, OSC, DCS.
//! - Every OSC (including titles, hyperlinks, colour queries and 52), DCS, SOS, PM and APC
//!   is dropped with its body, up to its terminator (ST, or BEL for OSC; CAN and SUB
//!   abandon it). A body longer than [`MAX_STRING`] is abandoned and what follows is text.
//! - CSI: see [`csi_allowed`].
//! - Other ESC sequences: cursor save/restore, keypad modes, index/reverse index, next
//!   line, tab set, single shifts and character set designations pass; the rest (DECID
//!   `ESC Z`, which answers like DA, RIS `ESC c`, 7/8-bit control switches) are dropped.

/// Longest CSI sequence kept (parameters and intermediates); a longer one is dropped whole.
pub const MAX_CSI: usize = 64;
/// Longest dropped string body (OSC, DCS, ...) before it is abandoned.
pub const MAX_STRING: usize = 1 << 20;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After a UTF-8 lead byte 0xC2: the next byte decides whether this is a C1 control.
    C2,
    /// Inside a UTF-8 character: this many continuation bytes still to come.
    Utf8(u8),
    Esc,
    /// ESC followed by an intermediate byte (in `seq`), waiting for the final.
    EscIntermediate,
    Csi,
    /// A CSI sequence being dropped (too long, or a byte not allowed inside it).
    CsiIgnore,
    /// The body of an OSC (`bel_ends`) or DCS/SOS/PM/APC string, being dropped.
    Str {
        bel_ends: bool,
    },
    /// ESC inside a string: `\` ends it.
    StrEsc {
        bel_ends: bool,
    },
}

/// The filter of one output stream.
#[derive(Debug, Clone)]
pub struct Filter {
    state: State,
    /// The sequence being collected (without its ESC): emitted whole if allowed.
    seq: Vec<u8>,
    /// Bytes of the string being dropped.
    dropped: usize,
}

impl Default for Filter {
    fn default() -> Self {
        Filter::new()
    }
}

impl Filter {
    pub fn new() -> Self {
        Filter {
            state: State::Ground,
            seq: Vec::with_capacity(MAX_CSI),
            dropped: 0,
        }
    }

    /// Filter `input`, appending what may reach the terminal to `out`. Bytes of an
    /// unfinished sequence are held until the next call.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.byte(b, out);
        }
    }

    /// Convenience: the filtered form of one chunk.
    pub fn filter(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        self.push(input, &mut out);
        out
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Ground => self.ground(b, out),
            State::C2 => {
                self.state = State::Ground;
                if (0x80..=0x9f).contains(&b) {
                    // U+0080..U+009F: a C1 control, dropped with its lead byte.
                    return;
                }
                if (0xa0..=0xbf).contains(&b) {
                    out.extend_from_slice(&[0xc2, b]);
                    return;
                }
                // Not a continuation: the lone lead byte is harmless text (shown as U+FFFD).
                out.push(0xc2);
                self.ground(b, out);
            }
            State::Utf8(n) => {
                if (0x80..=0xbf).contains(&b) {
                    out.push(b);
                    self.state = if n > 1 {
                        State::Utf8(n - 1)
                    } else {
                        State::Ground
                    };
                } else {
                    self.state = State::Ground;
                    self.ground(b, out);
                }
            }
            State::Esc => self.esc(b, out),
            State::EscIntermediate => {
                self.state = State::Ground;
                match b {
                    0x30..=0x7e => {
                        let inter = self.seq.first().copied().unwrap_or(0);
                        if esc_intermediate_allowed(inter, b) {
                            out.extend_from_slice(&[ESC, inter, b]);
                        }
                    }
                    ESC => self.state = State::Esc,
                    CAN | SUB => {}
                    // More intermediates, or a control inside: not a sequence anything here
                    // needs; dropped, and the byte is read again as text.
                    _ => self.ground(b, out),
                }
            }
            State::Csi => self.csi(b, out),
            State::CsiIgnore => match b {
                0x40..=0x7e => self.state = State::Ground,
                ESC => self.state = State::Esc,
                CAN | SUB => self.state = State::Ground,
                0x20..=0x3f => {}
                _ => {
                    self.state = State::Ground;
                    self.ground(b, out);
                }
            },
            State::Str { bel_ends } => match b {
                ESC => self.state = State::StrEsc { bel_ends },
                BEL if bel_ends => self.state = State::Ground,
                CAN | SUB => self.state = State::Ground,
                _ => {
                    self.dropped += 1;
                    if self.dropped > MAX_STRING {
                        self.state = State::Ground;
                    }
                }
            },
            State::StrEsc { bel_ends } => {
                if b == b'\\' {
                    self.state = State::Ground;
                } else if b == ESC {
                    // Still looking for `\`; stays dropped.
                    let _ = bel_ends;
                } else {
                    // An ESC that does not end the string starts a new sequence (as on
                    // xterm); the string is gone either way.
                    self.state = State::Esc;
                    self.esc(b, out);
                }
            }
        }
    }

    fn ground(&mut self, b: u8, out: &mut Vec<u8>) {
        match b {
            ESC => {
                self.state = State::Esc;
                self.seq.clear();
            }
            BEL | 0x08 | b'\t' | b'\n' | b'\r' => out.push(b),
            0x00..=0x1f => {}
            0x20..=0x7f => out.push(b),
            // Stray continuation bytes: C1 range dropped, the rest harmless.
            0x80..=0x9f => {}
            0xa0..=0xbf => out.push(b),
            0xc2 => self.state = State::C2,
            0xc0..=0xdf => {
                out.push(b);
                self.state = State::Utf8(1);
            }
            0xe0..=0xef => {
                out.push(b);
                self.state = State::Utf8(2);
            }
            0xf0..=0xf7 => {
                out.push(b);
                self.state = State::Utf8(3);
            }
            _ => out.push(b),
        }
    }

    fn esc(&mut self, b: u8, out: &mut Vec<u8>) {
        self.seq.clear();
        self.dropped = 0;
        self.state = State::Ground;
        match b {
            b'[' => self.state = State::Csi,
            b']' => self.state = State::Str { bel_ends: true },
            b'P' | b'X' | b'^' | b'_' => self.state = State::Str { bel_ends: false },
            ESC => self.state = State::Esc,
            CAN | SUB => {}
            // Intermediates: a charset designation and the like.
            0x20..=0x2f => {
                self.seq.push(b);
                self.state = State::EscIntermediate;
            }
            // DECSC, DECRC, DECKPAM, DECKPNM, IND, NEL, HTS, RI, SS2, SS3.
            b'7' | b'8' | b'=' | b'>' | b'D' | b'E' | b'H' | b'M' | b'N' | b'O' => {
                out.extend_from_slice(&[ESC, b]);
            }
            // Every other final (DECID `Z` answers; RIS `c`; a stray ST) is dropped.
            0x30..=0x7e => {}
            // A control inside: dropped ESC, the byte read as text.
            _ => self.ground(b, out),
        }
    }

    fn csi(&mut self, b: u8, out: &mut Vec<u8>) {
        match b {
            0x20..=0x3f => {
                if self.seq.len() >= MAX_CSI {
                    self.state = State::CsiIgnore;
                } else {
                    self.seq.push(b);
                }
            }
            0x40..=0x7e => {
                self.state = State::Ground;
                if csi_allowed(&self.seq, b) {
                    out.extend_from_slice(b"\x1b[");
                    out.extend_from_slice(&self.seq);
                    out.push(b);
                }
                self.seq.clear();
            }
            ESC => {
                self.state = State::Esc;
                self.seq.clear();
            }
            CAN | SUB => {
                self.state = State::Ground;
                self.seq.clear();
            }
            // A control inside a CSI (a terminal would execute it there): the sequence is
            // dropped and the byte read as text.
            _ => {
                self.state = State::Ground;
                self.seq.clear();
                self.ground(b, out);
            }
        }
    }
}

/// Whether `ESC inter final` passes: character set designations (`( ) * + - . /` then a
/// final), DEC line attributes and screen alignment (`#`), UTF-8 selection (`%`).
fn esc_intermediate_allowed(inter: u8, fin: u8) -> bool {
    match inter {
        b'(' | b')' | b'*' | b'+' | b'-' | b'.' | b'/' => true,
        b'#' => matches!(fin, b'3' | b'4' | b'5' | b'6' | b'8'),
        b'%' => matches!(fin, b'@' | b'G'),
        _ => false,
    }
}

/// Whether the CSI sequence `ESC [ body final` may reach a terminal. `body` is the
/// parameter bytes (0x30..0x3F, a leading `? > < =` marking a private form) and the
/// intermediates (0x20..0x2F). An allow list of what TUIs use that makes the terminal
/// answer nothing:
///
/// - plain: cursor movement and position (`A`-`G`, `H`, `f`, `d`, `e`, `a`, `` ` ``),
///   erase and edit (`J K L M P X @ b`), scroll (`S T`), tabs (`I Z g`), modes (`h l`),
///   SGR (`m`), scroll region (`r`), cursor save/restore (`s u`), LEDs (`q`);
/// - `?`: DEC private modes (`h l`, save/restore `s r`, selective erase `J K`);
/// - `>`: key modifier options (`m`) and the kitty keyboard push (`u`); `<`: its pop (`u`);
///   `=`: its set (`u`);
/// - intermediates: cursor style `SP q` and soft reset `! p` only.
///
/// Dropped, among others: DSR (`n`, any form), DA (`c`, any form), DECRQM (`$ p`), window
/// operations and reports (`t`), XTVERSION (`> q`), XTQMODKEYS (`? m`), the kitty keyboard
/// query (`? u`), XTSMGRAPHICS (`? S`), DECREQTPARM (`x`), DECTST (`y`), checksum reports,
/// media copy (`i`).
pub fn csi_allowed(body: &[u8], fin: u8) -> bool {
    let (private, rest) = match body.first() {
        Some(&p @ (b'?' | b'>' | b'<' | b'=')) => (Some(p), &body[1..]),
        _ => (None, body),
    };
    let split = rest
        .iter()
        .position(|b| (0x20..=0x2f).contains(b))
        .unwrap_or(rest.len());
    let (params, inter) = rest.split_at(split);
    // Parameters are digits, `;` and `:` only once past the private marker, and the
    // intermediates come last.
    if !params
        .iter()
        .all(|b| b.is_ascii_digit() || *b == b';' || *b == b':')
        || !inter.iter().all(|b| (0x20..=0x2f).contains(b))
    {
        return false;
    }
    match (private, inter) {
        (None, []) => matches!(
            fin,
            b'A' | b'B'
                | b'C'
                | b'D'
                | b'E'
                | b'F'
                | b'G'
                | b'H'
                | b'I'
                | b'J'
                | b'K'
                | b'L'
                | b'M'
                | b'P'
                | b'S'
                | b'T'
                | b'X'
                | b'Z'
                | b'@'
                | b'`'
                | b'a'
                | b'b'
                | b'd'
                | b'e'
                | b'f'
                | b'g'
                | b'h'
                | b'l'
                | b'm'
                | b'q'
                | b'r'
                | b's'
                | b'u'
        ),
        (Some(b'?'), []) => matches!(fin, b'h' | b'l' | b's' | b'r' | b'J' | b'K'),
        (Some(b'>'), []) => matches!(fin, b'm' | b'u'),
        (Some(b'<' | b'='), []) => fin == b'u',
        (None, [b' ']) => fin == b'q',
        (None, [b'!']) => fin == b'p',
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn f(input: &[u8]) -> Vec<u8> {
        Filter::new().filter(input)
    }

    #[test]
    fn text_and_plain_controls_pass() {
        let s = "héllo → wörld ✓ 🦀\r\n\tx\x08y\x07".as_bytes();
        assert_eq!(f(s), s);
    }

    #[test]
    fn what_a_tui_needs_passes() {
        for seq in [
            &b"\x1b[1;31m"[..],
            b"\x1b[38:2::10:20:30m",
            b"\x1b[38;5;208m",
            b"\x1b[0m",
            b"\x1b[H",
            b"\x1b[12;40H",
            b"\x1b[2J",
            b"\x1b[K",
            b"\x1b[3A",
            b"\x1b[?1049h",
            b"\x1b[?1049l",
            b"\x1b[?2004h",
            b"\x1b[?25l",
            b"\x1b[?1000h",
            b"\x1b[?1006h",
            b"\x1b[?2026h",
            b"\x1b[1;24r",
            b"\x1b[>4;2m",
            b"\x1b[>1u",
            b"\x1b[<u",
            b"\x1b[2 q",
            b"\x1b[!p",
            b"\x1b7",
            b"\x1b8",
            b"\x1bM",
            b"\x1b=",
            b"\x1b(B",
            b"\x1b(0",
        ] {
            assert_eq!(f(seq), seq, "{:?}", String::from_utf8_lossy(seq));
        }
    }

    #[test]
    fn osc_dcs_apc_pm_sos_are_dropped_with_their_body() {
        for (input, want) in [
            (&b"a\x1b]52;c;aGVsbG8=\x07b"[..], &b"ab"[..]),
            (b"a\x1b]52;c;aGVsbG8=\x1b\\b", b"ab"),
            (b"a\x1b]0;title\x07b", b"ab"),
            (b"a\x1b]2;title\x1b\\b", b"ab"),
            (b"a\x1b]10;?\x07b", b"ab"),
            (
                b"a\x1b]8;;https://x.example/\x07link\x1b]8;;\x07b",
                b"alinkb",
            ),
            (b"a\x1bP+q544e\x1b\\b", b"ab"),
            (b"a\x1bPq#0;2;0;0;0\x1b\\b", b"ab"),
            (b"a\x1b_Gf=100;AAAA\x1b\\b", b"ab"),
            (b"a\x1b^private\x1b\\b", b"ab"),
            (b"a\x1bXstring\x1b\\b", b"ab"),
            // BEL ends only OSC: inside a DCS it is body.
            (b"a\x1bPx\x07y\x1b\\b", b"ab"),
            // CAN abandons the string.
            (b"a\x1b]52;c;x\x18b", b"ab"),
        ] {
            assert_eq!(f(input), want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn report_requests_are_dropped() {
        for seq in [
            &b"\x1b[6n"[..],
            b"\x1b[5n",
            b"\x1b[?6n",
            b"\x1b[?15n",
            b"\x1b[c",
            b"\x1b[0c",
            b"\x1b[>c",
            b"\x1b[>0c",
            b"\x1b[=c",
            b"\x1b[?2004$p",
            b"\x1b[4$p",
            b"\x1b[14t",
            b"\x1b[18t",
            b"\x1b[19t",
            b"\x1b[21t",
            b"\x1b[8;100;200t",
            b"\x1b[>q",
            b"\x1b[>0q",
            b"\x1b[?u",
            b"\x1b[?4m",
            b"\x1b[?1;1;0S",
            b"\x1b[x",
            b"\x1b[1x",
            b"\x1b[4;1y",
            b"\x1b[1;1;1;1;1;1*y",
            b"\x1b[5i",
            b"\x1bZ",
            b"\x1bc",
            b"\x1b G",
            b"\x05",
        ] {
            assert_eq!(f(seq), b"", "{:?}", String::from_utf8_lossy(seq));
        }
    }

    #[test]
    fn c1_controls_are_dropped_raw_and_utf8_encoded() {
        assert_eq!(f(b"a\x9b6nb"), b"a6nb");
        assert_eq!(f(b"a\xc2\x9d52;c;x\x07b"), b"a52;c;x\x07b");
        assert_eq!(f(b"a\xc2\x9bb"), b"ab");
        // U+00A0..U+00BF are text.
        assert_eq!(f("a\u{a0}\u{b0}b".as_bytes()), "a\u{a0}\u{b0}b".as_bytes());
    }

    #[test]
    fn sequences_split_across_chunks() {
        let mut filter = Filter::new();
        let mut out = Vec::new();
        for chunk in [
            &b"x\x1b"[..],
            b"]5",
            b"2;c;abc",
            b"\x1b",
            b"\\y\x1b[",
            b"1;3",
            b"1mz\x1b[6",
            b"n!\xc2",
            b"\x9bq\xe2\x86",
            b"\x92",
        ] {
            filter.push(chunk, &mut out);
        }
        assert_eq!(out, "xy\x1b[1;31mz!q→".as_bytes());
    }

    #[test]
    fn an_overlong_csi_is_dropped_whole() {
        let mut input = b"\x1b[".to_vec();
        input.extend(std::iter::repeat_n(b'1', MAX_CSI + 10));
        input.extend_from_slice(b"mok");
        assert_eq!(f(&input), b"ok");
    }

    #[test]
    fn an_unterminated_string_is_abandoned_after_its_bound() {
        let mut input = b"\x1b]52;c;".to_vec();
        input.extend(std::iter::repeat_n(b'A', MAX_STRING + 1));
        input.extend_from_slice(b"ok");
        // The body's first MAX_STRING + 1 bytes ("52;c;" and all but five `A`) are dropped.
        assert_eq!(f(&input), b"AAAAAok");
    }

    /// Pieces an attack is made of, so random inputs hit the interesting states often.
    fn piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"\x1b".to_vec()),
            Just(b"\x1b]".to_vec()),
            Just(b"\x1bP".to_vec()),
            Just(b"\x1b_".to_vec()),
            Just(b"\x1b^".to_vec()),
            Just(b"\x1bX".to_vec()),
            Just(b"\x1b[".to_vec()),
            Just(b"\x1b\\".to_vec()),
            Just(b"\x07".to_vec()),
            Just(b"\x18".to_vec()),
            Just(b"\xc2".to_vec()),
            Just(b"\x9b".to_vec()),
            Just(b"\x9d".to_vec()),
            Just(b"6n".to_vec()),
            Just(b"52;c;".to_vec()),
            Just(b"?".to_vec()),
            Just(b">".to_vec()),
            Just(b"$p".to_vec()),
            Just(b"c".to_vec()),
            Just(b"t".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..8),
        ]
    }

    /// No escape sequence that starts a string, and no sequence that asks for a report,
    /// ever leaves the filter, however the input is cut.
    fn forbidden(out: &[u8]) -> Option<String> {
        for (i, w) in out.windows(2).enumerate() {
            if w[0] == ESC && matches!(w[1], b']' | b'P' | b'_' | b'^' | b'X' | b'Z' | b'c') {
                return Some(format!("ESC {:?} at {i}", w[1] as char));
            }
            if w == [0xc2, 0x9b] || w == [0xc2, 0x9d] || w == [0xc2, 0x90] {
                return Some(format!("UTF-8 C1 at {i}"));
            }
        }
        // Every CSI that got out is one the allow list passes.
        let mut i = 0;
        while i + 1 < out.len() {
            if out[i] == ESC && out[i + 1] == b'[' {
                let mut j = i + 2;
                while j < out.len() && (0x20..=0x3f).contains(&out[j]) {
                    j += 1;
                }
                if j >= out.len() {
                    return Some("an unfinished CSI".into());
                }
                if !csi_allowed(&out[i + 2..j], out[j]) {
                    return Some(format!("CSI {:?}", String::from_utf8_lossy(&out[i..=j])));
                }
                i = j;
            }
            i += 1;
        }
        if out
            .iter()
            .any(|b| matches!(b, 0x00..=0x06 | 0x0b..=0x0c | 0x0e..=0x1a | 0x1c..=0x1f))
        {
            return Some("a C0 control".into());
        }
        None
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn never_emits_a_string_or_a_report_request(
            pieces in proptest::collection::vec(piece(), 0..40),
            cuts in proptest::collection::vec(1usize..7, 1..20),
        ) {
            let input: Vec<u8> = pieces.concat();
            let whole = f(&input);
            prop_assert_eq!(forbidden(&whole), None);
            // The same bytes in chunks of other sizes give the same output.
            let mut filter = Filter::new();
            let mut out = Vec::new();
            let mut rest = &input[..];
            let mut k = 0;
            while !rest.is_empty() {
                let n = cuts[k % cuts.len()].min(rest.len());
                filter.push(&rest[..n], &mut out);
                rest = &rest[n..];
                k += 1;
            }
            prop_assert_eq!(out, whole);
        }
    }
}
