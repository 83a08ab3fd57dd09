//! Where a run's output goes: every line into the run's journal (journald or its fallback
//! file), and optionally a copy to someone watching (a `--wait` client of airlockd, or the
//! terminal of a standalone launch). Shared by both launch paths so both journal the same.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::connector;
use super::launch::{LaunchError, Prepared};
use super::outcome::{self, Closing};
use super::process::{self, Milestone, OutputSink, RunControl, Spawned};
use super::run_end::Teardown;
use crate::gateway::egress::EgressRecord;
use crate::gateway::provider::ProviderRecord;
use crate::gateway::{CallLog, CallRecord, Gateway, UpstreamPlan};
use crate::journal::{EventKind, LineSplitter, RunJournal, Stream};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A copy of one output stream for whoever watches the run. Must not block for long: the
/// agent waits on its pipe meanwhile.
pub trait Tee: Send {
    /// A chunk exactly as the agent wrote it (before line splitting).
    fn chunk(&mut self, _bytes: &[u8]) {}
    /// One complete line, without its newline.
    fn line(&mut self, _stream: Stream, _line: &[u8]) {}
    /// The stream ended.
    fn finish(&mut self) {}
}

/// One output stream of a run: split into lines, each line to the journal (every one; a
/// line that reached neither journald nor the fallback file is counted in `lost`), and a
/// copy to the tee.
pub struct JournalSink {
    stream: Stream,
    splitter: LineSplitter,
    journal: Arc<Mutex<RunJournal>>,
    lost: Arc<AtomicU64>,
    tee: Option<Box<dyn Tee>>,
    /// Put before every line (a connector's stderr says whose it is).
    prefix: Vec<u8>,
}

impl JournalSink {
    pub fn new(
        stream: Stream,
        journal: Arc<Mutex<RunJournal>>,
        lost: Arc<AtomicU64>,
        tee: Option<Box<dyn Tee>>,
    ) -> JournalSink {
        JournalSink {
            stream,
            splitter: LineSplitter::default(),
            journal,
            lost,
            tee,
            prefix: Vec::new(),
        }
    }

    fn emit(&mut self, line: &[u8]) {
        let prefixed;
        let line = if self.prefix.is_empty() {
            line
        } else {
            prefixed = [self.prefix.as_slice(), line].concat();
            &prefixed
        };
        if lock(&self.journal).line(self.stream, line).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(t) = &mut self.tee {
            t.line(self.stream, line);
        }
    }
}

impl OutputSink for JournalSink {
    fn data(&mut self, bytes: &[u8]) {
        if let Some(t) = &mut self.tee {
            t.chunk(bytes);
        }
        let mut splitter = std::mem::take(&mut self.splitter);
        let _ = splitter.push(bytes, |line| {
            self.emit(line);
            Ok::<(), ()>(())
        });
        self.splitter = splitter;
    }

    fn finish(&mut self) {
        let mut splitter = std::mem::take(&mut self.splitter);
        let _ = splitter.finish(|line| {
            self.emit(line);
            Ok::<(), ()>(())
        });
        self.splitter = splitter;
        if let Some(mut t) = self.tee.take() {
            t.finish();
        }
    }
}

/// A run's journal, shared by its output sinks and its events, with the count of records
/// that reached neither journald nor the fallback file: the run's ledger record says how
/// many, so the trail never claims to be complete when it is not. Both launch paths
/// (airlockd, `launch --standalone`) journal a run through this.
pub struct JournaledRun {
    journal: Arc<Mutex<RunJournal>>,
    lost: Arc<AtomicU64>,
    metrics: Option<Counted>,
}

/// What a run of airlockd counts in its metrics.
struct Counted {
    metrics: Arc<crate::metrics::Metrics>,
    role: String,
    /// When its launch was asked for.
    requested: std::time::Instant,
    live: Arc<crate::metrics::live::LiveCounts>,
    trace: Option<Arc<crate::metrics::traces::RunSpan>>,
}

impl JournaledRun {
    pub fn new(journal: RunJournal) -> JournaledRun {
        JournaledRun {
            journal: Arc::new(Mutex::new(journal)),
            lost: Arc::new(AtomicU64::new(0)),
            metrics: None,
        }
    }

    /// Count the run's decisions (where they are journaled), its launch time and its
    /// fallback journal records in `metrics`.
    pub fn with_metrics(
        mut self,
        metrics: Arc<crate::metrics::Metrics>,
        role: &str,
        requested: std::time::Instant,
        live: Arc<crate::metrics::live::LiveCounts>,
        trace: Option<crate::metrics::traces::RunSpan>,
    ) -> JournaledRun {
        lock(&self.journal).count_fallback(metrics.journal_fallback_records.clone());
        self.metrics = Some(Counted {
            metrics,
            role: role.to_string(),
            requested,
            live,
            trace: trace.map(Arc::new),
        });
        self
    }

