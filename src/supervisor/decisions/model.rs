//! A decision (seed 003): a hire, fire or change raised by the chief or a person, resolved
//! by a person against its digest. Pure: the states, the transitions, the canonical form
//! and its digest. Durable keeping is [`super::store`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a decision does to an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Hire,
    Fire,
    Change,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Hire => "hire",
            Op::Fire => "fire",
            Op::Change => "change",
        }
    }
}

/// pending → approved | denied | expired | withdrawn; every other state is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Pending,
    Approved,
    Denied,
    Expired,
    Withdrawn,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Denied => "denied",
            State::Expired => "expired",
            State::Withdrawn => "withdrawn",
        }
    }
}

/// One decision, as kept under the state directory and shown by `airlockctl decisions`.
/// The first twelve fields are the interface (`decisions --json`); the rest are kept for
/// `decision show` and the approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub id: String,
    pub op: Op,
    pub state: State,
    /// The instance the decision is about.
    pub name: String,
    /// The role (its class) the instance is hired for or changed to; for a fire, its role.
    pub role: String,
    /// `uid N` (a person) or `instance NAME` (the chief).
    pub raised_by: String,
    pub reason: String,
    /// Grants above the raiser's own role: an owner must approve.
    pub flagged: Vec<String>,
    /// One per credential the role's runs would use: an owner must approve.
    pub credential_lines: Vec<String>,
    /// sha256 of the canonical decision; approval must name it.
    pub digest: String,
    /// Unix milliseconds.
    pub expires_at: u64,
    pub resolved_by: Option<String>,
    /// The frozen revision the hire or change would run (sha256 of the role's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_sha256: Option<String>,
    /// Where the role came from: `template NAME` or `inline`.
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub raised_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<u64>,
    /// Why it was denied (written by the person who denied it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// The raising instance, when the chief raised it (it alone may withdraw it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raised_by_instance: Option<String>,
}

/// What the digest covers: everything that decides what an approval does, in a fixed order.
#[derive(Serialize)]
struct Canonical<'a> {
    id: &'a str,
    op: Op,
    name: &'a str,
    role: &'a str,
    role_sha256: &'a Option<String>,
    source: &'a str,
    raised_by: &'a str,
    reason: &'a str,
    flagged: &'a [String],
    credential_lines: &'a [String],
    expires_at: u64,
}

impl Decision {
    /// The canonical form: one line of JSON, fields in a fixed order.
    pub fn canonical(&self) -> String {
        serde_json::to_string(&Canonical {
            id: &self.id,
            op: self.op,
            name: &self.name,
            role: &self.role,
            role_sha256: &self.role_sha256,
            source: &self.source,
            raised_by: &self.raised_by,
            reason: &self.reason,
            flagged: &self.flagged,
            credential_lines: &self.credential_lines,
            expires_at: self.expires_at,
        })
        .unwrap_or_default()
    }

    /// Hex sha256 of [`Decision::canonical`].
    pub fn compute_digest(&self) -> String {
        hex(&Sha256::digest(self.canonical().as_bytes()))
    }

    /// Whether approving needs an owner: any flagged or credential line.
    pub fn needs_owner(&self) -> bool {
        !self.flagged.is_empty() || !self.credential_lines.is_empty()
    }

    /// Pending and past its expiry at `now`.
    pub fn is_overdue(&self, now: u64) -> bool {
        self.state == State::Pending && now >= self.expires_at
    }
}

/// Who is resolving, as the daemon found out from the kernel's peer credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// May resolve any decision (root, `decisions.owners`).
    Owner,
    /// May resolve decisions without flagged or credential lines (`decisions.approvers`).
    Approver,
    None,
}

