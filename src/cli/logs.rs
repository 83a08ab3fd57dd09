//! `airlockctl logs RUN [-f]`: a run's output and events, from journald and the run's
//! fallback file (read directly; airlockd need not be running). A run the ledger does not
//! have is refused by name.

use std::io::Write;

use super::output;
use super::remote::{self, Ctx, Failed};
use crate::control::protocol::{ErrorCode, Op};
use crate::journal;

pub fn logs(ctx: &Ctx, run: &str, follow: bool) -> i32 {
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
    let mut out = std::io::stdout().lock();
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
