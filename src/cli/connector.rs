//! `airlockctl connector login|status|logout`: an OAuth connector's authorization. airlockd
//! talks to the authorization server and keeps the refresh token; airlockctl only shows
//! the operator what to open and, for the code grant, passes back the URL the browser was
//! sent to. Nothing here ever holds a token.

use std::io::BufRead;
use std::time::Duration;

use serde_json::Value;

use super::output::{self, outln};
use super::remote::{client_error, daemon_error, Ctx};
use super::table::{clean, utc};
use crate::control::client::Client;
use crate::control::protocol::{Op, Request};

/// Wrong pastes allowed before the login is given up.
const PASTES: usize = 3;

/// One request with its own timeout (a device login waits for the operator).
fn call(ctx: &Ctx, op: Op, timeout: Duration) -> Result<Value, i32> {
    let socket = ctx.socket_path()?;
    let name = op.name();
    let mut c = Client::connect(&socket).map_err(|e| client_error(&e))?;
    c.set_timeout(Some(timeout)).map_err(|e| client_error(&e))?;
    match c.call(&Request::new(op)) {
        Ok(r) if r.ok => Ok(r.data.unwrap_or(Value::Null)),
        Ok(r) => Err(daemon_error(name, r.error.as_ref())),
        Err(e) => Err(client_error(&e)),
    }
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

pub fn login(ctx: &Ctx, connector: &str) -> i32 {
    let begun = match call(
        ctx,
        Op::ConnectorLogin {
            connector: connector.into(),
        },
        Duration::from_secs(60),
    ) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let login = text(&begun, "login").to_string();
    let expires = begun
        .get("expires_in")
        .and_then(Value::as_u64)
        .unwrap_or(600);
    let finish = |redirected: Option<String>| {
        call(
            ctx,
            Op::ConnectorLoginFinish {
                connector: connector.into(),
                login: login.clone(),
                redirected,
            },
            Duration::from_secs(expires + 60),
        )
    };
    let name = clean(connector);
    let done = if text(&begun, "flow") == "device" {
        let open = match text(&begun, "verification_uri_complete") {
            "" => text(&begun, "verification_uri"),
            u => u,
        };
        eprintln!(
            "To authorize connector {name}, open this address in a browser and approve the code {}:\n\n  {}\n\n(the code expires in {expires} s; waiting for the approval)",
            clean(text(&begun, "user_code")),
            clean(open)
        );
        finish(None)
    } else {
        eprintln!(
            "To authorize connector {name}, open this address in a browser, sign in and approve:\n\n  {}\n\nThe browser is then sent to {} (nothing listens there, so the page does not load).\nPaste the whole address from its address bar here, then press Enter:",
            clean(text(&begun, "authorize_url")),
            clean(text(&begun, "redirect_uri"))
        );
        let mut tries = 0;
        loop {
            let mut line = String::new();
            match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => {
                    eprintln!("airlockctl connector login: no address was pasted; the login is not finished");
                    return output::ERROR;
                }
                Ok(_) => {}
            }
            tries += 1;
            match finish(Some(line.trim().to_string())) {
                Err(code) if code == output::NO && tries < PASTES => {
                    eprintln!("Paste the address again:");
                }
                r => break r,
            }
        }
    };
    match done {
        Ok(v) if ctx.json => {
            outln!("{v}");
            output::OK
        }
        Ok(v) => {
            let life = v
                .get("access_expires_in")
                .and_then(Value::as_u64)
                .map(|s| format!("; its access token expires in {s} s and is renewed by airlockd"))
                .unwrap_or_default();
            outln!("connector {name}: authorized{life}");
            output::OK
        }
        Err(code) => code,
    }
}

pub fn logout(ctx: &Ctx, connector: &str) -> i32 {
    match call(
        ctx,
        Op::ConnectorLogout {
            connector: connector.into(),
        },
        Duration::from_secs(60),
    ) {
        Ok(v) if ctx.json => {
            outln!("{v}");
            output::OK
        }
        Ok(v) => {
            let name = clean(connector);
            match (
                v["forgotten"].as_bool().unwrap_or(false),
                v["revoked_at_server"].as_bool().unwrap_or(false),
            ) {
                (false, _) => outln!("connector {name}: was not authorized on this host"),
                (true, true) => {
                    outln!("connector {name}: logged out (revoked at its server, and forgotten)")
                }
                (true, false) => outln!(
                    "connector {name}: forgotten (its server offers no revocation: revoke the grant there too)"
                ),
            }
            output::OK
        }
        Err(code) => code,
    }
}

pub fn status(ctx: &Ctx) -> i32 {
    let data = match call(ctx, Op::ConnectorStatus, Duration::from_secs(30)) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if ctx.json {
        outln!("{data}");
        return output::OK;
    }
    let list = data["connectors"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        outln!("no OAuth connectors are configured");
        return output::OK;
    }
    for c in &list {
        let name = clean(text(c, "connector"));
        let grant = clean(text(c, "grant"));
        let access = c["access_token_expires_at_ms"]
            .as_u64()
            .map(|ms| format!("access token until {}", utc(ms)))
            .unwrap_or_else(|| "no access token yet".into());
        let state = match (c["authorized"].as_bool().unwrap_or(false), grant.as_str()) {
            (_, _) if !text(c, "error").is_empty() => format!("error: {}", clean(text(c, "error"))),
            (true, "authorization_code") => format!(
                "authorized at {} by {} (refresh token of {}), {access}",
                c["authorized_at_ms"].as_u64().map(utc).unwrap_or_default(),
                clean(text(c, "issuer")),
                c["rotated_at_ms"].as_u64().map(utc).unwrap_or_default()
            ),
            (false, "authorization_code") => {
                format!("not authorized: an admin runs `airlockctl connector login {name}`")
            }
            _ => access,
        };
        outln!("{name}\t{grant}\t{state}");
    }
    output::OK
}
