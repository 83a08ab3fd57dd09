//! The PostgreSQL side of the fleet store: a small pool, the migrations, the host lease and
//! the shared operations. Every call is bounded by [`TIMEOUT`]; an unreachable database is
//! [`StoreError::Unavailable`], and the daemon refuses what needs it (fail closed).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use super::conf::StoreConf;
use super::pending::{Pending, PendingFire};
use super::schema;
use super::signing::HostKey;
use crate::credentials::Secret;

/// Longest wait for the database in any one call.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// How often the host lease is checked and `airlock_hosts.seen_at` renewed.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// Missing records of the mirror looked for, and put back, at once.
const GAPS_AT_ONCE: i64 = 10_000;
/// Connections per host: admissions and hires are short statements.
const POOL_SIZE: usize = 4;
/// How long a run's lease lasts unless its host renews it (every [`HEARTBEAT`]).
pub const RUN_LEASE_MS: i64 = 6_000;
/// The LISTEN/NOTIFY channel of fires; the payload is the instance's name.
pub const FIRE_CHANNEL: &str = "airlock_fire";
/// Advisory lock keys (an arbitrary airlock-specific prefix): migrations, hires.
const K_SCHEMA: i64 = 0x4149_524c_4f43_4b01;
const K_INSTANCES: i64 = 0x4149_524c_4f43_4b02;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("{0} is unavailable ({1}); new launches and hires are refused until it is back (running runs go on)")]
    Unavailable(String, String),
    #[error("{0}")]
    Refused(String),
}

/// An instance as the fleet knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetInstance {
    pub name: String,
    pub role: String,
    pub uid: u32,
    pub fired: bool,
    pub hired_at_ms: u64,
}

/// This host's handle on the fleet store.
pub struct Fleet {
    pool: Pool,
    host_id: String,
    name: String,
    /// Whether this process holds the host lease right now (lost while the database is away).
    lease: Arc<AtomicBool>,
    rt: tokio::runtime::Handle,
    /// Signs every record this host writes to the ledgers' mirror.
    key: HostKey,
}

fn pg_config(
    conf: &StoreConf,
    password: Option<&Secret>,
) -> Result<tokio_postgres::Config, String> {
    let mut c: tokio_postgres::Config = conf
        .conninfo_string()
        .parse()
        .map_err(|e| format!("store.postgres: {e}"))?;
    if let Some(p) = password {
        c.password(p.expose());
    }
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(TIMEOUT);
    }
    if c.get_application_name().is_none() {
        c.application_name(format!("airlockd {}", conf.host_id));
    }
    Ok(c)
}

/// The advisory lock that is the host lease of `host_id` (64-bit: collisions are not a
/// practical concern).
const LEASE_SQL: &str = "SELECT pg_try_advisory_lock(hashtextextended('airlock host ' || $1, 0))";

/// A fire in one statement (so all of it or none): the fire's row, the registry's mark,
/// and the notification to every host ([`FIRE_CHANNEL`], delivered at commit), the last
/// only when the fire is new.
const FIRE_SQL: &str = "
WITH f AS (
    INSERT INTO airlock_fires (instance, fired_on, fired_by_uid, fired_at_ms)
    VALUES ($1, $2, $3, $4) ON CONFLICT (instance) DO NOTHING
    RETURNING instance
), i AS (
    UPDATE airlock_instances SET fired = true, fired_on = $2, fired_by_uid = $3, fired_at_ms = $4
     WHERE name = $1 AND NOT fired
)
SELECT pg_notify($5, instance) FROM f";

/// Record `f` (made on `host_id`) in the fleet store: `Ok(true)` a new fire, `Ok(false)`
/// the fleet had it fired already.
async fn record_fire(
    c: &tokio_postgres::Client,
    host_id: &str,
    f: &PendingFire,
) -> Result<bool, tokio_postgres::Error> {
    let at = i64::try_from(f.at_ms).unwrap_or(i64::MAX);
    let rows = c
        .query(
            FIRE_SQL,
            &[
                &f.instance,
                &host_id,
                &i64::from(f.by_uid),
                &at,
                &FIRE_CHANNEL,
            ],
        )
        .await?;
    Ok(!rows.is_empty())
}

