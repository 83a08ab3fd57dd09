//! The write-once run ledger: `<state_dir>/ledger.jsonl`, one JSON record per line, each
//! appended with a single `O_APPEND` write and fsync'd before the append returns (or, with
//! [`Ledger::append_all_pending`], before its [`Pending::wait`] does: appenders that
//! arrive together share one sync, see [`super::ledger_sync`]).
//!
//! Records are hash-chained: `seq` counts from 1, `prev` is the `hash` of the previous
//! record (64 zeros for the first), and `hash` is the hex SHA-256 of the record's canonical
//! line without `hash`: `{"seq":N,"prev":"…","event":{…}}` exactly as serde_json writes it
//! (struct fields in declaration order, object keys of `budgets` sorted). A stored line must
//! be byte-identical to the canonical form, so any edit to a record (or a removed or
//! reordered one) breaks the chain at that record, and [`verify`] names it. Removing
//! records from the end cannot be seen from the file alone.
//!
//! A run is open from its `run_opened` record until a `run_closed` record for the same run
//! exists; [`open_runs`] lists the ones a crash left open. One process appends at a time:
//! [`Ledger::open`] takes an exclusive `flock` and refuses if another holder has it.
//!
//! Readers ([`records`], [`verify`], [`open_runs`], [`runs_since`]) need no lock: they read
//! complete lines only and verify the chain before answering; a broken ledger is an error,
//! never a silently partial answer.

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ledger_sync::GroupSync;
use crate::role::model::Level;

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The ledger's file name inside the state directory.
pub const FILE_NAME: &str = "ledger.jsonl";

/// Milliseconds since the Unix epoch, as the ledger records times.
pub use crate::clock::now_ms;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Exited,
    Killed,
    TimedOut,
    Stopped,
    /// Stopped because its standalone supervisor was sent SIGINT, SIGTERM or SIGHUP.
    Interrupted,
    Aborted,
    Refused,
}

/// A run was launched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunOpened {
    pub run: String,
    /// The uid of the control-socket peer that asked for the launch.
    pub launched_by_uid: u32,
    pub role: String,
    pub instance: String,
    /// The instance uid the run executes as.
    pub uid: u32,
    pub level: Level,
    /// The budgets in force for this run (as resolved by the supervisor).
    pub budgets: serde_json::Value,
    /// Unix milliseconds.
    pub started_at: u64,
    pub deadline_s: u64,
    /// The frozen revision of the role the run ran: the sha256 of its folder and the
    /// instance's revision number. Absent in older records and for one-off runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<u32>,
    /// The image the run's command side was rooted in (`environments`) and its manifest
    /// digest. Absent: the host's system folders (and in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
}

/// A run ended (or was refused before it started).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunClosed {
    pub run: String,
    /// Unix milliseconds.
    pub ended_at: u64,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Written by airlock, never copied from the agent or a secret.
    pub reason: String,
    /// The calls through the run's gateway, when it had one. Absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<CallCounts>,
    /// The run's model requests and spend, when it had a provider route. Absent in older
    /// records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<SpendCounts>,
    /// The run's GitHub writes, when it had a GitHub route. Absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GithubWrites>,
    /// The run's connections through its egress proxy, when it had a gateway. Absent in
    /// older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressCounts>,
}

/// What a run's gateway counted, for its closing record (each part only when the run had
/// that route).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: Option<CallCounts>,
    pub spend: Option<SpendCounts>,
    pub github: Option<GithubWrites>,
    pub egress: Option<EgressCounts>,
}

impl RunClosed {
    /// A closing record with the run's tally.
    pub fn new(
        run: &str,
        outcome: Outcome,
        exit_code: Option<i32>,
        signal: Option<i32>,
        reason: &str,
        t: Tally,
    ) -> RunClosed {
        RunClosed {
            run: run.to_string(),
            ended_at: now_ms(),
            outcome,
            exit_code,
            signal,
            reason: reason.to_string(),
            calls: t.calls,
            spend: t.spend,
            github: t.github,
            egress: t.egress,
        }
    }
}

