//! airlockd's side of decisions (seed 003): raising a hire, fire or change (by a person
//! through `airlockctl`, or by the chief through its gateway's Airlock tools), resolving it
//! against its digest with the right the peer's groups give, expiring it, and doing what
//! an approval says. Every step is a record in the ledger's hash chain; the decision itself
//! is kept under the state directory ([`crate::supervisor::decisions::store`]).

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::Daemon;
use crate::catalog::{Catalog, CatalogEntry};
use crate::control::auth::{self, Peer};
use crate::control::protocol::{DecisionArgs, ErrorCode, Response};
use crate::journal::EventKind;
use crate::role::Role;
use crate::supervisor::decisions::{model, pins, revisions, store, Decision, Op, Right, State};
use crate::supervisor::instances;
use crate::supervisor::ledger::{self, DecisionStep, LedgerEvent};

/// One decision changes at a time (ids, states and the effects of approvals).
static LOCK: Mutex<()> = Mutex::new(());

/// The authority a chief's class holds (policies/classes.yaml).
pub const HIRE_AUTHORITY: &str = "hire";

fn refuse(code: ErrorCode, msg: impl Into<String>) -> Response {
    Response::err(code, msg)
}

/// Who raises a decision.
pub enum Raiser<'a> {
    Person(u32),
    /// The chief: its instance, its own role (the revision it runs) and class.
    Chief {
        instance: &'a str,
        role: &'a Role,
        class: &'a str,
    },
}

impl Raiser<'_> {
    fn label(&self) -> String {
        match self {
            Raiser::Person(uid) => format!("uid {uid}"),
            Raiser::Chief { instance, .. } => format!("instance {instance}"),
        }
    }
}

/// Where the role of a hire comes from.
pub enum RoleSpec {
    Template(String),
    Inline { role_yaml: String, brief: String },
}

/// The right the peer's kernel credentials give over decisions.
pub fn right_of(d: &Daemon, peer: &Peer) -> Right {
    let set = d.set();
    let conf = &set.config.decisions;
    let member = |g: &Option<crate::config::GroupRef>| {
        g.as_ref()
            .and_then(|g| g.resolve().ok())
            .is_some_and(|g| peer.gid == g || peer.groups.contains(&g))
    };
    if peer.uid == 0 || member(&conf.owners) {
        Right::Owner
    } else if member(&conf.approvers)
        || (conf.approvers.is_none() && auth::access_of(peer, &set.groups) == auth::Access::Admin)
    {
        Right::Approver
    } else {
        Right::None
    }
}

fn step(dec: &Decision, what: &str, by: &str) -> DecisionStep {
    DecisionStep {
        decision: dec.id.clone(),
        step: what.to_string(),
        op: dec.op.as_str().to_string(),
        name: dec.name.clone(),
        role: dec.role.clone(),
        by: by.to_string(),
        digest: dec.digest.clone(),
        at: ledger::now_ms(),
        flagged: if what == "raise" {
            dec.flagged.clone()
        } else {
            Vec::new()
        },
        role_sha256: dec.role_sha256.clone(),
        rev: None,
    }
}

fn append(d: &Daemon, steps: Vec<DecisionStep>) -> Result<(), Response> {
    let mut l = d.ledger.lock().unwrap_or_else(|e| e.into_inner());
    l.append_all(steps.into_iter().map(LedgerEvent::Decision).collect())
        .map(|_| ())
        .map_err(|e| {
            refuse(
                ErrorCode::Internal,
                format!("the decision was not recorded: {e}"),
            )
        })
}

fn log(d: &Daemon, dec: &Decision, what: &str, by: &str) {
    d.events.log(
        EventKind::InstanceHired,
        &format!(
            "decision {} ({} {} as {}): {what} by {by}",
            dec.id,
            dec.op.as_str(),
            dec.name,
            dec.role
        ),
        &[("AIRLOCK_SUBJECT_INSTANCE", &dec.name)],
    );
}

/// Expire every pending decision past its time (recorded, then kept). The caller holds
/// [`LOCK`].
fn sweep(d: &Daemon, state: &Path) -> Result<(), Response> {
    let now = ledger::now_ms();
    let all = store::all(state).map_err(|e| refuse(ErrorCode::Internal, e))?;
    for mut dec in all.into_iter().filter(|x| x.is_overdue(now)) {
        append(d, vec![step(&dec, "expire", "airlockd")])?;
        dec.state = State::Expired;
        dec.resolved_by = Some("airlockd".into());
        dec.resolved_at = Some(now);
        store::save(state, &dec).map_err(|e| refuse(ErrorCode::Internal, e))?;
        log(d, &dec, "expired", "airlockd");
    }
    Ok(())
}