/// A run of this host that never started: `aborted`, unless its closing record came first,
/// and its admission given back to the instance's `runs_per_week` (one stamp equal to the
/// run's removed, in the same statement, so only the abort that changed the row gives it
/// back).
const ABORT_SQL: &str = "
WITH r AS (
    UPDATE airlock_runs SET state = 'aborted', closed_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
     WHERE run = $1 AND host_id = $2 AND state IN ('active', 'unsupervised')
    RETURNING instance, admitted_ms
)
UPDATE airlock_admissions a
   SET admitted_ms = a.admitted_ms[:array_position(a.admitted_ms, r.admitted_ms) - 1]
                  || a.admitted_ms[array_position(a.admitted_ms, r.admitted_ms) + 1:]
  FROM r
 WHERE a.instance = r.instance AND array_position(a.admitted_ms, r.admitted_ms) IS NOT NULL";

/// The database's time in milliseconds: the fleet's one clock (see [`super::skew`]). The
/// statement's start, so every use in one statement agrees.
macro_rules! db_now_ms {
    () => {
        "(extract(epoch from statement_timestamp()) * 1000)::bigint"
    };
}

/// The instance's admissions row (made if missing), and the database's time, read to
/// check this host's clock against it.
const PREADMIT_SQL: &str = concat!(
    "WITH i AS (INSERT INTO airlock_admissions (instance) VALUES ($1) ON CONFLICT DO NOTHING) SELECT ",
    db_now_ms!()
);

