//! Frozen role revisions in the fleet store (migration 5): the files of each revision, by
//! the sha256 that names them, and which revision each instance runs. An approval on one
//! host pins the instance for the whole fleet; another host fetches the files, checks them
//! against their name ([`crate::supervisor`] does, it owns the hashing) and runs them.

use super::pg::Fleet;
use super::StoreError;

/// The revision an instance runs, as the fleet records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetPin {
    pub role: String,
    pub sha256: String,
    pub rev: u32,
    pub source: String,
}

/// How a pin is written: an approval moves the instance (its `rev` counts up when the
/// revision differs); a first freeze (an instance from before revisions) only when the
/// fleet has none yet, so the first host to freeze it decides for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinWrite {
    Approved,
    FirstFreeze,
}

impl Fleet {
    /// Keep the files of revision `sha256` of `role` (once: a revision never changes).
    pub async fn put_revision(
        &self,
        sha256: &str,
        role: &str,
        files: &[(String, Vec<u8>)],
    ) -> Result<(), StoreError> {
        self.bounded(async {
            let mut c = self.client().await?;
            let tx = c.transaction().await.map_err(|e| self.down(e))?;
            for (path, bytes) in files {
                tx.execute(
                    "INSERT INTO airlock_revisions (sha256, role, path, bytes) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    &[&sha256, &role, path, bytes],
                )
                .await
                .map_err(|e| self.down(e))?;
            }
            tx.commit().await.map_err(|e| self.down(e))
        })
        .await
    }

    /// The files of revision `sha256` of `role` (empty: the fleet does not have it).
    pub async fn revision(
        &self,
        sha256: &str,
        role: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            let rows = c
                .query(
                    "SELECT path, bytes FROM airlock_revisions WHERE sha256 = $1 AND role = $2 ORDER BY path",
                    &[&sha256, &role],
                )
                .await
                .map_err(|e| self.down(e))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
        .await
    }

    /// Pin `instance` to `pin` (its `rev` is used only when the fleet has no pin of it
    /// yet); the pin the fleet holds afterwards.
    pub async fn put_pin(
        &self,
        instance: &str,
        pin: &FleetPin,
        how: PinWrite,
    ) -> Result<FleetPin, StoreError> {
        let conflict = match how {
            PinWrite::Approved => {
                "DO UPDATE SET rev = CASE WHEN airlock_pins.sha256 = EXCLUDED.sha256 AND airlock_pins.role = EXCLUDED.role THEN airlock_pins.rev ELSE airlock_pins.rev + 1 END, role = EXCLUDED.role, sha256 = EXCLUDED.sha256, source = EXCLUDED.source, set_on = EXCLUDED.set_on, set_at_ms = EXCLUDED.set_at_ms"
            }
            PinWrite::FirstFreeze => "DO NOTHING",
        };
        let sql = format!(
            "INSERT INTO airlock_pins (instance, role, sha256, rev, source, set_on, set_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (instance) {conflict}"
        );
        let rev = i32::try_from(pin.rev).unwrap_or(i32::MAX);
        let now = i64::try_from(crate::clock::now_ms()).unwrap_or(i64::MAX);
        self.bounded(async {
            let c = self.client().await?;
            c.execute(
                &sql,
                &[
                    &instance,
                    &pin.role,
                    &pin.sha256,
                    &rev,
                    &pin.source,
                    &self.host_id(),
                    &now,
                ],
            )
            .await
            .map_err(|e| self.down(e))?;
            Ok(())
        })
        .await?;
        self.pin(instance).await?.ok_or_else(|| {
            StoreError::Refused(format!(
                "instance `{instance}`: its revision was written to the fleet store and is not there"
            ))
        })
    }

    /// The revision the fleet has `instance` run, if it has one.
    pub async fn pin(&self, instance: &str) -> Result<Option<FleetPin>, StoreError> {
        self.bounded(async {
            let c = self.client().await?;
            let row = c
                .query_opt(
                    "SELECT role, sha256, rev, source FROM airlock_pins WHERE instance = $1",
                    &[&instance],
                )
                .await
                .map_err(|e| self.down(e))?;
            Ok(row.map(|r| FleetPin {
                role: r.get(0),
                sha256: r.get(1),
                rev: u32::try_from(r.get::<_, i32>(2)).unwrap_or(0),
                source: r.get(3),
            }))
        })
        .await
    }
}
