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

/// `verify-ledger --fleet`: every host's chain as the fleet store mirrors it, each checked
/// as the file is (contiguous from record 1, canonical lines, hashes chained), and each
/// row's own `seq` and `hash` columns against its line. Exit 0 all intact, 1 one broken.
pub fn run_fleet(ctx: &Ctx) -> i32 {
    let hosts = match with_store(ctx, "verify-ledger --fleet", |store, pw| {
        Box::pin(crate::store::pg::read_ledgers(store, pw))
    }) {
        Ok(h) => h,
        Err(code) => return code,
    };
    let store_name = match ctx.load_config() {
        Ok(c) => c.store.map(|s| s.describe()).unwrap_or_default(),
        Err(code) => return code,
    };
    let mut report = Vec::new();
    let mut broken = false;
    for (host, rows) in &hosts {
        let verdict = check_host(host, rows);
        broken |= verdict.is_err();
        report.push((host.clone(), rows.len(), verdict));
    }
    if ctx.json {
        let hosts: Vec<_> = report
            .iter()
            .map(|(h, n, v)| match v {
                Ok(()) => json!({"host_id": h, "ok": true, "records": n}),
                Err((seq, why)) => {
                    json!({"host_id": h, "ok": false, "broken": {"seq": seq, "why": why}})
                }
            })
            .collect();
        output::json(&json!({"fleet": true, "ok": !broken, "hosts": hosts}));
    } else {
        if report.is_empty() {
            outln!("{store_name}: no host has mirrored a ledger record yet");
        }
        for (h, n, v) in &report {
            match v {
                Ok(()) => outln!("host {h}: {n} records, hash chain intact"),
                Err((seq, why)) => outln!("host {h}: BROKEN at record {seq}: {why}"),
            }
        }
    }
    if broken {
        output::NO
    } else {
        output::OK
    }
}

/// One host's mirrored chain; `Err((seq, why))` at its first broken record.
fn check_host(host: &str, rows: &[(i64, String, String)]) -> Result<(), (i64, String)> {
    let origin = PathBuf::from(format!("(fleet store, host {host})"));
    let checked = ledger::verify_lines(&origin, rows.iter().map(|(_, _, l)| l.as_bytes()));
    let records = checked.map_err(|e| match e {
        LedgerError::Broken { seq, why, .. } => (i64::try_from(seq).unwrap_or(i64::MAX), why),
        e => (0, e.to_string()),
    })?;
    for ((seq, hash, _), r) in rows.iter().zip(&records) {
        if u64::try_from(*seq).ok() != Some(r.seq) || *hash != r.hash {
            return Err((
                *seq,
                "the row's seq or hash column does not match its record".into(),
            ));
        }
    }
    Ok(())
}

type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, String>> + 'a>>;

/// Read something from the config's fleet store (`what` names the command in errors).
fn with_store<T>(
    ctx: &Ctx,
    what: &str,
    read: impl for<'a> FnOnce(
        &'a crate::store::StoreConf,
        Option<&'a crate::credentials::Secret>,
    ) -> StoreFuture<'a, T>,
) -> Result<T, i32> {
    let cfg = ctx.load_config()?;
    let Some(store) = &cfg.store else {
        eprintln!(
            "airlockctl {what}: {}: no `store:` (a fleet store); without one, only this host's files are read",
            cfg.file.display()
        );
        return Err(output::ERROR);
    };
    let password = match &store.password_credential {
        None => None,
        Some(n) => match cfg
            .credentials
            .get(n)
            .ok_or_else(|| format!("store.password_credential: no credentials.{n}"))
            .and_then(|src| crate::credentials::read(n, src))
        {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("airlockctl {what}: {e}");
                return Err(output::ERROR);
            }
        },
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(read(store, password.as_ref())))
        .map_err(|e| {
            eprintln!("airlockctl {what}: {e}");
            output::ERROR
        })
}

/// `runs --fleet`: the newest runs of every host, from the fleet store.
pub fn runs_fleet(ctx: &Ctx, last: Option<u32>) -> i32 {
    let limit = i64::from(last.unwrap_or(100));
    let runs = match with_store(ctx, "runs --fleet", |store, pw| {
        Box::pin(crate::store::pg::read_runs(store, pw, limit))
    }) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if ctx.json {
        return output::json(&json!({ "runs": runs }));
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.run.clone(),
                r.host_id.clone(),
                r.instance.clone(),
                crate::cli::table::utc(u64::try_from(r.admitted_ms).unwrap_or(0)),
                r.state.clone(),
            ]
        })
        .collect();
    outln!(
        "{}",
        crate::cli::table::render(&["RUN", "HOST", "INSTANCE", "ADMITTED", "STATE"], &rows)
    );
    output::OK
}