/// One run's admission: the window and the stamp are the database's time, never a host's.
const ADMIT_SQL: &str = concat!(
    "
WITH n AS (SELECT ",
    db_now_ms!(),
    " AS ms),
a AS (
    UPDATE airlock_admissions
       SET admitted_ms = array(SELECT t FROM unnest(admitted_ms) AS t WHERE t > (SELECT ms FROM n) - $2) || (SELECT ms FROM n)
     WHERE instance = $1
       AND (SELECT count(*) FROM unnest(admitted_ms) AS t WHERE t > (SELECT ms FROM n) - $2) < $3
       AND NOT EXISTS (SELECT 1 FROM airlock_fires f WHERE f.instance = $1)
    RETURNING instance
)
INSERT INTO airlock_runs (run, host_id, instance, admitted_ms, expires_ms)
SELECT $4, $5, instance, (SELECT ms FROM n), (SELECT ms FROM n) + $6 FROM a
RETURNING run"
);

/// Renew this host's runs' leases, on the database's clock.
const RENEW_SQL: &str = concat!(
    "UPDATE airlock_runs SET expires_ms = ",
    db_now_ms!(),
    " + $3::bigint WHERE host_id = $1 AND run = ANY($2) AND state = 'active'"
);

/// Mark every run whose lease ran out `unsupervised`, judged on the database's clock.
const RECLAIM_SQL: &str = concat!(
    "UPDATE airlock_runs SET state = 'unsupervised' WHERE state = 'active' AND expires_ms < ",
    db_now_ms!(),
    " RETURNING run, host_id"
);

impl Fleet {
    /// Connect, migrate and take the host lease. `Err` names the store and says why
    /// airlockd must not start.
    pub async fn open(
        conf: &StoreConf,
        password: Option<&Secret>,
        fires: Fires,
        pending: Pending,
        key: HostKey,
    ) -> Result<Fleet, String> {
        let name = conf.describe();
        let cfg = pg_config(conf, password)?;
        let mgr = Manager::from_config(
            cfg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(TIMEOUT))
            .create_timeout(Some(TIMEOUT))
            .recycle_timeout(Some(TIMEOUT))
            .build()
            .map_err(|e| format!("{name}: {e}"))?;
        migrate(&pool).await.map_err(|e| format!("{name}: {e}"))?;
        let lease = Arc::new(AtomicBool::new(false));
        let public = key.public_hex();
        let client = match take_lease(&cfg, &conf.host_id, &fires, &public).await {
            Ok(c) => c,
            Err(e) => return Err(format!("{name}: {e}")),
        };
        // Before this host admits anything: its fires made while the store was away reach
        // the fleet, and every fire of the fleet is passed on (those made while this host
        // was down included; each is recorded here and stops nothing that is not running).
        let mut keeper = Keeper {
            host_id: conf.host_id.clone(),
            pending,
            fires,
            last_fire: 0,
            public_key: public,
        };
        tokio::time::timeout(TIMEOUT, keeper.sync(&client))
            .await
            .map_err(|_| format!("{name}: no answer while reading the fleet's fires"))?
            .map_err(|e| format!("{name}: {e}"))?;
        lease.store(true, Ordering::SeqCst);
        tokio::spawn(keep_lease(cfg, name.clone(), client, lease.clone(), keeper));
        Ok(Fleet {
            pool,
            host_id: conf.host_id.clone(),
            name,
            lease,
            rt: tokio::runtime::Handle::current(),
            key,
        })
    }

    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// Run a store call from a blocking thread (the launch path, hires).
    pub fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub(super) fn down(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable(self.name.clone(), e.to_string())
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        if !self.lease.load(Ordering::SeqCst) {
            return Err(self.down("this host does not hold its host lease right now"));
        }
        self.pool.get().await.map_err(|e| self.down(e))
    }

    pub(super) async fn bounded<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(TIMEOUT, f)
            .await
            .unwrap_or_else(|_| Err(self.down(format!("no answer within {}s", TIMEOUT.as_secs()))))
    }

    /// Admit one run of `instance` fleet-wide: one conditional statement that counts the
    /// instance's admissions of the last seven days and adds this one only while fewer
    /// than `limit` (Read Committed re-checks the condition on the row a concurrent
    /// admission just updated, so two hosts never both take the last run). Refused too
    /// when the fleet has the instance fired, and when this host's clock is more than
    /// [`super::skew::MAX_CLOCK_SKEW_MS`] from the database's (the window and the stamp are
    /// the database's time either way). A run counts from its admission, released only
    /// when it is closed as `aborted` (it never started, [`Fleet::abandon`]).
    pub async fn admit(
        &self,
        instance: &str,
        run: &str,
        limit: Option<u64>,
    ) -> Result<(), StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            let before = crate::clock::now_ms();
            let db_ms: i64 = c
                .query_one(PREADMIT_SQL, &[&instance])
                .await
                .map_err(|e| self.down(e))?
                .get(0);
            super::skew::check(db_ms, before, crate::clock::now_ms()).map_err(|m| {
                StoreError::Refused(format!("{}: {m}", self.name))
            })?;
            let week = i64::try_from(crate::policy::budget::WEEK_MS).unwrap_or(i64::MAX);
            let limit_i = limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
            let rows = c
                .query(
                    ADMIT_SQL,
                    &[&instance, &week, &limit_i, &run, &self.host_id, &RUN_LEASE_MS],
                )
                .await
                .map_err(|e| self.down(e))?;
            if !rows.is_empty() {
                return Ok(());
            }
            let fired = c
                .query_opt("SELECT 1 FROM airlock_fires WHERE instance = $1", &[&instance])
                .await
                .map_err(|e| self.down(e))?
                .is_some();
            Err(StoreError::Refused(if fired {
                format!("instance `{instance}` was fired (recorded in {}); it can never run again", self.name)
            } else {
                format!(
                    "budget.runs_per_week: instance `{instance}` has used its {} runs in the last 7 days across the fleet (rolling window on the database's clock, counted in {}); a run becomes available when the oldest one is 7 days old, or raise budget.runs_per_week in the role",
                    limit.unwrap_or(0),
                    self.name
                )
            }))
        })
        .await
    }

    /// Hire `name` fleet-wide: under one lock of the fleet's registry, refuse a name the
    /// fleet knows, and take the lowest uid of `first..=last` no instance of the fleet
    /// holds and `usable` accepts (this host's own checks: accounts, reserved ranges).
    #[allow(clippy::too_many_arguments)]
    pub async fn hire(
        &self,
        name: &str,
        role: &str,
        by_uid: u32,
        now_ms: u64,
        (first, last): (u32, u32),
        usable: &dyn Fn(u32) -> bool,
    ) -> Result<u32, StoreError> {
        self.bounded(async {
            let mut c = self.client().await?;
            let tx = c.transaction().await.map_err(|e| self.down(e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&K_INSTANCES])
                .await
                .map_err(|e| self.down(e))?;
            let taken = tx
                .query_opt("SELECT 1 FROM airlock_instances WHERE name = $1", &[&name])
                .await
                .map_err(|e| self.down(e))?;
            if taken.is_some() {
                return Err(StoreError::Refused(format!(
                    "instance name `{name}` is taken in the fleet (hired or fired before on some host); names are never reused, pick another"
                )));
            }
            let held: BTreeSet<u32> = tx
                .query(
                    "SELECT uid FROM airlock_instances WHERE uid BETWEEN $1 AND $2",
                    &[&i64::from(first), &i64::from(last)],
                )
                .await
                .map_err(|e| self.down(e))?
                .iter()
                .filter_map(|r| u32::try_from(r.get::<_, i64>(0)).ok())
                .collect();
            let uid = (first..=last)
                .find(|u| !held.contains(u) && usable(*u))
                .ok_or_else(|| {
                    StoreError::Refused(format!(
                        "instances.{name}: no free uid left in uid_range across the fleet"
                    ))
                })?;
            tx.execute(
                "INSERT INTO airlock_instances (name, role, uid, hired_on, hired_by_uid, hired_at_ms) VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &name,
                    &role,
                    &i64::from(uid),
                    &self.host_id,
                    &i64::from(by_uid),
                    &i64::try_from(now_ms).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(|e| self.down(e))?;
            tx.commit().await.map_err(|e| self.down(e))?;
            Ok(uid)
        })
        .await
    }

    /// Record a fire fleet-wide and tell every host ([`record_fire`]). `Ok(false)`: the
    /// fleet had it fired.
    pub async fn fire(&self, f: &PendingFire) -> Result<bool, StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            record_fire(&c, &self.host_id, f)
                .await
                .map_err(|e| self.down(e))
        })
        .await
    }

    /// What the mirror holds of this host's ledger: `(signed rows, highest seq)` (`(0, 0)`:
    /// none). Fewer than the highest seq: some were deleted, or written before records were
    /// signed ([`Fleet::mirror_gaps`]).
    pub async fn mirror_state(&self) -> Result<(u64, u64), StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            let r = c
                .query_one(
                    "SELECT count(sig)::bigint, coalesce(max(seq), 0)::bigint FROM airlock_ledger WHERE host_id = $1",
                    &[&self.host_id],
                )
                .await
                .map_err(|e| self.down(e))?;
            let n = |i: usize| u64::try_from(r.get::<_, i64>(i)).unwrap_or(0);
            Ok((n(0), n(1)))
        })
        .await
    }

    /// The records `1..=upto` of this host the mirror lacks or has unsigned, the first
    /// [`GAPS_AT_ONCE`].
    pub async fn mirror_gaps(&self, upto: u64) -> Result<Vec<u64>, StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            let upto = i64::try_from(upto).unwrap_or(i64::MAX);
            let rows = c
                .query(
                    "SELECT s FROM generate_series(1::bigint, $2::bigint) AS s WHERE NOT EXISTS (SELECT 1 FROM airlock_ledger l WHERE l.host_id = $1 AND l.seq = s AND l.sig IS NOT NULL) ORDER BY s LIMIT $3",
                    &[&self.host_id, &upto, &GAPS_AT_ONCE],
                )
                .await
                .map_err(|e| self.down(e))?;
            Ok(rows
                .iter()
                .filter_map(|r| u64::try_from(r.get::<_, i64>(0)).ok())
                .collect())
        })
        .await
    }

    /// Write records of this host's ledger to the mirror, in one transaction: `(seq,
    /// hash, line)`, in order of `seq` (appended, or put back where rows went missing), each
    /// signed with this host's key. A record already there is left as it is (never
    /// overwritten), but for the signature of an unsigned one whose hash and line are the
    /// file's (written before records were signed). The highest record
    /// written and its hash are this host's report in `airlock_hosts`, in the same
    /// transaction, for `verify-ledger --fleet`.
    pub async fn mirror(&self, rows: &[MirrorWrite]) -> Result<(), StoreError> {
        self.bounded(async {
            let mut c = self.client().await?;
            let tx = c.transaction().await.map_err(|e| self.down(e))?;
            let st = tx
                .prepare("INSERT INTO airlock_ledger AS l (host_id, seq, hash, line, sig) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (host_id, seq) DO UPDATE SET sig = EXCLUDED.sig WHERE l.sig IS NULL AND l.hash = EXCLUDED.hash AND l.line = EXCLUDED.line")
                .await
                .map_err(|e| self.down(e))?;
            for MirrorWrite { seq, hash, line, .. } in rows {
                let sig = self.key.sign(&self.host_id, *seq, hash);
                let seq = i64::try_from(*seq).unwrap_or(i64::MAX);
                tx.execute(&st, &[&self.host_id, &seq, hash, line, &sig])
                    .await
                    .map_err(|e| self.down(e))?;
            }
            if let Some(MirrorWrite { seq, hash, .. }) = rows.iter().max_by_key(|r| r.seq) {
                let seq = i64::try_from(*seq).unwrap_or(i64::MAX);
                tx.execute(
                    "UPDATE airlock_hosts SET mirrored_seq = $2, mirrored_head = $3 WHERE host_id = $1 AND mirrored_seq < $2",
                    &[&self.host_id, &seq, hash],
                )
                .await
                .map_err(|e| self.down(e))?;
            }
            // A closing record ends the run's lease (an `unsupervised` one too: its host
            // came back and closed it).
            for (run, at) in rows.iter().filter_map(|r| r.closes.as_ref()) {
                tx.execute(
                    "UPDATE airlock_runs SET state = 'closed', closed_ms = $2 WHERE run = $1 AND host_id = $3",
                    &[run, at, &self.host_id],
                )
                .await
                .map_err(|e| self.down(e))?;
            }
            tx.commit().await.map_err(|e| self.down(e))
        })
        .await
    }

    /// This host's runs the store has as running (`active`, or `unsupervised` while this
    /// host was away).
    pub async fn open_runs(&self) -> Result<Vec<String>, StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            let rows = c
                .query(
                    "SELECT run FROM airlock_runs WHERE host_id = $1 AND state IN ('active', 'unsupervised') ORDER BY run",
                    &[&self.host_id],
                )
                .await
                .map_err(|e| self.down(e))?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
        .await
    }

    /// Close this host's admitted run `run` as `aborted`: it never started, so it no longer
    /// counts against the instance's `runs_per_week`.
    pub async fn abandon(&self, run: &str) -> Result<(), StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            c.execute(ABORT_SQL, &[&run, &self.host_id])
                .await
                .map_err(|e| self.down(e))?;
            Ok(())
        })
        .await
    }

    /// Renew the leases of this host's `active` runs, and mark every run of the fleet
    /// whose lease expired `unsupervised`: those marked now, `(run, host_id)`. Both on the
    /// database's clock, so a host whose clock is off neither loses its own leases nor
    /// judges another host's.
    pub async fn beat_runs(&self, active: &[String]) -> Result<Vec<(String, String)>, StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            c.execute(RENEW_SQL, &[&self.host_id, &active, &RUN_LEASE_MS])
                .await
                .map_err(|e| self.down(e))?;
            let rows = c.query(RECLAIM_SQL, &[]).await.map_err(|e| self.down(e))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
        .await
    }

    /// One instance of the fleet's registry.
    pub async fn instance(&self, name: &str) -> Result<Option<FleetInstance>, StoreError> {
        Ok(self.query_instances(Some(name)).await?.into_iter().next())
    }

    /// Every instance of the fleet's registry, by name.
    pub async fn instances(&self) -> Result<Vec<FleetInstance>, StoreError> {
        self.query_instances(None).await
    }

    async fn query_instances(&self, name: Option<&str>) -> Result<Vec<FleetInstance>, StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            let rows = c
                .query(
                    "SELECT name, role, uid, fired, hired_at_ms FROM airlock_instances WHERE $1::text IS NULL OR name = $1 ORDER BY name",
                    &[&name],
                )
                .await
                .map_err(|e| self.down(e))?;
            Ok(rows
                .iter()
                .filter_map(|r| {
                    Some(FleetInstance {
                        name: r.get(0),
                        role: r.get(1),
                        uid: u32::try_from(r.get::<_, i64>(2)).ok()?,
                        fired: r.get(3),
                        hired_at_ms: u64::try_from(r.get::<_, i64>(4)).unwrap_or(0),
                    })
                })
                .collect())
        })
        .await
    }
}

