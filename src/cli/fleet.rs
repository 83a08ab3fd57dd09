//! The read commands of the fleet store (`store:`), for every host's runs and ledgers:
//! `runs --fleet`, `verify-ledger --fleet`, and `show RUN` of a run this host does not
//! have. They read PostgreSQL directly, without a host lease, and never write.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::output::{self, outln};
use super::remote::Ctx;
use crate::credentials::leases::{Lease, LeaseKind, LeaseState};
use crate::daemon::runs::run_info;
use crate::store::pg::{HostReport, MirrorRow};
use crate::supervisor::ledger::{self, LedgerError, LedgerEvent, Record, RunRecords};

/// `verify-ledger --fleet`: every host's chain as the fleet store mirrors it, each checked
/// as the file is (contiguous from record 1, canonical lines, hashes chained), each row's
/// own `seq` and `hash` columns against its line, and the whole against what the host
/// reported writing (`airlock_hosts`: its highest record and that record's hash), so a cut
/// tail, a hole or a host whose rows are all gone is named. Rows of a host_id no host ever
/// registered are named and not trusted. Exit 0 all intact, 1 anything wrong.
pub fn verify(ctx: &Ctx) -> i32 {
    let ledgers = match with_store(ctx, "verify-ledger --fleet", |store, pw| {
        Box::pin(crate::store::pg::read_ledgers(store, pw))
    }) {
        Ok(h) => h,
        Err(code) => return code,
    };
    let store_name = match ctx.load_config() {
        Ok(c) => c.store.map(|s| s.describe()).unwrap_or_default(),
        Err(code) => return code,
    };
    let none = Vec::new();
    let hosts: std::collections::BTreeSet<&String> = ledgers
        .rows
        .keys()
        .chain(
            ledgers
                .reported
                .iter()
                .filter(|(_, r)| r.mirrored_seq > 0)
                .map(|(h, _)| h),
        )
        .collect();
    let report: Vec<(&String, usize, Vec<Problem>)> = hosts
        .into_iter()
        .map(|h| {
            let rows = ledgers.rows.get(h).unwrap_or(&none);
            (h, rows.len(), check_host(h, rows, ledgers.reported.get(h)))
        })
        .collect();
    let broken = report.iter().any(|(_, _, p)| !p.is_empty());
    if ctx.json {
        let hosts: Vec<_> = report
            .iter()
            .map(|(h, n, p)| {
                let problems: Vec<_> = p
                    .iter()
                    .map(|p| json!({"kind": p.kind, "seq": p.seq, "why": p.why}))
                    .collect();
                let reported = ledgers.reported.get(*h).map(|r| r.mirrored_seq);
                let mut v = json!({"host_id": h, "ok": p.is_empty(), "records": n, "reported": reported, "problems": problems});
                if let Some(first) = p.first() {
                    v["broken"] = json!({"seq": first.seq, "why": first.why});
                }
                v
            })
            .collect();
        output::json(&json!({"fleet": true, "ok": !broken, "hosts": hosts}));
    } else {
        if report.is_empty() {
            outln!("{store_name}: no host has mirrored a ledger record yet");
        }
        for (h, n, problems) in &report {
            if problems.is_empty() {
                outln!(
                    "host {h}: {n} records, hash chain intact, each signed by the host's registered key, as the host reported writing them"
                );
            }
            for p in problems {
                outln!("host {h}: {} at record {}: {}", p.kind, p.seq, p.why);
            }
        }
    }
    if broken {
        output::NO
    } else {
        output::OK
    }
}

/// One thing wrong with a host's mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Problem {
    /// `BROKEN`, `MISSING ROWS`, `CUT`, `MISSING`, `UNKNOWN HOST`, `UNSIGNED` or `BAD
    /// SIGNATURE`.
    kind: &'static str,
    /// The first record it concerns.
    seq: i64,
    why: String,
}

