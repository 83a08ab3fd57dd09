//! A running run's tallies for `airlockctl ps` and `top`: kept by its call log next to
//! the metrics, read by airlockd when asked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Updated as the run's decisions are journaled.
#[derive(Debug, Default)]
pub struct LiveCounts {
    tool_calls: AtomicU64,
    refused: AtomicU64,
    spend_micro_usd: AtomicU64,
    writes: AtomicU64,
    last: Mutex<Option<String>>,
}

/// What `ps` and `top` show of a running run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveInfo {
    /// Tool calls (MCP and bash), allowed and refused.
    pub tool_calls: u64,
    pub refused: u64,
    pub spend_micro_usd: u64,
    /// GitHub writes made.
    pub writes: u64,
    /// The last decision: `connector/tool allow|deny by RULE` (labels as the metrics
    /// have them, so nothing the agent named), or the like for the other routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<String>,
    /// CPU time of the run's cgroup, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usec: Option<u64>,
    /// Memory charged to the run's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

impl LiveCounts {
    pub fn call(&self, allow: bool, last: String) {
        self.tool_calls.fetch_add(1, Ordering::Relaxed);
        if !allow {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        self.decided(last);
    }

    pub fn spent(&self, micro_usd: u64) {
        self.spend_micro_usd.fetch_max(micro_usd, Ordering::Relaxed);
    }

    pub fn wrote(&self, writes: u64) {
        self.writes.fetch_max(writes, Ordering::Relaxed);
    }

    pub fn decided(&self, last: String) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(last);
    }

    pub fn get(&self) -> LiveInfo {
        LiveInfo {
            tool_calls: self.tool_calls.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            spend_micro_usd: self.spend_micro_usd.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            last_decision: self.last.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            cpu_usec: None,
            memory_bytes: None,
        }
    }
}

/// `usage_usec` of a cgroup's `cpu.stat`.
pub fn cpu_usec(cpu_stat: &str) -> Option<u64> {
    cpu_stat
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

/// The CPU and memory of the cgroup at `dir` (each `None` when unreadable).
pub fn cgroup_usage(dir: &std::path::Path) -> (Option<u64>, Option<u64>) {
    let cpu = std::fs::read_to_string(dir.join("cpu.stat"))
        .ok()
        .and_then(|s| cpu_usec(&s));
    let mem = std::fs::read_to_string(dir.join("memory.current"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    (cpu, mem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_and_cpu_stat() {
        let c = LiveCounts::default();
        c.call(true, "airlock/bash allow by run.bash[0]".into());
        c.call(
            false,
            "airlock/bash deny by default: no prefix matches".into(),
        );
        c.spent(1500);
        c.spent(1000);
        c.wrote(2);
        let i = c.get();
        assert_eq!(
            (i.tool_calls, i.refused, i.spend_micro_usd, i.writes),
            (2, 1, 1500, 2)
        );
        assert_eq!(
            i.last_decision.as_deref(),
            Some("airlock/bash deny by default: no prefix matches")
        );
        assert_eq!(cpu_usec("usage_usec 1234\nuser_usec 1000\n"), Some(1234));
        assert_eq!(cpu_usec("user_usec 1000\n"), None);
    }
}