/// A run's egress: connections (CONNECT tunnels and plain HTTP requests) let through and
/// refused, and the bytes that went each way through those let through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressCounts {
    pub allowed: u64,
    pub refused: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// A run's GitHub writes, forwarded through its GitHub route, and its budget.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubWrites {
    /// Writes forwarded (a push counts one).
    pub writes: u64,
    /// `budget.github_writes_per_run`.
    pub budget: u64,
    /// The branches the run created, `owner/repo:branch`: the ratchet finds the role that
    /// opened a pull request from its head branch here. Absent when it created none (and
    /// in older records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<String>,
}

/// A run's model requests (forwarded and refused) and what they cost, in micro-USD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpendCounts {
    pub requests: u64,
    pub refused: u64,
    pub micro_usd: u64,
    pub budget_micro_usd: u64,
    /// Model turns forwarded and `run.max_turns` (absent in records written before the
    /// provider route counted turns, so those stay in canonical form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u64>,
}

/// A credential lease was issued to a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseIssued {
    pub lease: String,
    pub run: String,
    pub instance: String,
    /// `provider`, `connector` (not `kind`: that names the record's own kind).
    pub lease_kind: String,
    pub grants: String,
    /// Unix milliseconds.
    pub issued_at: u64,
    pub expires_at: Option<u64>,
}

/// A credential lease was revoked (or its revocation at the source is still pending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRevoked {
    pub lease: String,
    pub run: String,
    pub instance: String,
    /// Unix milliseconds.
    pub revoked_at: u64,
    /// `revoked`, or `revoke-pending`.
    pub state: String,
    /// Written by airlock: why (the run ended, the instance was fired, ...).
    pub reason: String,
}

/// Calls through a run's gateway (bash and MCP), by decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallCounts {
    pub allowed: u64,
    pub refused: u64,
    /// Of the allowed, the bash commands that ran. Absent in older records (and then
    /// never written back: a record reads back byte for byte or the chain breaks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bash: Option<u64>,
    /// The requests put to a person (asks), when the run asked any; absent otherwise and
    /// in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asks: Option<AskCounts>,
}

/// A run's asks by how they ended: `allowed` counts `--for-run` answers too, and
/// `unanswered` those that expired or were withdrawn with the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskCounts {
    pub asked: u64,
    pub allowed: u64,
    pub denied: u64,
    pub unanswered: u64,
}

/// One step of a decision (seed 003): `raise`, `approve`, `deny`, `expire`, `withdraw`,
/// and what an approval did: `hire`, `fire`, `change`. No free text (a reason could hold
/// anything): who, what, and the digest that was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionStep {
    pub decision: String,
    pub step: String,
    /// `hire`, `fire` or `change`.
    pub op: String,
    pub name: String,
    pub role: String,
    /// `uid N`, `instance NAME` or `airlockd` (an expiry).
    pub by: String,
    pub digest: String,
    /// Unix milliseconds.
    pub at: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flagged: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LedgerEvent {
    RunOpened(RunOpened),
    RunClosed(RunClosed),
    LeaseIssued(LeaseIssued),
    LeaseRevoked(LeaseRevoked),
    Decision(DecisionStep),
}

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub seq: u64,
    pub prev: String,
    pub event: LedgerEvent,
    pub hash: String,
}

/// What `hash` covers.
#[derive(Serialize)]
struct Unsigned<'a> {
    seq: u64,
    prev: &'a str,
    event: &'a LedgerEvent,
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger {}: cannot {op}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    #[error("ledger {} is held by another process (is airlockd already running?)", path.display())]
    Locked { path: PathBuf },
    #[error("ledger {} is broken at line {line} (record {seq}): {why}; keep it as evidence and start a new ledger", path.display())]
    Broken {
        path: PathBuf,
        seq: u64,
        line: u64,
        why: String,
    },
    #[error("ledger {}: an earlier append failed; reopen the ledger to repair it", path.display())]
    Poisoned { path: PathBuf },
    #[error("ledger: a record would not read back identically (budgets must hold only strings, integers, booleans, null, arrays and objects)")]
    NotCanonical,
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> LedgerError + 'a {
    move |source| LedgerError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn serialize<T: Serialize>(v: &T) -> Result<String, LedgerError> {
    serde_json::to_string(v).map_err(|_| LedgerError::NotCanonical)
}