/// A role of a hire or change as it would be frozen: its revision, loaded from the frozen
/// copy through every rule a role file meets.
fn frozen_role(
    set: &super::reload::LoadedSet,
    spec: &RoleSpec,
) -> Result<(CatalogEntry, String, String), Response> {
    let state = &set.config.state_dir;
    let (name, files, source) = match spec {
        RoleSpec::Template(t) => {
            let entry = set.catalog.resolve(t).ok_or_else(|| {
                refuse(
                    ErrorCode::NotFound,
                    "role.template: not in the catalog (missing, or it failed validation); see `airlockctl validate`",
                )
            })?;
            let files = revisions::read_folder(&entry.loaded.dir)
                .map_err(|e| refuse(ErrorCode::Internal, e))?;
            (
                entry.class.clone(),
                files,
                format!("template {}", entry.class),
            )
        }
        RoleSpec::Inline { role_yaml, brief } => {
            let file = Path::new("inline/role.yaml");
            let (role, _) = crate::role::parse_role(file, role_yaml)
                .map_err(|p| refuse(ErrorCode::Refused, problems(&p)))?;
            if role.brief.contains("..") || role.brief.starts_with('/') || role.brief == "role.yaml"
            {
                return Err(refuse(
                    ErrorCode::Refused,
                    "inline/role.yaml: brief: must name a file beside the role (brief.md)",
                ));
            }
            let files = vec![
                (role.brief.clone(), brief.as_bytes().to_vec()),
                ("role.yaml".to_string(), role_yaml.as_bytes().to_vec()),
            ];
            (role.role.clone(), files, "inline".to_string())
        }
    };
    let sha = revisions::sha_of(&files);
    let existed = revisions::root(state).join(&sha).exists();
    let (sha, _) =
        revisions::store(state, &name, &files).map_err(|e| refuse(ErrorCode::Internal, e))?;
    let layer = revisions::root(state).join(&sha);
    match Catalog::load_one(std::slice::from_ref(&layer), &set.policies, &name) {
        Ok(Some(e)) => Ok((e, sha, source)),
        other => {
            if !existed {
                let _ = std::fs::remove_dir_all(&layer);
            }
            let msg = match other {
                Err(p) => problems(&p).replace(&format!("{}/", layer.display()), "inline/"),
                _ => "role: the role's folder name is not a role name".into(),
            };
            Err(refuse(ErrorCode::Refused, msg))
        }
    }
}

