//! A terminal session on a control connection (`launch --tty`, `attach`): after the
//! `started` frame, the run's filtered terminal output goes out as `output` frames
//! (stream `tty`) and the client's lines ([`TtyMsg`]: keys, window sizes) come in. The
//! client leaving is a detach: the run goes on.

use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};

use super::Daemon;
use crate::control::auth::{self, AccessGroups, Peer};
use crate::control::protocol::{
    from_hex, AskHow, ErrorCode, Frame, Response, TtyMsg, TtySize, MAX_TTY_LINE,
};
use crate::supervisor::tty::{Input, Refused, Session};

const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a session looks for a change in its run's asks (a person's pace).
const ASKS_EVERY: Duration = Duration::from_millis(200);

/// Who is at the terminal, for answering its run's asks there.
pub struct Answerer<'a> {
    pub daemon: &'a Daemon,
    pub peer: &'a Peer,
}

/// An answer typed on the terminal: only the writer's, only to an ask of its own run;
/// otherwise as `airlockctl allow|deny` (the launcher or an admin, journaled by uid).
fn answer(who: &Answerer<'_>, writer: bool, run: &str, ask: &str, how: AskHow) -> String {
    if !writer {
        return "a read-only terminal cannot answer; `airlockctl allow|deny ID` does".into();
    }
    let shown = crate::terminal::escaped(ask);
    if !super::asks::of_run(run).iter().any(|a| a.id == ask) {
        return format!("ask {shown} no longer waits on this run");
    }
    let resp = super::asks::answer(who.daemon, who.peer, ask, how.into());
    match (resp.ok, resp.data, resp.error) {
        (true, Some(d), _) => d
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("answered")
            .to_string(),
        (_, _, Some(e)) => e.message,
        _ => format!("ask {shown}: no answer from airlockd"),
    }
}

/// The terminal of live run `run` for `peer`: as its writer (the launcher or an admin),
/// or `read_only` (any operator). A second writer is refused naming the first.
pub fn attach(
    d: &Daemon,
    peer: &Peer,
    groups: &AccessGroups,
    run: &str,
    read_only: bool,
) -> Result<Session, Response> {
    let shown = crate::terminal::escaped(run);
    let active = d
        .active
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(run)
        .cloned();
    let Some(a) = active else {
        return Err(Response::err(
            ErrorCode::NotFound,
            format!("run {shown} is not running here (it ended, or never started): `airlockctl show {shown}` tells how it ended"),
        ));
    };
    let Some(hub) = &a.tty else {
        return Err(Response::err(
            ErrorCode::Refused,
            format!("run {shown} was launched without --tty, so it has no terminal: `airlockctl logs -f {shown}` follows its output"),
        ));
    };
    if !read_only && !auth::may_stop(peer, groups, a.info.launched_by_uid) {
        return Err(Response::err(
            ErrorCode::Forbidden,
            format!(
                "only run {shown}'s launcher (uid {}) or an admin may type into it; `airlockctl attach {shown} --read-only` watches it",
                a.info.launched_by_uid
            ),
        ));
    }
    hub.attach(peer.uid, !read_only).map_err(|r| match r {
        Refused::Writer(uid) => Response::err(
            ErrorCode::Busy,
            format!(
                "uid {uid}{} holds run {shown}'s keyboard (one writer at a time); attach with --read-only to watch, or once they detach",
                user_name(uid).map(|n| format!(" ({n})")).unwrap_or_default()
            ),
        ),
        Refused::Ended => Response::err(
            ErrorCode::NotFound,
            format!("run {shown}'s terminal is closed (the run is ending)"),
        ),
    })
}

fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| crate::terminal::escaped(&u.name))
}

async fn send(w: &mut OwnedWriteHalf, resp: &Response) -> bool {
    let Ok(mut line) = serde_json::to_vec(resp) else {
        return false;
    };
    line.push(b'\n');
    matches!(
        tokio::time::timeout(WRITE_TIMEOUT, w.write_all(&line)).await,
        Ok(Ok(()))
    )
}

fn frame(f: &Frame) -> Response {
    Response::ok(serde_json::to_value(f).unwrap_or(serde_json::Value::Null))
}

/// The longest valid UTF-8 text at the front of `carry`, taken out; an unfinished
/// character at its end stays for the next chunk. Invalid bytes become U+FFFD.
pub fn take_utf8(carry: &mut Vec<u8>) -> String {
    match std::str::from_utf8(carry) {
        Ok(s) => {
            let t = s.to_owned();
            carry.clear();
            t
        }
        Err(e) if e.error_len().is_none() && carry.len() - e.valid_up_to() < 4 => {
            let rest = carry.split_off(e.valid_up_to());
            let t = String::from_utf8_lossy(carry).into_owned();
            *carry = rest;
            t
        }
        Err(_) => {
            let t = String::from_utf8_lossy(carry).into_owned();
            carry.clear();
            t
        }
    }
}

