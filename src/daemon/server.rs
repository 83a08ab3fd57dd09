//! One control-socket connection: read one request line (bounded in size and time), find
//! out who the peer is from the kernel, authorize, answer. A `launch` with `wait` then
//! streams the run's frames on the same connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;

use super::{peer, reload, runs, Daemon};
use crate::control::auth::{self, Peer};
use crate::control::protocol::{
    self, ErrorCode, Frame, InstanceInfo, Op, Response, StatusInfo, MAX_REQUEST_BYTES,
};
use crate::control::slots::{Busy, Class, Slot, Slots};
use crate::credentials::leases::LeaseStore;
use crate::journal::EventKind;
use crate::supervisor::{instances, lease_records, ledger};

/// How long a peer has to send its request line.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one response line may take to be written before the peer is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Output frames written to a `--wait` client at once, at most.
const FRAME_BATCH: usize = 64;

async fn send(w: &mut OwnedWriteHalf, resp: &Response) -> bool {
    let mut line = match serde_json::to_vec(resp) {
        Ok(l) => l,
        Err(_) => return false,
    };
    line.push(b'\n');
    matches!(
        tokio::time::timeout(WRITE_TIMEOUT, w.write_all(&line)).await,
        Ok(Ok(()))
    )
}

/// Answer a peer that got no connection slot, then hang up.
async fn busy(stream: UnixStream, why: Busy, uid: u32) {
    let (_, mut w) = stream.into_split();
    let resp = Response::err(ErrorCode::Busy, why.message(uid));
    let _ = tokio::time::timeout(Duration::from_secs(1), send(&mut w, &resp)).await;
}

/// A new connection: who the peer is, from the kernel, decides whether it gets a slot
/// (see [`crate::control::slots`]); then it is served, or told it is busy.
pub async fn accept(d: Arc<Daemon>, stream: UnixStream, slots: Arc<Slots>) {
    let Ok(cred) = stream.peer_cred() else {
        return;
    };
    let groups = peer::groups(&stream, cred.pid());
    let peer = Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid(),
        groups,
    };
    let class = match auth::access_of(&peer, &d.set().groups) {
        _ if peer.uid == 0 => Class::Root,
        auth::Access::Admin => Class::Admin,
        _ => Class::Other,
    };
    match slots.take(peer.uid, class) {
        Ok(slot) => serve(d, stream, peer, slot).await,
        Err(why) => busy(stream, why, peer.uid).await,
    }
}

/// Journal a refused peer: who (kernel credentials) and what it asked for.
fn log_refusal(d: &Daemon, peer: &Peer, op: &str, msg: &str) {
    let uid = peer.uid.to_string();
    let gid = peer.gid.to_string();
    let pid = peer.pid.map(|p| p.to_string()).unwrap_or_default();
    d.events.log(
        EventKind::ControlRefused,
        &format!("refused `{op}` from uid {}: {msg}", peer.uid),
        &[
            ("AIRLOCK_PEER_UID", &uid),
            ("AIRLOCK_PEER_GID", &gid),
            ("AIRLOCK_PEER_PID", &pid),
            ("AIRLOCK_OP", op),
        ],
    );
}

