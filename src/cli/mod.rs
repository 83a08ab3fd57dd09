//! What the binaries call: one module per subcommand. See README.md, "Architecture".

pub mod launch;
