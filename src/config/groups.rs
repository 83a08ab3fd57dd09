//! Groups the config names (`admin_group`, `operator_group`, `socket_group`, metrics'
//! `group`): by name or number.

use serde_yaml::Value;

use super::Parser;

/// A group named in the config: by name (resolved through NSS when used) or by number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRef {
    Name(String),
    Gid(u32),
}

impl std::fmt::Display for GroupRef {
    /// As the config names it: the group's name, or `gid N`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupRef::Name(n) => f.write_str(n),
            GroupRef::Gid(g) => write!(f, "gid {g}"),
        }
    }
}

impl GroupRef {
    /// The gid, looked up through NSS for a name. `Err` says which key could not be resolved.
    pub fn resolve(&self) -> Result<u32, String> {
        match self {
            GroupRef::Gid(g) => Ok(*g),
            GroupRef::Name(n) => match nix::unistd::Group::from_name(n) {
                Ok(Some(g)) => Ok(g.gid.as_raw()),
                _ => Err("no such group on this host (create it, or give a numeric gid)".into()),
            },
        }
    }
}

/// What a group key must be.
pub(crate) const GROUP_PROBLEM: &str =
    "must be a group name ([a-z_][a-z0-9_-]{0,31}) or a numeric gid below 2147483648";

/// A group key's value: a name or a gid.
pub(crate) fn group_ref(v: &Value) -> Option<GroupRef> {
    if let Some(n) = v.as_u64() {
        if n < 1 << 31 {
            return Some(GroupRef::Gid(n as u32));
        }
    } else if let Some(s) = v.as_str() {
        let ok = !s.is_empty()
            && s.len() <= 32
            && s.bytes()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
            && s.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'));
        if ok {
            return Some(GroupRef::Name(s.to_string()));
        }
    }
    None
}

impl Parser<'_> {
    pub(super) fn group(&mut self, v: &Value, at: &str) -> Option<GroupRef> {
        let g = group_ref(v);
        if g.is_none() {
            self.problem(at, GROUP_PROBLEM);
        }
        g
    }
}
