//! `airlockctl logs RUN [-f]`: a run's output and events, from journald and the run's
//! fallback file (read directly; airlockd need not be running). A run the ledger does not
//! have is refused by name.

use std::io::Write;

use super::output;
use super::remote::{self, Ctx, Failed};
use crate::control::protocol::{ErrorCode, Op};
use crate::journal;

/// How `logs` prints each record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Agent events as readable lines ([`super::agent_events::readable`]).
    Readable,
    /// Each record as the journal reader prints it.
    Raw,
    /// Each record as a JSON object.
    Json,
}

/// Passes each whole line through the chosen style as it is written (so `-f` stays live).
struct Styled<'a> {
    out: &'a mut dyn Write,
    style: Style,
    line: Vec<u8>,
}

impl Write for Styled<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let text = String::from_utf8_lossy(&self.line).into_owned();
            self.line.clear();
            let lines = match self.style {
                Style::Raw => vec![text],
                // Made from the agent's JSON, whose escapes (`\u001b`) are decoded: escaped
                // again, as the journal reader escapes every record it prints.
                Style::Readable => super::agent_events::readable(&text)
                    .iter()
                    .map(|l| crate::terminal::escaped(l))
                    .collect(),
                Style::Json => vec![super::agent_events::as_json(&text)],
            };
            for l in lines {
                writeln!(self.out, "{l}")?;
            }
            self.out.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

pub fn logs(ctx: &Ctx, run: &str, follow: bool, raw: bool) -> i32 {
    if !journal::valid_run_id(run) {
        eprintln!("airlockctl logs: not a run id (letters, digits, '.', '_' and '-'); `airlockctl runs` lists them");
        return output::ERROR;
    }
    // A run the ledger does not have has no trail to show. The check is airlockd's (or the
    // ledger's, read directly when airlockd is not running); when neither can be asked,
    // the journal alone decides, as before.
    if let Err(Failed::Refused(Some(e))) = ctx.request(&Op::Show { run: run.into() }) {
        if e.code == ErrorCode::NotFound {
            return remote::no_such_run("logs", run);
        }
    }
    let cfg = match ctx.load_config() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let mut stdout = std::io::stdout().lock();
    let style = match (ctx.json, raw) {
        (true, _) => Style::Json,
        (false, true) => Style::Raw,
        (false, false) => Style::Readable,
    };
    let mut out = Styled {
        out: &mut stdout,
        style,
        line: Vec::new(),
    };
    let result = journal::read_run(run, &cfg.journal_dir(), follow, &mut out);
    let _ = out.flush();
    match result {
        Ok(()) => output::OK,
        // The reader of our output went away (`| head`): nothing left to do.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => output::OK,
        Err(e) => {
            eprintln!("airlockctl logs: {e}; journalctl must be installed, and reading another user's journal needs root or the systemd-journal group");
            output::ERROR
        }
    }
}
