//! When each step of a jail's setup ended, for the setup line the run's journal keeps
//! (`jail: setup: ...`; benches/jail.sh reads it): where a launch's time goes between its
//! spec's arrival and the agent's exec. A warm jail has built everything before the spec;
//! what is after it is the run's own part, and this line splits it.
//!
//! Pid 1 marks its steps, the agent side and the agent add theirs: each fork carries the
//! marks made so far.

use std::time::Instant;

#[derive(Debug, Clone)]
pub struct SetupMarks {
    start: Instant,
    spec_at: Instant,
    steps: Vec<(&'static str, Instant)>,
}

impl SetupMarks {
    /// `start`: the helper's start; `spec_at`: the spec read whole.
    pub fn new(start: Instant, spec_at: Instant) -> SetupMarks {
        SetupMarks {
            start,
            spec_at,
            steps: Vec::with_capacity(8),
        }
    }

    /// When the spec arrived: a process forked after it (the command side) times its own
    /// steps from here.
    pub fn spec_at(&self) -> Instant {
        self.spec_at
    }

    /// `step` has just ended.
    pub fn mark(&mut self, step: &'static str) {
        self.steps.push((step, Instant::now()));
    }

    /// The setup line, as of `now` (the agent's exec).
    pub fn line(&self, now: Instant) -> String {
        let us = |t: Instant| t.saturating_duration_since(self.spec_at).as_micros();
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(s, t)| format!("{s} {}", us(*t)))
            .collect();
        format!(
            "setup: {} us from the helper's start to the agent's exec ({} us from the spec's arrival{}{})",
            now.saturating_duration_since(self.start).as_micros(),
            us(now),
            if steps.is_empty() {
                ""
            } else {
                "; each step's end, in us from it: "
            },
            steps.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_line_gives_each_step_from_the_spec_and_keeps_what_the_bench_reads() {
        let start = Instant::now();
        let spec = start + Duration::from_micros(5000);
        let mut m = SetupMarks::new(start, spec);
        m.steps.push(("root", spec + Duration::from_micros(300)));
        m.steps.push(("cgroups", spec + Duration::from_micros(450)));
        let line = m.line(spec + Duration::from_micros(1200));
        assert_eq!(
            line,
            "setup: 6200 us from the helper's start to the agent's exec (1200 us from the \
             spec's arrival; each step's end, in us from it: root 300, cgroups 450)"
        );
        // benches/jail.sh's two patterns.
        assert!(line.contains("setup: 6200 us"));
        assert!(line.contains("(1200 us from the spec"));
        let bare = SetupMarks::new(start, spec).line(spec);
        assert!(bare.ends_with("(0 us from the spec's arrival)"), "{bare}");
    }
}