fn problems(p: &[crate::diag::Problem]) -> String {
    p.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Raise a decision: checked, its lines computed by Airlock, recorded, kept.
pub fn raise(
    d: &Daemon,
    op: Op,
    name: &str,
    spec: Option<RoleSpec>,
    reason: &str,
    by: &Raiser,
    wanted: &[String],
) -> Result<Decision, Response> {
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let set = d.set();
    let cfg = &set.config;
    let state = &cfg.state_dir;
    sweep(d, state)?;
    if !crate::sandbox::spec::valid_name(name) {
        return Err(refuse(
            ErrorCode::BadRequest,
            "name: instance names match [a-z][a-z0-9_-]{0,31}",
        ));
    }
    if reason.len() > 2000 {
        return Err(refuse(ErrorCode::BadRequest, "reason: at most 2000 bytes"));
    }
    let existing = instances::lookup(cfg, name);
    let pending = store::all(state).map_err(|e| refuse(ErrorCode::Internal, e))?;
    if let Some(p) = pending
        .iter()
        .find(|x| x.state == State::Pending && x.name == name)
    {
        return Err(refuse(
            ErrorCode::Refused,
            format!(
                "name: decision {} about `{name}` is pending; resolve or withdraw it first",
                p.id
            ),
        ));
    }
    let current = match (&existing, op) {
        (Ok(_) | Err(instances::InstanceError::Fired(_)), Op::Hire) => {
            return Err(refuse(
                ErrorCode::Refused,
                instances::InstanceError::NameTaken(name.to_string()).to_string(),
            ))
        }
        (Err(instances::InstanceError::Unknown(_)), Op::Hire) => None,
        (Ok(e), _) if e.fired => {
            return Err(refuse(
                ErrorCode::Refused,
                instances::InstanceError::Fired(name.to_string()).to_string(),
            ))
        }
        (Ok(e), _) => Some(e.clone()),
        (Err(e), _) => return Err(refuse(ErrorCode::Refused, e.to_string())),
    };
    let spec = match (op, spec, &current) {
        (Op::Hire, Some(s), _) => Some(s),
        (Op::Change, None, Some(e)) => Some(RoleSpec::Template(e.role.clone())),
        (Op::Change, Some(s), _) => Some(s),
        (Op::Fire, _, _) => None,
        _ => return Err(refuse(ErrorCode::BadRequest, "role: required")),
    };
    let now = ledger::now_ms();
    let mut dec = Decision {
        id: store::next_id(state).map_err(|e| refuse(ErrorCode::Internal, e))?,
        op,
        state: State::Pending,
        name: name.to_string(),
        role: current.as_ref().map(|e| e.role.clone()).unwrap_or_default(),
        raised_by: by.label(),
        reason: reason.to_string(),
        flagged: Vec::new(),
        credential_lines: Vec::new(),
        digest: String::new(),
        expires_at: now.saturating_add(cfg.decisions.expire_after_s.saturating_mul(1000)),
        resolved_by: None,
        role_sha256: None,
        source: String::new(),
        raised_at: now,
        resolved_at: None,
        resolution: None,
        raised_by_instance: match by {
            Raiser::Chief { instance, .. } => Some(instance.to_string()),
            Raiser::Person(_) => None,
        },
    };
    if let Some(spec) = spec {
        let (entry, sha, source) = frozen_role(&set, &spec)?;
        if op == Op::Change {
            let pin = pins::get(state, name).map_err(|e| refuse(ErrorCode::Internal, e))?;
            if pin.as_ref().is_some_and(|p| p.sha256 == sha) {
                return Err(refuse(
                    ErrorCode::Refused,
                    format!("instance `{name}` already runs this revision of its role"),
                ));
            }
        }
        let new = &entry.loaded.role;
        let granted = |role: &str, class: &str| -> Vec<String> {
            crate::policy::egress::destinations::granted(
                &cfg.egress.lists,
                role,
                class,
                &cfg.egress.ports,
            )
            .iter()
            .map(|g| g.name.clone())
            .collect()
        };
        dec.flagged = match by {
            Raiser::Chief { role, class, .. } => {
                if entry.authority.iter().any(|a| a == HIRE_AUTHORITY) {
                    return Err(refuse(
                        ErrorCode::Refused,
                        "role: its class holds the hire authority; a chief never hires a chief (no hire chains)",
                    ));
                }
                let mine = set.policies.classes.authority_of(class);
                let mut f = crate::policy::flagged::flagged(
                    new,
                    role,
                    (
                        &granted(&new.role, &entry.class),
                        &granted(&role.role, class),
                    ),
                );
                f.extend(
                    entry
                        .authority
                        .iter()
                        .filter(|a| !mine.contains(a))
                        .map(|a| format!("authority: {a}")),
                );
                f
            }
            Raiser::Person(_) => entry
                .authority
                .iter()
                .map(|a| format!("authority: {a}"))
                .collect(),
        };
        dec.credential_lines =
            crate::policy::hire::credential_lines(new, cfg).map_err(|missing| {
                refuse(
                    ErrorCode::Refused,
                    format!(
                        "role {} needs credentials this host does not configure in {}: {}",
                        entry.class,
                        cfg.file.display(),
                        missing.join("; ")
                    ),
                )
            })?;
        // What the chief said the hire needs must be among what Airlock computed.
        crate::policy::hire::check_requested(wanted, &dec.credential_lines)
            .map_err(|e| refuse(ErrorCode::BadRequest, e))?;
        dec.role = entry.class.clone();
        dec.role_sha256 = Some(sha);
        dec.source = source;
    }
    dec.digest = dec.compute_digest();
    append(d, vec![step(&dec, "raise", &dec.raised_by)])?;
    store::save(state, &dec).map_err(|e| refuse(ErrorCode::Internal, e))?;
    log(d, &dec, "raised", &dec.raised_by);
    Ok(dec)
}

/// Approve `id` as `by` (right `right`) against `digest`, and do what it says.
fn approve_locked(d: &Arc<Daemon>, id: &str, digest: &str, right: Right, by_uid: u32) -> Response {
    let set = d.set();
    let state = set.config.state_dir.clone();
    if let Err(r) = sweep(d, &state) {
        return r;
    }
    let mut dec = match store::load(&state, id) {
        Ok(Some(x)) => x,
        Ok(None) => {
            return refuse(
                ErrorCode::NotFound,
                "no such decision; `airlockctl decisions --all` lists them",
            )
        }
        Err(e) => return refuse(ErrorCode::BadRequest, e),
    };
    if let Err(e) = model::check_approve(&dec, digest, right, ledger::now_ms()) {
        return refuse(ErrorCode::Refused, e);
    }
    let by = format!("uid {by_uid}");
    let mut steps = vec![step(&dec, "approve", &by)];
    let mut effect = step(&dec, dec.op.as_str(), &by);
    // A hire or change is recorded before it happens; a fire happens whatever the ledger
    // can take (a fire revokes, and is never held back), and is recorded after.
    if dec.op != Op::Fire {
        if let Err(r) = append(d, std::mem::take(&mut steps)) {
            return r;
        }
    }
    let data = match dec.op {
        Op::Hire | Op::Change => {
            let sha = dec.role_sha256.clone().unwrap_or_default();
            let layer = revisions::root(&state).join(&sha);
            let entry =
                match Catalog::load_one(std::slice::from_ref(&layer), &set.policies, &dec.role) {
                    Ok(Some(e)) => e,
                    _ => {
                        return refuse(
                            ErrorCode::Internal,
                            format!("decision {id}: its frozen role revision cannot be loaded"),
                        )
                    }
                };
            let mut data = Value::Null;
            if dec.op == Op::Hire {
                let r = super::server::hire_now(d, dec.name.clone(), &entry, by_uid);
                match r.data {
                    Some(v) if r.ok => data = v,
                    _ => return r,
                }
            }
            let before = pins::get(&state, &dec.name).ok().flatten();
            let rev = match pins::set(&state, &dec.name, &dec.role, &sha, &dec.source) {
                Ok(r) => r,
                Err(e) => return refuse(ErrorCode::Internal, e),
            };
            // The fleet's pin from now on (its rev counted fleet-wide); a store away now is
            // said in the answer, and this host runs the approved revision all the same.
            let local = pins::Pin {
                role: dec.role.clone(),
                sha256: sha.clone(),
                rev,
                source: dec.source.clone(),
            };
            let (rev, unshared) = match super::fleet_revisions::publish(
                d,
                &state,
                &dec.name,
                &local,
                crate::store::pins::PinWrite::Approved,
            ) {
                Ok(p) => (p.rev, None),
                Err(e) => (rev, Some(e)),
            };
            effect.rev = Some(rev);
            if let (Some(m), Some(e)) = (data.as_object_mut(), unshared) {
                m.insert(
                    "fleet_error".into(),
                    format!("the revision is not in the fleet store yet: {e}").into(),
                );
            }
            if let Some(m) = data.as_object_mut() {
                m.insert("rev".into(), rev.into());
                m.insert("role_sha256".into(), sha.into());
            } else {
                data =
                    json!({"instance": dec.name, "role": dec.role, "role_sha256": sha, "rev": rev});
            }
            if dec.op == Op::Change {
                let runs =
                    super::live_change::apply(d, &state, &dec.name, before.as_ref(), &entry, rev);
                if let Some(m) = data.as_object_mut() {
                    m.insert("narrowed_runs".into(), runs.into());
                }
            }
            data
        }
        Op::Fire => {
            let r = super::server::fire_now(d, dec.name.clone(), by_uid);
            match r.data {
                Some(v) if r.ok => v,
                _ => return r,
            }
        }
    };
    steps.push(effect);
    let unrecorded = append(d, steps)
        .err()
        .and_then(|r| r.error)
        .map(|e| e.message);
    dec.state = State::Approved;
    dec.resolved_by = Some(by.clone());
    dec.resolved_at = Some(ledger::now_ms());
    if let Err(e) = store::save(&state, &dec) {
        return refuse(ErrorCode::Internal, e);
    }
    log(d, &dec, "approved", &by);
    let mut data = data;
    if let Some(m) = data.as_object_mut() {
        m.insert("decision".into(), public(&dec));
        if let Some(e) = unrecorded {
            m.insert("decision_error".into(), e.into());
        }
    }
    Response::ok(data)
}

/// The interface's fields of a decision, exactly.
pub fn public(dec: &Decision) -> Value {
    json!({
        "id": dec.id, "op": dec.op, "state": dec.state, "name": dec.name, "role": dec.role,
        "raised_by": dec.raised_by, "reason": dec.reason, "flagged": dec.flagged,
        "credential_lines": dec.credential_lines, "digest": dec.digest,
        "expires_at": dec.expires_at, "resolved_by": dec.resolved_by,
    })
}

/// A person's request: raised, then approved at once when the person may approve it; left
/// pending for an owner otherwise.
fn person(
    d: &Arc<Daemon>,
    peer: &Peer,
    op: Op,
    name: &str,
    spec: Option<RoleSpec>,
    args: Option<DecisionArgs>,
) -> Response {
    let reason = args.and_then(|a| a.reason).unwrap_or_default();
    let dec = match raise(d, op, name, spec, &reason, &Raiser::Person(peer.uid), &[]) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let right = right_of(d, peer);
    if model::check_approve(&dec, &dec.digest, right, ledger::now_ms()).is_err() {
        return Response::ok(json!({
            "decision": public(&dec),
            "state": "pending",
            "message": format!(
                "decision {} is pending: it has {} flagged and {} credential line(s), so an owner approves it with `airlockctl approve {} --digest {}`",
                dec.id, dec.flagged.len(), dec.credential_lines.len(), dec.id, dec.digest
            ),
        }));
    }
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    approve_locked(d, &dec.id, &dec.digest, right, peer.uid)
}

pub fn person_hire(
    d: &Arc<Daemon>,
    peer: &Peer,
    name: &str,
    role: &str,
    args: Option<DecisionArgs>,
) -> Response {
    person(
        d,
        peer,
        Op::Hire,
        name,
        Some(RoleSpec::Template(role.to_string())),
        args,
    )
}

pub fn person_fire(
    d: &Arc<Daemon>,
    peer: &Peer,
    name: &str,
    args: Option<DecisionArgs>,
) -> Response {
    // A name nobody hired is answered as before: not found.
    if let Err(instances::InstanceError::Unknown(_)) = instances::lookup(&d.set().config, name) {
        return refuse(
            ErrorCode::NotFound,
            "no such instance; `airlockctl instances` lists them",
        );
    }
    let r = person(d, peer, Op::Fire, name, None, args);
    match &r.error {
        // The decision could not be recorded or kept: the fire goes ahead all the same
        // (a fire is never held back) and says so.
        Some(e) if e.code == ErrorCode::Internal && right_of(d, peer) != Right::None => {
            let why = e.message.clone();
            let mut r = super::server::fire_now(d, name.to_string(), peer.uid);
            if let Some(m) = r.data.as_mut().and_then(Value::as_object_mut) {
                m.insert("decision_error".into(), why.into());
            }
            r
        }
        _ => r,
    }
}

pub fn person_change(
    d: &Arc<Daemon>,
    peer: &Peer,
    name: &str,
    args: Option<DecisionArgs>,
) -> Response {
    person(d, peer, Op::Change, name, None, args)
}

pub fn approve(d: &Arc<Daemon>, peer: &Peer, args: DecisionArgs) -> Response {
    let right = right_of(d, peer);
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    approve_locked(
        d,
        args.id.as_deref().unwrap_or_default(),
        args.digest.as_deref().unwrap_or_default(),
        right,
        peer.uid,
    )
}

/// Resolve a pending decision without its effect: `deny` (a person) or `withdraw` (its
/// chief).
fn close(
    d: &Daemon,
    id: &str,
    what: &str,
    by: &str,
    check: &dyn Fn(&Decision) -> Result<(), String>,
    note: Option<String>,
) -> Result<Decision, Response> {
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let state = d.set().config.state_dir.clone();
    sweep(d, &state)?;
    let mut dec = match store::load(&state, id) {
        Ok(Some(x)) => x,
        Ok(None) => {
            return Err(refuse(
                ErrorCode::NotFound,
                "no such decision; `airlockctl decisions --all` lists them",
            ))
        }
        Err(e) => return Err(refuse(ErrorCode::BadRequest, e)),
    };
    check(&dec).map_err(|e| refuse(ErrorCode::Refused, e))?;
    append(d, vec![step(&dec, what, by)])?;
    dec.state = if what == "deny" {
        State::Denied
    } else {
        State::Withdrawn
    };
    dec.resolved_by = Some(by.to_string());
    dec.resolved_at = Some(ledger::now_ms());
    dec.resolution = note;
    store::save(&state, &dec).map_err(|e| refuse(ErrorCode::Internal, e))?;
    log(d, &dec, what, by);
    Ok(dec)
}

pub fn deny(d: &Arc<Daemon>, peer: &Peer, args: DecisionArgs) -> Response {
    let right = right_of(d, peer);
    let id = args.id.clone().unwrap_or_default();
    let check = |dec: &Decision| model::check_deny(dec, right, ledger::now_ms());
    match close(
        d,
        &id,
        "deny",
        &format!("uid {}", peer.uid),
        &check,
        args.reason,
    ) {
        Ok(dec) => Response::ok(json!({"decision": public(&dec)})),
        Err(r) => r,
    }
}

pub fn list(d: &Arc<Daemon>, all: bool) -> Response {
    let state = d.set().config.state_dir.clone();
    {
        let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(r) = sweep(d, &state) {
            return r;
        }
    }
    match store::all(&state) {
        Ok(v) => Response::ok(
            json!({"decisions": v.iter().filter(|x| all || x.state == State::Pending).map(public).collect::<Vec<_>>()}),
        ),
        Err(e) => refuse(ErrorCode::Internal, e),
    }
}

/// A decision in full: its fields, the role's frozen text, and its difference from the
/// template of the same name as that is now.
pub fn show(d: &Arc<Daemon>, args: DecisionArgs) -> Response {
    let set = d.set();
    let state = set.config.state_dir.clone();
    {
        let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(r) = sweep(d, &state) {
            return r;
        }
    }
    let dec = match store::load(&state, args.id.as_deref().unwrap_or_default()) {
        Ok(Some(x)) => x,
        Ok(None) => {
            return refuse(
                ErrorCode::NotFound,
                "no such decision; `airlockctl decisions --all` lists them",
            )
        }
        Err(e) => return refuse(ErrorCode::BadRequest, e),
    };
    Response::ok(details(&set, &dec))
}

fn details(set: &super::reload::LoadedSet, dec: &Decision) -> Value {
    let state = &set.config.state_dir;
    let mut v = public(dec);
    let frozen = dec
        .role_sha256
        .as_ref()
        .and_then(|sha| revisions::read_folder(&revisions::folder(state, sha, &dec.role)).ok())
        .unwrap_or_default();
    let template = set
        .catalog
        .resolve(&dec.role)
        .and_then(|e| revisions::read_folder(&e.loaded.dir).ok())
        .unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("source".into(), dec.source.clone().into());
        m.insert("role_sha256".into(), dec.role_sha256.clone().into());
        m.insert("raised_at".into(), dec.raised_at.into());
        m.insert("resolution".into(), dec.resolution.clone().into());
        let files: serde_json::Map<String, Value> = frozen
            .iter()
            .map(|(p, b)| (p.clone(), String::from_utf8_lossy(b).into_owned().into()))
            .collect();
        m.insert("role_files".into(), files.into());
        m.insert(
            "template_diff".into(),
            revisions::diff(&template, &frozen).into(),
        );
    }
    v
}

