//! The run journal against a real journald, a missing socket, a socket that goes away, a
//! stalled receiver; the line splitter; the reader over both sources.

use std::collections::HashSet;
use std::fs;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock::journal::reader::{read_run_with, ReaderConfig};
use airlock::journal::{
    read_run, EventKind, JournalConfig, LineSplitter, RunFields, RunJournal, Stream,
};
use serde_json::Value;

const SOCKET: &str = "/run/systemd/journal/socket";

fn require_journald() {
    // Connecting tells a live journald from a socket file left by one that is gone.
    let live = std::os::unix::net::UnixDatagram::unbound()
        .and_then(|s| s.connect(SOCKET))
        .is_ok();
    assert!(
        live,
        "journald is not running ({SOCKET} does not answer): start it with scripts/start-journald.sh"
    );
}

fn unique_run(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t-{tag}-{}-{nanos}", std::process::id())
}

fn fields(run: &str) -> RunFields {
    RunFields {
        run: run.to_string(),
        role: "code".to_string(),
        instance: "tess".to_string(),
    }
}

/// journalctl's records for the run, waiting (not asserting a time) until `want` are there.
fn journald_records(run: &str, want: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("journalctl")
            .args(["--no-pager", "-q", "--all", "-o", "json"])
            .arg(format!("AIRLOCK_RUN={run}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "journalctl failed");
        let recs: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if recs.len() >= want || Instant::now() > deadline {
            return recs;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A field in journalctl's JSON convention: string or array of bytes.
fn bytes_of(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Array(a) => a.iter().map(|n| n.as_u64().unwrap() as u8).collect(),
        other => panic!("unexpected field value {other}"),
    }
}

fn text(rec: &Value, name: &str) -> String {
    match &rec[name] {
        Value::String(s) => s.clone(),
        other => panic!("{name}: expected one string value, got {other}"),
    }
}

fn fallback_records(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn real_journald_gets_every_field_and_exact_bytes() {
    require_journald();
    let run = unique_run("real");
    let dir = tempfile::tempdir().unwrap();
    let mut j = RunJournal::open(fields(&run), dir.path()).unwrap();

    let lines: Vec<(Stream, Vec<u8>)> = vec![
        (Stream::Stdout, b"hello".to_vec()),
        (Stream::Stderr, b"warning: careful".to_vec()),
        (
            Stream::Stdout,
            b"AIRLOCK_RUN=forged\nAIRLOCK_ROLE=evil\nPRIORITY=0".to_vec(),
        ),
        (Stream::Stdout, b"AIRLOCK_RUN=forged".to_vec()),
        (Stream::Stdout, vec![0xff, 0xfe, b'a', 0, 0x1b, b'[']),
        (Stream::Stderr, b"line1\nline2".to_vec()),
        (Stream::Stdout, Vec::new()),
    ];
    j.event(
        EventKind::RunStarted,
        "run started",
        &[("AIRLOCK_UID", "60001")],
    )
    .unwrap();
    for (s, l) in &lines {
        j.line(*s, l).unwrap();
    }
    j.event(EventKind::RunExited, "exited with code 0", &[])
        .unwrap();
    assert_eq!(j.sent_to_fallback(), 0);
    assert_eq!(j.sent_to_journald(), 9);
    assert!(!j.fallback_path().exists(), "nothing should fall back");

    let mut recs = journald_records(&run, 9);
    assert_eq!(
        recs.len(),
        9,
        "journald should hold every record of the run"
    );
    recs.sort_by_key(|r| text(r, "AIRLOCK_SEQ").parse::<u64>().unwrap());
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(text(r, "AIRLOCK_SEQ"), (i + 1).to_string());
        assert_eq!(
            text(r, "AIRLOCK_RUN"),
            run,
            "forged text must not add fields"
        );
        assert_eq!(text(r, "AIRLOCK_ROLE"), "code");
        assert_eq!(text(r, "AIRLOCK_INSTANCE"), "tess");
        assert_eq!(text(r, "SYSLOG_IDENTIFIER"), "airlockd");
        assert!(text(r, "AIRLOCK_TIME_US").parse::<u64>().is_ok());
    }
    let first = &recs[0];
    assert_eq!(text(first, "AIRLOCK_EVENT"), "run_started");
    assert_eq!(
        text(first, "MESSAGE_ID"),
        EventKind::RunStarted.message_id()
    );
    assert_eq!(text(first, "MESSAGE"), "run started");
    assert_eq!(text(first, "PRIORITY"), "6");
    assert_eq!(text(first, "AIRLOCK_UID"), "60001");
    assert!(first.get("AIRLOCK_STREAM").is_none());
    let last = &recs[8];
    assert_eq!(text(last, "AIRLOCK_EVENT"), "run_exited");
    assert_eq!(text(last, "MESSAGE_ID"), EventKind::RunExited.message_id());

    for ((stream, bytes), r) in lines.iter().zip(&recs[1..8]) {
        assert_eq!(text(r, "AIRLOCK_STREAM"), stream.as_str());
        assert_eq!(&bytes_of(&r["MESSAGE"]), bytes, "line bytes must be exact");
        assert!(r.get("MESSAGE_ID").is_none());
        assert!(r.get("AIRLOCK_EVENT").is_none());
        assert_eq!(text(r, "PRIORITY"), stream.priority().to_string());
    }
}

#[test]
fn oversized_record_goes_through_memfd() {
    require_journald();
    let run = unique_run("memfd");
    let dir = tempfile::tempdir().unwrap();
    let mut j = RunJournal::open(fields(&run), dir.path()).unwrap();
    // Larger than the default socket send buffer (212992 bytes), so a plain datagram fails
    // with EMSGSIZE and the record must travel in a sealed memfd.
    let big: String = "0123456789abcdef".repeat(20 * 1024);
    j.event(
        EventKind::JailReport,
        "jail report",
        &[("AIRLOCK_DETAIL", &big)],
    )
    .unwrap();
    assert_eq!(j.sent_to_journald(), 1);
    assert_eq!(j.sent_to_fallback(), 0);
    let recs = journald_records(&run, 1);
    assert_eq!(recs.len(), 1);
    assert_eq!(text(&recs[0], "AIRLOCK_DETAIL"), big);
}

#[test]
fn missing_socket_sends_every_record_to_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let run = unique_run("missing");
    let config = JournalConfig {
        socket: dir.path().join("no-such-socket"),
        ..JournalConfig::default()
    };
    let fb = dir.path().join("fallback");
    let mut j = RunJournal::open_with(fields(&run), &fb, config).unwrap();
    let n = 10_000;
    j.event(EventKind::RunStarted, "run started", &[]).unwrap();
    for i in 0..n {
        let s = if i % 3 == 0 {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        j.line(s, format!("line {i}").as_bytes()).unwrap();
    }
    j.line(Stream::Stdout, &[0xc3, 0x28, b'\n', 0xff]).unwrap();
    j.event(EventKind::RunExited, "exited", &[]).unwrap();
    assert!(j.falling_back());
    assert_eq!(j.sent_to_journald(), 0);
    assert_eq!(j.sent_to_fallback(), n + 3);
    let path = j.fallback_path().to_path_buf();
    assert_eq!(path, fb.join(format!("{run}.journal")));
    drop(j);

    let recs = fallback_records(&path);
    assert_eq!(recs.len() as u64, n + 3, "no record may be lost");
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(text(r, "AIRLOCK_SEQ"), (i + 1).to_string());
        assert_eq!(text(r, "AIRLOCK_RUN"), run);
        assert_eq!(text(r, "AIRLOCK_ROLE"), "code");
        assert_eq!(text(r, "AIRLOCK_INSTANCE"), "tess");
        assert_eq!(text(r, "SYSLOG_IDENTIFIER"), "airlockd");
        assert!(r.get("PRIORITY").is_some());
        assert!(r.get("AIRLOCK_TIME_US").is_some());
    }
    assert_eq!(
        text(&recs[0], "MESSAGE_ID"),
        EventKind::RunStarted.message_id()
    );
    for i in 0..n as usize {
        let r = &recs[i + 1];
        assert_eq!(text(r, "MESSAGE"), format!("line {i}"));
        let want = if i % 3 == 0 { "stderr" } else { "stdout" };
        assert_eq!(text(r, "AIRLOCK_STREAM"), want);
    }
    // Non-UTF-8 survives as an array of bytes.
    assert_eq!(
        bytes_of(&recs[n as usize + 1]["MESSAGE"]),
        vec![0xc3, 0x28, b'\n', 0xff]
    );
    assert_eq!(text(&recs[n as usize + 2], "AIRLOCK_EVENT"), "run_exited");
}

fn recv_message(sock: &UnixDatagram) -> Option<String> {
    let mut buf = vec![0u8; 70_000];
    match sock.recv(&mut buf) {
        Ok(n) => {
            let dgram = &buf[..n];
            let text = String::from_utf8_lossy(dgram);
            text.lines()
                .find_map(|l| l.strip_prefix("MESSAGE=").map(str::to_string))
        }
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            None
        }
        Err(e) => panic!("recv: {e}"),
    }
}

#[test]
fn socket_that_disappears_mid_run_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path: PathBuf = dir.path().join("journal.sock");
    let receiver = UnixDatagram::bind(&sock_path).unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let run = unique_run("vanish");
    let config = JournalConfig {
        socket: sock_path.clone(),
        retry_interval: Duration::from_millis(50),
        ..JournalConfig::default()
    };
    let mut j = RunJournal::open_with(fields(&run), dir.path(), config).unwrap();

    let mut received = Vec::new();
    for i in 0..100 {
        j.line(Stream::Stdout, format!("line {i}").as_bytes())
            .unwrap();
        received.push(recv_message(&receiver).expect("fake journald gets the line"));
    }
    drop(receiver); // journald goes away; the socket file stays, so sends are refused
    for i in 100..1000 {
        j.line(Stream::Stdout, format!("line {i}").as_bytes())
            .unwrap();
    }
    assert_eq!(j.sent_to_journald(), 100);
    assert_eq!(j.sent_to_fallback(), 900);
    let fallback: Vec<String> = fallback_records(j.fallback_path())
        .iter()
        .map(|r| text(r, "MESSAGE"))
        .collect();
    assert_eq!(received.len() + fallback.len(), 1000);
    let all: HashSet<String> = received.iter().chain(&fallback).cloned().collect();
    assert_eq!(all.len(), 1000, "every line exactly once");
    assert_eq!(fallback[0], "line 100");

    // journald comes back: after the retry interval records go to it again.
    fs::remove_file(&sock_path).unwrap();
    let receiver = UnixDatagram::bind(&sock_path).unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(60));
    for i in 1000..1010 {
        j.line(Stream::Stdout, format!("line {i}").as_bytes())
            .unwrap();
        assert_eq!(recv_message(&receiver), Some(format!("line {i}")));
    }
    assert!(!j.falling_back());
    assert_eq!(j.sent_to_fallback(), 900);
    assert_eq!(fallback_records(j.fallback_path()).len(), 900);
}

