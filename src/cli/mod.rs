//! What `airlockctl` does, one module per subcommand; the binary only parses arguments.

pub mod agent_events;
pub mod asks;
pub mod check;
pub mod connector;
pub mod decisions;
pub mod detach;
pub mod explain;
pub mod fleet;
pub mod image;
pub mod instances;
pub mod interrupt;
pub mod launch;
pub mod launch_daemon;
pub mod logs;
pub mod offline;
pub mod output;
pub mod remote;
pub mod runs;
pub mod sources;
pub mod status;
pub mod table;
pub mod timers;
pub mod top;
pub mod tty;
pub mod validate;
pub mod verify_ledger;
