//! The write-once run ledger: chain, tamper detection, crash repair, locking, queries.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use airlock::role::model::Level;
use airlock::supervisor::ledger::{
    self, Ledger, LedgerError, LedgerEvent, Outcome, RunClosed, RunOpened, GENESIS,
};
use serde_json::json;
use sha2::{Digest, Sha256};

fn opened(run: &str, instance: &str, started_at: u64) -> LedgerEvent {
    LedgerEvent::RunOpened(RunOpened {
        run: run.to_string(),
        launched_by_uid: 1000,
        role: "code".to_string(),
        instance: instance.to_string(),
        uid: 60001,
        level: Level::L2,
        budgets: json!({"minutes": 30, "runs_per_week": 20, "writes": {"max": 100, "files": null}}),
        started_at,
        deadline_s: 1800,
        role_sha256: None,
        rev: None,
        image: None,
        image_digest: None,
    })
}

fn closed(run: &str) -> LedgerEvent {
    LedgerEvent::RunClosed(RunClosed {
        run: run.to_string(),
        ended_at: 5000,
        outcome: Outcome::Exited,
        exit_code: Some(0),
        signal: None,
        reason: "agent exited".to_string(),
        calls: None,
        spend: None,
        github: None,
        egress: None,
    })
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(ledger::FILE_NAME);
    (dir, path)
}

fn three_records(path: &Path) {
    let mut l = Ledger::open(path).unwrap();
    l.append(opened("run-a", "tess", 1000)).unwrap();
    l.append(opened("run-b", "tess", 2000)).unwrap();
    l.append(closed("run-a")).unwrap();
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    fs::write(path, text).unwrap();
}

fn broken_at(r: Result<u64, LedgerError>) -> (u64, u64) {
    match r {
        Err(LedgerError::Broken { seq, line, .. }) => (seq, line),
        other => panic!("expected a broken ledger, got {other:?}"),
    }
}

#[test]
fn append_chains_and_verifies() {
    let (_d, path) = setup();
    let mut l = Ledger::open(&path).unwrap();
    assert!(l.is_empty());
    let r1 = l.append(opened("run-a", "tess", 1000)).unwrap();
    let r2 = l.append(closed("run-a")).unwrap();
    assert_eq!((r1.seq, r2.seq), (1, 2));
    assert_eq!(r1.prev, GENESIS);
    assert_eq!(r2.prev, r1.hash);
    assert_eq!(l.len(), 2);
    drop(l);

    assert_eq!(ledger::verify(&path).unwrap(), 2);
    assert_eq!(
        ledger::records(&path).unwrap(),
        vec![r1.clone(), r2.clone()]
    );

    // The documented hash: SHA-256 of the line without its `hash` member.
    for (line, rec) in lines(&path).iter().zip([&r1, &r2]) {
        let cut = line.find(",\"hash\":").unwrap();
        let unsigned = format!("{}}}", &line[..cut]);
        let digest = Sha256::digest(unsigned.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, rec.hash);
        assert!(line.starts_with(&format!("{{\"seq\":{},\"prev\":\"", rec.seq)));
    }
    // Budgets keys are written sorted, so the canonical form does not depend on map order.
    assert!(lines(&path)[0].contains(
        r#""budgets":{"minutes":30,"runs_per_week":20,"writes":{"files":null,"max":100}}"#
    ));

    // Reopening continues the chain.
    let mut l = Ledger::open(&path).unwrap();
    let r3 = l.append(opened("run-b", "tess", 3000)).unwrap();
    assert_eq!(r3.seq, 3);
    assert_eq!(r3.prev, r2.hash);
    drop(l);
    assert_eq!(ledger::verify(&path).unwrap(), 3);
}