fn problem(kind: &'static str, seq: i64, why: String) -> Problem {
    Problem { kind, seq, why }
}

/// One host's mirrored rows (in order of `seq`) against its chain, its registered key and
/// what it reported writing (`None`: no such host registered). Pure.
fn check_host(host: &str, rows: &[MirrorRow], reported: Option<&HostReport>) -> Vec<Problem> {
    let Some(HostReport {
        mirrored_seq: told,
        mirrored_head: told_head,
        public_key,
    }) = reported
    else {
        return vec![problem(
            "UNKNOWN HOST",
            rows.first().map_or(0, |r| r.seq),
            format!("{} rows under a host_id no airlockd of the fleet ever registered (not in airlock_hosts); not trusted", rows.len()),
        )];
    };
    let mut out = Vec::new();
    // Holes: every record from 1 up to the last row must be there.
    let mut want = 1i64;
    for MirrorRow { seq, .. } in rows {
        if *seq > want {
            out.push(problem(
                "MISSING ROWS",
                want,
                format!("records {want}..{} are not in the store (deleted)", seq - 1),
            ));
        }
        want = want.max(seq.saturating_add(1));
    }
    let last = rows.last().map_or(0, |r| r.seq);
    if rows.is_empty() && *told > 0 {
        out.push(problem(
            "MISSING",
            1,
            format!("none of {host}'s records are in the store; it reported writing up to record {told}"),
        ));
    } else if last < *told {
        out.push(problem(
            "CUT",
            last + 1,
            format!("the mirror ends at record {last}, but {host} reported writing up to record {told} (its tail was deleted)"),
        ));
    } else if *told > 0 {
        let at = rows.iter().find(|r| r.seq == *told).map(|r| &r.hash);
        if at != told_head.as_ref() {
            out.push(problem(
                "BROKEN",
                *told,
                format!(
                    "its hash is not the one {host} reported writing (the record was replaced)"
                ),
            ));
        }
    }
    if !out.is_empty() {
        return out;
    }
    if let Err((seq, why)) = check_chain(host, rows) {
        out.push(problem("BROKEN", seq, why));
        return out;
    }
    // Whose rows: each signed with the key the host registered (a chain is easy to
    // rewrite whole; a signature without the host's key is not).
    let Some(pk) = public_key else {
        out.push(problem(
            "UNSIGNED",
            1,
            format!("{host} has no signing key registered (an airlockd from before keys): who wrote its rows cannot be checked"),
        ));
        return out;
    };
    for r in rows {
        let seq = u64::try_from(r.seq).unwrap_or(0);
        match &r.sig {
            None => out.push(problem(
                "UNSIGNED",
                r.seq,
                format!("the row has no signature ({host} signs every row it writes)"),
            )),
            Some(sig) if !crate::store::signing::verify(pk, host, seq, &r.hash, sig) => {
                out.push(problem(
                    "BAD SIGNATURE",
                    r.seq,
                    format!("its signature does not verify with {host}'s registered key: {host} did not write this row"),
                ))
            }
            Some(_) => continue,
        }
        break;
    }
    out
}

