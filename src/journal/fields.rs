//! Journal field names and the fixed `MESSAGE_ID` of every daemon event kind.
//!
//! A sysadmin finds a run with `journalctl AIRLOCK_RUN=<id>` and one kind of event across all
//! runs with `journalctl MESSAGE_ID=<id>`. The ids below never change once released: tools and
//! alert rules match on them.
//!
//! | `AIRLOCK_EVENT`    | `MESSAGE_ID`                       | `PRIORITY` |
//! |--------------------|------------------------------------|------------|
//! | `run_started`      | `449cbb726be1461eb409c263dcabbeb5` | 6 info     |
//! | `run_exited`       | `4ea47110c67045838a8e4ab453e289cd` | 6 info     |
//! | `run_killed`       | `dc879c001bb2462a8dd34056a02f80c1` | 4 warning  |
//! | `deadline_reached` | `337396cee8644b4d8b8ec134a462ddb7` | 4 warning  |
//! | `run_stopped`      | `a45c01e5a14546c1b3edd303fee87f25` | 5 notice   |
//! | `run_aborted`      | `038bc0438acd47b4a03c13b2636ed62b` | 3 err      |
//! | `launch_refused`   | `d88db261f9274eefba513ea480e06cc0` | 4 warning  |
//! | `control_refused`  | `7f0597ea86e342529c908cd66b8072e6` | 4 warning  |
//! | `output_dropped`   | `aff31360bec84407bd77bc248ecc0045` | 4 warning  |
//! | `jail_report`      | `471cc8fe4632425fa97fd51dc41759b4` | 6 info     |
//! | `daemon_started`   | `9296f1133a254c6da5bac2ef9cf4b9e3` | 5 notice   |
//! | `daemon_stopping`  | `1595bf20ec17464ca564b34699794f48` | 5 notice   |
//! | `reloaded`         | `4bb75c00a1ea47f79993c4e18e6b535f` | 5 notice   |
//! | `reload_refused`   | `8d06ee4da3124bc3a4bc535ba6c1f343` | 4 warning  |
//! | `instance_hired`   | `c442d70523704501b777e03f9b73fab4` | 5 notice   |
//! | `instance_fired`   | `a615d5abbb654d4c88237db15efdaf10` | 5 notice   |
//! | `tool_call`        | `6f1e0c9b2d8a4e37b5c4a1d09e7f3b62` | 6 info     |
//! | `egress`           | `5b0d7c2e9a4f4e1c8d3b6a7f2e1c0d94` | 6 info     |
//! | `github_write`     | `c3e81f0a5b6d4f2a9e7c1b8d0a4f6e29` | 6 info     |
//! | `withheld`         | `be5dc193c2cc4ac786c56eb246cb14b9` | 4 warning  |
//!
//! Agent output lines carry `AIRLOCK_STREAM=stdout|stderr` instead of an event and have no
//! `MESSAGE_ID`; stdout lines are priority 6, stderr lines priority 5.

pub const MESSAGE: &str = "MESSAGE";
pub const MESSAGE_ID: &str = "MESSAGE_ID";
pub const PRIORITY: &str = "PRIORITY";
pub const SYSLOG_IDENTIFIER: &str = "SYSLOG_IDENTIFIER";
pub const AIRLOCK_RUN: &str = "AIRLOCK_RUN";
pub const AIRLOCK_ROLE: &str = "AIRLOCK_ROLE";
pub const AIRLOCK_INSTANCE: &str = "AIRLOCK_INSTANCE";
pub const AIRLOCK_STREAM: &str = "AIRLOCK_STREAM";
pub const AIRLOCK_EVENT: &str = "AIRLOCK_EVENT";
/// Per-writer record counter, from 1. Orders records across journald and the fallback file
/// and lets the reader notice records that never arrived.
pub const AIRLOCK_SEQ: &str = "AIRLOCK_SEQ";
/// Wall-clock time the record was written, microseconds since the epoch, never decreasing
/// within one writer.
pub const AIRLOCK_TIME_US: &str = "AIRLOCK_TIME_US";

/// The `SYSLOG_IDENTIFIER` of everything airlockd writes.
pub const IDENTIFIER: &str = "airlockd";