#[test]
fn stalled_receiver_overflows_to_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("stalled.sock");
    let receiver = UnixDatagram::bind(&sock_path).unwrap();
    let run = unique_run("stall");
    let config = JournalConfig {
        socket: sock_path,
        send_timeout: Duration::from_millis(20),
        retry_interval: Duration::from_millis(20),
    };
    let mut j = RunJournal::open_with(fields(&run), dir.path(), config).unwrap();
    let n = 3000;
    for i in 0..n {
        j.line(Stream::Stdout, format!("line {i}").as_bytes())
            .unwrap();
    }
    receiver.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    while let Some(m) = recv_message(&receiver) {
        got.push(m);
    }
    let fallback: Vec<String> = fallback_records(j.fallback_path())
        .iter()
        .map(|r| text(r, "MESSAGE"))
        .collect();
    assert!(!got.is_empty() && !fallback.is_empty());
    assert_eq!(got.len() as u64, j.sent_to_journald());
    assert_eq!(got.len() + fallback.len(), n);
    let all: HashSet<&String> = got.iter().chain(&fallback).collect();
    assert_eq!(all.len(), n);
}

#[test]
fn extra_fields_cannot_override_fixed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = JournalConfig {
        socket: dir.path().join("none"),
        ..JournalConfig::default()
    };
    let mut j = RunJournal::open_with(fields("r1"), dir.path(), config).unwrap();
    for bad in ["AIRLOCK_RUN", "MESSAGE", "_UID", "lower", "A=B"] {
        let err = j
            .event(EventKind::JailReport, "x", &[(bad, "SECRETVALUE")])
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(
            !err.to_string().contains("SECRETVALUE"),
            "value must not be echoed"
        );
    }
    assert_eq!(j.sent_to_fallback(), 0);
    for bad_run in ["../x", ".hidden", "", "a/b", "a b"] {
        assert!(RunJournal::open(fields(bad_run), dir.path()).is_err());
    }
}

