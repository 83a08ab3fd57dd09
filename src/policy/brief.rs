//! The brief as the agent reads it: the role's brief, then its floors (seed 000: "listed
//! so the brief and the allowlist generator both carry them"). Pure.

/// `brief` followed by a section listing `floors`, one per line; `brief` as it is when the
/// role has none.
pub fn with_floors(brief: &str, floors: &[String]) -> String {
    if floors.is_empty() {
        return brief.to_string();
    }
    let mut out = String::with_capacity(brief.len() + 64 * floors.len());
    out.push_str(brief);
    if !brief.is_empty() && !brief.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("\n## Floors\n\nWhat this role never does, whatever the task asks:\n\n");
    for floor in floors {
        // One line each: a floor's own line breaks would read as more items.
        let line: String = floor
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        out.push_str("- ");
        out.push_str(line.trim());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_follow_the_brief_one_per_line_and_a_role_without_keeps_its_brief() {
        assert_eq!(with_floors("Do X.\n", &[]), "Do X.\n");
        let b = with_floors(
            "Do X.",
            &[
                "never merges".to_string(),
                "never\npushes to main".to_string(),
            ],
        );
        assert!(b.starts_with("Do X.\n\n## Floors\n"), "{b}");
        assert!(
            b.ends_with("\n- never merges\n- never pushes to main\n"),
            "{b}"
        );
    }
}