/// Fields a caller may not set through `extra`: they are fixed by the writer, so neither a
/// caller mistake nor agent-controlled text can change which run a record belongs to.
pub const RESERVED: [&str; 11] = [
    MESSAGE,
    MESSAGE_ID,
    PRIORITY,
    SYSLOG_IDENTIFIER,
    AIRLOCK_RUN,
    AIRLOCK_ROLE,
    AIRLOCK_INSTANCE,
    AIRLOCK_STREAM,
    AIRLOCK_EVENT,
    AIRLOCK_SEQ,
    AIRLOCK_TIME_US,
];

/// A journald field name: `A-Z`, `0-9`, `_`, not starting with a digit or `_` (leading `_`
/// marks fields only journald itself may set), at most 64 bytes.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && !b[0].is_ascii_digit()
        && b[0] != b'_'
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// Which output stream of the agent a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    pub fn parse(s: &str) -> Option<Stream> {
        match s {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }

    pub fn priority(self) -> u8 {
        match self {
            Stream::Stdout => 6,
            Stream::Stderr => 5,
        }
    }
}

/// Something the daemon reports about a run or about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    RunStarted,
    RunExited,
    RunKilled,
    DeadlineReached,
    RunStopped,
    RunAborted,
    LaunchRefused,
    ControlRefused,
    OutputDropped,
    JailReport,
    DaemonStarted,
    DaemonStopping,
    Reloaded,
    ReloadRefused,
    InstanceHired,
    InstanceFired,
    ToolCall,
    /// A request on the run's provider route (`provider`).
    Provider,
    /// A credential lease issued or revoked (`lease`).
    Lease,
    /// A connection through the run's egress proxy (`egress`).
    Egress,
    /// A GitHub write (or refused write) through the run's GitHub route (`github_write`).
    GithubWrite,
    /// An upstream's answer echoed a secret of the run, and it was withheld (`withheld`).
    Withheld,
    /// An OAuth connector's login, or logout, by an operator (`connector_auth`).
    ConnectorAuth,
    /// A request that waited for a person (`ask`): raised, and how it was answered.
    Ask,
}

impl EventKind {
    pub const ALL: [EventKind; 24] = [
        EventKind::RunStarted,
        EventKind::RunExited,
        EventKind::RunKilled,
        EventKind::DeadlineReached,
        EventKind::RunStopped,
        EventKind::RunAborted,
        EventKind::LaunchRefused,
        EventKind::ControlRefused,
        EventKind::OutputDropped,
        EventKind::JailReport,
        EventKind::DaemonStarted,
        EventKind::DaemonStopping,
        EventKind::Reloaded,
        EventKind::ReloadRefused,
        EventKind::InstanceHired,
        EventKind::InstanceFired,
        EventKind::ToolCall,
        EventKind::Provider,
        EventKind::Lease,
        EventKind::Egress,
        EventKind::GithubWrite,
        EventKind::Withheld,
        EventKind::ConnectorAuth,
        EventKind::Ask,
    ];