/// `role diff NAME`: what changed in the template since the instance's frozen revision.
pub fn role_diff(d: &Arc<Daemon>, name: &str) -> Response {
    let set = d.set();
    let state = &set.config.state_dir;
    let pin = match pins::get(state, name) {
        Ok(Some(p)) => p,
        Ok(None) => return refuse(ErrorCode::NotFound, format!("instance `{name}` has no frozen revision yet (it is frozen at its hire or first run)")),
        Err(e) => return refuse(ErrorCode::Internal, e),
    };
    let frozen = revisions::read_folder(&revisions::folder(state, &pin.sha256, &pin.role))
        .unwrap_or_default();
    let Some(entry) = set.catalog.resolve(&pin.role) else {
        return refuse(
            ErrorCode::NotFound,
            format!("role {}: no template of this name in the catalog", pin.role),
        );
    };
    let now = revisions::read_folder(&entry.loaded.dir).unwrap_or_default();
    Response::ok(json!({
        "instance": name, "role": pin.role, "rev": pin.rev, "role_sha256": pin.sha256,
        "template_sha256": revisions::sha_of(&now),
        "template_changed": revisions::sha_of(&now) != pin.sha256,
        "diff": revisions::diff(&frozen, &now),
    }))
}

/// The role a launch of `instance` as role `requested` runs: the instance's frozen
/// revision, pinned now from the template when it has none yet (an instance hired before
/// revisions existed: the migration). A launch naming another role than the instance's
/// runs that role's template as before. `Ok(None)`: no such role.
pub fn entry_for_launch(
    d: &Daemon,
    requested: &str,
    instance: &str,
) -> Result<Option<(CatalogEntry, Option<pins::Pin>)>, String> {
    let set = d.set();
    let cfg = &set.config;
    let state = &cfg.state_dir;
    let class = crate::policy::classes::canonicalize(requested);
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // The fleet's pin first: an approval on another host decides what runs here too.
    super::fleet_revisions::sync_pin(d, state, instance)?;
    let pin = match pins::get(state, instance)? {
        Some(p) if p.role == class => p,
        Some(p) => {
            return Err(format!(
                "instance `{instance}` is hired for role {}; launch it as that role",
                p.role
            ))
        }
        None => {
            let Some(entry) = set.catalog.resolve(requested) else {
                return Ok(None);
            };
            let hired_as = instances::lookup(cfg, instance).map(|e| e.role).ok();
            if hired_as.as_deref() != Some(entry.class.as_str()) {
                return Ok(Some((entry.clone(), None)));
            }
            // Frozen as the folder is now; if that no longer passes (edited since the set
            // in force was loaded), the run goes on the role in force, frozen later.
            let (sha, dir) = revisions::freeze(state, &entry.class, &entry.loaded.dir)?;
            let layer = dir.parent().map(Path::to_path_buf).unwrap_or_default();
            if !matches!(
                Catalog::load_one(std::slice::from_ref(&layer), &set.policies, &entry.class),
                Ok(Some(_))
            ) {
                return Ok(Some((entry.clone(), None)));
            }
            let source = format!("template {}", entry.class);
            let rev = pins::set(state, instance, &entry.class, &sha, &source)?;
            d.events.log(
                EventKind::InstanceHired,
                &format!("instance `{instance}`: frozen at its role's template as revision {rev} ({sha}) at its first run"),
                &[("AIRLOCK_SUBJECT_INSTANCE", instance)],
            );
            // The first host to freeze it decides for the fleet.
            super::fleet_revisions::publish(
                d,
                state,
                instance,
                &pins::Pin {
                    role: entry.class.clone(),
                    sha256: sha,
                    rev,
                    source,
                },
                crate::store::pins::PinWrite::FirstFreeze,
            )?
        }
    };
    let layer = revisions::root(state).join(&pin.sha256);
    match Catalog::load_one(std::slice::from_ref(&layer), &set.policies, &pin.role) {
        Ok(Some(e)) => Ok(Some((e, Some(pin)))),
        Ok(None) => Err(format!(
            "instance `{instance}`: its frozen revision {} is missing from {}",
            pin.sha256,
            layer.display()
        )),
        Err(p) => Err(format!(
            "instance `{instance}`: its frozen revision no longer passes this host's rules: {}",
            problems(&p)
        )),
    }
}

