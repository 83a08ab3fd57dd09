//! The MCP route: Airlock's own MCP server ([`server`]) and the proxy in front of each
//! `run.mcp` connector ([`proxy`]), its upstreams over streamable HTTP ([`upstream`]) or
//! stdio in a jail of their own ([`stdio_upstream`]), their OAuth ([`oauth`] and the
//! modules beside it) and the JSON-RPC framing both speak ([`jsonrpc`]).

pub mod decisions;
pub mod jsonrpc;
pub mod oauth;
pub mod oauth_login;
pub mod oauth_meta;
pub mod oauth_reach;
pub mod proxy;
pub mod server;
pub mod stdio_upstream;
pub mod upstream;
