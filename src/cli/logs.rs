//! `airlockctl logs RUN [-f]`: a run's output and events, from journald and the run's
//! fallback file (read directly; airlockd need not be running).

use std::io::Write;

use super::output;
use super::remote::Ctx;
use crate::journal;

pub fn logs(ctx: &Ctx, run: &str, follow: bool) -> i32 {
    if !journal::valid_run_id(run) {
        eprintln!("airlockctl logs: not a run id (letters, digits, '.', '_' and '-'); `airlockctl runs` lists them");
        return output::ERROR;
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
