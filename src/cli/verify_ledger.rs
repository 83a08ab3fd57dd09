//! `airlockctl verify-ledger [--ledger PATH]`: check the ledger's hash chain offline.
//! Exit 0 intact, 1 broken (naming the first broken record), 2 unreadable.

use crate::cli::output::outln;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::output;
use super::remote::Ctx;
use crate::supervisor::ledger::{self, LedgerError};

pub fn run(ctx: &Ctx, ledger_path: Option<&Path>) -> i32 {
    let path: PathBuf = match ledger_path {
        Some(p) => {
            // An explicit path that is not there is a mistake, not an empty ledger.
            if let Err(e) = std::fs::metadata(p) {
                eprintln!("airlockctl verify-ledger: {}: {e}", p.display());
                return output::ERROR;
            }
            p.to_path_buf()
        }
        None => match ctx.load_config() {
            Ok(cfg) => cfg.state_dir.join(ledger::FILE_NAME),
            Err(code) => return code,
        },
    };
    let shown = path.display().to_string();
    match ledger::verify(&path) {
        Ok(count) => {
            if ctx.json {
                return output::json(&json!({"ledger": shown, "ok": true, "records": count}));
            }
            if count == 0 && !path.exists() {
                outln!("{shown}: no ledger yet (0 records)");
            } else {
                outln!("{shown}: {count} records, hash chain intact");
            }
            output::OK
        }
        Err(LedgerError::Broken { seq, line, why, .. }) => {
            if ctx.json {
                output::json(&json!({
                    "ledger": shown,
                    "ok": false,
                    "broken": {"seq": seq, "line": line, "why": why},
                }));
            } else {
                outln!("{shown}: BROKEN at line {line} (record {seq}): {why}");
                eprintln!("keep the file as evidence; records after the break cannot be trusted");
            }
            output::NO
        }
        Err(e) => {
            eprintln!("airlockctl verify-ledger: {e}");
            output::ERROR
        }
    }
}
