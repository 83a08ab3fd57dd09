//! The fleet store's schema, as numbered migrations. airlockd applies the ones a database
//! lacks at start, all in one transaction; a database at a version above the last one here
//! was migrated by a newer airlockd, and this one refuses to start against it rather than
//! write rows the newer schema does not expect.

/// Migration `i + 1` is `MIGRATIONS[i]`. Append only: a released migration never changes.
pub const MIGRATIONS: &[&str] = &[
    // 1: hosts, the instance registry, fires, admissions against runs_per_week, runs, the
    // ledgers' mirror.
    "
    CREATE TABLE airlock_hosts (
        host_id    text PRIMARY KEY,
        hostname   text NOT NULL,
        pid        bigint NOT NULL,
        started_at timestamptz NOT NULL,
        seen_at    timestamptz NOT NULL
    );
    CREATE TABLE airlock_instances (
        name         text PRIMARY KEY,
        role         text NOT NULL,
        uid          bigint NOT NULL UNIQUE,
        hired_on     text NOT NULL,
        hired_by_uid bigint NOT NULL,
        hired_at_ms  bigint NOT NULL,
        fired        boolean NOT NULL DEFAULT false,
        fired_on     text,
        fired_by_uid bigint,
        fired_at_ms  bigint
    );
    -- One row per instance: the admission times of its runs in the last seven days,
    -- updated by one conditional statement (see admit in store::pg).
    CREATE TABLE airlock_admissions (
        instance    text PRIMARY KEY,
        admitted_ms bigint[] NOT NULL DEFAULT '{}'
    );
    -- Every fire, of a hired or a config-declared instance, in order: what a host that
    -- missed the notification finds on its next heartbeat.
    CREATE TABLE airlock_fires (
        seq          bigserial PRIMARY KEY,
        instance     text NOT NULL UNIQUE,
        fired_on     text NOT NULL,
        fired_by_uid bigint NOT NULL,
        fired_at_ms  bigint NOT NULL
    );
    -- Every admitted run as a lease its host renews: `active` until its closing record
    -- is mirrored (`closed`), or, once its host stopped renewing it, `unsupervised`
    -- (marked by whichever host sees it expired first).
    CREATE TABLE airlock_runs (
        run         text PRIMARY KEY,
        host_id     text NOT NULL,
        instance    text NOT NULL,
        admitted_ms bigint NOT NULL,
        expires_ms  bigint NOT NULL,
        state       text NOT NULL DEFAULT 'active',
        closed_ms   bigint
    );
    CREATE INDEX airlock_runs_instance ON airlock_runs (instance);
    -- Each host's ledger, mirrored: the file's lines exactly, so a reader checks every
    -- host's hash chain as verify-ledger checks the file.
    CREATE TABLE airlock_ledger (
        host_id text NOT NULL,
        seq     bigint NOT NULL,
        hash    text NOT NULL,
        line    text NOT NULL,
        PRIMARY KEY (host_id, seq)
    );
    ",
    // 2: `show RUN` finds a run's records on any host by its id: the first `"run":"..."` of
    // a ledger line is its event's run (a regular expression, so no row can fail it).
    r#"
    CREATE INDEX airlock_ledger_run ON airlock_ledger ((substring(line from '"run":"([^"]*)"')));
    "#,
    // 3: what each host has written to the mirror, set in the same transaction as the
    // rows: its highest record and that record's hash. `verify-ledger --fleet` holds the
    // rows against it, so a cut tail or a host whose rows are all gone is named.
    "
    ALTER TABLE airlock_hosts
        ADD COLUMN mirrored_seq bigint NOT NULL DEFAULT 0,
        ADD COLUMN mirrored_head text;
    ",
    // 4: each host's Ed25519 public key (store::signing), registered at its first start, and
    // each mirrored record's signature by its host.
    "
    ALTER TABLE airlock_hosts ADD COLUMN public_key text;
    ALTER TABLE airlock_ledger ADD COLUMN sig text;
    ",
    // 5: frozen role revisions (issue 45) are the fleet's: each revision's files by the
    // sha256 that names them, and the revision each instance runs (`rev` counts up
    // fleet-wide), so every host runs what an approval froze, whichever host approved it.
    "
    CREATE TABLE airlock_revisions (
        sha256 text NOT NULL,
        role   text NOT NULL,
        path   text NOT NULL,
        bytes  bytea NOT NULL,
        PRIMARY KEY (sha256, role, path)
    );
    CREATE TABLE airlock_pins (
        instance  text PRIMARY KEY,
        role      text NOT NULL,
        sha256    text NOT NULL,
        rev       integer NOT NULL,
        source    text NOT NULL,
        set_on    text NOT NULL,
        set_at_ms bigint NOT NULL
    );
    ",
];

/// The schema version this build writes.
pub fn current() -> i32 {
    MIGRATIONS.len() as i32
}

/// What to do with a database at version `found`: the migrations to apply (their
/// versions), or `Err` when the database is newer than this build.
pub fn plan(found: i32) -> Result<std::ops::RangeInclusive<i32>, String> {
    let cur = current();
    if found > cur {
        return Err(format!(
            "its schema is at version {found}, newer than this airlockd's {cur}: a newer airlockd migrated it; upgrade this host's airlock package (airlockd never writes to a schema it does not know)"
        ));
    }
    Ok(found + 1..=cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        assert_eq!(plan(0).unwrap(), 1..=current());
        assert!(plan(current()).unwrap().is_empty());
        let e = plan(current() + 1).unwrap_err();
        assert!(e.contains("newer"), "{e}");
    }
}
