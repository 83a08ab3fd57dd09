//! The jail of one run. This layer is the only one that makes namespace, mount and
//! credential syscalls. One file per isolation step.

pub mod error;
pub mod landlock;
pub mod seccomp;
pub mod seccomp_table;
pub mod spec;

pub use error::SandboxError;
pub use spec::RunSpec;
