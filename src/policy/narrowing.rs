//! Whether a change of an instance's role may reach its live runs (issue 45): only a change
//! that narrows, and only in what the run's gateway decides afresh on every call (MCP tools,
//! resources, denials and bash prefixes). Anything else (a wider grant, writes, budgets,
//! egress, the model, the brief) takes effect at the instance's next launch. Pure.

use super::flagged::flagged;
use crate::role::Role;

/// `old` → `new` grants nothing `old` did not ([`flagged`] finds no line, and no denial of
/// `old` is dropped) and differs from it only in `tools`, `resources`, `deny` and
/// `run.bash`. `egress`: the lists the host grants `new` and `old`.
pub fn narrows_live(old: &Role, new: &Role, egress: (&[String], &[String])) -> bool {
    if !flagged(new, old, egress).is_empty() {
        return false;
    }
    let keeps_denials = old.deny.iter().all(|(conn, pats)| {
        new.deny
            .get(conn)
            .is_some_and(|n| pats.iter().all(|p| n.contains(p)))
    });
    if !keeps_denials {
        return false;
    }
    let mut rest = new.clone();
    rest.tools = old.tools.clone();
    rest.resources = old.resources.clone();
    rest.deny = old.deny.clone();
    if let (Some(r), Some(o)) = (rest.run.as_mut(), old.run.as_ref()) {
        r.bash = o.bash.clone();
    }
    rest == *old
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
    fn only_a_narrowing_of_per_call_grants_reaches_live_runs() {
        let old = role(&format!(
            "{BASE}tools: {{board: [board_read_item, board_list]}}\nrun: {{model: m, bash: [git log, git status]}}\n"
        ));
        let fewer = role(&format!(
            "{BASE}tools: {{board: [board_list]}}\nrun: {{model: m, bash: [git status]}}\n"
        ));
        assert!(narrows_live(&old, &fewer, (&[], &[])));
        assert!(narrows_live(&old, &old.clone(), (&[], &[])));
        // Wider: a prefix the old role did not hold.
        let wider = role(&format!(
            "{BASE}tools: {{board: [board_list]}}\nrun: {{model: m, bash: [git status, git push]}}\n"
        ));
        assert!(!narrows_live(&old, &wider, (&[], &[])));
        // Narrower, but in what a live run cannot take (its budget): next launch.
        let budget = role(&format!(
            "{}tools: {{board: [board_list]}}\nrun: {{model: m, bash: [git status]}}\n",
            BASE.replace("runs_per_week: 5", "runs_per_week: 4")
        ));
        assert!(!narrows_live(&old, &budget, (&[], &[])));
        // Another model: not a narrowing.
        let model = role(&format!(
            "{BASE}tools: {{board: [board_list]}}\nrun: {{model: n, bash: [git status]}}\n"
        ));
        assert!(!narrows_live(&old, &model, (&[], &[])));
        // An egress list the host grants the new role and not the old.
        assert!(!narrows_live(&old, &fewer, (&["crates".into()], &[])));
    }
}
