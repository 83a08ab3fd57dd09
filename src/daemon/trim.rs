//! Giving memory back once idle. glibc keeps what a burst of runs freed in its arenas (one
//! per thread that allocated), so airlockd's RSS settles above where it started though
//! nothing of the runs is live: heaptrack over a 1,000-run soak found 0.5 MB live at the
//! end and a 2.7 MB heap peak against an RSS that crept by megabytes. Whenever the last
//! active run closes, `malloc_trim` hands the free pages back (it walks a heap of a few
//! megabytes: well under a millisecond, against a run's launch and close).
//!
//! The arenas are bounded too: each of the blocking pool's threads (fsync, fork/exec) would
//! otherwise get an arena of its own the first time it allocates, and a 10,000-run soak saw
//! RSS step up by 2.3 MB the moment launches went 8 at a time and stay there.
//!
//! And glibc's per-thread caches of freed chunks (tcache) are off: with them, the soak's
//! RSS crept by about 100 bytes a run one at a time and by 2.9 MB over the whole 10,000
//! while heaptrack saw the heap's peak the same after 400 runs as after 2,000 (2.54 MB) and
//! nothing more left at exit: the allocator's keeping, not a leak. Without them it stays
//! flat. glibc reads that setting only from `GLIBC_TUNABLES` as the process starts, so
//! airlockd executes itself again once with it set ([`without_thread_caches`]).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

/// The tunable airlockd runs with.
const NO_TCACHE: &str = "glibc.malloc.tcache_count=0";
const TUNABLES: &str = "GLIBC_TUNABLES";

/// At most this many malloc arenas: the main one and one the workers share. Contention is
/// no concern here (a launch allocates kilobytes); memory that stays with idle threads is.
const ARENAS: libc::c_int = 2;

/// Call first thing in airlockd, before the runtime starts any thread.
pub fn bound_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes a tuning parameter of the allocator; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Call first thing in airlockd, while it is one thread: unless glibc already runs with the
/// tunable (or an operator's own tcache setting), execute this binary again, same pid and
/// arguments, with it added to `GLIBC_TUNABLES`; once running with it, put the variable back
/// as it was, so nothing airlockd starts inherits it. Where the executable cannot be found
/// again (replaced under a running unit) or the exec fails, go on as is: memory, not
/// isolation, is at stake.
pub fn without_thread_caches() {
    if !cfg!(target_env = "gnu") {
        return;
    }
    let current = std::env::var(TUNABLES).ok();
    match tuned(current.as_deref()) {
        Tuned::Yes(original) => {
            match original {
                Some(v) => std::env::set_var(TUNABLES, v),
                None => std::env::remove_var(TUNABLES),
            }
            return;
        }
        Tuned::ByOperator => return,
        Tuned::No => {}
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return eprintln!("airlockd: running with glibc's thread caches (its own executable cannot be found again: {e})"),
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("airlockd"));
    let value = match &current {
        Some(v) if !v.is_empty() => format!("{v}:{NO_TCACHE}"),
        _ => NO_TCACHE.to_string(),
    };
    // Only returns on failure.
    let e = std::process::Command::new(exe)
        .arg0(arg0)
        .args(args)
        .env(TUNABLES, value)
        .exec();
    eprintln!(
        "airlockd: running with glibc's thread caches (could not execute itself without them: {e})"
    );
}

#[derive(Debug, PartialEq, Eq)]
enum Tuned<'a> {
    /// Running with airlockd's tunable; the variable as it was before it was added.
    Yes(Option<&'a str>),
    /// The operator set tcache_count themselves: left alone.
    ByOperator,
    No,
}

/// Whether `GLIBC_TUNABLES` (its value, if set) holds airlockd's tunable, last, as
/// [`without_thread_caches`] adds it.
fn tuned(current: Option<&str>) -> Tuned<'_> {
    let Some(v) = current else {
        return Tuned::No;
    };
    if v == NO_TCACHE {
        return Tuned::Yes(None);
    }
    if let Some(before) = v.strip_suffix(NO_TCACHE).and_then(|b| b.strip_suffix(':')) {
        return Tuned::Yes(Some(before));
    }
    if v.split(':')
        .any(|t| t.starts_with("glibc.malloc.tcache_count="))
    {
        return Tuned::ByOperator;
    }
    Tuned::No
}

/// The daemon has no active run now.
pub fn when_idle() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunable_is_added_once_and_taken_out_again() {
        assert_eq!(tuned(None), Tuned::No);
        assert_eq!(tuned(Some("glibc.malloc.check=0")), Tuned::No);
        assert_eq!(tuned(Some(NO_TCACHE)), Tuned::Yes(None));
        assert_eq!(
            tuned(Some("glibc.malloc.check=0:glibc.malloc.tcache_count=0")),
            Tuned::Yes(Some("glibc.malloc.check=0"))
        );
        assert_eq!(
            tuned(Some("glibc.malloc.tcache_count=3")),
            Tuned::ByOperator
        );
    }
}