/// A datagram's `AIRLOCK_SEQ`.
fn seq_of(dgram: &[u8]) -> u64 {
    String::from_utf8_lossy(dgram)
        .lines()
        .find_map(|l| l.strip_prefix("AIRLOCK_SEQ="))
        .expect("every record has AIRLOCK_SEQ")
        .parse()
        .unwrap()
}

#[test]
fn event_now_writes_only_what_journald_takes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("now.sock");
    let receiver = UnixDatagram::bind(&sock_path).unwrap();
    let run = unique_run("now");
    let config = JournalConfig {
        socket: sock_path,
        send_timeout: Duration::from_millis(20),
        retry_interval: Duration::from_secs(60),
    };
    let mut j = RunJournal::open_with(fields(&run), dir.path(), config).unwrap();
    // Nobody reads: the socket's queue fills, and then event_now takes nothing.
    let mut taken = 0u64;
    while j
        .event_now(EventKind::ToolCall, "call", &[("AIRLOCK_TOOL", "echo")])
        .unwrap()
    {
        taken += 1;
        assert!(taken < 100_000, "the receiver's queue never filled");
    }
    assert_eq!(j.sent_to_journald(), taken);
    assert!(!j.falling_back(), "a full queue is no reason to fall back");
    assert!(
        !j.fallback_path().exists(),
        "event_now never writes the file"
    );
    // The refused record spent no sequence number: the sure writes that follow carry on
    // from it. What refused the instant send may be journald's queue (full at once under
    // the kernel's net.unix.max_dgram_qlen of 10) or only the connected socket's send
    // buffer (under systemd's 512): the sure writer's own socket then still reaches the
    // queue until it is full, and the next record waits out the send timeout and goes to
    // the fallback file.
    let mut sure = 0u64;
    while !j.fallback_path().exists() {
        j.event(EventKind::ToolCall, "call", &[("AIRLOCK_TOOL", "echo")])
            .unwrap();
        sure += 1;
        assert!(sure < 100_000, "the receiver's queue never filled");
    }
    assert_eq!(j.sent_to_journald(), taken + sure - 1);
    let fallback = fallback_records(j.fallback_path());
    assert_eq!(fallback.len(), 1);
    assert_eq!(
        text(&fallback[0], "AIRLOCK_SEQ"),
        (taken + sure).to_string()
    );
    // While falling back, event_now leaves retries and the file to the sure writer.
    assert!(!j
        .event_now(EventKind::ToolCall, "call", &[("AIRLOCK_TOOL", "echo")])
        .unwrap());
    assert_eq!(j.sent_to_fallback(), 1);
    receiver.set_nonblocking(true).unwrap();
    let mut buf = vec![0u8; 70_000];
    let mut seqs = Vec::new();
    while let Ok(n) = receiver.recv(&mut buf) {
        seqs.push(seq_of(&buf[..n]));
    }
    assert_eq!(seqs, (1..taken + sure).collect::<Vec<_>>());
}

