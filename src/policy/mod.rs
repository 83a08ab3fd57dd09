//! Policy: the host's rails, role classes and protected authority, autonomy levels, and the
//! decision engine (bash command, MCP tool call, MCP resource). Everything here is a pure
//! function of its inputs; the gateway and `airlockctl check` call the same code.

pub mod agent_config;
pub mod asks;
pub mod autonomy;
pub mod bash;
pub mod brief;
pub mod budget;
pub mod classes;
pub mod decision;
pub mod egress;
pub mod engine;
pub mod flagged;
pub mod fold;
pub mod git_overrides;
pub mod github;
pub mod hire;
pub mod levels;
pub mod narrowing;
pub use crate::pattern;
pub mod prices;
pub mod provider_keys;
pub mod provider_tools;
pub mod rails;
pub mod ratchet;
pub mod resource;
pub mod secrets;
pub mod store;
pub mod tool;

pub use decision::Decision;
pub use engine::RolePolicy;
pub use store::Policies;
