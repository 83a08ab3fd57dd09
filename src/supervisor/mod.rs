//! See README.md, "Architecture".

pub mod ledger;
