//! Fleet writes this host made while the store was away: each fire is a file under
//! `state_dir/fleet/pending-fires/`, written (fsync'd) before `fire` answers, and removed
//! only once the store has the fire. The host lease's keeper replays them at start and on
//! every heartbeat, so a fire made here is never lost and never said to be fleet-wide
//! before it is.

use std::fs;
use std::path::{Path, PathBuf};

/// One fire the fleet store does not have yet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingFire {
    pub instance: String,
    pub by_uid: u32,
    pub at_ms: u64,
}

/// The queue of one host (its `state_dir`).
#[derive(Debug, Clone)]
pub struct Pending {
    dir: PathBuf,
}

impl Pending {
    pub fn new(state_dir: &Path) -> Pending {
        Pending {
            dir: state_dir.join("fleet").join("pending-fires"),
        }
    }

    fn file(&self, instance: &str) -> Result<PathBuf, String> {
        // The name becomes a file name: only what an instance name may be.
        if !crate::sandbox::spec::valid_name(instance) {
            return Err("an instance name must match [a-z][a-z0-9_-]{0,31}".into());
        }
        Ok(self.dir.join(format!("{instance}.json")))
    }

    /// Queue a fire, durably (the file and its directory fsync'd) before returning.
    pub fn add(&self, f: &PendingFire) -> Result<(), String> {
        let path = self.file(&f.instance)?;
        let text = serde_json::to_vec(f).map_err(|e| e.to_string())?;
        super::private_file::write(&self.dir, &path, &text)
    }

    /// The store has it now.
    pub fn remove(&self, instance: &str) -> Result<(), String> {
        let path = self.file(instance)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("cannot remove {}: {e}", path.display())),
        }
    }

    /// Every queued fire, by name. A file that does not parse is named in `Err` entries and
    /// left where it is (an operator looks at it; it is never guessed at).
    pub fn list(&self) -> Vec<Result<PendingFire, String>> {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|p| {
                let bad = |why: String| format!("{}: {why}", p.display());
                let text = fs::read(&p).map_err(|e| bad(e.to_string()))?;
                let f: PendingFire =
                    serde_json::from_slice(&text).map_err(|_| bad("not a pending fire".into()))?;
                // The file's name is the instance it fires: a mismatch is not trusted.
                if self.file(&f.instance).ok().as_deref() != Some(p.as_path()) {
                    return Err(bad("its instance does not match its file name".into()));
                }
                Ok(f)
            })
            .collect()
    }

    /// The names queued, for `status`.
    pub fn names(&self) -> Vec<String> {
        self.list()
            .into_iter()
            .map(|r| r.map(|f| f.instance).unwrap_or_else(|e| e))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_until_removed() {
        let d = tempfile::tempdir().unwrap();
        let p = Pending::new(d.path());
        assert!(p.list().is_empty());
        let f = PendingFire {
            instance: "tess".into(),
            by_uid: 0,
            at_ms: 7,
        };
        p.add(&f).unwrap();
        assert_eq!(p.list(), vec![Ok(f.clone())]);
        p.add(&f).unwrap();
        assert_eq!(p.names(), vec!["tess".to_string()]);
        p.remove("tess").unwrap();
        p.remove("tess").unwrap();
        assert!(p.list().is_empty());
        assert!(p
            .add(&PendingFire {
                instance: "../x".into(),
                ..f
            })
            .is_err());
    }

    #[test]
    fn a_file_naming_another_instance_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = Pending::new(d.path());
        fs::create_dir_all(&p.dir).unwrap();
        fs::write(
            p.dir.join("tess.json"),
            r#"{"instance":"max","by_uid":0,"at_ms":1}"#,
        )
        .unwrap();
        let l = p.list();
        assert_eq!(l.len(), 1);
        assert!(
            l[0].as_ref().unwrap_err().contains("does not match"),
            "{l:?}"
        );
    }
}
