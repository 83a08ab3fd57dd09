//! The control socket: a versioned JSON-lines protocol between `airlockctl` and `airlockd`,
//! and who may ask for what, decided from the peer's credentials (SO_PEERCRED).

pub mod auth;
pub mod client;
pub mod listener;
pub mod protocol;
pub mod slots;
pub mod socket_acl;
