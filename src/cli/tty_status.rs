//! The status line of a terminal session (`launch --tty`, `attach`): while an ask of the
//! run waits, airlockctl keeps the terminal's last row for it. The agent is told its
//! window is one row shorter (so a TUI draws above it), the rows above are made the
//! scroll region (so plain output scrolls above it), and the line is drawn again after
//! every piece of output (so nothing the agent writes hides it). When no ask waits, the
//! row and the size go back to the agent, which redraws.

use super::table::clean;
use crate::control::protocol::{AskShown, TtySize};

/// The status line's text for `asks` (the first is the one the keys answer), `notice`
/// (how the last answer went), fitted to `cols` columns; `None` when no ask waits.
pub fn text(asks: &[AskShown], notice: Option<&str>, cols: u16, read_only: bool) -> Option<String> {
    let first = asks.first()?;
    let mut t = format!(
        "ask {}: {} `{}` ({})",
        clean(&first.id),
        clean(&first.kind),
        clean(&first.what),
        clean(&first.rule)
    );
    if read_only {
        t.push_str(&format!(
            " · read-only: airlockctl allow|deny {}",
            clean(&first.id)
        ));
    } else {
        t.push_str(" · Ctrl-] a allow, r for the run, n deny");
    }
    if asks.len() > 1 {
        t.push_str(&format!(" (+{} more)", asks.len() - 1));
    }
    if let Some(n) = notice {
        t = format!("{} · {t}", clean(n));
    }
    Some(t.chars().take(usize::from(cols)).collect())
}

/// Bytes that draw `text` on the last of `size.rows` rows, reversed, with the rows above
/// as the scroll region; the cursor and its attributes are put back.
pub fn draw(size: TtySize, text: &str) -> Vec<u8> {
    let rows = size.rows.max(2);
    format!(
        "\x1b7\x1b[1;{}r\x1b[{rows};1H\x1b[0;7m\x1b[2K{text}\x1b[0m\x1b8",
        rows - 1
    )
    .into_bytes()
}

/// Bytes that give the last row back: the whole screen scrolls again, the line is blank.
pub fn clear(size: TtySize) -> Vec<u8> {
    format!("\x1b7\x1b[r\x1b[{};1H\x1b[2K\x1b8", size.rows.max(1)).into_bytes()
}

/// The size the agent is told: one row less while the status line holds the last.
pub fn agent_size(real: TtySize, reserved: bool) -> TtySize {
    if reserved && real.rows > 2 {
        TtySize {
            rows: real.rows - 1,
            cols: real.cols,
        }
    } else {
        real
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(id: &str, what: &str) -> AskShown {
        AskShown {
            id: id.into(),
            kind: "bash".into(),
            what: what.into(),
            rule: "default: no prefix matches".into(),
        }
    }

    #[test]
    fn the_line_names_the_first_ask_and_the_keys_and_fits() {
        assert_eq!(text(&[], None, 80, false), None);
        let asks = [ask("a-3", "touch x"), ask("a-4", "touch y")];
        let t = text(&asks, None, 200, false).unwrap();
        assert_eq!(
            t,
            "ask a-3: bash `touch x` (default: no prefix matches) · Ctrl-] a allow, r for the run, n deny (+1 more)"
        );
        let t = text(&asks[..1], Some("only the launcher"), 200, true).unwrap();
        assert!(t.starts_with("only the launcher · ask a-3"), "{t}");
        assert!(t.ends_with("read-only: airlockctl allow|deny a-3"), "{t}");
        assert_eq!(text(&asks, None, 10, false).unwrap(), "ask a-3: b");
    }

    #[test]
    fn what_the_agent_controls_reaches_the_line_escaped() {
        let t = text(&[ask("a-1", "echo \x1b]52;c;eA==\x07")], None, 200, false).unwrap();
        assert!(!t.contains('\x1b') && !t.contains('\x07'), "{t:?}");
    }

    #[test]
    fn drawing_keeps_the_cursor_and_reserves_the_last_row() {
        let s = TtySize {
            rows: 30,
            cols: 100,
        };
        let d = String::from_utf8(draw(s, "x")).unwrap();
        assert_eq!(d, "\x1b7\x1b[1;29r\x1b[30;1H\x1b[0;7m\x1b[2Kx\x1b[0m\x1b8");
        assert_eq!(
            agent_size(s, true),
            TtySize {
                rows: 29,
                cols: 100
            }
        );
        assert_eq!(agent_size(s, false), s);
        assert_eq!(
            String::from_utf8(clear(s)).unwrap(),
            "\x1b7\x1b[r\x1b[30;1H\x1b[2K\x1b8"
        );
    }
}
