//! The ledger as airlockd and `airlockctl verify-ledger`/`runs`/`show` read it, from a
//! file that may be torn, edited or hostile. Invariants: the whole-file reader and the
//! from-the-end readers agree: when the chain verifies, every run the reverse scan finds
//! exists in the full read, and each run it finds is found by id.
#![no_main]

use std::io::Write;

use airlock::supervisor::ledger::{self, LedgerEvent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a temp dir");
    let path = dir.path().join("ledger.jsonl");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(data))
        .expect("write the ledger");
    let full = ledger::records(&path);
    let recent = ledger::recent_runs(&path, 1000);
    let _ = ledger::open_runs(&path);
    if let Ok(records) = &full {
        assert_eq!(
            ledger::verify(&path).ok(),
            Some(records.len() as u64),
            "verify and records disagree"
        );
        let (runs, more) = recent.expect("a chain that verifies whole reads from the end");
        let opened = records
            .iter()
            .filter(|r| matches!(r.event, LedgerEvent::RunOpened(_)))
            .count();
        assert_eq!(runs.len().min(1000), runs.len());
        if !more {
            assert_eq!(
                runs.len(),
                opened,
                "the reverse scan lost or invented a run"
            );
        }
        for (o, _) in runs.iter().take(4) {
            let found = ledger::find_run(&path, &o.run).expect("find_run reads it too");
            assert!(found.is_some(), "a listed run is not found by id");
        }
    }
});