/// Apply the migrations this database lacks, in one transaction, under a lock that makes
/// two hosts starting at once take turns.
async fn migrate(pool: &Pool) -> Result<(), String> {
    let work = async {
        let mut c = pool
            .get()
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let tx = c.transaction().await.map_err(|e| e.to_string())?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&K_SCHEMA])
            .await
            .map_err(|e| e.to_string())?;
        // Created only when missing: a host's role of a fleet with row-level security
        // (the manual's Many hosts page) may not create tables, even ones that exist.
        let missing: bool = tx
            .query_one("SELECT to_regclass('airlock_schema') IS NULL", &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        if missing {
            tx.batch_execute(
                "CREATE TABLE airlock_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
            )
            .await
            .map_err(|e| format!("cannot create the schema table: {e}"))?;
        }
        let found: i32 = tx
            .query_one("SELECT coalesce(max(version), 0) FROM airlock_schema", &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        for v in schema::plan(found)? {
            let sql = schema::MIGRATIONS[(v - 1) as usize];
            tx.batch_execute(sql)
                .await
                .map_err(|e| format!("migration {v} failed (nothing of it applied): {e}"))?;
            tx.execute("INSERT INTO airlock_schema (version) VALUES ($1)", &[&v])
                .await
                .map_err(|e| e.to_string())?;
        }
        tx.commit()
            .await
            .map_err(|e| format!("migrations not committed: {e}"))
    };
    tokio::time::timeout(TIMEOUT * 2, work)
        .await
        .unwrap_or_else(|_| Err("no answer while migrating".into()))
}