    /// Journal an event of the run (counted as lost if it reached nowhere).
    pub fn event(&self, kind: EventKind, msg: &str) {
        self.event_with(kind, msg, &[]);
    }

    /// [`JournaledRun::event`] with more fields of its own.
    pub fn event_with(&self, kind: EventKind, msg: &str, fields: &[(&str, &str)]) {
        if lock(&self.journal).event(kind, msg, fields).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Journal what a revocation of the run's leases did.
    pub fn revoked(&self, r: &crate::supervisor::lease_records::Revoked, reason: &str) {
        for id in &r.revoked {
            self.event(EventKind::Lease, &format!("lease {id} revoked: {reason}"));
        }
        for id in &r.pending {
            self.event(
                EventKind::Lease,
                &format!("lease {id} revoked here, its revocation at the source pending: {reason}"),
            );
        }
    }

    /// Records lost so far.
    /// A sink for a `--tty` run's terminal output: its lines into the journal as stdout,
    /// exactly as written (`logs` shows them escaped).
    pub fn tty_sink(&self) -> Box<dyn OutputSink> {
        Box::new(JournalSink::new(
            Stream::Stdout,
            self.journal.clone(),
            self.lost.clone(),
            None,
        ))
    }

    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Make fallback records durable (the run is over).
    pub fn sync(&self) {
        if lock(&self.journal).sync().is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Run a spawned jail to its end, as a task of the caller's runtime: its output into
    /// the journal (and a copy to `tees`, stdout's then stderr's), the jail's report and
    /// the deadline as events, its gateway served from the jail's hand-over until the run
    /// is over. Then an event counting lost records, if any. Returns how the run ended,
    /// once its cgroups are removed too.
    pub async fn supervise(
        &self,
        prepared: &Prepared,
        helper: Result<Spawned, LaunchError>,
        ctl: &RunControl,
        tees: [Option<Box<dyn Tee>>; 2],
        deadline_s: u64,
    ) -> Closing {
        self.supervise_run(prepared, helper, ctl, tees, deadline_s, false)
            .await
            .0
    }

    /// [`JournaledRun::supervise`] until every process of the run is gone: what is left
    /// of its teardown, if anything, is for the caller to finish once it has recorded and
    /// answered the run's end ([`Teardown::finish`]).
    pub async fn supervise_until_end(
        &self,
        prepared: &Prepared,
        helper: Result<Spawned, LaunchError>,
        ctl: &RunControl,
        tees: [Option<Box<dyn Tee>>; 2],
        deadline_s: u64,
    ) -> (Closing, Option<Teardown>) {
        self.supervise_run(prepared, helper, ctl, tees, deadline_s, true)
            .await
    }

    async fn supervise_run(
        &self,
        prepared: &Prepared,
        helper: Result<Spawned, LaunchError>,
        ctl: &RunControl,
        tees: [Option<Box<dyn Tee>>; 2],
        deadline_s: u64,
        early: bool,
    ) -> (Closing, Option<Teardown>) {
        let [out_tee, err_tee] = tees;
        let sink = |stream, tee| {
            Box::new(JournalSink::new(
                stream,
                self.journal.clone(),
                self.lost.clone(),
                tee,
            )) as Box<dyn OutputSink>
        };
        let (out, errs) = (sink(Stream::Stdout, out_tee), sink(Stream::Stderr, err_tee));
        let grace = ctl.grace.as_secs();
        let mut sigkilled = false;
        let started = std::time::Instant::now();
        let mut served: Option<Served> = None;
        for l in &prepared.leases {
            self.event(
                EventKind::Lease,
                &format!(
                    "lease {} issued: {}{}",
                    l.id,
                    l.grants,
                    match l.expires_at {
                        Some(t) => format!(", expires at {t} (Unix ms)"),
                        None => String::new(),
                    }
                ),
            );
        }
        let result = match helper {
            Err(e) => Err(e),
            Ok(sp) => {
                let mut on = |m: Milestone<'_>| {
                    match m {
                    Milestone::Setup(report) => {
                        // The status pipe closes when the agent is exec'd.
                        if let (Some(c), None) = (&self.metrics, &report.error) {
                            c.metrics
                                .launch_duration
                                .observe(c.requested.elapsed().as_secs_f64());
                        }
                        for i in &report.infos {
                            self.event(EventKind::JailReport, &format!("jail: {i}"));
                        }
                    }
                    Milestone::DeadlineReached => self.event(
                        EventKind::DeadlineReached,
                        &format!(
                            "deadline of {deadline_s} s reached; SIGTERM sent, SIGKILL after {grace} s"
                        ),
                    ),
                    // Stop and kill are told by the run's last record (which ends `logs -f`),
                    // so nothing that ends a run is logged before the output is drained.
                    Milestone::Stopping(_) => {}
                    Milestone::Killing => sigkilled = true,
                    Milestone::Gateway(fds) => {
                        let deadline = prepared.deadline.map(|d| started + d);
                        match self.serve(prepared, fds, deadline) {
                            Ok(s) => served = Some(s),
                            Err(why) => {
                                // Fail closed: a run without its gateway has no tools.
                                self.event(
                                    EventKind::JailReport,
                                    &format!("gateway: {why}; stopping the run"),
                                );
                                ctl.request_stop("its gateway could not be served");
                            }
                        }
                    }
                }
                };
                let spec = &prepared.spec;
                if early {
                    process::supervise_until_end(spec, sp, ctl, out, errs, &mut on).await
                } else {
                    process::supervise(spec, sp, ctl, out, errs, &mut on)
                        .await
                        .map(|s| (s, None))
                }
            }
        };
        let (result, teardown) = match result {
            Ok((s, t)) => (Ok(s), t),
            Err(e) => (Err(e), None),
        };
        let mut counted = None;
        let mut egress = None;
        let mut account = None;
        if let Some(s) = served {
            account = Some(s.gateway.account());
            let counts = s.log.counts.clone();
            s.stop().await;
            counted = Some(counts.get());
            egress = Some(counts.egress());
        }
        // Every call of the run has its span by now (made as it was counted).
        if let Some(t) = self.metrics.as_ref().and_then(|c| c.trace.as_ref()) {
            t.end();
        }
        let l = self.lost();
        if l > 0 {
            self.event(
                EventKind::OutputDropped,
                &format!("{l} journal records reached neither journald nor the fallback file"),
            );
        }
        let mut closing = outcome::closing(&result, deadline_s, grace, sigkilled);
        closing.tally.calls = counted;
        closing.tally.egress = egress;
        if let Some(p) = &prepared.gateway.provider {
            let a = account.unwrap_or_default();
            closing.tally.spend = Some(crate::supervisor::ledger::SpendCounts {
                requests: a.requests.load(Ordering::Relaxed),
                refused: a.refused.load(Ordering::Relaxed),
                micro_usd: a.spent_micro_usd.load(Ordering::Relaxed),
                budget_micro_usd: p.budget_micro_usd,
                turns: Some(a.turns.load(Ordering::Relaxed)),
                max_turns: Some(p.max_turns),
            });
        }
        if let Some(g) = &prepared.gateway.github {
            closing.tally.github = Some(crate::supervisor::ledger::GithubWrites {
                writes: g.writes.load(Ordering::SeqCst),
                budget: g.policy.budget,
                created: g
                    .created
                    .lock()
                    .map(|c| c.iter().map(|(r, b)| format!("{r}:{b}")).collect())
                    .unwrap_or_default(),
            });
        }
        (closing, teardown)
    }

    /// Serve the run's gateway from the jail's hand-over: its stdio connectors' jails
    /// first (their stderr into this journal), then the gateway itself, its calls journaled
    /// by a writer task off the calls' path.
    fn serve(
        &self,
        prepared: &Prepared,
        fds: crate::gateway::GatewayFds,
        deadline: Option<std::time::Instant>,
    ) -> Result<Served, String> {
        let metrics = self.metrics.as_ref().map(|c| crate::metrics::RunMetrics {
            metrics: c.metrics.clone(),
            role: c.role.clone(),
            connectors: prepared.gateway.connectors.clone(),
            policy: prepared.gateway.policy.get(),
            model: prepared.gateway.provider.as_ref().map(|p| p.model.clone()),
            live: c.live.clone(),
            trace: c.trace.clone(),
        });
        let log = JournalCallLog::start(self.journal.clone(), self.lost.clone(), metrics);
        let mut connectors = Vec::new();
        let mut stdio = std::collections::BTreeMap::new();
        for (name, up) in &prepared.gateway.upstreams {
            if let UpstreamPlan::Stdio { spec, env } = up {
                let mut stderr = JournalSink::new(
                    Stream::Stderr,
                    self.journal.clone(),
                    self.lost.clone(),
                    None,
                );
                stderr.prefix = format!("[connector {name}] ").into_bytes();
                let (jail, sock) =
                    connector::start((**spec).clone(), env.clone(), Box::new(stderr))
                        .map_err(|e| format!("connector {name} could not be started ({e})"))?;
                connectors.push(jail);
                stdio.insert(name.clone(), sock);
            }
        }
        let gateway = Gateway::start(prepared.gateway.clone(), fds, deadline, log.clone(), stdio)
            .map_err(|e| format!("could not be served ({e})"))?;
        Ok(Served {
            gateway,
            connectors,
            log,
        })
    }
}

/// A run's gateway being served, with what serves it.
struct Served {
    gateway: Gateway,
    /// The run's stdio connectors, stopped after the gateway (their stdio closes first).
    connectors: Vec<connector::ConnectorJail>,
    log: Arc<JournalCallLog>,
}

impl Served {
    /// The run is over: stop the gateway (every connection and call of the run ends), then
    /// the connectors' jails, then let the call writer drain what is queued.
    async fn stop(self) {
        let Served {
            gateway,
            connectors,
            log,
        } = self;
        gateway.stop().await;
        for c in connectors {
            c.stop().await;
        }
        // The gateway's tasks are gone, and their senders with them: this is the last.
        let writer = log.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(log);
        if let Some(w) = writer {
            let _ = w.await;
        }
    }
}

/// The run's gateway calls, as journal events (`AIRLOCK_EVENT=tool_call`, `egress`),
/// written in order by a task of their own so no call waits for journald: sent from the
/// task while journald's socket takes them at once, else written on the blocking pool.
struct JournalCallLog {
    tx: tokio::sync::mpsc::Sender<Entry>,
    counts: Arc<Counts>,
    /// airlockd's metrics, counted with the ledger's counts (a standalone launch has none).
    metrics: Option<crate::metrics::RunMetrics>,
    lost: Arc<AtomicU64>,
    /// The writer; taken by whoever waits for it to drain.
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// One record for the call writer. Boxed: the queue's first block of slots is allocated
/// when the run's gateway starts and lives as long as the run, and with the records inline
/// (a call record is hundreds of bytes) that block took about 10 kB of every live run,
/// most of which never makes a call.
enum Entry {
    Call(Box<CallRecord>),
    Provider(Box<ProviderRecord>),
    Withheld(Box<crate::gateway::withhold::WithheldRecord>),
    Egress(Box<EgressRecord>),
    Github(Box<crate::gateway::github::GithubRecord>),
    Ask(Box<crate::gateway::asks::AskRecord>),
}

/// Call records waiting for the journal, at most.
const CALL_QUEUE: usize = 4096;

/// Records the writer takes at once (one trip to the blocking pool).
const CALL_BATCH: usize = 256;

/// The gateway's calls by decision, for the run's closing record.
#[derive(Default)]
struct Counts {
    allowed: AtomicU64,
    refused: AtomicU64,
    bash: AtomicU64,
    egress_allowed: AtomicU64,
    egress_refused: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    asked: AtomicU64,
    asks_allowed: AtomicU64,
    asks_denied: AtomicU64,
    asks_unanswered: AtomicU64,
}

impl Counts {
    fn asks(&self) -> Option<crate::supervisor::ledger::AskCounts> {
        let asked = self.asked.load(Ordering::Relaxed);
        (asked > 0).then(|| crate::supervisor::ledger::AskCounts {
            asked,
            allowed: self.asks_allowed.load(Ordering::Relaxed),
            denied: self.asks_denied.load(Ordering::Relaxed),
            unanswered: self.asks_unanswered.load(Ordering::Relaxed),
        })
    }

