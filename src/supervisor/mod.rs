//! The service around the jail: instances, launches, the ledger, systemd notifications.

pub mod agent_files;
pub mod alive;
pub mod as_user;
pub mod connector;
pub mod disk;
pub mod egress_plan;
pub mod exec_set;
pub mod github_plan;
pub mod host_addrs;
pub mod image_pool;
pub mod instances;
pub mod launch;
pub mod lease_records;
pub mod ledger;
pub mod loopdev;
pub mod notify;
pub mod outcome;
pub mod process;
pub mod reap;
pub mod reserve;
pub mod run_ca;
pub mod run_output;
pub mod spawn;
pub mod standalone;
pub mod tree;
pub mod workspace;