/// Read the client's lines into `tx` until it leaves or sends something malformed.
async fn read_msgs<R: AsyncBufRead + Unpin>(mut reader: R, tx: mpsc::Sender<Result<TtyMsg, ()>>) {
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_TTY_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            let _ = tx.send(Err(())).await;
            return;
        }
        line.pop();
        let msg = serde_json::from_slice::<TtyMsg>(&line).map_err(|_| ());
        let bad = msg.is_err();
        if tx.send(msg).await.is_err() || bad {
            return;
        }
    }
}

/// Serve one terminal session until the run's terminal closes (then the launcher gets the
/// run's exit) or the client leaves (a detach). `redraw`: the writer's window on attach,
/// set on the pty twice (a different size first, so the agent's TUI gets SIGWINCH and
/// draws its screen again). The run's asks go to the client as they change, and the
/// writer may answer them (see [`answer`]).
pub async fn serve<R: AsyncBufRead + Unpin + Send + 'static>(
    reader: R,
    w: &mut OwnedWriteHalf,
    run: String,
    mut session: Session,
    exit: Option<oneshot::Receiver<Frame>>,
    redraw: Option<TtySize>,
    who: Answerer<'_>,
) {
    if !send(w, &frame(&Frame::Started { run: run.clone() })).await {
        return;
    }
    if let Some(s) = redraw {
        if s.cols > 1 {
            session
                .send(Input::Resize {
                    rows: s.rows,
                    cols: s.cols - 1,
                })
                .await;
        }
        session
            .send(Input::Resize {
                rows: s.rows,
                cols: s.cols,
            })
            .await;
    }
    let (tx, mut msgs) = mpsc::channel(64);
    let reading = tokio::spawn(read_msgs(reader, tx));
    let mut carry = Vec::new();
    let mut client_gone = false;
    let mut asks_tick = tokio::time::interval(ASKS_EVERY);
    asks_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut shown = Vec::new();
    loop {
        tokio::select! {
            _ = asks_tick.tick() => {
                let now = super::asks::of_run(&run);
                if now != shown {
                    shown = now;
                    if !send(w, &frame(&Frame::Asks { asks: shown.clone() })).await {
                        client_gone = true;
                        break;
                    }
                }
            },
            out = session.output.recv() => match out {
                Some(bytes) => {
                    carry.extend_from_slice(&bytes);
                    let data = take_utf8(&mut carry);
                    if data.is_empty() {
                        continue;
                    }
                    let f = Frame::Output { stream: "tty".into(), data };
                    if !send(w, &frame(&f)).await {
                        client_gone = true;
                        break;
                    }
                }
                None => break,
            },
            m = msgs.recv(), if !client_gone => match m {
                Some(Ok(TtyMsg::Keys { hex })) => match from_hex(&hex) {
                    Some(keys) => { session.send(Input::Keys(keys)).await; }
                    None => {
                        send(w, &Response::err(ErrorCode::BadRequest, "keys must be hex")).await;
                        client_gone = true;
                        break;
                    }
                },
                Some(Ok(TtyMsg::Resize { rows, cols })) => {
                    session.send(Input::Resize { rows, cols }).await;
                }
                Some(Ok(TtyMsg::Answer { ask, how })) => {
                    let text = answer(&who, session.writer, &run, &ask, how);
                    // The asks as they are now, so the line never shows an answered one.
                    let now = super::asks::of_run(&run);
                    let changed = now != shown;
                    shown = now;
                    let sent = send(w, &frame(&Frame::Notice { text })).await
                        && (!changed || send(w, &frame(&Frame::Asks { asks: shown.clone() })).await);
                    if !sent {
                        client_gone = true;
                        break;
                    }
                }
                Some(Err(())) => {
                    send(w, &Response::err(ErrorCode::BadRequest, "a terminal session takes one JSON object per line: {\"tty\":\"keys\",\"hex\":...} or {\"tty\":\"resize\",\"rows\":...,\"cols\":...}")).await;
                    client_gone = true;
                    break;
                }
                // The client left: a detach. The run goes on.
                None => {
                    client_gone = true;
                    break;
                }
            },
        }
    }
    reading.abort();
    let fell_behind = !client_gone && !session.ended();
    drop(session);
    if client_gone {
        return;
    }
    if fell_behind {
        send(w, &Response::err(ErrorCode::Busy, "this terminal fell too far behind the run's output and was let go; attach again to redraw")).await;
        return;
    }
    if let Some(exit) = exit {
        if let Ok(f) = exit.await {
            send(w, &frame(&f)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::take_utf8;

    #[test]
    fn a_character_split_between_chunks_waits_for_its_end() {
        let arrow = "→".as_bytes();
        let mut carry = b"ab".to_vec();
        carry.push(arrow[0]);
        assert_eq!(take_utf8(&mut carry), "ab");
        assert_eq!(carry, &arrow[..1]);
        carry.extend_from_slice(&arrow[1..]);
        assert_eq!(take_utf8(&mut carry), "→");
        assert!(carry.is_empty());
        let mut bad = b"a\xffb".to_vec();
        assert_eq!(take_utf8(&mut bad), "a\u{fffd}b");
    }
}
