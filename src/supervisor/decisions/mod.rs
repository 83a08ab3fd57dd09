//! Decisions (seed 003): hires, fires and changes that a person approves against a digest,
//! each step a record in the ledger's hash chain; and the frozen role revisions an approval
//! makes. [`model`] is pure, [`store`] keeps the decisions, [`revisions`] the frozen roles.

pub mod launch_role;
pub mod model;
pub mod pins;
pub mod revisions;
pub mod store;

pub use model::{Decision, Op, Right, State};