async fn serve(d: Arc<Daemon>, stream: UnixStream, peer: Peer, slot: Slot) {
    let (r, mut w) = stream.into_split();
    // One byte over the bound is enough to know the request is too large.
    let mut reader = BufReader::new(r.take(MAX_REQUEST_BYTES as u64 + 1));
    let mut line = Vec::new();
    let read = tokio::time::timeout(READ_TIMEOUT, reader.read_until(b'\n', &mut line)).await;
    // A peer in none of the groups is refused whatever it sent, or failed to send, without
    // parsing any of it; the line was read (bounded) so its client sees the answer, and the
    // refusal is logged.
    // One set for both checks: a reload while the request is read cannot split them.
    let set = d.set();
    if auth::access_of(&peer, &set.groups) == auth::Access::None {
        let msg = format!(
            "uid {} may not use airlockd: {}",
            peer.uid,
            set.groups.anyone()
        );
        log_refusal(&d, &peer, "(unread)", &msg);
        send(&mut w, &Response::err(ErrorCode::Forbidden, msg)).await;
        return;
    }
    match read {
        Err(_) => {
            let resp = Response::err(
                ErrorCode::BadRequest,
                format!(
                    "no complete request line within {} s; send one JSON object ending in a newline",
                    READ_TIMEOUT.as_secs()
                ),
            );
            send(&mut w, &resp).await;
            return;
        }
        Ok(Err(_)) => return,
        Ok(Ok(_)) => {}
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    } else if line.len() > MAX_REQUEST_BYTES {
        let resp = Response::err(
            ErrorCode::TooLarge,
            format!("request is over {MAX_REQUEST_BYTES} bytes"),
        );
        send(&mut w, &resp).await;
        return;
    }
    let req = match protocol::parse_request(&line) {
        Ok(r) => r,
        Err(resp) => {
            send(&mut w, &resp).await;
            return;
        }
    };
    if let Err(msg) = auth::authorize(&peer, &set.groups, &req.op) {
        log_refusal(&d, &peer, req.op.name(), &msg);
        send(&mut w, &Response::err(ErrorCode::Forbidden, msg)).await;
        return;
    }
    // The slot is held until the answer is out, so one peer's requests queue on its own
    // slots; a streaming launch gives it back once its run has started (the run cap bounds
    // those).
    match req.op {
        Op::Launch {
            role,
            instance,
            workspace,
            max_seconds,
            command,
            wait,
            tty,
        } => {
            let requester = crate::supervisor::workspace::Requester {
                ids: crate::supervisor::as_user::Ids {
                    uid: peer.uid,
                    gid: peer.gid,
                    groups: peer.groups.clone(),
                },
                privileged: auth::access_of(&peer, &set.groups) == auth::Access::Admin,
            };
            let args = runs::LaunchArgs {
                peer_uid: peer.uid,
                requester,
                role,
                instance,
                workspace,
                max_seconds,
                command,
                wait,
                tty: tty.map(|t| (t.rows, t.cols)),
            };
            let d2 = d.clone();
            let started = match tokio::task::spawn_blocking(move || runs::launch(&d2, args)).await {
                Ok(r) => r,
                Err(_) => Err(Response::err(ErrorCode::Internal, "launch failed")),
            };
            match started {
                Err(resp) => {
                    send(&mut w, &resp).await;
                }
                Ok(mut s) => {
                    drop(slot);
                    match s.tty.take() {
                        Some(session) => {
                            let exit = s.frames.take().map(|(_, e)| e);
                            // What the client sends from here on is keys and sizes.
                            reader.get_mut().set_limit(u64::MAX);
                            let who = super::tty::Answerer {
                                daemon: &d,
                                peer: &peer,
                            };
                            super::tty::serve(reader, &mut w, s.run, session, exit, None, who).await
                        }
                        None => stream_run(&mut w, s).await,
                    }
                }
            }
        }
        Op::Attach {
            run,
            read_only,
            tty,
        } => match super::tty::attach(&d, &peer, &set.groups, &run, read_only) {
            Err(resp) => {
                send(&mut w, &resp).await;
            }
            Ok(session) => {
                drop(slot);
                reader.get_mut().set_limit(u64::MAX);
                let size = tty.filter(|_| session.writer);
                let who = super::tty::Answerer {
                    daemon: &d,
                    peer: &peer,
                };
                super::tty::serve(reader, &mut w, run, session, None, size, who).await
            }
        },
        // Asynchronous: they talk to an authorization server (a device login waits for the
        // operator's approval).
        op @ (Op::ConnectorLogin { .. }
        | Op::ConnectorLoginFinish { .. }
        | Op::ConnectorStatus
        | Op::ConnectorLogout { .. }) => {
            let resp = super::connectors::answer(&d, &peer, op).await;
            send(&mut w, &resp).await;
            drop(slot);
        }
        op => {
            let d2 = d.clone();
            let resp = match tokio::task::spawn_blocking(move || answer(&d2, &peer, op)).await {
                Ok(r) => r,
                Err(_) => Response::err(ErrorCode::Internal, "the request failed inside airlockd"),
            };
            send(&mut w, &resp).await;
            drop(slot);
        }
    }
}

fn frame(f: &Frame) -> Response {
    Response::ok(serde_json::to_value(f).unwrap_or(serde_json::Value::Null))
}

async fn stream_run(w: &mut OwnedWriteHalf, s: runs::Started) {
    let started = Frame::Started { run: s.run.clone() };
    if !send(w, &frame(&started)).await {
        return;
    }
    let Some((mut frames, exit)) = s.frames else {
        return;
    };
    let mut connected = true;
    // What is queued goes out in one write: a run printing fast costs one syscall per
    // batch of lines, not per line.
    let mut batch = Vec::new();
    while frames.recv_many(&mut batch, FRAME_BATCH).await > 0 {
        if connected {
            let mut bytes = Vec::new();
            for f in batch.drain(..) {
                if serde_json::to_writer(&mut bytes, &frame(&f)).is_ok() {
                    bytes.push(b'\n');
                }
            }
            let sent = tokio::time::timeout(WRITE_TIMEOUT, w.write_all(&bytes)).await;
            if !matches!(sent, Ok(Ok(()))) {
                // Keep receiving (and discarding) so the run's pumps never wait on us.
                connected = false;
                frames.close();
            }
        }
        batch.clear();
    }
    if let Ok(f) = exit.await {
        if connected {
            send(w, &frame(&f)).await;
        }
    }
}

