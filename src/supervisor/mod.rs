//! The service around the jail: instances, launches, the ledger, systemd notifications.

pub mod agent_files;
pub mod instances;
pub mod launch;
pub mod ledger;
pub mod notify;
pub mod process;
pub mod workspace;
