//! Who may ask airlockd for what. Decided from the peer's kernel-verified credentials
//! (SO_PEERCRED uid and gid plus the peer's supplementary groups), never from anything the
//! peer says about itself.

use super::protocol::Op;

/// What a peer may do, from least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Not in any configured group: refused, and the refusal is logged.
    None,
    /// Launch, stop and read (ps, runs, show, logs, instances, status).
    Operator,
    /// Everything an operator may do, plus hire, fire and reload.
    Admin,
}

/// The peer, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    /// Supplementary groups of the peer process.
    pub groups: Vec<u32>,
}

/// The groups configured for access, with the names the config gives them (for errors).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessGroups {
    pub admin_gid: Option<u32>,
    pub operator_gid: Option<u32>,
    /// `admin_group` as the config writes it (a name, or `gid N`).
    pub admin_name: Option<String>,
    /// `operator_group` as the config writes it.
    pub operator_name: Option<String>,
}

impl AccessGroups {
    /// "the admin group `airlock-admin`", or that none is configured.
    fn admin(&self) -> String {
        match &self.admin_name {
            Some(n) => format!("the admin group `{n}` (admin_group)"),
            None => "the admin group, which is not configured (admin_group)".into(),
        }
    }

    fn operator(&self) -> String {
        match &self.operator_name {
            Some(n) => format!("the operator group `{n}` (operator_group)"),
            None => "the operator group, which is not configured (operator_group)".into(),
        }
    }

    /// Who may use airlockd at all, in words naming the configured groups.
    pub fn anyone(&self) -> String {
        format!("be in {} or {}", self.operator(), self.admin())
    }
}

pub fn access_of(peer: &Peer, groups: &AccessGroups) -> Access {
    let member = |gid: Option<u32>| gid.is_some_and(|g| peer.gid == g || peer.groups.contains(&g));
    if peer.uid == 0 || member(groups.admin_gid) {
        Access::Admin
    } else if member(groups.operator_gid) {
        Access::Operator
    } else {
        Access::None
    }
}

/// The least access an operation needs.
pub fn required(op: &Op) -> Access {
    match op {
        Op::Hire { .. }
        | Op::Fire { .. }
        | Op::Change { .. }
        | Op::Reload
        | Op::ConnectorLogin { .. }
        | Op::ConnectorLoginFinish { .. }
        | Op::ConnectorLogout { .. } => Access::Admin,
        Op::Launch { .. }
        | Op::Attach { .. }
        | Op::Stop { .. }
        | Op::Ps
        | Op::Runs { .. }
        | Op::Show { .. }
        | Op::Instances
        | Op::Status
        | Op::RoleDiff { .. }
        // Who may resolve which decision is decided by decisions.approvers and owners.
        | Op::Decisions { .. }
        | Op::DecisionShow { .. }
        | Op::Approve { .. }
        | Op::Deny { .. }
        // Who may answer which ask (its run's launcher or an admin) is decided per ask.
        | Op::Asks
        | Op::Allow { .. }
        | Op::ConnectorStatus => Access::Operator,
    }
}

/// Whether `peer` may stop a run `launched_by` someone: its launcher, root and admins may;
/// another operator may not (a run is its launcher's work; seeing it, with `ps` and `show`,
/// is every operator's, since runs share the host's slots and budgets).
pub fn may_stop(peer: &Peer, groups: &AccessGroups, launched_by: u32) -> bool {
    peer.uid == launched_by || access_of(peer, groups) == Access::Admin
}

/// Allow or refuse one operation for one peer.
pub fn authorize(peer: &Peer, groups: &AccessGroups, op: &Op) -> Result<Access, String> {
    let have = access_of(peer, groups);
    let need = required(op);
    if have >= need && have > Access::None {
        Ok(have)
    } else {
        let what = match need {
            Access::Admin => format!("be root or in {}", groups.admin()),
            _ => groups.anyone(),
        };
        Err(format!("uid {} may not `{}`: {what}", peer.uid, op.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUPS: AccessGroups = AccessGroups {
        admin_gid: Some(900),
        operator_gid: Some(901),
        admin_name: None,
        operator_name: None,
    };

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            uid,
            gid,
            pid: None,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn connector_logins_and_logouts_are_for_admins_and_status_for_operators() {
        let op = peer(1000, 1000, &[901]);
        for o in [
            Op::ConnectorLogin {
                connector: "x".into(),
            },
            Op::ConnectorLoginFinish {
                connector: "x".into(),
                login: "l".into(),
                redirected: None,
            },
            Op::ConnectorLogout {
                connector: "x".into(),
            },
        ] {
            assert!(authorize(&op, &GROUPS, &o).is_err(), "{o:?}");
            assert!(authorize(&peer(1000, 1000, &[900]), &GROUPS, &o).is_ok());
        }
        assert!(authorize(&op, &GROUPS, &Op::ConnectorStatus).is_ok());
    }

    #[test]
    fn root_and_admins_may_do_everything() {
        for p in [
            peer(0, 0, &[]),
            peer(1000, 1000, &[900]),
            peer(1000, 900, &[]),
        ] {
            assert!(authorize(&p, &GROUPS, &Op::Reload).is_ok());
            assert!(authorize(&p, &GROUPS, &Op::Ps).is_ok());
        }
    }

    #[test]
    fn operators_may_launch_but_not_hire() {
        let p = peer(1000, 1000, &[901]);
        assert!(authorize(&p, &GROUPS, &Op::Status).is_ok());
        assert!(authorize(&p, &GROUPS, &Op::Stop { run: "r".into() }).is_ok());
        assert!(authorize(
            &p,
            &GROUPS,
            &Op::Fire {
                instance: "tess".into(),
                decision: None,
            }
        )
        .is_err());
        assert!(authorize(&p, &GROUPS, &Op::Reload).is_err());
    }

    #[test]
    fn everyone_else_is_refused() {
        let p = peer(1000, 1000, &[4, 24, 27]);
        let err = authorize(&p, &GROUPS, &Op::Ps).expect_err("refused");
        assert!(err.contains("uid 1000"));
        let none = AccessGroups::default();
        assert!(authorize(&p, &none, &Op::Ps).is_err());
        assert!(authorize(&peer(0, 0, &[]), &none, &Op::Ps).is_ok());
    }

    #[test]
    fn refusals_name_the_configured_groups() {
        let named = AccessGroups {
            admin_name: Some("ops-admins".into()),
            operator_name: Some("gid 901".into()),
            ..GROUPS
        };
        let e = authorize(&peer(1000, 1000, &[901]), &named, &Op::Reload).expect_err("no");
        assert!(
            e.contains("`ops-admins`") && !e.contains("airlock-admin"),
            "{e}"
        );
        let e = authorize(&peer(1000, 1000, &[]), &named, &Op::Ps).expect_err("no");
        assert!(e.contains("`gid 901`") && e.contains("`ops-admins`"), "{e}");
    }

    #[test]
    fn only_the_launcher_and_admins_stop_a_run() {
        assert!(may_stop(&peer(1001, 1001, &[901]), &GROUPS, 1001));
        assert!(!may_stop(&peer(1002, 1002, &[901]), &GROUPS, 1001));
        assert!(may_stop(&peer(1002, 1002, &[900]), &GROUPS, 1001));
        assert!(may_stop(&peer(0, 0, &[]), &GROUPS, 1001));
    }
}