/// The hash and full line (without newline) of a record.
fn seal(seq: u64, prev: &str, event: &LedgerEvent) -> Result<(String, String), LedgerError> {
    let unsigned = serialize(&Unsigned { seq, prev, event })?;
    let hash = sha256_hex(unsigned.as_bytes());
    let record = Record {
        seq,
        prev: prev.to_string(),
        event: event.clone(),
        hash: hash.clone(),
    };
    Ok((hash, serialize(&record)?))
}

/// Chain state after the records seen so far.
struct Chain {
    next_seq: u64,
    last_hash: String,
}

impl Chain {
    fn new() -> Chain {
        Chain {
            next_seq: 1,
            last_hash: GENESIS.to_string(),
        }
    }

    /// Check one complete line (without its newline) as the next record.
    fn check(&mut self, path: &Path, line_no: u64, line: &[u8]) -> Result<Record, LedgerError> {
        let seq = self.next_seq;
        let broken = |why: String| LedgerError::Broken {
            path: path.to_path_buf(),
            seq,
            line: line_no,
            why,
        };
        let record = check_record(line).map_err(|why| broken(why.to_string()))?;
        if record.seq != seq {
            return Err(broken(format!(
                "expected record {seq}, found record {} (a record was removed, added or reordered)",
                record.seq
            )));
        }
        if record.prev != self.last_hash {
            return Err(broken(
                "its prev does not match the previous record's hash".to_string(),
            ));
        }
        self.next_seq += 1;
        self.last_hash = record.hash.clone();
        Ok(record)
    }
}

/// Parse one line and check it on its own: canonical form, and its hash over its contents.
/// A canonical line is its unsigned form with `,"hash":"<hash>"` before the closing brace,
/// so the hash is checked over the line's own bytes (one serialization per record, not
/// two: this runs for every record airlockd and `verify-ledger` read).
pub fn check_record(line: &[u8]) -> Result<Record, &'static str> {
    let record: Record = serde_json::from_slice(line).map_err(|_| "not a ledger record")?;
    let canonical = serialize(&record).map_err(|_| "not a ledger record")?;
    if canonical.as_bytes() != line {
        return Err("it is not in canonical form (edited)");
    }
    // Canonical: the line ends with `,"hash":"` + 64 hex digits + `"}`.
    let unsigned_len = line.len().saturating_sub(record.hash.len() + 11);
    let mut hasher = Sha256::new();
    hasher.update(&line[..unsigned_len]);
    hasher.update(b"}");
    if hex(&hasher.finalize()) != record.hash {
        return Err("its hash does not match its contents");
    }
    Ok(record)
}

/// Verify every complete line of `data`; returns the records and the chain state.
fn check_all(path: &Path, data: &[u8]) -> Result<(Vec<Record>, Chain), LedgerError> {
    let mut chain = Chain::new();
    let mut records = Vec::new();
    // Only complete lines count: an unterminated tail is an append in progress or torn.
    let Some(last_nl) = data.iter().rposition(|&c| c == b'\n') else {
        return Ok((records, chain));
    };
    for (i, line) in data[..last_nl].split(|&c| c == b'\n').enumerate() {
        records.push(chain.check(path, i as u64 + 1, line)?);
    }
    Ok((records, chain))
}

fn read_all(path: &Path) -> Result<Vec<u8>, LedgerError> {
    match std::fs::read(path) {
        Ok(d) => Ok(d),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err(path, "read")(e)),
    }
}

/// How far before the budget window [`Ledger::open_recent`] still reads: records are
/// appended in time order unless the clock was set back, and this much back is covered.
pub const CLOCK_SLACK_MS: u64 = 7 * 24 * 3600 * 1000;

/// [`Ledger::open_recent`] stops after this many opening records in a row from before the
/// window less [`CLOCK_SLACK_MS`].
const OLD_IN_A_ROW: u32 = 64;

