//! `uid_range` and `instances`: the uids hired instances get, and instances named in the
//! config.

use serde_yaml::Value;

use super::Parser;
use crate::diag::key;
use crate::names::valid_name;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceConf {
    pub role: String,
    pub uid: Option<u32>,
}

impl Parser<'_> {
    pub(super) fn uid_range(&mut self, v: &Value) -> Option<UidRange> {
        const MSG: &str = "must be FIRST-LAST with 1000 <= FIRST <= LAST < 2147483647";
        let parsed = v.as_str().and_then(|s| {
            let (a, b) = s.split_once('-')?;
            Some((a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?))
        });
        match parsed {
            Some((first, last)) if first >= 1000 && first <= last && last < (1 << 31) - 1 => {
                if (first..=last).contains(&65534) || (first..=last).contains(&65535) {
                    self.problem("uid_range", "must not contain 65534 (nobody) or 65535");
                    return None;
                }
                Some(UidRange { first, last })
            }
            _ => {
                self.problem("uid_range", MSG);
                None
            }
        }
    }

    pub(super) fn instance(&mut self, v: &Value, at: &str) -> Option<InstanceConf> {
        let m = self.mapping(v, at, &["role", "uid"])?;
        let role = match m.get(Value::from("role")).and_then(Value::as_str) {
            Some(r) if valid_name(r) => r.to_string(),
            _ => {
                self.problem(
                    &key(at, "role"),
                    "required; a role name [a-z][a-z0-9_-]{0,31}",
                );
                return None;
            }
        };
        let uid = match m.get(Value::from("uid")) {
            None => None,
            Some(u) => match u.as_u64() {
                Some(n) if n < (1 << 31) - 1 => Some(n as u32),
                _ => {
                    self.problem(&key(at, "uid"), "must be an integer below 2147483647");
                    return None;
                }
            },
        };
        Some(InstanceConf { role, uid })
    }
}