#[test]
fn records_appended_together_chain_as_if_appended_alone() {
    let (_d, path) = setup();
    let mut l = Ledger::open(&path).unwrap();
    let r1 = l.append(opened("run-a", "tess", 1000)).unwrap();
    let batch = l
        .append_all(vec![
            opened("run-b", "tess", 2000),
            closed("run-a"),
            closed("run-b"),
        ])
        .unwrap();
    assert_eq!(
        batch.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    assert_eq!(batch[0].prev, r1.hash);
    assert_eq!(batch[2].prev, batch[1].hash);
    assert!(l.append_all(Vec::new()).unwrap().is_empty());
    // The opening record in a batch counts for the weekly budget like one appended alone.
    assert_eq!(l.opened_since("tess", 0), 2);
    let r5 = l.append(opened("run-c", "tess", 3000)).unwrap();
    assert_eq!((r5.seq, &r5.prev), (5, &batch[2].hash));
    drop(l);
    assert_eq!(ledger::verify(&path).unwrap(), 5);
    let mut all = vec![r1];
    all.extend(batch);
    all.push(r5);
    assert_eq!(ledger::records(&path).unwrap(), all);
}

#[test]
fn missing_ledger_is_empty() {
    let (_d, path) = setup();
    assert_eq!(ledger::verify(&path).unwrap(), 0);
    assert!(ledger::open_runs(&path).unwrap().is_empty());
}

#[test]
fn edited_byte_in_middle_record_is_named() {
    let (_d, path) = setup();
    three_records(&path);
    let mut l = lines(&path);
    assert!(l[1].contains("\"run-b\""));
    l[1] = l[1].replacen("\"run-b\"", "\"run-c\"", 1);
    write_lines(&path, &l);
    assert_eq!(broken_at(ledger::verify(&path)), (2, 2));
    // The appender refuses a broken ledger too.
    assert!(matches!(
        Ledger::open(&path),
        Err(LedgerError::Broken { seq: 2, .. })
    ));
    assert!(ledger::open_runs(&path).is_err());
}

#[test]
fn rehashed_forgery_breaks_the_next_link() {
    let (_d, path) = setup();
    three_records(&path);
    let recs = ledger::records(&path).unwrap();
    // A forger who rewrites record 2 with a valid hash of its own still breaks record 3.
    let (_fd, forged) = setup();
    let mut f = Ledger::open(&forged).unwrap();
    f.append(recs[0].event.clone()).unwrap();
    f.append(opened("run-evil", "tess", 2000)).unwrap();
    drop(f);
    let mut l = lines(&path);
    l[1] = lines(&forged)[1].clone();
    write_lines(&path, &l);
    assert_eq!(broken_at(ledger::verify(&path)), (3, 3));
}

#[test]
fn whitespace_or_extra_member_is_detected() {
    let (_d, path) = setup();
    three_records(&path);
    let mut l = lines(&path);
    l[0] = l[0].replacen("{\"seq\":1,", "{\"seq\": 1,", 1);
    write_lines(&path, &l);
    assert_eq!(broken_at(ledger::verify(&path)), (1, 1));

    three_records(&{
        fs::remove_file(&path).unwrap();
        path.clone()
    });
    let mut l = lines(&path);
    l[2] = l[2].replacen("{\"seq\":3,", "{\"seq\":3,\"note\":\"x\",", 1);
    write_lines(&path, &l);
    assert_eq!(broken_at(ledger::verify(&path)), (3, 3));
}

#[test]
fn deleted_record_is_detected() {
    let (_d, path) = setup();
    three_records(&path);
    let mut l = lines(&path);
    l.remove(1);
    write_lines(&path, &l);
    let err = ledger::verify(&path).unwrap_err();
    assert_eq!(broken_at(Err(err)), (2, 2));
    // The first record removed: the chain must start at 1.
    three_records(&{
        fs::remove_file(&path).unwrap();
        path.clone()
    });
    let mut l = lines(&path);
    l.remove(0);
    write_lines(&path, &l);
    assert_eq!(broken_at(ledger::verify(&path)), (1, 1));
}

#[test]
fn torn_last_line_is_cut_and_chain_continues() {
    let (_d, path) = setup();
    three_records(&path);
    let good_len = fs::metadata(&path).unwrap().len();
    let last_hash = ledger::records(&path).unwrap()[2].hash.clone();
    // A crash in the middle of an append leaves an unterminated line.
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"seq\":4,\"prev\":\"ab").unwrap();
    drop(f);
    // Readers ignore the unterminated tail.
    assert_eq!(ledger::verify(&path).unwrap(), 3);

    let mut l = Ledger::open(&path).unwrap();
    assert_eq!(l.torn_bytes_removed(), 19);
    assert_eq!(fs::metadata(&path).unwrap().len(), good_len);
    let r4 = l.append(closed("run-b")).unwrap();
    assert_eq!(r4.seq, 4);
    assert_eq!(r4.prev, last_hash);
    drop(l);
    assert_eq!(ledger::verify(&path).unwrap(), 4);
}