/// Open (creating it, and making its directory entry durable, if needed) and lock the
/// ledger for appending; refuses if another process holds it.
fn lock_for_append(path: &Path) -> Result<Flock<File>, LedgerError> {
    let mut created = false;
    let file = match OpenOptions::new()
        .read(true)
        .append(true)
        .create_new(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => {
            created = true;
            f
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => OpenOptions::new()
            .read(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(io_err(path, "open"))?,
        Err(e) => return Err(io_err(path, "create")(e)),
    };
    if created {
        // The new directory entry must survive a crash along with the first record.
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(path, "sync its directory"))?;
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(f) => Ok(f),
        Err((_, Errno::EWOULDBLOCK)) => Err(LedgerError::Locked {
            path: path.to_path_buf(),
        }),
        Err((_, e)) => Err(io_err(path, "lock")(io::Error::from(e))),
    }
}

/// Cut an unterminated last line (a torn append) so the file ends at `keep`; returns the
/// bytes removed.
fn cut_torn_tail(file: &mut File, path: &Path, size: u64, keep: u64) -> Result<u64, LedgerError> {
    if size > keep {
        file.set_len(keep)
            .and_then(|_| file.sync_all())
            .map_err(io_err(path, "truncate its torn last line"))?;
    }
    Ok(size - keep)
}

/// Bytes read at a time by [`scan_back`].
const TAIL_CHUNK: u64 = 64 << 10;

/// Hand the file's complete lines (without newline) to `visit`, last first, until it
/// returns false or the file's start is reached. Returns the file's size and its length up
/// to the end of its last complete line.
fn scan_back(
    file: &mut File,
    path: &Path,
    mut visit: impl FnMut(&[u8]) -> Result<bool, LedgerError>,
) -> Result<(u64, u64), LedgerError> {
    let size = file.metadata().map_err(io_err(path, "read"))?.len();
    // Bytes [pos, pos + buf.len()) of the file not handed out yet.
    let mut pos = size;
    let mut buf: Vec<u8> = Vec::new();
    let mut keep: Option<u64> = None;
    loop {
        let start = pos.saturating_sub(TAIL_CHUNK);
        let mut chunk = vec![0u8; (pos - start) as usize];
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(&mut chunk))
            .map_err(io_err(path, "read"))?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
        pos = start;
        let keep_at = match keep {
            Some(k) => k,
            None => match buf.iter().rposition(|&c| c == b'\n') {
                Some(i) => {
                    buf.truncate(i + 1);
                    let k = pos + i as u64 + 1;
                    keep = Some(k);
                    k
                }
                None if pos == 0 => return Ok((size, 0)),
                None => continue,
            },
        };
        // `buf` ends with a newline; lines after the first one in it are complete.
        let body = &buf[..buf.len() - 1];
        let mut end = body.len();
        while let Some(i) = body[..end].iter().rposition(|&c| c == b'\n') {
            if !visit(&body[i + 1..end])? {
                return Ok((size, keep_at));
            }
            end = i;
        }
        if pos == 0 {
            if end > 0 {
                visit(&body[..end])?;
            }
            return Ok((size, keep_at));
        }
        // The first line may go on in the bytes before: keep it for the next round.
        buf.truncate(end);
        buf.push(b'\n');
    }
}

/// [`scan_back`] over records: each line is checked against its own hash and linked to
/// the record after it, so an edit or a removal within what is read is an error, never a
/// silently partial answer. `visit` gets the records, newest first, until it says stop.
fn scan_back_records(
    file: &mut File,
    path: &Path,
    mut visit: impl FnMut(Record) -> bool,
) -> Result<(u64, u64), LedgerError> {
    // The seq and hash the next record read (the one before) must have.
    let mut expect: Option<(u64, String)> = None;
    scan_back(file, path, |line| {
        let seq = expect.as_ref().map_or(0, |(seq, _)| *seq);
        let broken = |why: String| LedgerError::Broken {
            path: path.to_path_buf(),
            seq,
            line: 0,
            why: format!("{why} (`airlockctl verify-ledger` names the first broken record)"),
        };
        let record =
            check_record(line).map_err(|why| broken(format!("a record near the end: {why}")))?;
        if let Some((seq, hash)) = &expect {
            if record.seq != *seq || record.hash != *hash {
                return Err(broken(
                    "a record near the end does not link to the one after it".to_string(),
                ));
            }
        }
        expect = record.seq.checked_sub(1).map(|s| (s, record.prev.clone()));
        Ok(visit(record))
    })
}