/// Every operation but launch. Blocking (ledger reads, registry writes).
fn answer(d: &Arc<Daemon>, peer: &Peer, op: Op) -> Response {
    let peer_uid = peer.uid;
    let ok = |v: serde_json::Value| Response::ok(v);
    match op {
        Op::Ps => ok(serde_json::json!({ "runs": runs::active(d) })),
        Op::Runs { last } => {
            let last = last
                .unwrap_or(protocol::RUNS_DEFAULT)
                .clamp(1, protocol::RUNS_MAX);
            match runs::recent(d, last as usize) {
                Ok((r, more)) => ok(serde_json::json!({ "runs": r, "more": more })),
                Err(e) => Response::err(ErrorCode::Internal, e),
            }
        }
        Op::Show { run } => match runs::one(d, &run) {
            Ok(Some(r)) => ok(super::live_change::show(d, r)),
            Ok(None) => Response::err(
                ErrorCode::NotFound,
                "no run with this id in the ledger; `airlockctl runs` lists them",
            ),
            Err(e) => Response::err(ErrorCode::Internal, e),
        },
        Op::Stop { run } => {
            let launcher = runs::launched_by(d, &run);
            if launcher.is_some_and(|by| !auth::may_stop(peer, &d.set().groups, by)) {
                let msg = format!(
                    "uid {peer_uid} may not stop run {run}: another user launched it; its launcher may, and so may whoever may `fire`: be root or in {}",
                    d.set().groups.admin_name.as_deref().map_or("the admin group".to_string(), |n| format!("the admin group `{n}`"))
                );
                log_refusal(d, peer, "stop", &msg);
                return Response::err(ErrorCode::Forbidden, msg);
            }
            match runs::stop(d, &run, &format!("stop requested by uid {peer_uid}")) {
                true => ok(serde_json::json!({ "run": run, "stopping": true })),
                false => Response::err(
                    ErrorCode::NotFound,
                    "no active run with this id (it may have ended already); `airlockctl ps` lists active runs",
                ),
            }
        }
        Op::Status => {
            let set = d.set();
            let info = StatusInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                active_runs: d.active_count(),
                max_concurrent_runs: set.config.max_concurrent_runs,
                draining: d.is_draining(),
                roles: set.catalog.len(),
                loaded_at: set.loaded_at,
                ledger_records: d.ledger_len(),
                fleet: super::fleet::status(d, &set.config.state_dir),
                warm: d.warm.status(),
            };
            ok(serde_json::to_value(info).unwrap_or_default())
        }
        Op::Instances => {
            let set = d.set();
            if let Some(why) = super::fleet::sync_all(d, &set.config) {
                d.events.log(
                    EventKind::DaemonStarted,
                    &format!("instances: the fleet's registry was not fully read here: {why}"),
                    &[],
                );
            }
            match instances::list(&set.config) {
                Ok(list) => {
                    let active = runs::active(d);
                    let mut leases = runs::open_leases(&set.config.state_dir);
                    let infos: Vec<InstanceInfo> = list
                        .into_iter()
                        .map(|e| {
                            let (role_sha256, rev, template_changed) =
                                super::decisions::revision_of(&set, &e.name);
                            InstanceInfo {
                                role_sha256,
                                rev,
                                template_changed,
                                leases: leases.remove(&e.name).unwrap_or_default(),
                                active_runs: active.iter().filter(|r| r.instance == e.name).count(),
                                // 0: a config instance whose uid is allocated on its first run.
                                uid: e.uid.unwrap_or(0),
                                instance: e.name,
                                role: e.role,
                                source: e.source.as_str().to_string(),
                                fired: e.fired,
                            }
                        })
                        .collect();
                    ok(serde_json::json!({ "instances": infos }))
                }
                Err(e) => Response::err(ErrorCode::Internal, e.to_string()),
            }
        }
        Op::Hire {
            instance,
            role,
            decision,
        } => super::decisions::person_hire(d, peer, &instance, &role, decision),
        Op::Fire { instance, decision } => {
            super::decisions::person_fire(d, peer, &instance, decision)
        }
        Op::Change { instance, decision } => {
            super::decisions::person_change(d, peer, &instance, decision)
        }
        Op::RoleDiff { instance } => super::decisions::role_diff(d, &instance),
        Op::Decisions { decision } => super::decisions::list(d, decision.all),
        Op::DecisionShow { decision } => super::decisions::show(d, decision),
        Op::Approve { decision } => super::decisions::approve(d, peer, decision),
        Op::Deny { decision } => match decision.id.as_deref() {
            Some(id) if super::asks::is_ask_id(id) => {
                super::asks::answer(d, peer, id, super::asks::How::Deny)
            }
            Some(id) if id.starts_with("d-") => super::decisions::deny(d, peer, decision),
            _ => Response::err(
                ErrorCode::BadRequest,
                "deny takes a decision id (d-N, `airlockctl decisions`) or an ask id (a-N, `airlockctl asks`)",
            ),
        },
        Op::Asks => super::asks::list(),
        Op::Allow { decision } => {
            let how = if decision.for_run {
                super::asks::How::AllowForRun
            } else {
                super::asks::How::Allow
            };
            super::asks::answer(d, peer, decision.id.as_deref().unwrap_or_default(), how)
        }
        Op::Reload => match reload_now(d) {
            Ok(at) => ok(serde_json::json!({ "loaded_at": at })),
            Err(problems) => Response::err(
                ErrorCode::Refused,
                format!(
                    "reload refused, the previous roles, policies and config stay in force: {}",
                    problems.join("; ")
                ),
            ),
        },
        Op::Launch { .. }
        | Op::Attach { .. }
        | Op::ConnectorLogin { .. }
        | Op::ConnectorLoginFinish { .. }
        | Op::ConnectorStatus
        | Op::ConnectorLogout { .. } => Response::err(ErrorCode::Internal, "handled elsewhere"),
    }
}