#[test]
fn complete_bad_last_line_is_not_truncated() {
    let (_d, path) = setup();
    three_records(&path);
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"seq\":4}\n").unwrap();
    drop(f);
    let before = fs::read(&path).unwrap();
    assert!(matches!(
        Ledger::open(&path),
        Err(LedgerError::Broken {
            seq: 4,
            line: 4,
            ..
        })
    ));
    assert_eq!(fs::read(&path).unwrap(), before, "evidence must be kept");
}

#[test]
fn second_opener_is_refused() {
    let (_d, path) = setup();
    let first = Ledger::open(&path).unwrap();
    let err = Ledger::open(&path).unwrap_err();
    assert!(matches!(err, LedgerError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("held by another process"));
    drop(first);
    Ledger::open(&path).unwrap();
}

#[test]
fn open_runs_lists_unclosed_runs() {
    let (_d, path) = setup();
    three_records(&path);
    let open = ledger::open_runs(&path).unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].run, "run-b");
    assert_eq!(open[0].level, Level::L2);
    let mut l = Ledger::open(&path).unwrap();
    l.append(LedgerEvent::RunClosed(RunClosed {
        run: "run-b".into(),
        ended_at: 9000,
        outcome: Outcome::Aborted,
        exit_code: None,
        signal: Some(9),
        reason: "daemon restarted".into(),
        calls: None,
        spend: None,
        github: None,
        egress: None,
    }))
    .unwrap();
    drop(l);
    assert!(ledger::open_runs(&path).unwrap().is_empty());
}

#[test]
fn runs_since_counts_within_window() {
    let (_d, path) = setup();
    let mut l = Ledger::open(&path).unwrap();
    for (run, inst, at) in [
        ("r1", "tess", 1000),
        ("r2", "tess", 5000),
        ("r3", "tess", 9000),
        ("r4", "ivan", 9000),
    ] {
        l.append(opened(run, inst, at)).unwrap();
    }
    l.append(closed("r1")).unwrap();
    // The appender's in-memory index agrees with the file, before and after a reopen.
    assert_eq!(l.opened_since("tess", 5000), 2);
    drop(l);
    let reopened = Ledger::open(&path).unwrap();
    assert_eq!(reopened.opened_since("tess", 0), 3);
    assert_eq!(reopened.opened_since("tess", 9001), 0);
    assert_eq!(reopened.opened_since("ivan", 0), 1);
    drop(reopened);
    assert_eq!(ledger::runs_since(&path, "tess", 0).unwrap(), 3);
    assert_eq!(ledger::runs_since(&path, "tess", 5000).unwrap(), 2);
    assert_eq!(ledger::runs_since(&path, "tess", 9001).unwrap(), 0);
    assert_eq!(ledger::runs_since(&path, "ivan", 0).unwrap(), 1);
    assert_eq!(ledger::runs_since(&path, "nobody", 0).unwrap(), 0);
}

#[test]
fn outcomes_round_trip() {
    let (_d, path) = setup();
    let mut l = Ledger::open(&path).unwrap();
    for o in [
        Outcome::Exited,
        Outcome::Killed,
        Outcome::TimedOut,
        Outcome::Stopped,
        Outcome::Aborted,
        Outcome::Refused,
    ] {
        l.append(LedgerEvent::RunClosed(RunClosed {
            run: "r".into(),
            ended_at: 1,
            outcome: o,
            exit_code: None,
            signal: None,
            reason: String::new(),
            calls: None,
            spend: None,
            github: None,
            egress: None,
        }))
        .unwrap();
    }
    drop(l);
    assert_eq!(ledger::verify(&path).unwrap(), 6);
    assert!(fs::read_to_string(&path)
        .unwrap()
        .contains("\"outcome\":\"timed_out\""));
}

/// Enough records (about 600 bytes each) that the backwards scan crosses several 64 KiB
/// reads, with runs of two instances spread over a fortnight.
fn many_records(path: &Path, n: u64) {
    let mut l = Ledger::open(path).unwrap();
    for i in 0..n {
        let inst = if i % 3 == 0 { "max" } else { "tess" };
        l.append(opened(&format!("run-{i}"), inst, 1_000_000 + i * 3_600_000))
            .unwrap();
        if i % 2 == 0 {
            l.append(closed(&format!("run-{i}"))).unwrap();
        }
    }
}

