//! What the command side's own user namespace adds to a launch
//! (`airlock::sandbox::command_userns`): making it (a child that unshares it as the owner
//! uid, the maps written through a /proc stacked for the moment, the namespace opened) and
//! joining it with setns from a forked child, as the runner and the noexec runner each do;
//! beside a bare fork and wait of the same child, for scale. p50 and p99 over N rounds.
//! Root only; it works in a private mount namespace of its own.
//!
//! Run: `cargo bench --bench command_userns` (N=300 by default, `N=...` to change).

use std::time::{Duration, Instant};

use airlock::sandbox::command_userns;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, ForkResult};

const UID: u32 = 1_880_099_901;

/// Fork a child that runs `child` and _exits with its verdict; wait for it.
fn in_child(child: impl FnOnce() -> bool) -> bool {
    // SAFETY: this benchmark is single-threaded; the child _exits.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let ok = child();
            // SAFETY: leave without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        ForkResult::Parent { child } => matches!(
            waitpid(child, None),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0))
        ),
    }
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}

fn main() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "benches/command_userns: run as root"
    );
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    unshare(CloneFlags::CLONE_NEWNS).expect("unshare a mount namespace");
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .expect("make the mounts private");
    let (mut made, mut bare) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        let ns = command_userns::make(UID, UID).expect("make the namespace");
        assert!(in_child(move || command_userns::enter(ns).is_ok()));
        made.push(t.elapsed());
        let t = Instant::now();
        assert!(in_child(|| true));
        bare.push(t.elapsed());
    }
    let (m50, m99) = percentiles(made);
    let (b50, b99) = percentiles(bare);
    println!(
        "command side's user namespace, made and joined: p50 {m50:.0} us, p99 {m99:.0} us; a bare fork and wait: p50 {b50:.0} us, p99 {b99:.0} us (N={n})"
    );
}
