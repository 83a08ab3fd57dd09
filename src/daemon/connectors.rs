//! `airlockctl connector login|status|logout`: an OAuth connector's authorization, done
//! by airlockd for an admin (see [`crate::gateway::mcp::oauth_login`]). Each login and logout is
//! journaled with who asked; no answer or event carries a token.

use serde_json::{json, Value};

use super::Daemon;
use crate::config::Config;
use crate::control::auth::Peer;
use crate::control::protocol::{ErrorCode, Op, Response};
use crate::gateway::mcp::oauth_login;
use crate::journal::EventKind;
use crate::supervisor::launch::connector_oauth;

/// Answer one connector operation (the caller has authorized it).
pub async fn answer(d: &Daemon, peer: &Peer, op: Op) -> Response {
    let cfg = d.set().config.clone();
    let (connector, result) = match &op {
        Op::ConnectorStatus => return Response::ok(status(&cfg).await),
        Op::ConnectorLogin { connector } => (connector, begin(&cfg, connector).await),
        Op::ConnectorLoginFinish {
            connector,
            login,
            redirected,
        } => (
            connector,
            oauth_login::finish(connector, login, redirected.as_deref()).await,
        ),
        Op::ConnectorLogout { connector } => (connector, logout(&cfg, connector).await),
        _ => return Response::err(ErrorCode::BadRequest, "not a connector operation"),
    };
    let who = peer.uid;
    let msg = match (&op, &result) {
        (_, Err(e)) => format!(
            "connector {connector}: `{}` by uid {who} failed: {e}",
            op.name()
        ),
        (Op::ConnectorLogin { .. }, Ok(v)) => format!(
            "connector {connector}: login started by uid {who} ({} grant)",
            v["flow"].as_str().unwrap_or("?")
        ),
        (Op::ConnectorLoginFinish { .. }, Ok(_)) => {
            format!("connector {connector}: authorized by uid {who}")
        }
        (_, Ok(v)) => format!(
            "connector {connector}: logged out by uid {who} (revoked at its server: {})",
            v["revoked_at_server"].as_bool().unwrap_or(false)
        ),
    };
    d.events.log(
        EventKind::ConnectorAuth,
        &msg,
        &[("AIRLOCK_CONNECTOR", connector.as_str())],
    );
    match result {
        Ok(v) => Response::ok(v),
        Err(e) => Response::err(ErrorCode::Refused, e),
    }
}

async fn begin(cfg: &Config, connector: &str) -> Result<Value, String> {
    connector_oauth(cfg, connector)?.begin_login().await
}

async fn logout(cfg: &Config, connector: &str) -> Result<Value, String> {
    connector_oauth(cfg, connector)?.logout().await
}

/// Every OAuth connector of the config, as its token source knows it.
async fn status(cfg: &Config) -> Value {
    let mut out = Vec::new();
    for (name, c) in &cfg.mcp_connectors {
        if c.oauth.is_none() {
            continue;
        }
        match connector_oauth(cfg, name) {
            Ok(src) => out.push(src.status().await),
            Err(e) => out.push(json!({"connector": name, "authorized": false, "error": e})),
        }
    }
    json!({ "connectors": out })
}