/// Reload (SIGHUP or `reload`): RELOADING=1, load anew, swap whole or keep the old set,
/// READY=1 again.
pub fn reload_now(d: &Arc<Daemon>) -> Result<u64, Vec<String>> {
    crate::supervisor::notify::reloading();
    let _one = d.reload_lock.lock().unwrap_or_else(|e| e.into_inner());
    let old = d.set();
    let result = reload::load(&d.config_path).and_then(|new| {
        reload::check_swap(&old.config, &new.config)?;
        Ok(new)
    });
    let out = match result {
        Ok(new) => {
            let at = new.loaded_at;
            let roles = new.catalog.len();
            if let Err(e) = super::admit_admins(&new, &new.config.socket) {
                d.events.log(EventKind::Reloaded, &e, &[]);
            }
            d.swap(new);
            // A warm jail was built for the set that was in force: none is given after a
            // reload; the pool is built again for the new one.
            d.warm.clear();
            super::warm::WarmPool::kick(d);
            d.events.log(
                EventKind::Reloaded,
                &format!("reloaded config, policies and {roles} roles; warm jails built again"),
                &[],
            );
            Ok(at)
        }
        Err(problems) => {
            d.events.log(
                EventKind::ReloadRefused,
                &format!(
                    "reload refused; the previous set stays in force: {}",
                    problems.join("; ")
                ),
                &[],
            );
            Err(problems)
        }
    };
    crate::supervisor::notify::ready(&d.status_line());
    out
}

/// Hire `instance` for role `role` now (an approved decision's effect): the registry, the
/// journal, and the answer listing its credentials and egress.
pub(super) fn hire_now(
    d: &Arc<Daemon>,
    instance: String,
    entry: &crate::catalog::CatalogEntry,
    peer_uid: u32,
) -> Response {
    let ok = |v: serde_json::Value| Response::ok(v);
    let set = d.set();
    // Every credential the role's runs will use must be configured here, and the
    // reply lists each (seed 003).
    let lines = match crate::policy::hire::credential_lines(&entry.loaded.role, &set.config) {
        Ok(l) => l,
        Err(missing) => {
            return Response::err(
                ErrorCode::Refused,
                format!(
                    "role {} needs credentials this host does not configure in {}: {}",
                    entry.class,
                    set.config.file.display(),
                    missing.join("; ")
                ),
            )
        }
    };
    match super::fleet::hire(
        d,
        &set.config,
        &instance,
        &entry.class,
        peer_uid,
        ledger::now_ms(),
    ) {
        Ok(i) => {
            d.events.log(
                EventKind::InstanceHired,
                &format!(
                    "instance `{}` hired for role {} as uid {} by uid {peer_uid}",
                    i.name, i.role, i.uid
                ),
                &[("AIRLOCK_SUBJECT_INSTANCE", &i.name)],
            );
            let egress: Vec<String> = crate::policy::egress::destinations::granted(
                &set.config.egress.lists,
                &entry.loaded.role.role,
                &entry.class,
                &set.config.egress.ports,
            )
            .iter()
            .map(crate::policy::egress::destinations::describe)
            .collect();
            let environment = set
                .config
                .images
                .environment_of(&entry.loaded.role.role, &entry.class)
                .map(|(key, image)| {
                    serde_json::json!({"image": image, "granted_by": format!("environments.{key}")})
                });
            ok(serde_json::json!({
            "instance": i.name, "role": i.role, "uid": i.uid, "source": "hired",
            "credentials": lines, "egress": egress, "environment": environment,
            }))
        }
        Err(e) => Response::err(ErrorCode::Refused, e.to_string()),
    }
}

