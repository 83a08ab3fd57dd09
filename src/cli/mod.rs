//! What `airlockctl` does, one module per subcommand; the binary only parses arguments.

pub mod check;
pub mod explain;
pub mod launch;
pub mod output;
pub mod sources;
pub mod validate;
