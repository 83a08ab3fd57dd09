//! The flagged lines of a hire (seed 003, "no grant beyond the granter"): every grant the
//! role to be hired carries that the raiser's own role does not hold. Airlock computes them,
//! never the raiser; a decision with any flagged line needs an owner's approval. Pure: two
//! roles (and the egress lists the host grants each) in, lines out, each naming the key.

use crate::policy::rails::glob_match;
use crate::role::Role;

/// Every grant of `new` above `raiser`'s, one line each (`tools.github: create_issue`).
/// `egress`: the egress lists the host grants the new role and the raiser.
pub fn flagged(new: &Role, raiser: &Role, egress: (&[String], &[String])) -> Vec<String> {
    let mut out = Vec::new();
    if new.level > raiser.level {
        out.push(format!("level: {} (above {})", new.level, raiser.level));
    }
    for (conn, patterns) in &new.tools {
        let mine = raiser.tools.get(conn).map(Vec::as_slice).unwrap_or(&[]);
        for p in patterns {
            if !tool_covered(p, mine) {
                out.push(format!("tools.{conn}: {p}"));
            }
        }
    }
    for (conn, patterns) in &new.resources {
        let mine = raiser.resources.get(conn).map(Vec::as_slice).unwrap_or(&[]);
        for p in patterns.iter().filter(|p| !mine.contains(p)) {
            out.push(format!("resources.{conn}: {p}"));
        }
    }
    for p in new.bash_prefixes() {
        if !bash_covered(p, raiser.bash_prefixes()) {
            out.push(format!("run.bash: {p}"));
        }
    }
    let (run_new, run_mine) = (new.run.as_ref(), raiser.run.as_ref());
    for t in run_new.iter().flat_map(|r| &r.tools) {
        if !run_mine.is_some_and(|r| r.tools.contains(t)) {
            out.push(format!("run.tools: {t}"));
        }
    }
    for c in run_new.iter().flat_map(|r| r.mcp.keys()) {
        if !run_mine.is_some_and(|r| r.mcp.contains_key(c)) {
            out.push(format!("run.mcp: {c}"));
        }
    }
    let (w, m) = (&new.writes, &raiser.writes);
    for (key, a, b) in [
        ("writes.repos", &w.repos, &m.repos),
        ("writes.issues", &w.issues, &m.issues),
        ("writes.pull_requests", &w.pull_requests, &m.pull_requests),
        ("writes.board", &w.board, &m.board),
        ("writes.reads", &w.reads, &m.reads),
    ] {
        for x in a.iter().filter(|x| !b.contains(x)) {
            out.push(format!("{key}: {x}"));
        }
    }
    if w.workflows && !m.workflows {
        out.push("writes.workflows: true".into());
    }
    if w.dispatch && !m.dispatch {
        out.push("writes.dispatch: true".into());
    }
    let (b, mine) = (&new.budget, &raiser.budget);
    for (key, a, c) in [
        ("runs_per_week", b.runs_per_week, mine.runs_per_week),
        ("minutes_per_run", b.minutes_per_run, mine.minutes_per_run),
        (
            "github_writes_per_run",
            b.github_writes_per_run,
            mine.github_writes_per_run,
        ),
    ] {
        if above(a.map(|x| x as f64), c.map(|x| x as f64)) {
            out.push(format!("budget.{key}: {}", show(a.map(|x| x as f64))));
        }
    }
    if above(b.spend_usd, mine.spend_usd) {
        out.push(format!("budget.spend_usd: {}", show(b.spend_usd)));
    }
    for l in egress.0.iter().filter(|l| !egress.1.contains(l)) {
        out.push(format!("egress: {l}"));
    }
    out
}

/// `None` is unbounded: above anything bounded.
fn above(new: Option<f64>, mine: Option<f64>) -> bool {
    match (new, mine) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a > b,
    }
}

fn show(v: Option<f64>) -> String {
    v.map_or("unbounded".into(), |x| x.to_string())
}

/// A tool pattern is held when the raiser has it, or a glob of the raiser's matches it as a
/// name (a pattern with wildcards is held only by the same pattern).
fn tool_covered(p: &str, mine: &[String]) -> bool {
    mine.iter()
        .any(|m| m == p || (!p.contains('*') && !p.contains('?') && glob_match(m, p)))
}

/// A bash prefix is held when the raiser holds it or a shorter prefix of it, word for word.
fn bash_covered(p: &str, mine: &[String]) -> bool {
    mine.iter().any(|m| {
        p == m
            || p.strip_prefix(m.as_str())
                .is_some_and(|r| r.starts_with(' '))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn role(text: &str) -> Role {
        crate::role::parse_role(Path::new("r/role.yaml"), text)
            .map_err(|p| format!("{p:?}"))
            .unwrap()
            .0
    }

    const BASE: &str = "schema: 1\nrole: r\nlevel: L2\nbrief: b.md\nwrites: {}\ndigest: none\nfloors: [x]\nbudget: {runs_per_week: 5, minutes_per_run: 10, github_writes_per_run: 0, spend_usd: 1}\n";

    #[test]
    fn grants_above_the_raisers_are_each_flagged_and_the_rest_are_not() {
        let chief = role(&format!(
            "{BASE}tools: {{board: [board_read_*, board_list]}}\nrun: {{model: m, bash: [git log]}}\n"
        ));
        let narrower = role(&format!(
            "{BASE}tools: {{board: [board_read_item]}}\nrun: {{model: m, bash: [git log --oneline]}}\n"
        ));
        assert_eq!(flagged(&narrower, &chief, (&[], &[])), Vec::<String>::new());
        let wider = role(&format!(
            "{}tools: {{board: [board_read_item, board_write]}}\nrun: {{model: m, bash: [git log, git push]}}\n",
            BASE.replace("runs_per_week: 5", "runs_per_week: 50")
        ));
        let egress = vec!["crates".to_string()];
        assert_eq!(
            flagged(&wider, &chief, (&egress, &[])),
            vec![
                "tools.board: board_write",
                "run.bash: git push",
                "budget.runs_per_week: 50",
                "egress: crates"
            ]
        );
        // A prefix that only starts like one of the raiser's is not held by it.
        let sneaky = role(&format!(
            "{BASE}tools: {{board: [board_list]}}\nrun: {{model: m, bash: [git logx]}}\n"
        ));
        assert_eq!(
            flagged(&sneaky, &chief, (&[], &[])),
            vec!["run.bash: git logx"]
        );
    }
}
