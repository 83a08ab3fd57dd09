//! Who opened a pull request, for the ratchet: the newest run in this host's ledger that
//! created its head branch, and the judge checks of that run's role, read from the role
//! as the host has it now (the ledger keeps the role's name, not its file).

use std::path::PathBuf;

use crate::catalog::Catalog;
use crate::gateway::github::land::{checks_of, Opener, Openers};
use crate::policy::Policies;

use super::ledger;

pub struct LedgerOpeners {
    pub ledger: PathBuf,
    pub roles: Vec<PathBuf>,
    pub policies: Policies,
}

impl Openers for LedgerOpeners {
    fn opener(&self, repo: &str, branch: &str) -> Result<Option<Opener>, String> {
        let Some(run) =
            ledger::creator_of(&self.ledger, repo, branch).map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let entry = Catalog::load_one(&self.roles, &self.policies, &run.role)
            .map_err(|_| {
                format!(
                    "role {} (of run {}, which created {branch}) does not load now",
                    run.role, run.run
                )
            })?
            .ok_or_else(|| {
                format!(
                    "role {} (of run {}, which created {branch}) is no longer on this host",
                    run.role, run.run
                )
            })?;
        let checks = checks_of(
            entry
                .loaded
                .role
                .judge
                .as_ref()
                .and_then(|j| j.check.as_ref()),
        );
        Ok(Some(Opener {
            run: run.run,
            role: run.role,
            checks,
        }))
    }
}
