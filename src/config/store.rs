//! airlockd's `store:` key: where the state shared by a fleet of hosts lives. Absent: the
//! files under `state_dir` alone (one host, the default). Present:
//! `store: {postgres: "<libpq key=value conninfo>", host_id: NAME, password_credential: NAME?}`.
//!
//! The conninfo is checked here, as a pure function: only the keys this build understands
//! (an unknown one is refused by name), never `password` (secrets come from `credentials`),
//! and values are never echoed in errors (an operator may paste a secret by mistake).

use serde_yaml::Value;

use crate::diag::key;

/// The conninfo keys airlockd passes on to the PostgreSQL client.
pub const CONNINFO_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "connect_timeout",
    "application_name",
    "options",
    "keepalives",
    "keepalives_idle",
    "target_session_attrs",
    "sslmode",
];

const STORE_KEYS: &[&str] = &["postgres", "host_id", "password_credential"];

/// A fleet store: one PostgreSQL database shared by every host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConf {
    /// The checked conninfo pairs, in order.
    pub conninfo: Vec<(String, String)>,
    /// This host's name in the fleet: `[a-z0-9][a-z0-9_.-]{0,62}`.
    pub host_id: String,
    /// A `credentials` name holding the database password, if it needs one.
    pub password_credential: Option<String>,
}

impl StoreConf {
    /// How the store is named in errors: the database, the host id (never a secret).
    pub fn describe(&self) -> String {
        let get = |k: &str| {
            self.conninfo
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        format!(
            "the fleet store (PostgreSQL database `{}` on {}, host_id {})",
            get("dbname").unwrap_or("(default)"),
            get("host").or(get("hostaddr")).unwrap_or("(default host)"),
            self.host_id
        )
    }

    /// The conninfo as the client library reads it (values quoted).
    pub fn conninfo_string(&self) -> String {
        self.conninfo
            .iter()
            .map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A host id: a lowercase name, as shown in `runs --fleet` and keyed in the database.
pub fn valid_host_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        })
}

/// Split a libpq `key=value ...` string (values bare or single-quoted, `\` escaping in
/// quotes). `Err` says what is wrong, naming a key but never a value.
pub fn parse_conninfo(s: &str) -> Result<Vec<(String, String)>, String> {
    if s.contains("://") {
        return Err(
            "must be a key=value connection string (host=... dbname=... user=...), not a URL"
                .into(),
        );
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let mut it = s.chars().peekable();
    loop {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.peek().is_none() {
            break;
        }
        let mut k = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            k.push(c);
            it.next();
        }
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        let shown = |k: &str| {
            if crate::secret_shapes::is_plain_key(k) {
                format!("`{k}`")
            } else {
                "a key".to_string()
            }
        };
        if it.next() != Some('=') {
            return Err(format!("{}: expected `=` after the key", shown(&k)));
        }
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        let mut v = String::new();
        if it.peek() == Some(&'\'') {
            it.next();
            let mut closed = false;
            while let Some(c) = it.next() {
                match c {
                    '\\' => match it.next() {
                        Some(e) => v.push(e),
                        None => break,
                    },
                    '\'' => {
                        closed = true;
                        break;
                    }
                    c => v.push(c),
                }
            }
            if !closed {
                return Err(format!("{}: unterminated quoted value", shown(&k)));
            }
        } else {
            while let Some(&c) = it.peek() {
                if c.is_whitespace() {
                    break;
                }
                v.push(c);
                it.next();
            }
        }
        if k == "password" || k == "passfile" {
            return Err(format!(
                "`{k}`: no secret inline; name a credentials entry in store.password_credential"
            ));
        }
        if !CONNINFO_KEYS.contains(&k.as_str()) {
            return Err(format!(
                "{}: unknown connection key; allowed: {}",
                shown(&k),
                CONNINFO_KEYS.join(", ")
            ));
        }
        // Without TLS in this build, only a connection that asks for none is honest.
        if k == "sslmode" && v != "disable" {
            return Err("`sslmode`: only `disable` (this build speaks to PostgreSQL without TLS: use a unix socket or a trusted network)".into());
        }
        if out.iter().any(|(n, _)| *n == k) {
            return Err(format!("`{k}`: given twice"));
        }
        out.push((k, v));
    }
    if out.is_empty() {
        return Err("is empty; give at least host= and dbname=".into());
    }
    Ok(out)
}