/// The appending side. The daemon holds exactly one.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: Flock<File>,
    next_seq: u64,
    last_hash: String,
    len: u64,
    torn_bytes: u64,
    poisoned: bool,
    /// Start times of every opened run, by instance: the weekly budget is checked on each
    /// launch, and re-reading the whole ledger for it would grow with its history.
    starts: BTreeMap<String, Vec<u64>>,
    /// The record count, for readers that must not wait on the ledger's lock (the fleet
    /// mirror's async task, `status`).
    count: Arc<AtomicU64>,
    /// The file's durability, shared with appenders waiting outside the lock.
    sync: Arc<GroupSync>,
}

/// Records written and not yet known durable: [`Pending::wait`] until they are. Got from
/// [`Ledger::append_all_pending`], waited for once the ledger's lock is released.
#[must_use = "a record is durable only once waited for"]
pub struct Pending {
    sync: Arc<GroupSync>,
    end: u64,
    path: PathBuf,
}

impl Pending {
    /// Until the records are durable (one sync for every appender waiting meanwhile).
    pub fn wait(self) -> Result<(), LedgerError> {
        self.sync.wait(self.end).map_err(io_err(&self.path, "sync"))
    }
}

/// The ledger file's [`GroupSync`], on a descriptor of its own (the file stays locked).
fn group_sync(file: &File, path: &Path, len: u64) -> Result<Arc<GroupSync>, LedgerError> {
    let dup = file.try_clone().map_err(io_err(path, "open for syncing"))?;
    Ok(Arc::new(GroupSync::new(dup, len)))
}

impl Ledger {
    /// Open (creating if missing) and lock the ledger, cut away a torn final line left by a
    /// crash mid-append, and verify the whole chain.
    pub fn open(path: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open_with_unclosed(path).map(|(l, _)| l)
    }