/// One host's mirrored chain; `Err((seq, why))` at its first broken record.
fn check_chain(host: &str, rows: &[MirrorRow]) -> Result<(), (i64, String)> {
    let origin = PathBuf::from(format!("(fleet store, host {host})"));
    let checked = ledger::verify_lines(&origin, rows.iter().map(|r| r.line.as_bytes()));
    let records = checked.map_err(|e| match e {
        LedgerError::Broken { seq, why, .. } => (i64::try_from(seq).unwrap_or(i64::MAX), why),
        e => (0, e.to_string()),
    })?;
    for (row, r) in rows.iter().zip(&records) {
        if u64::try_from(row.seq).ok() != Some(r.seq) || row.hash != r.hash {
            return Err((
                row.seq,
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
pub fn runs(ctx: &Ctx, last: Option<u32>) -> i32 {
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

/// `show RUN` of a run this host's ledger does not have: its records as the fleet store
/// mirrors them, each checked against its own hash, with its host. `Ok(None)` without a
/// store, or when no host has the run.
pub fn show(ctx: &Ctx, run: &str) -> Result<Option<Value>, i32> {
    if ctx.load_config()?.store.is_none() {
        return Ok(None);
    }
    let id = run.to_string();
    let found = with_store(ctx, "show", |store, pw| {
        Box::pin(async move { crate::store::pg::read_run(store, pw, &id).await })
    })?;
    let records = match assemble(&found.lines) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("airlockctl show: {why}; `airlockctl verify-ledger --fleet` checks every host's chain");
            return Err(output::NO);
        }
    };
    let Some((host, records, leases)) = records else {
        return match found.host_id {
            None => Ok(None),
            Some(h) => {
                eprintln!(
                    "airlockctl show: run {} was admitted on host {} but its ledger records have not reached the fleet store yet (that host mirrors them as it can)",
                    super::table::clean(run),
                    super::table::clean(&h)
                );
                Err(output::NO)
            }
        };
    };
    let mut info = run_info(records);
    info.leases = leases;
    if info.ended_at.is_none() && found.state.as_deref() == Some(super::offline::UNSUPERVISED) {
        info.state = super::offline::UNSUPERVISED.into();
        info.reason = Some(format!(
            "its host {host} stopped renewing the run's lease; that host's next airlockd start closes the record as aborted"
        ));
    }
    Ok(Some(json!({ "run": info, "host_id": host })))
}

/// One run from its mirrored lines `(host_id, line)`: its host, its opening and last
/// closing record, and its leases as the lease records tell them. `Err` names the first
/// line that fails its own check; `Ok(None)` when no line opens the run.
fn assemble(
    lines: &[(String, String)],
) -> Result<Option<(String, RunRecords, Vec<Lease>)>, String> {
    let mut opened = None;
    let mut closed = None;
    let mut leases: Vec<Lease> = Vec::new();
    for (host, line) in lines {
        let r: Record = ledger::check_record(line.as_bytes()).map_err(|why| {
            format!("host {host}: a mirrored record of this run fails its check: {why}")
        })?;
        match r.event {
            LedgerEvent::RunOpened(o) => opened = Some((host.clone(), o)),
            LedgerEvent::RunClosed(c) => closed = Some(c),
            LedgerEvent::LeaseIssued(l) => leases.push(Lease {
                kind: serde_json::from_value::<LeaseKind>(Value::String(l.lease_kind.clone()))
                    .map_err(|_| {
                        format!(
                            "host {host}: lease {} has a kind this build does not know",
                            l.lease
                        )
                    })?,
                id: l.lease,
                run: l.run,
                instance: l.instance,
                grants: l.grants,
                issued_at: l.issued_at,
                expires_at: l.expires_at,
                state: LeaseState::Active,
                revoked_at: None,
                revoke_reason: None,
                upstream_expires_at: None,
            }),
            LedgerEvent::LeaseRevoked(v) => {
                if let Some(l) = leases.iter_mut().find(|l| l.id == v.lease) {
                    l.state = if v.state == "revoked" {
                        LeaseState::Revoked
                    } else {
                        LeaseState::RevokePending
                    };
                    l.revoked_at = Some(v.revoked_at);
                    l.revoke_reason = Some(v.reason);
                }
            }
            LedgerEvent::Decision(_) => {}
        }
    }
    Ok(opened.map(|(host, o)| (host, (o, closed), leases)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(v: Value) -> LedgerEvent {
        serde_json::from_value(v).expect("an event")
    }

    /// Lines as a host's ledger writes them (and the mirror copies them).
    fn lines() -> Vec<(String, String)> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ledger.jsonl");
        let mut l = ledger::Ledger::open(&path).expect("ledger");
        l.append(event(
            json!({"kind": "run_opened", "run": "r-1", "launched_by_uid": 0,
            "role": "code", "instance": "tess", "uid": 61000, "level": "L2", "budgets": {},
            "started_at": 1000, "deadline_s": 60}),
        ))
        .expect("append");
        l.append(event(
            json!({"kind": "lease_issued", "lease": "run/r-1/provider/0",
            "run": "r-1", "instance": "tess", "lease_kind": "provider", "grants": "claude",
            "issued_at": 1001, "expires_at": null}),
        ))
        .expect("append");
        l.append(event(
            json!({"kind": "lease_revoked", "lease": "run/r-1/provider/0",
            "run": "r-1", "instance": "tess", "revoked_at": 2000, "state": "revoked",
            "reason": "the run ended"}),
        ))
        .expect("append");
        l.append(event(
            json!({"kind": "run_closed", "run": "r-1", "ended_at": 2000,
            "outcome": "exited", "exit_code": 0, "signal": null, "reason": "exited 0"}),
        ))
        .expect("append");
        std::fs::read_to_string(&path)
            .expect("read")
            .lines()
            .map(|l| ("node-b".to_string(), l.to_string()))
            .collect()
    }

    #[test]
    fn a_run_is_assembled_from_its_mirrored_records_with_its_host_and_leases() {
        let (host, (opened, closed), leases) = assemble(&lines()).expect("checked").expect("found");
        assert_eq!(host, "node-b");
        assert_eq!(
            (opened.run.as_str(), opened.instance.as_str()),
            ("r-1", "tess")
        );
        assert_eq!(closed.map(|c| c.ended_at), Some(2000));
        assert_eq!(leases.len(), 1);
        assert_eq!(leases[0].state, LeaseState::Revoked);
        assert_eq!(leases[0].revoke_reason.as_deref(), Some("the run ended"));
        // Only a lease record: no run to show.
        assert!(assemble(&lines()[1..2]).expect("checked").is_none());
    }

    #[test]
    fn an_edited_mirrored_record_is_named_not_shown() {
        let mut l = lines();
        l[0].1 = l[0].1.replace("\"tess\"", "\"tass\"");
        let e = assemble(&l).expect_err("edited");
        assert!(e.contains("host node-b") && e.contains("hash"), "{e}");
    }

    fn rows(seqs: &[i64]) -> Vec<MirrorRow> {
        seqs.iter()
            .map(|s| MirrorRow {
                seq: *s,
                hash: format!("h{s}"),
                line: String::new(),
                sig: None,
            })
            .collect()
    }

    fn report(n: i64, head: &str) -> HostReport {
        HostReport {
            mirrored_seq: n,
            mirrored_head: Some(head.into()),
            public_key: None,
        }
    }

    fn kinds(p: &[Problem]) -> Vec<(&'static str, i64)> {
        p.iter().map(|p| (p.kind, p.seq)).collect()
    }

    #[test]
    fn holes_cut_tails_missing_hosts_and_strangers_are_named() {
        let told = |n: i64| Some(report(n, &format!("h{n}")));
        let p = check_host("a", &rows(&[1, 2, 4, 5]), told(8).as_ref());
        assert_eq!(kinds(&p), vec![("MISSING ROWS", 3), ("CUT", 6)], "{p:?}");
        assert!(p[1].why.contains("up to record 8"), "{p:?}");
        let p = check_host("a", &[], told(8).as_ref());
        assert_eq!(kinds(&p), vec![("MISSING", 1)]);
        let p = check_host("x", &rows(&[1]), None);
        assert_eq!(kinds(&p), vec![("UNKNOWN HOST", 1)]);
        // The reported head replaced by another record.
        let p = check_host("a", &rows(&[1, 2]), Some(&report(2, "other")));
        assert_eq!(kinds(&p), vec![("BROKEN", 2)]);
    }
}