/// Parse the `store` key; problems are reported through `problem(path, message)`.
pub fn parse(
    v: &Value,
    credential_known: &dyn Fn(&str) -> bool,
    problem: &mut dyn FnMut(&str, &str),
) -> Option<StoreConf> {
    let Some(m) = v.as_mapping() else {
        problem(
            "store",
            "must be a mapping {postgres, host_id, password_credential?}",
        );
        return None;
    };
    let mut ok = true;
    for k in m.keys() {
        match k.as_str() {
            Some(k) if STORE_KEYS.contains(&k) => {}
            Some(k) => {
                let at = if crate::secret_shapes::is_plain_key(k) {
                    key("store", k)
                } else {
                    key("store", "<unknown key>")
                };
                problem(
                    &at,
                    &format!("unknown key; allowed: {}", STORE_KEYS.join(", ")),
                );
                ok = false;
            }
            None => {
                problem("store", "keys must be strings");
                ok = false;
            }
        }
    }
    let get = |k: &str| m.get(Value::from(k));
    let conninfo = match get("postgres").map(|v| v.as_str()) {
        Some(Some(s)) => match parse_conninfo(s) {
            Ok(c) => Some(c),
            Err(e) => {
                problem("store.postgres", &e);
                None
            }
        },
        Some(None) => {
            problem("store.postgres", "must be a libpq connection string");
            None
        }
        None => {
            problem(
                "store.postgres",
                "is required: the fleet's PostgreSQL (host=... dbname=... user=...)",
            );
            None
        }
    };
    let host_id = match get("host_id").map(|v| v.as_str()) {
        Some(Some(s)) if valid_host_id(s) => Some(s.to_string()),
        Some(_) => {
            problem("store.host_id", "must match [a-z0-9][a-z0-9_.-]{0,62}");
            None
        }
        None => {
            problem(
                "store.host_id",
                "is required: this host's name in the fleet, unique across it",
            );
            None
        }
    };
    let password_credential = match get("password_credential") {
        None => None,
        Some(v) => match v.as_str() {
            Some(n) if credential_known(n) => Some(n.to_string()),
            _ => {
                problem(
                    "store.password_credential",
                    "must name an entry of `credentials` (the file or systemd credential holding the password)",
                );
                ok = false;
                None
            }
        },
    };
    Some(StoreConf {
        conninfo: conninfo?,
        host_id: host_id?,
        password_credential,
    })
    .filter(|_| ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(yaml: &str) -> Result<StoreConf, Vec<(String, String)>> {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        let mut problems = Vec::new();
        let known = |n: &str| n == "pgpass";
        let r = parse(&v, &known, &mut |p: &str, m: &str| {
            problems.push((p.to_string(), m.to_string()))
        });
        match r {
            Some(c) if problems.is_empty() => Ok(c),
            _ => Err(problems),
        }
    }

    #[test]
    fn conninfo_pairs_quoted_and_bare() {
        let c =
            parse_conninfo("host=/run/postgresql dbname = airlock user='air lock\\'s'").unwrap();
        assert_eq!(
            c,
            vec![
                ("host".into(), "/run/postgresql".into()),
                ("dbname".into(), "airlock".into()),
                ("user".into(), "air lock's".into()),
            ]
        );
    }

    #[test]
    fn an_unknown_key_is_named_and_its_value_never_shown() {
        let e = parse_conninfo("host=/tmp dbnmae=s3cr3tvalue").unwrap_err();
        assert!(e.contains("`dbnmae`") && e.contains("unknown"), "{e}");
        assert!(!e.contains("s3cr3tvalue"), "{e}");
    }

    #[test]
    fn an_inline_password_is_refused() {
        let e = parse_conninfo("host=/tmp password=hunter2").unwrap_err();
        assert!(
            e.contains("password_credential") && !e.contains("hunter2"),
            "{e}"
        );
        assert!(parse_conninfo("postgresql://u:p@db.example/airlock").is_err());
        assert!(parse_conninfo("host='/tmp").is_err());
        assert!(parse_conninfo("").is_err());
        assert!(parse_conninfo("host=/tmp host=/run").is_err());
        assert!(parse_conninfo("host=/tmp sslmode=require").is_err());
    }

    #[test]
    fn the_store_key() {
        let c = conf(
            "{postgres: 'host=/tmp dbname=airlock', host_id: node-a, password_credential: pgpass}",
        )
        .unwrap();
        assert_eq!(c.host_id, "node-a");
        assert_eq!(c.password_credential.as_deref(), Some("pgpass"));
        assert!(c.describe().contains("`airlock`") && c.describe().contains("node-a"));
        let p = conf("{postgres: 'host=/tmp', host_id: node-a, password_credential: other}")
            .unwrap_err();
        assert_eq!(p[0].0, "store.password_credential");
        let p = conf("{postgres: 'host=/tmp', host_id: Node_A}").unwrap_err();
        assert_eq!(p[0].0, "store.host_id");
        let p = conf("{postgres: 'host=/tmp'}").unwrap_err();
        assert_eq!(p[0].0, "store.host_id");
        let p = conf("{postgres: 'host=/tmp', host_id: a, pool: 3}").unwrap_err();
        assert_eq!(p[0].0, "store.pool");
        let p = conf("{postgres: 'hots=/tmp', host_id: a}").unwrap_err();
        assert!(
            p[0].0 == "store.postgres" && p[0].1.contains("`hots`"),
            "{p:?}"
        );
    }

    #[test]
    fn the_conninfo_string_reads_back() {
        let c = conf("{postgres: \"host=/tmp user='a b'\", host_id: a}").unwrap();
        assert_eq!(parse_conninfo(&c.conninfo_string()).unwrap(), c.conninfo);
    }
}