#[test]
fn open_recent_counts_what_a_full_read_counts() {
    let (_d, path) = setup();
    many_records(&path, 400);
    assert!(fs::metadata(&path).unwrap().len() > 3 * (64 << 10));
    let last = 1_000_000 + 399 * 3_600_000;
    for since in [
        0,
        1_000_000,
        last - 7 * 24 * 3_600_000,
        last - 3_600_000,
        last,
        last + 1,
    ] {
        let recent = Ledger::open_recent(&path, since).unwrap();
        for inst in ["tess", "max", "nobody"] {
            assert_eq!(
                recent.opened_since(inst, since),
                ledger::runs_since(&path, inst, since).unwrap(),
                "{inst} since {since}"
            );
        }
        assert_eq!(recent.len(), 600);
    }
}

#[test]
fn open_recent_continues_the_chain() {
    let (_d, path) = setup();
    many_records(&path, 150);
    {
        let mut l = Ledger::open_recent(&path, u64::MAX).unwrap();
        let r = l.append(opened("run-next", "tess", 9_000_000_000)).unwrap();
        assert_eq!(r.seq, 226);
    }
    assert_eq!(ledger::verify(&path).unwrap(), 226);
    // An empty ledger starts the chain.
    let (_d2, empty) = setup();
    let mut l = Ledger::open_recent(&empty, 0).unwrap();
    assert_eq!(l.append(closed("x")).unwrap().prev, GENESIS);
    drop(l);
    assert_eq!(ledger::verify(&empty).unwrap(), 1);
}

#[test]
fn open_recent_cuts_a_torn_tail_and_refuses_a_forged_last_record() {
    let (_d, path) = setup();
    three_records(&path);
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"seq\":4,\"prev\":\"ab")
        .unwrap();
    {
        let mut l = Ledger::open_recent(&path, 0).unwrap();
        assert!(l.torn_bytes_removed() > 0);
        l.append(closed("run-b")).unwrap();
    }
    assert_eq!(ledger::verify(&path).unwrap(), 4);
    // The last record edited: its own hash no longer matches, so nothing is appended to it.
    let mut ls = lines(&path);
    let n = ls.len();
    ls[n - 1] = ls[n - 1].replace("agent exited", "agent exitee");
    write_lines(&path, &ls);
    assert!(matches!(
        Ledger::open_recent(&path, 0),
        Err(LedgerError::Broken { .. })
    ));
}

#[test]
fn open_recent_refuses_a_removed_record_and_survives_one_misdated_record() {
    let (_d, path) = setup();
    many_records(&path, 20);
    let mut ls = lines(&path);
    ls.remove(ls.len() - 3);
    write_lines(&path, &ls);
    assert!(matches!(
        Ledger::open_recent(&path, 0),
        Err(LedgerError::Broken { .. })
    ));

    // One run recorded while the clock was a month behind does not hide the runs before it.
    let (_d2, path) = setup();
    let day = 24 * 3_600_000u64;
    let now = 100 * day;
    {
        let mut l = Ledger::open(&path).unwrap();
        l.append(opened("a", "tess", now - 2 * day)).unwrap();
        l.append(opened("b", "tess", now - day)).unwrap();
        l.append(opened("c", "tess", now - 30 * day)).unwrap();
    }
    let since = now - 7 * day;
    assert_eq!(
        Ledger::open_recent(&path, since)
            .unwrap()
            .opened_since("tess", since),
        ledger::runs_since(&path, "tess", since).unwrap()
    );
    assert_eq!(ledger::runs_since(&path, "tess", since).unwrap(), 2);
}

#[test]
fn recent_runs_reads_only_the_newest_runs_with_their_closings() {
    let (_d, path) = setup();
    assert_eq!(ledger::recent_runs(&path, 5).unwrap(), (Vec::new(), false));
    many_records(&path, 300);
    let (runs, more) = ledger::recent_runs(&path, 4).unwrap();
    assert!(more, "older runs exist");
    let names: Vec<&str> = runs.iter().map(|(o, _)| o.run.as_str()).collect();
    assert_eq!(names, ["run-296", "run-297", "run-298", "run-299"]);
    // Even runs were closed right after they opened; odd ones are still open.
    for (o, c) in &runs {
        let n: u64 = o.run["run-".len()..].parse().unwrap();
        assert_eq!(c.is_some(), n % 2 == 0, "{}", o.run);
    }
    let (all, more) = ledger::recent_runs(&path, 1000).unwrap();
    assert!(!more);
    assert_eq!(all.len(), 300);
    assert_eq!(all[0].0.run, "run-0");

    let (o, c) = ledger::find_run(&path, "run-10")
        .unwrap()
        .expect("run-10 is there");
    assert_eq!(
        (o.run.as_str(), c.map(|c| c.run)),
        ("run-10", Some("run-10".to_string()))
    );
    assert!(ledger::find_run(&path, "run-300").unwrap().is_none());
}