/// `instances --json`: each instance's revision and whether its template changed since.
pub fn revision_of(
    set: &super::reload::LoadedSet,
    instance: &str,
) -> (Option<String>, Option<u32>, bool) {
    pins::revision_of(&set.config.state_dir, instance, |role| {
        set.catalog.resolve(role).map(|e| e.loaded.dir.clone())
    })
}

/// The chief's Airlock tools (`hire_request`, `fire_request`, `change_request`,
/// `withdraw_request`, `decision_status`), answered for the instance `chief` of class
/// `class` whose role (its frozen revision) is `role`.
/// A hire or change request's `credentials` (seed 003: each service the agent needs): a
/// list of service names, or of `{service, scope?}` (the scope is Airlock's to state: its
/// credential line says it). Absent is none.
fn requested_credentials(v: Option<&Value>) -> Result<Vec<String>, String> {
    const WHAT: &str = "credentials: a list of the services the role's runs need, each a name (\"github\", \"connector docs\") or {service, scope}";
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = v.as_array().filter(|l| l.len() <= 64).ok_or(WHAT)?;
    list.iter()
        .map(|e| {
            e.as_str()
                .or_else(|| e.get("service").and_then(Value::as_str))
                .filter(|s| !s.is_empty() && s.len() <= 200)
                .map(str::to_string)
                .ok_or_else(|| WHAT.to_string())
        })
        .collect()
}