    fn get(&self) -> crate::supervisor::ledger::CallCounts {
        crate::supervisor::ledger::CallCounts {
            allowed: self.allowed.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            bash: Some(self.bash.load(Ordering::Relaxed)),
            asks: self.asks(),
        }
    }

    fn egress(&self) -> crate::supervisor::ledger::EgressCounts {
        crate::supervisor::ledger::EgressCounts {
            allowed: self.egress_allowed.load(Ordering::Relaxed),
            refused: self.egress_refused.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
        }
    }
}

impl JournalCallLog {
    /// Start the writer on the current runtime.
    fn start(
        journal: Arc<Mutex<RunJournal>>,
        lost: Arc<AtomicU64>,
        metrics: Option<crate::metrics::RunMetrics>,
    ) -> Arc<JournalCallLog> {
        // Bounded: a run that calls faster than journald takes records loses records (and
        // says so in its last record), never airlockd's memory.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Entry>(CALL_QUEUE);
        let (j, l) = (journal, lost.clone());
        let writer = tokio::spawn(async move {
            // Grown as records come: an idle run holds no batch.
            let mut batch = Vec::new();
            while rx.recv_many(&mut batch, CALL_BATCH).await > 0 {
                // Straight to journald while its socket takes records at once: no trip to
                // the blocking pool per call, and the calls of one turn of the runtime go
                // back to back (journald is woken once for them, not once each).
                let sent = send_now(&j, &batch);
                batch.drain(..sent);
                if batch.is_empty() {
                    continue;
                }
                // The rest, in order, by a thread that may wait for journald or write the
                // fallback file.
                let (j, l) = (j.clone(), l.clone());
                let b = std::mem::take(&mut batch);
                let written = tokio::task::spawn_blocking(move || {
                    let mut unsynced = 0;
                    for e in &b {
                        let mut out = Out::Sure {
                            journal: &j,
                            lost: &l,
                            unsynced: &mut unsynced,
                        };
                        e.write(&mut out);
                    }
                    // One trip to the disk for the batch's fallback copies, not one each:
                    // they were only in memory while queued anyway.
                    if unsynced > 0 && lock(&j).sync().is_err() {
                        l.fetch_add(unsynced, Ordering::Relaxed);
                    }
                })
                .await;
                if written.is_err() {
                    return;
                }
            }
        });
        Arc::new(JournalCallLog {
            tx,
            counts: Arc::default(),
            metrics,
            lost,
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Queue `e` for the writer (a full queue loses it, counted).
    fn record(&self, e: Entry) {
        if self.tx.try_send(e).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How many of `batch`, from its first, journald's socket took at once (never waiting,
/// for the journal's lock either: its holder may be waiting for journald).
fn send_now(journal: &Mutex<RunJournal>, batch: &[Entry]) -> usize {
    let mut j = match journal.try_lock() {
        Ok(j) => j,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return 0,
    };
    batch
        .iter()
        .take_while(|e| e.write(&mut Out::Now(&mut j)))
        .count()
}

/// Where an entry's journal event goes.
enum Out<'a> {
    /// Written for sure: to journald, else the fallback file (not synced: the writer syncs
    /// once per batch, counting here what is left to sync), else counted in `lost`.
    Sure {
        journal: &'a Mutex<RunJournal>,
        lost: &'a AtomicU64,
        unsynced: &'a mut u64,
    },
    /// To journald only if its socket takes it at once; else not at all.
    Now(&'a mut RunJournal),
}

impl Out<'_> {
    /// True when the event is done with: journaled, or counted lost (always, for
    /// [`Out::Sure`]); false when [`Out::Now`] wrote nothing.
    fn event(&mut self, kind: EventKind, msg: &str, fields: &[(&str, &str)]) -> bool {
        match self {
            Out::Sure {
                journal,
                lost,
                unsynced,
            } => {
                let mut j = lock(journal);
                let before = j.sent_to_fallback();
                match j.event_unsynced(kind, msg, fields) {
                    Ok(()) if j.sent_to_fallback() > before => **unsynced += 1,
                    Ok(()) => {}
                    Err(_) => {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
                true
            }
            // An error (a bad field name) is the sure writer's to count.
            Out::Now(j) => j.event_now(kind, msg, fields).unwrap_or(false),
        }
    }
}

impl Entry {
    fn write(&self, out: &mut Out<'_>) -> bool {
        match self {
            Entry::Call(r) => write_call(out, r),
            Entry::Provider(r) => write_provider(out, r),
            Entry::Egress(r) => write_egress(out, r),
            Entry::Github(r) => write_github(out, r),
            Entry::Withheld(r) => write_withheld(out, r),
            Entry::Ask(r) => write_ask(out, r),
        }
    }
}

impl CallLog for JournalCallLog {
    fn call(&self, r: CallRecord) {
        let n = if r.allow {
            &self.counts.allowed
        } else {
            &self.counts.refused
        };
        n.fetch_add(1, Ordering::Relaxed);
        // Only the bash tool names a program; a command that ran is no error (its exit
        // code is the agent's business).
        if r.allow && r.program.is_some() && !r.is_error {
            self.counts.bash.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(m) = &self.metrics {
            let rpc = r.rpc.as_ref();
            m.call(&crate::metrics::CallSeen {
                connector: &r.connector,
                tool: &r.tool,
                allow: r.allow,
                rule: &r.rule,
                is_error: r.is_error,
                duration_ms: r.duration_ms,
                method: rpc.map(|m| m.method.as_str()),
                session: rpc.and_then(|m| m.session.as_deref()),
                protocol: rpc.and_then(|m| m.protocol.as_deref()),
                request_id: rpc.and_then(|m| m.request_id.as_deref()),
            });
        }
        self.record(Entry::Call(Box::new(r)));
    }

    fn provider(&self, r: ProviderRecord) {
        if let Some(m) = &self.metrics {
            m.provider(&crate::metrics::ModelSeen {
                provider: &r.provider,
                model: r.model.as_deref(),
                allow: r.allow,
                rule: &r.rule,
                usage: &r.usage,
                cost_micro_usd: r.cost_micro_usd,
                spent_micro_usd: r.spent_micro_usd,
                duration_ms: r.duration_ms,
            });
        }
        self.record(Entry::Provider(Box::new(r)));
    }

    fn egress(&self, r: EgressRecord) {
        if let Some(m) = &self.metrics {
            m.egress(r.allow, r.bytes_up, r.bytes_down);
        }
        let c = &self.counts;
        if r.allow {
            c.egress_allowed.fetch_add(1, Ordering::Relaxed);
            c.bytes_up.fetch_add(r.bytes_up, Ordering::Relaxed);
            c.bytes_down.fetch_add(r.bytes_down, Ordering::Relaxed);
        } else {
            c.egress_refused.fetch_add(1, Ordering::Relaxed);
        }
        self.record(Entry::Egress(Box::new(r)));
    }

    fn github(&self, r: crate::gateway::github::GithubRecord) {
        if let Some(m) = &self.metrics {
            m.github(&r.action, r.allow, r.writes);
        }
        self.record(Entry::Github(Box::new(r)));
    }

    fn withheld(&self, r: crate::gateway::withhold::WithheldRecord) {
        self.record(Entry::Withheld(Box::new(r)));
    }

    fn ask(&self, r: crate::gateway::asks::AskRecord) {
        let n = match r.state {
            "waiting" => Some(&self.counts.asked),
            "allowed" | "allowed_for_run" => Some(&self.counts.asks_allowed),
            "denied" => Some(&self.counts.asks_denied),
            "expired" | "withdrawn" => Some(&self.counts.asks_unanswered),
            _ => None,
        };
        if let Some(n) = n {
            n.fetch_add(1, Ordering::Relaxed);
        }
        self.record(Entry::Ask(Box::new(r)));
    }
}

fn write_call(out: &mut Out<'_>, r: &CallRecord) -> bool {
    let decision = if r.allow { "allow" } else { "deny" };
    let exit = r.exit_code.map(|c| c.to_string());
    let duration = r.duration_ms.to_string();
    let bytes = r.result_bytes.to_string();
    let mut msg = format!("{}/{} {decision} by {}", r.connector, r.tool, r.rule);
    if r.allow {
        msg.push_str(&format!(": {}", r.detail));
        match &exit {
            Some(c) => msg.push_str(&format!(" -> exit {c}")),
            None if r.is_error => msg.push_str(" -> error"),
            // A command with no exit code was killed; an MCP call has none to give.
            None if r.program.is_some() => msg.push_str(" -> killed"),
            None => msg.push_str(" -> ok"),
        }
        msg.push_str(&format!(", {duration} ms"));
    } else {
        msg.push_str(&format!(": {}", r.reason));
    }
    // Named by Airlock (a few fixed texts), whatever the call's decision or outcome.
    let asked = r.asked.join(", ");
    if !asked.is_empty() {
        msg.push_str(&format!("; the upstream asked its client: {asked}"));
    }
    let mut fields: Vec<(&str, &str)> = vec![
        ("AIRLOCK_CONNECTOR", &r.connector),
        ("AIRLOCK_TOOL", &r.tool),
        ("AIRLOCK_DECISION", decision),
        ("AIRLOCK_RULE", &r.rule),
        ("AIRLOCK_DURATION_MS", &duration),
        ("AIRLOCK_RESULT_BYTES", &bytes),
        ("AIRLOCK_IS_ERROR", if r.is_error { "1" } else { "0" }),
    ];
    if let Some(p) = &r.program {
        fields.push(("AIRLOCK_PROGRAM", p));
    }
    if !r.detail.is_empty() {
        fields.push(("AIRLOCK_ARGS", &r.detail));
    }
    if let Some(c) = &exit {
        fields.push(("AIRLOCK_EXIT_CODE", c));
    }
    if !asked.is_empty() {
        fields.push(("AIRLOCK_UPSTREAM_ASKED", &asked));
    }
    out.event(EventKind::ToolCall, &msg, &fields)
}

fn write_provider(out: &mut Out<'_>, r: &ProviderRecord) -> bool {
    use crate::policy::prices::usd;
    let decision = if r.allow { "allow" } else { "deny" };
    let model = r.model.as_deref().unwrap_or("-");
    let msg = if r.allow {
        format!(
            "provider {} {} model {model}: {}, HTTP {}, {} in + {} cache write + {} cache read + {} out tokens{}{}, {} (reserved {}; spent {} of {}), first byte {} ms, {} ms",
            r.provider,
            r.endpoint,
            r.outcome.as_str(),
            r.status,
            r.usage.input,
            r.usage.cache_write,
            r.usage.cache_read,
            r.usage.output,
            match r.usage.web_search {
                0 => String::new(),
                n => format!(" + {n} web searches"),
            },
            if r.usage_final { "" } else { " (estimated: no final count)" },
            usd(r.cost_micro_usd),
            usd(r.reserve_micro_usd),
            usd(r.spent_micro_usd),
            usd(r.budget_micro_usd),
            r.first_byte_ms,
            r.duration_ms
        )
    } else {
        format!(
            "provider {} {} model {model} deny by {}: {}",
            r.provider, r.endpoint, r.rule, r.reason
        )
    };
    let n = |v: u64| v.to_string();
    let (status, input, output, cw, cr, cost, spent, budget, fb, dur, reserve) = (
        n(u64::from(r.status)),
        n(r.usage.input),
        n(r.usage.output),
        n(r.usage.cache_write),
        n(r.usage.cache_read),
        n(r.cost_micro_usd),
        n(r.spent_micro_usd),
        n(r.budget_micro_usd),
        n(r.first_byte_ms),
        n(r.duration_ms),
        n(r.reserve_micro_usd),
    );
    let searches = n(r.usage.web_search);
    let mut fields: Vec<(&str, &str)> = vec![
        ("AIRLOCK_PROVIDER", &r.provider),
        ("AIRLOCK_ENDPOINT", &r.endpoint),
        ("AIRLOCK_DECISION", decision),
        ("AIRLOCK_RULE", &r.rule),
        ("AIRLOCK_STATUS", &status),
        ("AIRLOCK_STREAMED", if r.streamed { "1" } else { "0" }),
        ("AIRLOCK_INPUT_TOKENS", &input),
        ("AIRLOCK_OUTPUT_TOKENS", &output),
        ("AIRLOCK_CACHE_WRITE_TOKENS", &cw),
        ("AIRLOCK_CACHE_READ_TOKENS", &cr),
        ("AIRLOCK_WEB_SEARCHES", &searches),
        (
            "AIRLOCK_USAGE",
            if r.usage_final { "final" } else { "estimated" },
        ),
        ("AIRLOCK_OUTCOME", r.outcome.as_str()),
        ("AIRLOCK_RESERVE_MICRO_USD", &reserve),
        ("AIRLOCK_COST_MICRO_USD", &cost),
        ("AIRLOCK_SPENT_MICRO_USD", &spent),
        ("AIRLOCK_BUDGET_MICRO_USD", &budget),
        ("AIRLOCK_FIRST_BYTE_MS", &fb),
        ("AIRLOCK_DURATION_MS", &dur),
    ];
    if let Some(m) = &r.model {
        fields.push(("AIRLOCK_MODEL", m));
    }
    if !r.reason.is_empty() {
        fields.push(("AIRLOCK_REASON", &r.reason));
    }
    out.event(EventKind::Provider, &msg, &fields)
}

fn write_github(out: &mut Out<'_>, r: &crate::gateway::github::GithubRecord) -> bool {
    let decision = if r.allow { "allow" } else { "deny" };
    let msg = if r.allow {
        format!(
            "github {} {} {decision} by {}: HTTP {}, write {} of {}",
            r.action, r.repo, r.rule, r.status, r.writes, r.budget
        )
    } else {
        format!(
            "github {} {} {decision} by {}: {} ({} of {} writes made)",
            r.action, r.repo, r.rule, r.reason, r.writes, r.budget
        )
    };
    let (writes, budget, status, dur) = (
        r.writes.to_string(),
        r.budget.to_string(),
        r.status.to_string(),
        r.duration_ms.to_string(),
    );
    let fields: Vec<(&str, &str)> = vec![
        ("AIRLOCK_REPO", &r.repo),
        ("AIRLOCK_ACTION", &r.action),
        ("AIRLOCK_ENDPOINT", &r.endpoint),
        ("AIRLOCK_DECISION", decision),
        ("AIRLOCK_RULE", &r.rule),
        ("AIRLOCK_REASON", &r.reason),
        ("AIRLOCK_WRITES", &writes),
        ("AIRLOCK_BUDGET", &budget),
        ("AIRLOCK_STATUS", &status),
        ("AIRLOCK_DURATION_MS", &dur),
    ];
    out.event(EventKind::GithubWrite, &msg, &fields)
}

fn write_withheld(out: &mut Out<'_>, r: &crate::gateway::withhold::WithheldRecord) -> bool {
    let msg = format!(
        "{} {}: the upstream's answer echoed a secret of the run; {} copies withheld from its headers and {} from its body",
        r.route, r.endpoint, r.in_headers, r.in_body
    );
    let (h, b) = (r.in_headers.to_string(), r.in_body.to_string());
    let fields: Vec<(&str, &str)> = vec![
        ("AIRLOCK_ROUTE", &r.route),
        ("AIRLOCK_ENDPOINT", &r.endpoint),
        ("AIRLOCK_WITHHELD_HEADERS", &h),
        ("AIRLOCK_WITHHELD_BODY", &b),
    ];
    out.event(EventKind::Withheld, &msg, &fields)
}

fn write_ask(out: &mut Out<'_>, r: &crate::gateway::asks::AskRecord) -> bool {
    let kind = r.kind.as_str();
    let msg = match &r.by {
        Some(by) => format!(
            "ask {} {}: {kind} {} (refused by {}), by {by}",
            r.id, r.state, r.what, r.rule
        ),
        None => format!(
            "ask {} {}: {kind} {} (refused by {})",
            r.id, r.state, r.what, r.rule
        ),
    };
    let mut fields: Vec<(&str, &str)> = vec![
        ("AIRLOCK_ASK", &r.id),
        ("AIRLOCK_ASK_KIND", kind),
        ("AIRLOCK_ASK_STATE", r.state),
        ("AIRLOCK_RULE", &r.rule),
    ];
    if let Some(by) = &r.by {
        fields.push(("AIRLOCK_ANSWERED_BY", by));
    }
    out.event(EventKind::Ask, &msg, &fields)
}

fn write_egress(out: &mut Out<'_>, r: &EgressRecord) -> bool {
    let decision = if r.allow { "allow" } else { "deny" };
    let (port, status) = (r.port.to_string(), r.status.to_string());
    let (up, down) = (r.bytes_up.to_string(), r.bytes_down.to_string());
    let duration = r.duration_ms.to_string();
    let addr = r.addr.map(|a| a.ip().to_string());
    let host = if r.host.contains(':') {
        format!("[{}]", r.host)
    } else {
        r.host.clone()
    };
    let mut msg = format!(
        "egress {} {host}:{}{} {decision} by {}",
        r.method, r.port, r.path, r.rule
    );
    if r.allow {
        msg.push_str(&format!(": {up} bytes up, {down} down, {duration} ms"));
    } else {
        msg.push_str(&format!(": {}", r.reason));
    }
    let mut fields: Vec<(&str, &str)> = vec![
        ("AIRLOCK_EGRESS_METHOD", &r.method),
        ("AIRLOCK_EGRESS_HOST", &r.host),
        ("AIRLOCK_EGRESS_PORT", &port),
        ("AIRLOCK_DECISION", decision),
        ("AIRLOCK_RULE", &r.rule),
        ("AIRLOCK_REASON", &r.reason),
        ("AIRLOCK_STATUS", &status),
        ("AIRLOCK_BYTES_UP", &up),
        ("AIRLOCK_BYTES_DOWN", &down),
        ("AIRLOCK_DURATION_MS", &duration),
    ];
    if let Some(a) = &addr {
        fields.push(("AIRLOCK_EGRESS_ADDR", a));
    }
    if !r.path.is_empty() {
        fields.push(("AIRLOCK_EGRESS_PATH", &r.path));
    }
    out.event(EventKind::Egress, &msg, &fields)
}

/// The agent's raw bytes to a writer (a standalone `--wait` launch: the terminal, through
/// [`crate::terminal::TerminalSafe`]). A failed write never stops the draining.
pub struct WriterTee(pub Box<dyn Write + Send>);

impl Tee for WriterTee {
    fn chunk(&mut self, bytes: &[u8]) {
        if self.0.write_all(bytes).is_ok() {
            let _ = self.0.flush();
        }
    }

    fn finish(&mut self) {
        let _ = self.0.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{JournalConfig, RunFields};

    #[test]
    fn a_queued_record_is_a_pointer_wide() {
        // Every live run holds a block of the call queue's slots: they stay small whatever
        // a record grows to.
        assert!(std::mem::size_of::<Entry>() <= 2 * std::mem::size_of::<usize>());
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_go_to_the_journal_and_bytes_to_the_tee() {
        let dir = tempfile::tempdir().unwrap();
        let fields = RunFields {
            run: "r-test-1".into(),
            role: "code".into(),
            instance: "tess".into(),
        };
        let config = JournalConfig {
            socket: dir.path().join("no-journald"),
            ..JournalConfig::default()
        };
        let j = Arc::new(Mutex::new(
            RunJournal::open_with(fields, dir.path(), config).unwrap(),
        ));
        let lost = Arc::new(AtomicU64::new(0));
        let seen = Shared::default();
        let mut sink = JournalSink::new(
            Stream::Stdout,
            j.clone(),
            lost.clone(),
            Some(Box::new(WriterTee(Box::new(seen.clone())))),
        );
        sink.data(b"one\ntw");
        sink.data(b"o\nthree");
        sink.finish();
        assert_eq!(lock(&seen.0).as_slice(), b"one\ntwo\nthree");
        assert_eq!(lost.load(Ordering::Relaxed), 0);
        assert_eq!(lock(&j).sent_to_fallback(), 3);
        let text = std::fs::read(lock(&j).fallback_path()).unwrap();
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains("two") && text.contains("three"), "{text}");
    }
}