#[test]
fn event_now_follows_a_journald_that_came_back() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("back.sock");
    let receiver = UnixDatagram::bind(&sock_path).unwrap();
    let config = JournalConfig {
        socket: sock_path.clone(),
        ..JournalConfig::default()
    };
    let mut j = RunJournal::open_with(fields("r-back"), dir.path(), config).unwrap();
    assert!(j.event_now(EventKind::ToolCall, "one", &[]).unwrap());
    // journald restarts with a new socket at the same path.
    drop(receiver);
    fs::remove_file(&sock_path).unwrap();
    let receiver = UnixDatagram::bind(&sock_path).unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // The send to the old socket is refused (nothing written); the next reaches the new one.
    assert!(!j.event_now(EventKind::ToolCall, "two", &[]).unwrap());
    assert!(j.event_now(EventKind::ToolCall, "two", &[]).unwrap());
    assert_eq!(recv_message(&receiver), Some("two".to_string()));
    assert_eq!((j.sent_to_journald(), j.sent_to_fallback()), (2, 0));
}

#[test]
fn event_now_with_no_journald_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = JournalConfig {
        socket: dir.path().join("none"),
        ..JournalConfig::default()
    };
    let mut j = RunJournal::open_with(fields("r-now"), dir.path(), config).unwrap();
    assert!(!j.event_now(EventKind::ToolCall, "call", &[]).unwrap());
    assert_eq!((j.sent_to_journald(), j.sent_to_fallback()), (0, 0));
    assert!(!j.fallback_path().exists());
    j.event_unsynced(EventKind::ToolCall, "call", &[]).unwrap();
    j.sync().unwrap();
    let fallback = fallback_records(j.fallback_path());
    assert_eq!(text(&fallback[0], "AIRLOCK_SEQ"), "1");
}

