//! See README.md, "Architecture".
pub mod notify;