/// Why a resolution is refused (the message names what, never a value from role text).
pub fn check_approve(d: &Decision, digest: &str, right: Right, now: u64) -> Result<(), String> {
    check_pending(d, now)?;
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("--digest: must be the decision's 64 hex digit sha256 (`airlockctl decision show ID` prints it)".into());
    }
    if !digest.eq_ignore_ascii_case(&d.digest) {
        return Err(format!(
            "--digest: is not decision {}'s current digest; read it again with `airlockctl decision show {}`",
            d.id, d.id
        ));
    }
    match right {
        Right::Owner => Ok(()),
        Right::Approver if !d.needs_owner() => Ok(()),
        Right::Approver => Err(format!(
            "decision {} has {} flagged and {} credential line(s): only an owner (root or decisions.owners) may approve it",
            d.id,
            d.flagged.len(),
            d.credential_lines.len()
        )),
        Right::None => Err("only decisions.approvers and decisions.owners (and root) may approve".into()),
    }
}

/// A deny needs the right to approve it.
pub fn check_deny(d: &Decision, right: Right, now: u64) -> Result<(), String> {
    check_pending(d, now)?;
    match right {
        Right::Owner => Ok(()),
        Right::Approver if !d.needs_owner() => Ok(()),
        Right::Approver => Err(format!(
            "decision {} has flagged or credential lines: only an owner may resolve it",
            d.id
        )),
        Right::None => {
            Err("only decisions.approvers and decisions.owners (and root) may deny".into())
        }
    }
}

/// Only a pending decision not yet past its expiry may be resolved.
pub fn check_pending(d: &Decision, now: u64) -> Result<(), String> {
    if d.state != State::Pending {
        return Err(format!(
            "decision {} is {} already; a resolved decision is never resolved again",
            d.id,
            d.state.as_str()
        ));
    }
    if d.is_overdue(now) {
        return Err(format!(
            "decision {} expired; raise it again to decide it",
            d.id
        ));
    }
    Ok(())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d() -> Decision {
        let mut d = Decision {
            id: "d-1".into(),
            op: Op::Hire,
            state: State::Pending,
            name: "nova".into(),
            role: "code".into(),
            raised_by: "instance boss".into(),
            reason: "more hands".into(),
            flagged: vec![],
            credential_lines: vec![],
            digest: String::new(),
            expires_at: 1000,
            resolved_by: None,
            role_sha256: Some("ab".repeat(32)),
            source: "template code".into(),
            raised_at: 0,
            resolved_at: None,
            resolution: None,
            raised_by_instance: Some("boss".into()),
        };
        d.digest = d.compute_digest();
        d
    }

    #[test]
    fn the_digest_covers_what_an_approval_does() {
        let a = d();
        let mut b = a.clone();
        b.flagged.push("tools.x: y".into());
        assert_ne!(a.compute_digest(), b.compute_digest());
        let mut c = a.clone();
        c.role_sha256 = Some("cd".repeat(32));
        assert_ne!(a.compute_digest(), c.compute_digest());
        assert_eq!(a.digest.len(), 64);
    }

    #[test]
    fn approval_needs_the_digest_the_right_and_a_pending_decision() {
        let mut x = d();
        let dg = x.digest.clone();
        assert!(check_approve(&x, &dg[..10], Right::Owner, 0)
            .unwrap_err()
            .contains("64 hex"));
        assert!(check_approve(&x, &"0".repeat(64), Right::Owner, 0)
            .unwrap_err()
            .contains("current digest"));
        assert!(check_approve(&x, &dg, Right::Approver, 0).is_ok());
        x.credential_lines.push("provider claude".into());
        assert!(check_approve(&x, &dg, Right::Approver, 0)
            .unwrap_err()
            .contains("only an owner"));
        assert!(check_approve(&x, &dg, Right::Owner, 0).is_ok());
        assert!(check_approve(&x, &dg, Right::Owner, 1000)
            .unwrap_err()
            .contains("expired"));
        x.state = State::Denied;
        assert!(check_approve(&x, &dg, Right::Owner, 0)
            .unwrap_err()
            .contains("denied already"));
        assert!(check_deny(&x, Right::Owner, 0).is_err());
    }
}