    /// The `AIRLOCK_EVENT` value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RunStarted => "run_started",
            EventKind::RunExited => "run_exited",
            EventKind::RunKilled => "run_killed",
            EventKind::DeadlineReached => "deadline_reached",
            EventKind::RunStopped => "run_stopped",
            EventKind::RunAborted => "run_aborted",
            EventKind::LaunchRefused => "launch_refused",
            EventKind::ControlRefused => "control_refused",
            EventKind::OutputDropped => "output_dropped",
            EventKind::JailReport => "jail_report",
            EventKind::DaemonStarted => "daemon_started",
            EventKind::DaemonStopping => "daemon_stopping",
            EventKind::Reloaded => "reloaded",
            EventKind::ReloadRefused => "reload_refused",
            EventKind::InstanceHired => "instance_hired",
            EventKind::InstanceFired => "instance_fired",
            EventKind::ToolCall => "tool_call",
            EventKind::Provider => "provider",
            EventKind::Lease => "lease",
            EventKind::Egress => "egress",
            EventKind::GithubWrite => "github_write",
            EventKind::Withheld => "withheld",
            EventKind::ConnectorAuth => "connector_auth",
            EventKind::Ask => "ask",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The fixed 128-bit `MESSAGE_ID`, 32 lowercase hex digits (see the table above).
    pub fn message_id(self) -> &'static str {
        match self {
            EventKind::RunStarted => "449cbb726be1461eb409c263dcabbeb5",
            EventKind::RunExited => "4ea47110c67045838a8e4ab453e289cd",
            EventKind::RunKilled => "dc879c001bb2462a8dd34056a02f80c1",
            EventKind::DeadlineReached => "337396cee8644b4d8b8ec134a462ddb7",
            EventKind::RunStopped => "a45c01e5a14546c1b3edd303fee87f25",
            EventKind::RunAborted => "038bc0438acd47b4a03c13b2636ed62b",
            EventKind::LaunchRefused => "d88db261f9274eefba513ea480e06cc0",
            EventKind::ControlRefused => "7f0597ea86e342529c908cd66b8072e6",
            EventKind::OutputDropped => "aff31360bec84407bd77bc248ecc0045",
            EventKind::JailReport => "471cc8fe4632425fa97fd51dc41759b4",
            EventKind::DaemonStarted => "9296f1133a254c6da5bac2ef9cf4b9e3",
            EventKind::DaemonStopping => "1595bf20ec17464ca564b34699794f48",
            EventKind::Reloaded => "4bb75c00a1ea47f79993c4e18e6b535f",
            EventKind::ReloadRefused => "8d06ee4da3124bc3a4bc535ba6c1f343",
            EventKind::InstanceHired => "c442d70523704501b777e03f9b73fab4",
            EventKind::InstanceFired => "a615d5abbb654d4c88237db15efdaf10",
            EventKind::ToolCall => "6f1e0c9b2d8a4e37b5c4a1d09e7f3b62",
            EventKind::Provider => "17ade88e3a4c25a074e1877319ca0cdf",
            EventKind::Lease => "7b6222c770b571e5092bd2d29a70ae56",
            EventKind::Egress => "5b0d7c2e9a4f4e1c8d3b6a7f2e1c0d94",
            EventKind::GithubWrite => "c3e81f0a5b6d4f2a9e7c1b8d0a4f6e29",
            EventKind::Withheld => "be5dc193c2cc4ac786c56eb246cb14b9",
            EventKind::ConnectorAuth => "5d0c9e2f7a8b4c61b3e4f1a2d7c8e903",
            EventKind::Ask => "0e8a5c3d6f2b4a719c1d7e6b5a4f3c28",
        }
    }

    /// syslog priority: 3 err, 4 warning, 5 notice, 6 info.
    pub fn priority(self) -> u8 {
        match self {
            EventKind::RunAborted => 3,
            EventKind::RunKilled
            | EventKind::DeadlineReached
            | EventKind::LaunchRefused
            | EventKind::ControlRefused
            | EventKind::OutputDropped
            | EventKind::ReloadRefused
            | EventKind::Withheld => 4,
            EventKind::RunStopped
            | EventKind::DaemonStarted
            | EventKind::DaemonStopping
            | EventKind::Reloaded
            | EventKind::InstanceHired
            | EventKind::InstanceFired
            | EventKind::Lease
            | EventKind::ConnectorAuth
            | EventKind::Ask => 5,
            EventKind::RunStarted
            | EventKind::RunExited
            | EventKind::JailReport
            | EventKind::ToolCall
            | EventKind::Provider
            | EventKind::Egress
            | EventKind::GithubWrite => 6,
        }
    }

    /// The last record of a run: `airlockctl logs -f` stops following after it.
    pub fn ends_run(self) -> bool {
        matches!(
            self,
            EventKind::RunExited
                | EventKind::RunKilled
                | EventKind::RunStopped
                | EventKind::RunAborted
                | EventKind::LaunchRefused
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_unique_128_bit_lowercase_hex() {
        let mut seen = std::collections::HashSet::new();
        for k in EventKind::ALL {
            let id = k.message_id();
            assert_eq!(id.len(), 32, "{k:?}");
            assert!(id
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
            assert!(seen.insert(id), "duplicate id for {k:?}");
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
    }

    #[test]
    fn field_names() {
        for n in RESERVED {
            assert!(valid_name(n), "{n}");
        }
        assert!(!valid_name("_PID"));
        assert!(!valid_name("lower"));
        assert!(!valid_name("1X"));
        assert!(!valid_name(""));
        assert!(!valid_name("A=B"));
        assert!(!valid_name(&"A".repeat(65)));
    }
}