    /// [`Ledger::open`], also returning the runs it found open (an opening record and no
    /// closing one), in ledger order: what crash recovery must close, from the one read.
    pub fn open_with_unclosed(path: &Path) -> Result<(Ledger, Vec<RunOpened>), LedgerError> {
        let mut file = lock_for_append(path)?;
        let mut data = Vec::new();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_end(&mut data))
            .map_err(io_err(path, "read"))?;
        // Only an unterminated last line is torn; every complete line is kept and verified.
        let keep = data.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
        let torn_bytes = cut_torn_tail(&mut file, path, data.len() as u64, keep as u64)?;
        data.truncate(keep);
        let (records, chain) = check_all(path, &data)?;
        let mut starts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for r in &records {
            if let LedgerEvent::RunOpened(o) = &r.event {
                starts
                    .entry(o.instance.clone())
                    .or_default()
                    .push(o.started_at);
            }
        }
        let ledger = Ledger {
            path: path.to_path_buf(),
            sync: group_sync(&file, path, keep as u64)?,
            file,
            next_seq: chain.next_seq,
            last_hash: chain.last_hash,
            len: keep as u64,
            torn_bytes,
            poisoned: false,
            count: Arc::new(AtomicU64::new(chain.next_seq - 1)),
            starts,
        };
        Ok((ledger, unclosed(&records)))
    }

    /// Open for appending like [`Ledger::open`], reading only the end of the file: the
    /// records back to `since_ms` (less [`CLOCK_SLACK_MS`], for a clock set back, and until
    /// 64 opening records in a row are older) for [`Ledger::opened_since`], each checked
    /// against its own hash and linked to the next, so the chain goes on from records that
    /// are what they claim to be. For
    /// launchers that append a record or two per process (`launch --standalone`), whose
    /// cost must not grow with the ledger's history; airlockd verifies the whole chain
    /// when it starts, and so does `airlockctl verify-ledger`.
    pub fn open_recent(path: &Path, since_ms: u64) -> Result<Ledger, LedgerError> {
        let mut file = lock_for_append(path)?;
        let floor = since_ms.saturating_sub(CLOCK_SLACK_MS);
        // The newest record's seq and hash: the chain goes on from it.
        let mut last: Option<(u64, String)> = None;
        let mut old_in_a_row = 0u32;
        let mut starts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let (size, keep) = scan_back_records(&mut file, path, |record| {
            if last.is_none() {
                last = Some((record.seq, record.hash.clone()));
            }
            // Opening records decide how far back to go (a closing one may come late).
            // Several old ones in a row, not one: a single record written while the clock
            // was far behind must not hide the records before it.
            if let LedgerEvent::RunOpened(o) = record.event {
                old_in_a_row = if o.started_at < floor {
                    old_in_a_row + 1
                } else {
                    0
                };
                starts.entry(o.instance).or_default().push(o.started_at);
            }
            old_in_a_row < OLD_IN_A_ROW
        })?;
        let torn_bytes = cut_torn_tail(&mut file, path, size, keep)?;
        let (next_seq, last_hash) = match last {
            Some((seq, hash)) => (
                seq.checked_add(1).ok_or_else(|| LedgerError::Broken {
                    path: path.to_path_buf(),
                    seq,
                    line: 0,
                    why: "its last record number cannot be followed".to_string(),
                })?,
                hash,
            ),
            None => (1, GENESIS.to_string()),
        };
        Ok(Ledger {
            path: path.to_path_buf(),
            sync: group_sync(&file, path, keep)?,
            file,
            next_seq,
            last_hash,
            len: keep,
            torn_bytes,
            poisoned: false,
            starts,
            count: Arc::new(AtomicU64::new(next_seq - 1)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs of `instance` opened at or after `since_ms`, from the index kept in memory
    /// (same answer as [`runs_since`] on the file, without reading it).
    pub fn opened_since(&self, instance: &str, since_ms: u64) -> usize {
        self.starts
            .get(instance)
            .map_or(0, |v| v.iter().filter(|&&t| t >= since_ms).count())
    }

    /// Bytes of a torn final line removed by [`Ledger::open`] (0 after a clean shutdown).
    pub fn torn_bytes_removed(&self) -> u64 {
        self.torn_bytes
    }

    /// Records in the ledger.
    pub fn len(&self) -> u64 {
        self.next_seq - 1
    }

    pub fn is_empty(&self) -> bool {
        self.next_seq == 1
    }

    /// [`Ledger::len`] as a value read without this ledger's lock, kept current by appends.
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.count.clone()
    }

    /// Append one record and make it durable before returning it.
    pub fn append(&mut self, event: LedgerEvent) -> Result<Record, LedgerError> {
        let mut records = self.append_all(vec![event])?;
        records.pop().ok_or(LedgerError::NotCanonical)
    }

    /// Append records in order with one write and one fsync (what must be durable
    /// together: a run's leases and its opening record, or their revocations and its
    /// closing one), each chained to the one before as if appended alone. A crash leaves
    /// the ledger ending at one of them (a torn last line is cut back at the next open).
    pub fn append_all(&mut self, events: Vec<LedgerEvent>) -> Result<Vec<Record>, LedgerError> {
        let (records, pending) = self.append_all_pending(events)?;
        if let Err(e) = pending.wait() {
            self.poison();
            return Err(e);
        }
        Ok(records)
    }

    /// [`Ledger::append_all`] without the wait for durability: the records are written
    /// (later appends chain on them) and durable once [`Pending::wait`] returns, which the
    /// caller does after releasing the ledger's lock, so appenders that arrive together
    /// share one sync. Nothing may act on the records, or tell of them, before that.
    pub fn append_all_pending(
        &mut self,
        events: Vec<LedgerEvent>,
    ) -> Result<(Vec<Record>, Pending), LedgerError> {
        if self.sync.failed() {
            self.poison();
        }
        if self.poisoned {
            return Err(LedgerError::Poisoned {
                path: self.path.clone(),
            });
        }
        // Refuse what a verifier would reject later (e.g. floats that do not round-trip).
        let mut check = Chain {
            next_seq: self.next_seq,
            last_hash: self.last_hash.clone(),
        };
        let mut bytes = Vec::new();
        let mut sealed = Vec::with_capacity(events.len());
        for event in events {
            let seq = check.next_seq;
            let prev = check.last_hash.clone();
            let (hash, line) = seal(seq, &prev, &event)?;
            if check.check(&self.path, 0, line.as_bytes()).is_err() {
                return Err(LedgerError::NotCanonical);
            }
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
            sealed.push(Record {
                seq,
                prev,
                event,
                hash,
            });
        }
        let pending = Pending {
            sync: self.sync.clone(),
            end: self.len,
            path: self.path.clone(),
        };
        if sealed.is_empty() {
            return Ok((sealed, pending));
        }
        let written = self.file.write_all(&bytes);
        if let Err(e) = written {
            // The tail is unknown now: try to cut back to the last good record, and refuse
            // further appends until a reopen has checked the file.
            self.poisoned = true;
            let _ = self
                .file
                .set_len(self.len)
                .and_then(|_| self.file.sync_all());
            return Err(io_err(&self.path, "append")(e));
        }
        self.len += bytes.len() as u64;
        self.sync.wrote(self.len);
        self.next_seq = check.next_seq;
        self.last_hash = check.last_hash;
        self.count.store(self.next_seq - 1, Ordering::SeqCst);
        for r in &sealed {
            if let LedgerEvent::RunOpened(o) = &r.event {
                let v = self.starts.entry(o.instance.clone()).or_default();
                v.push(o.started_at);
                forget_old_starts(v, o.started_at);
            }
        }
        Ok((
            sealed,
            Pending {
                end: self.len,
                ..pending
            },
        ))
    }

    /// A sync failed: what the file holds past the last durable byte is unknown. Cut back
    /// to it, and refuse appends until a reopen has checked the file.
    fn poison(&mut self) {
        if !self.poisoned {
            self.poisoned = true;
            let _ = self
                .file
                .set_len(self.sync.synced())
                .and_then(|_| self.file.sync_all());
        }
    }
}

/// Check a chain given as its lines (a host's ledger as the fleet store mirrors it):
/// the same checks as [`verify`], `origin` naming where the lines came from in errors.
pub fn verify_lines<'a>(
    origin: &Path,
    lines: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<Record>, LedgerError> {
    let mut chain = Chain::new();
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| chain.check(origin, i as u64 + 1, l))
        .collect()
}

/// A record's line as the ledger file holds it (canonical form, without the newline).
pub fn line_of(r: &Record) -> Result<String, LedgerError> {
    serialize(r)
}

/// How far back the index of run starts reaches: the weekly window and the slack for a
/// clock set back. Older starts can count for no budget, and a daemon up for months must
/// not keep one per run it ever launched.
const STARTS_KEPT_MS: u64 = 7 * 24 * 3600 * 1000 + CLOCK_SLACK_MS;

/// Drop the starts older than [`STARTS_KEPT_MS`] before `newest` (only when the oldest is
/// due, so an append costs no scan).
fn forget_old_starts(v: &mut Vec<u64>, newest: u64) {
    let floor = newest.saturating_sub(STARTS_KEPT_MS);
    if v.first().is_some_and(|&t| t < floor) {
        v.retain(|&t| t >= floor);
    }
}

/// Every record, after verifying the chain. A missing ledger has no records.
pub fn records(path: &Path) -> Result<Vec<Record>, LedgerError> {
    let data = read_all(path)?;
    Ok(check_all(path, &data)?.0)
}

/// A run as the ledger records it: its opening record, and its closing one once closed.
pub type RunRecords = (RunOpened, Option<RunClosed>);

/// The newest `limit` runs, oldest first, read from the end of the ledger (each record
/// checked against its own hash), and whether older runs exist. For listings: their cost
/// follows `limit`, not the ledger's history, and so does the answer's size.
pub fn recent_runs(path: &Path, limit: usize) -> Result<(Vec<RunRecords>, bool), LedgerError> {
    let mut runs = Vec::new();
    let mut more = false;
    scan_runs(path, |run| {
        if runs.len() == limit {
            more = true;
            return false;
        }
        runs.push(run);
        true
    })?;
    runs.reverse();
    Ok((runs, more))
}

/// One run's records, read from the end of the ledger back to its opening record.
pub fn find_run(path: &Path, run: &str) -> Result<Option<RunRecords>, LedgerError> {
    let mut found = None;
    scan_runs(path, |r| {
        if r.0.run == run {
            found = Some(r);
            return false;
        }
        true
    })?;
    Ok(found)
}

/// Visit runs from the newest opening record back, each with its closing record (which
/// comes after it in the file, so it has been read by then), until `visit` says stop.
fn scan_runs(path: &Path, mut visit: impl FnMut(RunRecords) -> bool) -> Result<(), LedgerError> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path, "read")(e)),
    };
    let mut closings: BTreeMap<String, RunClosed> = BTreeMap::new();
    scan_back_records(&mut file, path, |record| match record.event {
        LedgerEvent::RunClosed(c) => {
            // Read newest first: a run closed twice keeps its last closing.
            closings.entry(c.run.clone()).or_insert(c);
            true
        }
        LedgerEvent::RunOpened(o) => {
            let closed = closings.remove(&o.run);
            visit((o, closed))
        }
        LedgerEvent::LeaseIssued(_) | LedgerEvent::LeaseRevoked(_) | LedgerEvent::Decision(_) => {
            true
        }
    })?;
    Ok(())
}