/// Fire `instance` now (an approved decision's effect): stop its runs, revoke its leases.
pub(super) fn fire_now(d: &Arc<Daemon>, instance: String, peer_uid: u32) -> Response {
    let ok = |v: serde_json::Value| Response::ok(v);

    let set = d.set();
    // Under the ledger lock, which a launch holds from its last checks (this
    // instance not fired included) until its run is in the active table: no launch
    // can slip between the fire and the stop. The fire is recorded first, so a crash
    // from here on still ends in every lease revoked (airlockd's start sweeps them).
    let order = crate::store::pending::PendingFire {
        instance: instance.clone(),
        by_uid: peer_uid,
        at_ms: ledger::now_ms(),
    };
    let fired = {
        let mut ledger = d.ledger.lock().unwrap_or_else(|e| e.into_inner());
        instances::fire(&set.config, &instance, order.at_ms).map(|_| {
            // Queued for the fleet before anything is answered, so it survives a
            // store that is away and a crash; sent below, outside the lock.
            let queued = super::fleet::queue_fire(d, &set.config.state_dir, &order);
            // Tokens stop working at once, before the runs have even stopped.
            runs::revoke_live_instance(d, &instance);
            let n = runs::stop_instance(d, &instance, "the instance was fired");
            let store = LeaseStore::new(&set.config.state_dir);
            let why = format!("instance `{instance}` was fired by uid {peer_uid}");
            let mut append = |e| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
            (
                n,
                lease_records::revoke_instance(&store, &mut append, &instance, &why),
                queued,
            )
        })
    };
    let fired = fired.map(|(n, revoked, queued)| {
        let fleet = super::fleet::tell_fleet(d, &set.config.state_dir, &order, queued);
        if let super::fleet::FleetFire::Pending(e) | super::fleet::FleetFire::Lost(e) = &fleet {
            d.events.log(
                EventKind::InstanceFired,
                &format!(
                    "instance `{instance}`: the fire is not in the fleet store yet ({}): {e}",
                    fleet.word()
                ),
                &[("AIRLOCK_SUBJECT_INSTANCE", &instance)],
            );
        }
        (n, revoked, fleet)
    });
    match fired {
        Ok((n, revoked, fleet)) => {
            let (revoked, pending, error) = match revoked {
                Ok(r) => (r.revoked, r.pending, None),
                Err(e) => (Vec::new(), Vec::new(), Some(e)),
            };
            for id in &revoked {
                d.events.log(
                    EventKind::Lease,
                    &format!("lease {id} revoked: instance `{instance}` was fired"),
                    &[("AIRLOCK_SUBJECT_INSTANCE", &instance)],
                );
            }
            d.events.log(
                    EventKind::InstanceFired,
                    &format!(
                        "instance `{instance}` fired by uid {peer_uid}; {n} active run(s) stopped; {} lease(s) revoked{}{}",
                        revoked.len(),
                        if pending.is_empty() { String::new() } else { format!(", {} pending at their source", pending.len()) },
                        match &error { Some(e) => format!("; the rest could not be revoked now ({e}) and is revoked at airlockd's next start"), None => String::new() }
                    ),
                    &[("AIRLOCK_SUBJECT_INSTANCE", &instance)],
                );
            let mut reply = serde_json::json!({
                "instance": instance,
                "fired": true,
                "stopped_runs": n,
                "revoked": revoked,
                "pending": pending,
            });
            if let Some(e) = error {
                reply["revocation_error"] = e.into();
            }
            reply["fleet"] = fleet.word().into();
            if let super::fleet::FleetFire::Pending(e) | super::fleet::FleetFire::Lost(e) = fleet {
                reply["fleet_error"] = e.into();
            }
            ok(reply)
        }
        Err(instances::InstanceError::Unknown(_)) => Response::err(
            ErrorCode::NotFound,
            "no such instance; `airlockctl instances` lists them",
        ),
        Err(e) => Response::err(ErrorCode::Refused, e.to_string()),
    }
}
