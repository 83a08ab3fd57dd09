//! A git push as the gateway reads it before passing it on: the receive-pack request's ref
//! updates (pkt-lines `OLD NEW REF`, then a flush, then the pack), each checked (a branch,
//! never the default branch, never a tag, never a delete, an existing branch only when
//! the run created it). Whether an update is a fast-forward and what it changes is git's
//! to say ([`super::scratch`]). Pure.

const ZERO: &str = "0000000000000000000000000000000000000000";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: String,
    pub new: String,
    pub name: String,
}

impl RefUpdate {
    pub fn is_create(&self) -> bool {
        self.old == ZERO
    }
    pub fn is_delete(&self) -> bool {
        self.new == ZERO
    }
}

fn hex40(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A pkt-line's length: exactly four hex digits, as git reads it (`from_str_radix` alone
/// would take a sign, `+0a4`, that git refuses).
fn pkt_len(head: &[u8]) -> Option<usize> {
    if head.len() != 4 || !head.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    usize::from_str_radix(std::str::from_utf8(head).ok()?, 16).ok()
}

/// Whether `name` is a ref name git accepts (git-check-ref-format): anything else is
/// refused before git sees it, so what is checked is never a name git reads otherwise.
fn valid_ref(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && name != "@"
        && name
            .split('/')
            .all(|c| !c.starts_with('.') && !c.ends_with(".lock"))
        && !name
            .bytes()
            .any(|b| b < 0x20 || b == 0x7f || b" ~^:?*[\\".contains(&b))
}

/// The ref updates at the start of a receive-pack request body.
pub fn ref_updates(body: &[u8]) -> Result<Vec<RefUpdate>, &'static str> {
    let mut at = 0;
    let mut out = Vec::new();
    loop {
        let len = body
            .get(at..at + 4)
            .ok_or("the push ends before its ref updates do")?;
        let len = pkt_len(len).ok_or("not a git push (bad pkt-line)")?;
        if len == 0 {
            break;
        }
        if len < 4 {
            return Err("not a git push (bad pkt-line)");
        }
        let line = body
            .get(at + 4..at + len)
            .ok_or("the push ends inside a pkt-line")?;
        at += len;
        // The first line carries the capabilities after a NUL.
        let line = line.split(|&b| b == 0).next().unwrap_or(line);
        let line = std::str::from_utf8(line).map_err(|_| "a ref update is not text")?;
        // git chomps one newline, no more: a name with more is git's to refuse, and is
        // checked as git will read it.
        let line = line.strip_suffix('\n').unwrap_or(line);
        let mut f = line.splitn(3, ' ');
        let (Some(old), Some(new), Some(name)) = (f.next(), f.next(), f.next()) else {
            return Err("a ref update is not OLD NEW REF");
        };
        if line.starts_with("shallow ") || line.starts_with("push-cert") {
            return Err("shallow and signed pushes are not passed on");
        }
        if !hex40(old) || !hex40(new) {
            return Err("a ref update is not OLD NEW REF (SHA-1 object names)");
        }
        out.push(RefUpdate {
            old: old.to_ascii_lowercase(),
            new: new.to_ascii_lowercase(),
            name: name.to_string(),
        });
        if out.len() > 1000 {
            return Err("too many ref updates in one push");
        }
    }
    if out.is_empty() {
        return Err("the push updates no ref");
    }
    Ok(out)
}

/// Check one update; the branch it pushes. `own` says whether the run created the branch
/// (an update of any other existing branch is refused: the role may push only to branches
/// it creates).
pub fn check<'a>(
    u: &'a RefUpdate,
    default: &str,
    own: &dyn Fn(&str) -> bool,
) -> Result<&'a str, (&'static str, &'static str)> {
    if !valid_ref(&u.name) {
        return Err(("push: ref", "not a ref name git accepts"));
    }
    if u.name.starts_with("refs/tags/") {
        return Err(("push: tag", "pushing tags is refused"));
    }
    let Some(branch) = u.name.strip_prefix("refs/heads/") else {
        return Err(("push: ref", "only branches (refs/heads/...) are pushed"));
    };
    if u.is_delete() {
        return Err(("push: delete", "deleting a branch is refused"));
    }
    if branch == default {
        return Err((
            "push: default branch",
            "pushing to the default branch is refused",
        ));
    }
    if !u.is_create() && !own(branch) {
        return Err((
            "push: branch",
            "the run may update only branches it created",
        ));
    }
    Ok(branch)
}