/// A connection of its own that holds the host lease (a session advisory lock, released
/// by the server when this process dies, so a restart after a crash is not locked out).
/// The same connection listens on [`FIRE_CHANNEL`] and hands each fired name to `fires`.
async fn take_lease(
    cfg: &tokio_postgres::Config,
    host_id: &str,
    fires: &Fires,
    public_key: &str,
) -> Result<tokio_postgres::Client, String> {
    let work = async {
        let (client, mut conn) = cfg
            .connect(NoTls)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let to = fires.clone();
        tokio::spawn(async move {
            while let Some(m) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                match m {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        let _ = to.send(n.payload().to_string());
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        let got: bool = client
            .query_one(LEASE_SQL, &[&host_id])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        if !got {
            return Err(format!(
                "store.host_id: `{host_id}` is held by another live airlockd (its host lease); every host of a fleet needs a host_id of its own"
            ));
        }
        let hostname = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        // A host_id is one host's: registered with its key at its first start (or its first
        // start with keys), and refused to any other key (the lease makes this race-free).
        let registered: Option<Option<String>> = client
            .query_opt(
                "SELECT public_key FROM airlock_hosts WHERE host_id = $1",
                &[&host_id],
            )
            .await
            .map_err(|e| e.to_string())?
            .map(|r| r.get(0));
        if registered.flatten().is_some_and(|k| k != public_key) {
            return Err(format!(
                "store.host_id: `{host_id}` is registered in the fleet store with another signing key than this host's (state_dir/fleet/host-key.pk8): a host_id belongs to one host; give this host a host_id of its own (if this is that host and its key was lost, an operator clears the registration: see the manual's Many hosts page)"
            ));
        }
        client
            .execute(
                "INSERT INTO airlock_hosts (host_id, hostname, pid, started_at, seen_at, public_key) VALUES ($1, $2, $3, now(), now(), $4)
                 ON CONFLICT (host_id) DO UPDATE SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, started_at = now(), seen_at = now(), public_key = EXCLUDED.public_key",
                &[&host_id, &hostname, &i64::from(std::process::id()), &public_key],
            )
            .await
            .map_err(|e| e.to_string())?;
        client
            .batch_execute(&format!("LISTEN {FIRE_CHANNEL}"))
            .await
            .map_err(|e| e.to_string())?;
        Ok(client)
    };
    tokio::time::timeout(TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err("no answer while taking the host lease".into()))
}

/// Where fired instances' names go (from a notification or a heartbeat's catch-up); the
/// daemon stops its runs of each. A name may come more than once.
pub type Fires = tokio::sync::mpsc::UnboundedSender<String>;

/// What the host lease's connection does on every [`HEARTBEAT`], and once at start and
/// after every reconnect before launches resume.
struct Keeper {
    host_id: String,
    pending: Pending,
    fires: Fires,
    /// The newest fire passed on (`airlock_fires.seq`).
    last_fire: i64,
    /// This host's public key, checked against its registration on every reconnect.
    public_key: String,
}

impl Keeper {
    /// Renew `seen_at`, send this host's pending fires to the store (each removed from the
    /// queue once the store has it), and pass on every fire recorded since the last one
    /// seen (one whose notification was missed is found here).
    async fn sync(&mut self, c: &tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
        c.execute(
            "UPDATE airlock_hosts SET seen_at = now() WHERE host_id = $1",
            &[&self.host_id],
        )
        .await?;
        for f in self.pending.list().into_iter().flatten() {
            record_fire(c, &self.host_id, &f).await?;
            if let Err(e) = self.pending.remove(&f.instance) {
                // Sent again next beat: the store keeps the first (ON CONFLICT DO NOTHING).
                eprintln!(
                    "airlockd: the fire of `{}` is in the fleet store, but {e}",
                    f.instance
                );
            }
        }
        let rows = c
            .query(
                "SELECT seq, instance FROM airlock_fires WHERE seq > $1 ORDER BY seq",
                &[&self.last_fire],
            )
            .await?;
        for r in rows {
            self.last_fire = self.last_fire.max(r.get::<_, i64>(0));
            let _ = self.fires.send(r.get::<_, String>(1));
        }
        Ok(())
    }
}

/// Every [`HEARTBEAT`]: [`Keeper::sync`]. When the lease connection is lost, say so, refuse
/// (through `held`) until it is taken again and synced, and try again each beat.
async fn keep_lease(
    cfg: tokio_postgres::Config,
    name: String,
    client: tokio_postgres::Client,
    held: Arc<AtomicBool>,
    mut keeper: Keeper,
) {
    let mut client = Some(client);
    let mut tick = tokio::time::interval(HEARTBEAT);
    loop {
        tick.tick().await;
        if let Some(c) = &client {
            let beat = tokio::time::timeout(TIMEOUT, keeper.sync(c)).await;
            if matches!(beat, Ok(Ok(()))) && !c.is_closed() {
                continue;
            }
            held.store(false, Ordering::SeqCst);
            client = None;
            eprintln!("airlockd: {name}: lost the host lease connection; refusing new launches and hires until it is back");
        }
        let Ok(c) = take_lease(&cfg, &keeper.host_id, &keeper.fires, &keeper.public_key).await
        else {
            continue;
        };
        // Launches resume only once the fires made or missed meanwhile are through.
        if !matches!(
            tokio::time::timeout(TIMEOUT, keeper.sync(&c)).await,
            Ok(Ok(()))
        ) {
            continue;
        }
        client = Some(c);
        held.store(true, Ordering::SeqCst);
        eprintln!("airlockd: {name}: host lease taken again; launches and hires resume");
    }
}

/// A connection of its own for airlockctl's reads: no pool, no host lease.
async fn read_only(cfg: &tokio_postgres::Config) -> Result<tokio_postgres::Client, String> {
    let (client, conn) = cfg
        .connect(NoTls)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// `work` within `limit`, its error naming the store.
async fn bounded<T>(
    conf: &StoreConf,
    limit: Duration,
    work: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(limit, work)
        .await
        .unwrap_or_else(|_| Err("no answer".into()))
        .map_err(|e| format!("{}: {e}", conf.describe()))
}

/// Every host's mirrored ledger and what each host reported writing to it, read in one
/// snapshot (a mirror write between two reads would look like a cut tail).
#[derive(Debug, Default)]
pub struct FleetLedgers {
    /// By host, its rows in order of `seq`.
    pub rows: std::collections::BTreeMap<String, Vec<MirrorRow>>,
    /// By host (every host that ever took a lease): what it registered and reported.
    pub reported: std::collections::BTreeMap<String, HostReport>,
}

/// One row of the ledgers' mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRow {
    pub seq: i64,
    pub hash: String,
    pub line: String,
    /// The host's signature ([`super::signing`]); `None`: unsigned.
    pub sig: Option<String>,
}

/// What a host registered and last reported in `airlock_hosts`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostReport {
    /// The highest record it wrote to the mirror (0: none yet) and that record's hash.
    pub mirrored_seq: i64,
    pub mirrored_head: Option<String>,
    /// Its Ed25519 public key (hex); `None`: an airlockd from before keys.
    pub public_key: Option<String>,
}

/// Read [`FleetLedgers`] without taking any lease (`airlockctl`).
pub async fn read_ledgers(
    conf: &StoreConf,
    password: Option<&Secret>,
) -> Result<FleetLedgers, String> {
    let cfg = pg_config(conf, password)?;
    let work = async {
        let mut client = read_only(&cfg).await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| e.to_string())?;
        let mut out = FleetLedgers::default();
        for r in tx
            .query(
                "SELECT host_id, mirrored_seq, mirrored_head, public_key FROM airlock_hosts",
                &[],
            )
            .await
            .map_err(|e| e.to_string())?
        {
            out.reported.insert(
                r.get(0),
                HostReport {
                    mirrored_seq: r.get(1),
                    mirrored_head: r.get(2),
                    public_key: r.get(3),
                },
            );
        }
        let rows = tx
            .query(
                "SELECT host_id, seq, hash, line, sig FROM airlock_ledger ORDER BY host_id, seq",
                &[],
            )
            .await
            .map_err(|e| e.to_string())?;
        for r in rows {
            out.rows.entry(r.get(0)).or_default().push(MirrorRow {
                seq: r.get(1),
                hash: r.get(2),
                line: r.get(3),
                sig: r.get(4),
            });
        }
        Ok(out)
    };
    bounded(conf, TIMEOUT * 6, work).await
}

/// One run as the fleet store has it (`airlockctl show RUN` of any host's run): its host
/// and lease state from `airlock_runs`, and its mirrored ledger lines, in order.
#[derive(Debug, Clone, Default)]
pub struct FleetRunRecords {
    pub host_id: Option<String>,
    pub state: Option<String>,
    /// `(host_id, line)`.
    pub lines: Vec<(String, String)>,
}

/// Read one run from the fleet store, without a lease (`airlockctl`).
pub async fn read_run(
    conf: &StoreConf,
    password: Option<&Secret>,
    run: &str,
) -> Result<FleetRunRecords, String> {
    let cfg = pg_config(conf, password)?;
    let work = async {
        let client = read_only(&cfg).await?;
        let mut found = FleetRunRecords::default();
        if let Some(r) = client
            .query_opt(
                "SELECT host_id, state FROM airlock_runs WHERE run = $1",
                &[&run],
            )
            .await
            .map_err(|e| e.to_string())?
        {
            found.host_id = Some(r.get(0));
            found.state = Some(r.get(1));
        }
        // The expression is the index's (migration 2), so this reads only the run's rows.
        let rows = client
            .query(
                r#"SELECT host_id, line FROM airlock_ledger WHERE substring(line from '"run":"([^"]*)"') = $1 ORDER BY host_id, seq"#,
                &[&run],
            )
            .await
            .map_err(|e| e.to_string())?;
        found.lines = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        Ok(found)
    };
    bounded(conf, TIMEOUT * 2, work).await
}

/// One record of this host's ledger for the mirror: its place in the chain, its hash and
/// its line as the file holds it, and, for a run's closing record, the run and when it
/// ended (read by the caller, which knows the ledger's records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorWrite {
    pub seq: u64,
    pub hash: String,
    pub line: String,
    pub closes: Option<(String, i64)>,
}

/// A run as the fleet store lists it (`airlockctl runs --fleet`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetRun {
    pub run: String,
    pub host_id: String,
    pub instance: String,
    pub admitted_ms: i64,
    pub state: String,
    pub closed_ms: Option<i64>,
}

/// The newest `limit` runs of the fleet, newest last, read without a lease (`airlockctl`).
pub async fn read_runs(
    conf: &StoreConf,
    password: Option<&Secret>,
    limit: i64,
) -> Result<Vec<FleetRun>, String> {
    let cfg = pg_config(conf, password)?;
    let work = async {
        let client = read_only(&cfg).await?;
        let rows = client
            .query(
                "SELECT run, host_id, instance, admitted_ms, state, closed_ms FROM (SELECT * FROM airlock_runs ORDER BY admitted_ms DESC, run LIMIT $1) r ORDER BY admitted_ms, run",
                &[&limit],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(rows
            .iter()
            .map(|r| FleetRun {
                run: r.get(0),
                host_id: r.get(1),
                instance: r.get(2),
                admitted_ms: r.get(3),
                state: r.get(4),
                closed_ms: r.get(5),
            })
            .collect())
    };
    bounded(conf, TIMEOUT * 2, work).await
}
