//! Policy: the host's rails, role classes and protected authority, autonomy levels, and the
//! decision engine (bash command, MCP tool call, MCP resource). Everything here is a pure
//! function of its inputs; the gateway and `airlockctl check` call the same code.

pub mod bash;
pub mod decision;
pub mod pattern;
pub mod resource;
pub mod tool;

pub use decision::Decision;