/// The newest run that created `branch` in `repo` (by its closing record), read from the
/// end of the ledger: the run and its role.
pub fn creator_of(path: &Path, repo: &str, branch: &str) -> Result<Option<RunOpened>, LedgerError> {
    let want = format!("{repo}:{branch}");
    let mut found = None;
    scan_runs(path, |(opened, closed)| {
        let made = closed
            .as_ref()
            .and_then(|c| c.github.as_ref())
            .is_some_and(|g| g.created.iter().any(|c| c.eq_ignore_ascii_case(&want)));
        if made {
            found = Some(opened);
        }
        !made
    })?;
    Ok(found)
}

/// Verify the chain; returns the number of records, or the first broken one.
pub fn verify(path: &Path) -> Result<u64, LedgerError> {
    Ok(records(path)?.len() as u64)
}

/// Runs with an opening record and no closing one, in ledger order (crash recovery).
pub fn open_runs(path: &Path) -> Result<Vec<RunOpened>, LedgerError> {
    Ok(unclosed(&records(path)?))
}

fn unclosed(all: &[Record]) -> Vec<RunOpened> {
    let closed: HashSet<&str> = all
        .iter()
        .filter_map(|r| match &r.event {
            LedgerEvent::RunClosed(c) => Some(c.run.as_str()),
            _ => None,
        })
        .collect();
    all.iter()
        .filter_map(|r| match &r.event {
            LedgerEvent::RunOpened(o) if !closed.contains(o.run.as_str()) => Some(o.clone()),
            _ => None,
        })
        .collect()
}

/// Runs of `instance` opened at or after `since_ms` (for a rolling runs-per-week budget:
/// `since_ms = now_ms() - 7 days`).
pub fn runs_since(path: &Path, instance: &str, since_ms: u64) -> Result<usize, LedgerError> {
    Ok(records(path)?
        .iter()
        .filter(|r| {
            matches!(&r.event, LedgerEvent::RunOpened(o)
                if o.instance == instance && o.started_at >= since_ms)
        })
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_index_keeps_only_what_a_budget_can_count() {
        let day = 24 * 3600 * 1000;
        let now = 100 * day;
        let mut v = vec![now - 20 * day, now - 13 * day, now - day];
        forget_old_starts(&mut v, now);
        assert_eq!(v, vec![now - 13 * day, now - day]);
        // Within the window plus the slack: kept as it is.
        forget_old_starts(&mut v, now);
        assert_eq!(v.len(), 2);
    }
}