/// Where the pack starts in a receive-pack body: after the ref updates' flush.
pub fn pack_of(body: &[u8]) -> &[u8] {
    let mut at = 0;
    while let Some(len) = body.get(at..at + 4).and_then(pkt_len) {
        if len == 0 {
            return body.get(at + 4..).unwrap_or_default();
        }
        if len < 4 {
            break;
        }
        at += len;
    }
    &[]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(s: &str) -> String {
        format!("{:04x}{s}", s.len() + 4)
    }

    /// Found by the git_push fuzz target: a length with a sign, and newlines past the one
    /// git chomps, were read otherwise than git reads them.
    #[test]
    fn pkt_lines_and_ref_names_are_read_as_git_reads_them() {
        let a = "a".repeat(40);
        let line = format!("{ZERO} {a} refs/heads/x\n");
        let signed = format!("+{:03x}{line}0000", line.len() + 4);
        assert!(ref_updates(signed.as_bytes()).is_err());
        assert_eq!(pack_of(signed.as_bytes()), b"");
        let body = format!("{}0000", pkt(&format!("{ZERO} {a} refs/heads/x\n\n")));
        let u = ref_updates(body.as_bytes()).unwrap();
        assert_eq!(u[0].name, "refs/heads/x\n");
        let none = |_: &str| false;
        for name in [
            "refs/heads/x\n",
            "refs/heads/a..b",
            "refs/heads/a b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/x/",
            "refs/heads/a@{1}",
            "refs/heads/a\\b",
        ] {
            let u = RefUpdate {
                old: ZERO.into(),
                new: a.clone(),
                name: name.into(),
            };
            assert_eq!(
                check(&u, "main", &none).unwrap_err().0,
                "push: ref",
                "{name:?}"
            );
        }
    }

    #[test]
    fn ref_updates_are_read_and_checked() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let body = format!(
            "{}{}0000PACK",
            pkt(&format!(
                "{ZERO} {a} refs/heads/feature\0report-status side-band-64k\n"
            )),
            pkt(&format!("{a} {b} refs/heads/main\n"))
        );
        let u = ref_updates(body.as_bytes()).unwrap();
        assert_eq!(u.len(), 2);
        assert!(u[0].is_create());
        let none = |_: &str| false;
        assert_eq!(check(&u[0], "main", &none), Ok("feature"));
        assert_eq!(
            check(&u[1], "main", &|_| true).unwrap_err().0,
            "push: default branch"
        );
        let tag = RefUpdate {
            old: ZERO.into(),
            new: a.clone(),
            name: "refs/tags/v1".into(),
        };
        assert_eq!(check(&tag, "main", &none).unwrap_err().0, "push: tag");
        let del = RefUpdate {
            old: a.clone(),
            new: ZERO.into(),
            name: "refs/heads/x".into(),
        };
        assert_eq!(
            check(&del, "main", &|_| true).unwrap_err().0,
            "push: delete"
        );
        let upd = RefUpdate {
            old: a,
            new: b,
            name: "refs/heads/x".into(),
        };
        assert_eq!(check(&upd, "main", &none).unwrap_err().0, "push: branch");
        assert_eq!(pack_of(body.as_bytes()), b"PACK");
        for bad in [&b""[..], b"zzzz", b"0000", b"0009abc\n0000"] {
            assert!(ref_updates(bad).is_err());
        }
    }
}

/// One pkt-line of `data`.
fn pkt(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", data.len() + 4).into_bytes();
    out.extend_from_slice(data);
    out
}

/// git's answer to a push refused whole, in receive-pack's own report-status (inside
/// side-band channel 1 when the client asked for side-band, with the reason on channel 2
/// too, which git prints as `remote: ...`), so `git push` prints `! [remote rejected] REF
/// (Airlock: why)`. `None` when the request is no push this reads or asked for no report
/// (the caller answers with a bare HTTP refusal then).
pub fn refused_report(body: &[u8], why: &str) -> Option<Vec<u8>> {
    let updates = ref_updates(body).ok()?;
    let first_len = usize::from_str_radix(std::str::from_utf8(body.get(..4)?).ok()?, 16).ok()?;
    let first = body.get(4..first_len)?;
    let caps = first
        .splitn(2, |&b| b == 0)
        .nth(1)
        .map(|c| String::from_utf8_lossy(c).to_string())
        .unwrap_or_default();
    let caps: Vec<&str> = caps.split_whitespace().collect();
    if !caps
        .iter()
        .any(|c| *c == "report-status" || *c == "report-status-v2")
    {
        return None;
    }
    // One line, no control characters: the reason is git's to print as it is.
    let why: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(400)
        .collect();
    let mut report = pkt(b"unpack ok\n");
    for u in &updates {
        report.extend(pkt(format!("ng {} Airlock: {why}\n", u.name).as_bytes()));
    }
    report.extend_from_slice(b"0000");
    let band = if caps.contains(&"side-band-64k") {
        Some(65515)
    } else if caps.contains(&"side-band") {
        Some(995)
    } else {
        None
    };
    let Some(max) = band else {
        return Some(report);
    };
    let mut out = Vec::new();
    let mut progress = vec![2u8];
    progress.extend_from_slice(format!("Airlock: {why}\n").as_bytes());
    out.extend(pkt(&progress));
    for chunk in report.chunks(max) {
        let mut data = vec![1u8];
        data.extend_from_slice(chunk);
        out.extend(pkt(&data));
    }
    out.extend_from_slice(b"0000");
    Some(out)
}

#[cfg(test)]
mod report_tests {
    use super::*;

    #[test]
    fn a_refused_push_is_reported_as_receive_pack_reports_it() {
        let line = format!(
            "{ZERO} {} refs/heads/main\0report-status side-band-64k agent=git/2\n",
            "a".repeat(40)
        );
        let mut body = pkt(line.as_bytes());
        body.extend_from_slice(b"0000PACK");
        let out = refused_report(&body, "push to the default branch").unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.contains("\u{2}Airlock: push to the default branch\n"),
            "{text}"
        );
        assert!(
            text.contains("ng refs/heads/main Airlock: push to the default branch\n"),
            "{text}"
        );
        assert!(text.ends_with("0000"));
        let plain = format!("{ZERO} {} refs/heads/x\0report-status\n", "b".repeat(40));
        let mut body = pkt(plain.as_bytes());
        body.extend_from_slice(b"0000");
        let out = refused_report(&body, "x\ny").unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out),
            "000eunpack ok\n0021ng refs/heads/x Airlock: x y\n0000"
        );
        let none = format!("{ZERO} {} refs/heads/x\0agent=git/2\n", "b".repeat(40));
        assert!(refused_report(&pkt(none.as_bytes()), "x").is_none());
    }
}