/// Reference split: by newline, each line cut into pieces of `max`.
fn reference(input: &[u8], max: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut segs: Vec<&[u8]> = input.split(|&c| c == b'\n').collect();
    if segs.last().is_some_and(|s| s.is_empty()) {
        segs.pop();
    }
    for s in segs {
        if s.is_empty() {
            out.push(Vec::new());
        }
        for c in s.chunks(max) {
            out.push(c.to_vec());
        }
    }
    out
}

fn split_all(input: &[u8], max: usize, chunk_sizes: &[usize]) -> (Vec<Vec<u8>>, LineSplitter) {
    let mut sp = LineSplitter::new(max);
    let mut out = Vec::new();
    let mut rest = input;
    let mut k = 0;
    while !rest.is_empty() {
        let n = chunk_sizes[k % chunk_sizes.len()].clamp(1, rest.len());
        k += 1;
        sp.push(&rest[..n], |l| {
            out.push(l.to_vec());
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(sp.buffered() <= max, "splitter must stay bounded");
        rest = &rest[n..];
    }
    sp.finish(|l| {
        out.push(l.to_vec());
        Ok::<(), ()>(())
    })
    .unwrap();
    (out, sp)
}

#[test]
fn line_splitter_bounds_long_lines() {
    let mut input = b"abc\n".to_vec();
    input.extend(std::iter::repeat(b'x').take(20));
    input.extend_from_slice(b"\n12345678\n\ntail");
    let (out, sp) = split_all(&input, 8, &[3, 1, 7, 64]);
    let want: Vec<&[u8]> = vec![
        b"abc",
        b"xxxxxxxx",
        b"xxxxxxxx",
        b"xxxx",
        b"12345678",
        b"",
        b"tail",
    ];
    assert_eq!(out, want);
    assert_eq!(
        sp.split_lines(),
        1,
        "one over-long line, a line of exactly max is whole"
    );
    assert_eq!(sp.buffered(), 0);

    // A flood without newlines never holds more than the maximum.
    let mut sp = LineSplitter::new(1024);
    let mut pieces = 0;
    for _ in 0..1000 {
        sp.push(&[b'y'; 999], |l| {
            assert_eq!(l.len(), 1024);
            pieces += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(sp.buffered() <= 1024);
    }
    assert_eq!(pieces, 999_000 / 1024);
    assert_eq!(sp.split_lines(), 1);

    // Errors from the sink stop the split and are returned.
    let mut sp = LineSplitter::new(4);
    let r = sp.push(b"a\nb\n", |_| Err("sink full"));
    assert_eq!(r, Err("sink full"));
}

proptest::proptest! {
    #[test]
    fn line_splitter_matches_reference(
        input in proptest::collection::vec(proptest::sample::select(vec![b'a', b'b', b'\n', 0xff]), 0..300),
        max in 1usize..20,
        chunks in proptest::collection::vec(1usize..40, 1..8),
    ) {
        let (out, _) = split_all(&input, max, &chunks);
        proptest::prop_assert_eq!(out, reference(&input, max));
    }
}

#[test]
fn reader_merges_journald_and_fallback() {
    require_journald();
    let run = unique_run("reader");
    let dir = tempfile::tempdir().unwrap();
    // First writer reaches journald...
    let mut a = RunJournal::open(fields(&run), dir.path()).unwrap();
    a.event(EventKind::RunStarted, "run started", &[]).unwrap();
    a.line(Stream::Stdout, b"from journald").unwrap();
    assert_eq!(a.sent_to_journald(), 2);
    drop(a);
    // ...the second (same run, e.g. after a daemon restart) cannot.
    let config = JournalConfig {
        socket: dir.path().join("gone"),
        ..JournalConfig::default()
    };
    let mut b = RunJournal::open_with(fields(&run), dir.path(), config).unwrap();
    b.line(Stream::Stderr, b"from fallback \x1b[31mred\\")
        .unwrap();
    b.line(Stream::Stdout, b"two\nlines \xff").unwrap();
    b.event(EventKind::RunExited, "exited with code 0", &[])
        .unwrap();
    assert_eq!(b.sent_to_fallback(), 3);
    drop(b);
    assert_eq!(journald_records(&run, 2).len(), 2);

    let want = "run_started: run started\n\
                stdout: from journald\n\
                stderr: from fallback \\u{001b}[31mred\\\\\n\
                stdout: two\\nlines \\xff\n\
                run_exited: exited with code 0\n";
    let mut out = Vec::new();
    read_run(&run, dir.path(), false, &mut out).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), want);

    // Follow ends on its own after the record that ends the run.
    let mut out = Vec::new();
    read_run(&run, dir.path(), true, &mut out).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), want);

    // A record that vanished from one writer's sequence is reported in place.
    let path = dir.path().join(format!("{run}.journal"));
    let kept: Vec<String> = fs::read_to_string(&path)
        .unwrap()
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    fs::write(&path, kept.concat()).unwrap();
    let mut out = Vec::new();
    read_run(&run, dir.path(), false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("airlock: 1 record(s) missing\nrun_exited:"),
        "{text}"
    );

    // Records from other uids are not trusted as airlockd's.
    let mut out = Vec::new();
    let cfg = ReaderConfig {
        trusted_uid: Some(4242),
        ..ReaderConfig::default()
    };
    read_run_with(&run, dir.path(), false, &mut out, &cfg).unwrap();
    assert!(!String::from_utf8(out).unwrap().contains("from journald"));
}

#[test]
fn follow_prints_records_as_they_arrive() {
    require_journald();
    let run = unique_run("follow");
    let dir = tempfile::tempdir().unwrap();
    let run2 = run.clone();
    let dir2 = dir.path().to_path_buf();
    let follower = std::thread::spawn(move || {
        let mut out = Vec::new();
        read_run(&run2, &dir2, true, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut j = RunJournal::open(fields(&run), dir.path()).unwrap();
    j.line(Stream::Stdout, b"late line").unwrap();
    j.event(EventKind::RunKilled, "killed by signal 9", &[])
        .unwrap();
    let text = follower.join().unwrap();
    assert_eq!(text, "stdout: late line\nrun_killed: killed by signal 9\n");
}
