//! Split an agent's output stream into journal lines with bounded memory.
//!
//! Lines end at `\n` (not included in the line; a `\r` before it is kept, bytes are never
//! altered). A line longer than the maximum is cut into pieces of exactly the maximum length
//! and the cut is counted, so an agent that never writes a newline cannot make the
//! supervisor buffer without limit. At most `max_line` bytes are ever held.

/// Default longest journal line: 64 KiB.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024;

#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    max: usize,
    cutting: bool,
    split_lines: u64,
}

impl Default for LineSplitter {
    fn default() -> Self {
        LineSplitter::new(DEFAULT_MAX_LINE)
    }
}

impl LineSplitter {
    /// `max_line` is clamped to at least 1 byte.
    pub fn new(max_line: usize) -> LineSplitter {
        let max = max_line.max(1);
        LineSplitter {
            buf: Vec::new(),
            max,
            cutting: false,
            split_lines: 0,
        }
    }

    /// How many over-long lines were cut into pieces so far.
    pub fn split_lines(&self) -> u64 {
        self.split_lines
    }

    /// Bytes of an unfinished line held back until its newline (never above `max_line`).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Feed bytes read from the agent; `emit` gets every complete line or piece, in order.
    /// Lines wholly inside `data` are passed without copying. Stops at `emit`'s first error.
    pub fn push<E>(
        &mut self,
        data: &[u8],
        mut emit: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut rest = data;
        while !rest.is_empty() {
            match rest.iter().position(|&c| c == b'\n') {
                Some(i) => {
                    self.take(&rest[..i], true, &mut emit)?;
                    rest = &rest[i + 1..];
                }
                None => {
                    self.take(rest, false, &mut emit)?;
                    rest = &[];
                }
            }
        }
        Ok(())
    }

    /// End of stream: emit an unterminated last line, if any.
    pub fn finish<E>(&mut self, mut emit: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        if !self.buf.is_empty() {
            let r = emit(&self.buf);
            self.buf.clear();
            r?;
        }
        self.cutting = false;
        Ok(())
    }

    fn take<E>(
        &mut self,
        seg: &[u8],
        terminated: bool,
        emit: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut s = seg;
        // Cut only when a byte would not fit: a line of exactly `max` bytes stays whole.
        while self.buf.len() + s.len() > self.max {
            if self.buf.is_empty() {
                let (piece, tail) = s.split_at(self.max);
                emit(piece)?;
                s = tail;
            } else {
                let (head, tail) = s.split_at(self.max - self.buf.len());
                self.buf.extend_from_slice(head);
                s = tail;
                let r = emit(&self.buf);
                self.buf.clear();
                r?;
            }
            if !self.cutting {
                self.cutting = true;
                self.split_lines += 1;
            }
        }
        if terminated {
            if self.buf.is_empty() {
                emit(s)?;
            } else {
                self.buf.extend_from_slice(s);
                let r = emit(&self.buf);
                self.buf.clear();
                r?;
            }
            self.cutting = false;
        } else {
            self.buf.extend_from_slice(s);
        }
        Ok(())
    }
}
