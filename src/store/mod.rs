//! The fleet store: state that a fleet of hosts, each with its own airlockd, shares through
//! one PostgreSQL database (`store:` in the config). Without it airlockd keeps everything in
//! files under `state_dir`, as one host always did.
//!
//! Shared: the instance registry (names and uids, fleet-wide unique), admission against
//! `runs_per_week` (one conditional statement, see [`pg::Fleet::admit`]), which host id is
//! live (a host lease). Per host: the ledger, journals, homes, leases of credentials.

pub mod pending;
pub mod pg;
pub mod pins;
pub mod private_file;
pub mod schema;
pub mod signing;
pub mod skew;

pub use crate::config::store::{self as conf, StoreConf};
pub use pg::{Fleet, FleetInstance, MirrorWrite, StoreError};
pub use pins::FleetPin;