#[test]
fn recent_runs_refuses_an_edited_record_it_reads() {
    let (_d, path) = setup();
    many_records(&path, 10);
    let mut all = lines(&path);
    let last = all.len() - 1;
    all[last] = all[last]
        .replace("\"tess\"", "\"eve\"")
        .replace("\"max\"", "\"eve\"");
    write_lines(&path, &all);
    assert!(matches!(
        ledger::recent_runs(&path, 3),
        Err(LedgerError::Broken { .. })
    ));
}

#[test]
fn recent_runs_refuses_a_removed_record_and_keeps_a_runs_last_closing() {
    let (_d, path) = setup();
    many_records(&path, 10);
    let mut all = lines(&path);
    all.remove(5);
    write_lines(&path, &all);
    assert!(matches!(
        ledger::recent_runs(&path, 1000),
        Err(LedgerError::Broken { .. })
    ));

    let (_d, path) = setup();
    let mut l = Ledger::open(&path).unwrap();
    l.append(opened("run-a", "tess", 1000)).unwrap();
    l.append(closed("run-a")).unwrap();
    let mut again = closed("run-a");
    if let LedgerEvent::RunClosed(c) = &mut again {
        c.reason = "closed again".to_string();
    }
    l.append(again).unwrap();
    drop(l);
    let (_, c) = ledger::find_run(&path, "run-a").unwrap().unwrap();
    assert_eq!(c.unwrap().reason, "closed again");
}

/// A closing record written before Airlock counted bash commands (its `calls` has two
/// members) still reads back byte for byte, so an upgraded host's ledger verifies.
#[test]
fn a_closing_record_of_an_older_airlock_still_verifies() {
    let (_d, path) = setup();
    let mut l = Ledger::open(&path).unwrap();
    l.append(opened("run-a", "tess", 1000)).unwrap();
    let first = lines(&path).remove(0);
    drop(l);
    let r1: serde_json::Value = serde_json::from_str(&first).unwrap();
    let unsigned = format!(
        r#"{{"seq":2,"prev":"{}","event":{{"kind":"run_closed","run":"run-a","ended_at":5000,"outcome":"exited","exit_code":0,"signal":null,"reason":"agent exited","calls":{{"allowed":2,"refused":1}}}}}}"#,
        r1["hash"].as_str().unwrap()
    );
    let digest = Sha256::digest(unsigned.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let legacy = format!("{},\"hash\":\"{hex}\"}}", &unsigned[..unsigned.len() - 1]);
    write_lines(&path, &[first, legacy]);
    assert_eq!(ledger::verify(&path).unwrap(), 2);
    let recs = ledger::records(&path).unwrap();
    let LedgerEvent::RunClosed(c) = &recs[1].event else {
        panic!("{:?}", recs[1]);
    };
    let calls = c.calls.unwrap();
    assert_eq!((calls.allowed, calls.refused, calls.bash), (2, 1, None));
}

/// Group commit: appenders write under the ledger's lock and wait for durability after
/// releasing it. Many at once, interleaved with appends that wait under the lock: every
/// record is there once its wait returned, in one chain that verifies, each run's opening
/// before its closing.
#[test]
fn appends_waited_for_outside_the_lock_all_land_in_one_chain() {
    let (_d, path) = setup();
    let ledger = std::sync::Mutex::new(Ledger::open(&path).unwrap());
    std::thread::scope(|s| {
        for t in 0..8 {
            let ledger = &ledger;
            s.spawn(move || {
                for i in 0..10 {
                    let run = format!("run-{t}-{i}");
                    let (records, pending) = ledger
                        .lock()
                        .unwrap()
                        .append_all_pending(vec![opened(&run, "tess", 1000)])
                        .unwrap();
                    assert_eq!(records.len(), 1);
                    pending.wait().unwrap();
                    ledger.lock().unwrap().append(closed(&run)).unwrap();
                }
            });
        }
    });
    assert_eq!(ledger.lock().unwrap().len(), 160);
    drop(ledger);
    assert_eq!(ledger::verify(&path).unwrap(), 160);
    assert!(ledger::open_runs(&path).unwrap().is_empty());
    // Reopened, the chain goes on from the last record.
    let mut l = Ledger::open(&path).unwrap();
    l.append(opened("run-last", "tess", 2000)).unwrap();
    assert_eq!(ledger::verify(&path).unwrap(), 161);
}
