//! See README.md, "Architecture".
pub mod instances;
pub mod launch;
