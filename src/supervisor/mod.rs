//! The service around the jail: instances, launches, the ledger, systemd notifications.

pub mod ledger;
pub mod notify;
