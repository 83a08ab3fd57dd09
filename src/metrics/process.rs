//! The standard `process_*` metrics of airlockd itself, read from /proc/self at each scrape
//! (prometheus-client has no process collector of its own).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Default)]
pub struct ProcessMetrics {
    cpu_seconds: Counter<f64, AtomicU64>,
    resident_memory_bytes: Gauge,
    virtual_memory_bytes: Gauge,
    open_fds: Gauge,
    threads: Gauge,
    start_time_seconds: Gauge,
}

/// What /proc/self/stat says, in the metrics' units.
#[derive(Debug, PartialEq)]
pub struct Stat {
    pub cpu_seconds: f64,
    pub threads: i64,
    /// Clock ticks since boot.
    pub start_ticks: u64,
    pub vsize: i64,
    pub rss_pages: i64,
}

/// Parse /proc/PID/stat (the command may hold spaces and parentheses: fields are counted
/// from its last `)`).
pub fn parse_stat(text: &str, ticks_per_s: f64) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        cpu_seconds: (n(11)? + n(12)?) as f64 / ticks_per_s,
        threads: n(17)? as i64,
        start_ticks: n(19)?,
        vsize: n(20)? as i64,
        rss_pages: n(21)? as i64,
    })
}

impl ProcessMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "process_cpu_seconds",
            "User and system CPU time of airlockd",
            self.cpu_seconds.clone(),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of airlockd",
            self.resident_memory_bytes.clone(),
        );
        r.register(
            "process_virtual_memory_bytes",
            "Virtual memory of airlockd",
            self.virtual_memory_bytes.clone(),
        );
        r.register(
            "process_open_fds",
            "Open file descriptors of airlockd",
            self.open_fds.clone(),
        );
        r.register(
            "process_threads",
            "Threads of airlockd",
            self.threads.clone(),
        );
        r.register(
            "process_start_time_seconds",
            "Start time of airlockd, Unix seconds",
            self.start_time_seconds.clone(),
        );
    }

    /// Read /proc/self again (best effort: a value that cannot be read keeps its last).
    pub fn refresh(&self) {
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0)
            .unwrap_or(100) as f64;
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .unwrap_or(4096);
        if let Some(s) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|t| parse_stat(&t, ticks))
        {
            let have = self.cpu_seconds.get();
            if s.cpu_seconds > have {
                self.cpu_seconds.inc_by(s.cpu_seconds - have);
            }
            self.threads.set(s.threads);
            self.virtual_memory_bytes.set(s.vsize);
            self.resident_memory_bytes
                .set(s.rss_pages.saturating_mul(page));
            if let Some(boot) = boot_time() {
                self.start_time_seconds
                    .set(boot + (s.start_ticks as f64 / ticks) as i64);
            }
        }
        if let Ok(d) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(d.count() as i64);
        }
    }
}

fn boot_time() -> Option<i64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let line = "42 (air) lock (d)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1234 5000000 300 18446744073709551615";
        let s = parse_stat(line, 100.0).unwrap();
        assert_eq!(
            s,
            Stat {
                cpu_seconds: 3.0,
                threads: 7,
                start_ticks: 1234,
                vsize: 5_000_000,
                rss_pages: 300,
            }
        );
        assert_eq!(parse_stat("42 (x) S 1", 100.0), None);
    }
}
