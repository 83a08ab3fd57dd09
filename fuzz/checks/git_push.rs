// A receive-pack request body as the GitHub route reads it before passing it on: its ref
// updates and where its pack starts. Invariant: what ref_updates accepts is exactly what a
// strict reader of git's pkt-line format (four hex digits of length, then the line; git's
// receive-pack: the ref name ends at a NUL, one trailing newline chomped) reads, so the
// updates checked are the updates git will apply; and the pack starts right after them.
use airlock::gateway::github::push::{pack_of, ref_updates};

pub fn check(body: &[u8]) {
    let Ok(updates) = ref_updates(body) else {
        return;
    };
    let (strict, pack_at) = strict(body).expect("ref_updates accepted what git's pkt-line reader refuses");
    let ours: Vec<(String, String, String)> = updates
        .iter()
        .map(|u| (u.old.clone(), u.new.clone(), u.name.clone()))
        .collect();
    assert_eq!(ours, strict, "the updates checked are not the updates git reads");
    assert_eq!(
        pack_of(body).len(),
        body.len() - pack_at,
        "the pack is not what follows the updates"
    );
}

type Updates = Vec<(String, String, String)>;

fn strict(body: &[u8]) -> Option<(Updates, usize)> {
    let mut at = 0;
    let mut out = Vec::new();
    loop {
        let head = body.get(at..at + 4)?;
        if !head.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let len = usize::from_str_radix(std::str::from_utf8(head).ok()?, 16).ok()?;
        if len == 0 {
            return Some((out, at + 4));
        }
        let line = body.get(at + 4..at.checked_add(len)?)?;
        at += len;
        let line = line.split(|&b| b == 0).next().unwrap_or(line);
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = std::str::from_utf8(line).ok()?;
        let mut f = line.splitn(3, ' ');
        let (old, new, name) = (f.next()?, f.next()?, f.next()?);
        out.push((old.to_ascii_lowercase(), new.to_ascii_lowercase(), name.to_string()));
    }
}