pub fn chief_request(
    d: &Daemon,
    chief: &str,
    role: &Role,
    class: &str,
    tool: &str,
    args: &Value,
) -> Result<Value, String> {
    let set = d.set();
    if !set
        .policies
        .classes
        .authority_of(class)
        .iter()
        .any(|a| a == HIRE_AUTHORITY)
    {
        return Err(format!("{tool}: only a role of a class holding the hire authority (chief) may ask for decisions"));
    }
    let s = |k: &str| args.get(k).and_then(Value::as_str);
    let by = Raiser::Chief {
        instance: chief,
        role,
        class,
    };
    let answer = |dec: &Decision| {
        json!({
            "decision": dec.id, "state": dec.state, "flagged": dec.flagged,
            "credential_lines": dec.credential_lines, "digest": dec.digest, "expires_at": dec.expires_at,
        })
    };
    let reason = s("reason").unwrap_or_default();
    let err = |r: Response| r.error.map(|e| e.message).unwrap_or_default();
    match tool {
        "hire_request" | "change_request" => {
            let name = s("name").ok_or("name: required, a string")?;
            let spec = match args.get("role") {
                Some(r) => Some(
                    match (r.get("template").and_then(Value::as_str), r.get("inline")) {
                        (Some(t), None) => RoleSpec::Template(t.to_string()),
                        (None, Some(i)) => RoleSpec::Inline {
                            role_yaml: i
                                .get("role_yaml")
                                .and_then(Value::as_str)
                                .ok_or("role.inline.role_yaml: required, a string")?
                                .to_string(),
                            brief: i
                                .get("brief")
                                .and_then(Value::as_str)
                                .ok_or("role.inline.brief: required, a string")?
                                .to_string(),
                        },
                        _ => {
                            return Err(
                                "role: {template: NAME} or {inline: {role_yaml, brief}}".into()
                            )
                        }
                    },
                ),
                None if tool == "change_request" => None,
                None => return Err("role: required".into()),
            };
            let op = if tool == "hire_request" {
                Op::Hire
            } else {
                Op::Change
            };
            let wanted = requested_credentials(args.get("credentials"))?;
            raise(d, op, name, spec, reason, &by, &wanted)
                .map(|x| answer(&x))
                .map_err(err)
        }
        "fire_request" => {
            let name = s("name").ok_or("name: required, a string")?;
            raise(d, Op::Fire, name, None, reason, &by, &[])
                .map(|x| answer(&x))
                .map_err(err)
        }
        "withdraw_request" | "decision_status" => {
            let id = s("decision").ok_or("decision: required, a decision id")?;
            let mine = |dec: &Decision| {
                if dec.raised_by_instance.as_deref() == Some(chief) {
                    Ok(())
                } else {
                    Err(format!("decision {}: not raised by this instance", dec.id))
                }
            };
            if tool == "withdraw_request" {
                let check = |dec: &Decision| {
                    mine(dec)?;
                    model::check_pending(dec, ledger::now_ms())
                };
                close(
                    d,
                    id,
                    "withdraw",
                    &format!("instance {chief}"),
                    &check,
                    None,
                )
                .map(|x| answer(&x))
                .map_err(err)
            } else {
                let state = &set.config.state_dir;
                {
                    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
                    sweep(d, state).map_err(err)?;
                }
                match store::load(state, id)? {
                    Some(dec) => {
                        mine(&dec)?;
                        Ok(answer(&dec))
                    }
                    None => Err("decision: no such decision".to_string()),
                }
            }
        }
        other => Err(format!("{other}: not one of Airlock's decision tools")),
    }
}

/// A chief run's desk: its gateway's decision tools, answered by this airlockd for that
/// instance and the role revision it runs.
#[derive(Debug)]
pub struct ChiefDesk {
    pub daemon: std::sync::Weak<Daemon>,
    pub instance: String,
    pub role: Role,
    pub class: String,
}

impl crate::gateway::mcp::decisions::DecisionDesk for ChiefDesk {
    fn request(&self, tool: &str, args: &Value) -> Result<Value, String> {
        let d = self.daemon.upgrade().ok_or("airlockd is shutting down")?;
        chief_request(&d, &self.instance, &self.role, &self.class, tool, args)
    }
}
