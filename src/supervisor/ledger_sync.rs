//! Group commit for the ledger: records are written under the ledger's lock, and made
//! durable after it is released, one `fdatasync` covering every record written before it
//! started. Launches (and run closings) that arrive together share one sync instead of
//! queueing on the lock for one each; none is told its record is durable before a sync
//! that began after its write has returned.
//!
//! A failed sync fails every waiter whose bytes it was to cover and every later one: what
//! reached the disk is unknown, so the ledger refuses further appends until it is reopened
//! (see `Ledger::append_all`).

use std::fs::File;
use std::io;
use std::sync::{Condvar, Mutex, MutexGuard};

/// What can be made durable: the ledger's file (a descriptor of it), or a test's stand-in.
pub trait Durable: Send + Sync + std::fmt::Debug {
    fn sync(&self) -> io::Result<()>;
}

impl Durable for File {
    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Bytes of the file written (the ledger's length after its last write).
    written: u64,
    /// Bytes known durable.
    synced: u64,
    /// A sync is under way (its caller syncs for everyone).
    syncing: bool,
    /// A sync failed: nothing after `synced` can be told durable any more.
    failed: bool,
}

/// The ledger's file's durability, shared by its writers.
#[derive(Debug)]
pub struct GroupSync<D: Durable = File> {
    target: D,
    state: Mutex<State>,
    done: Condvar,
}

impl<D: Durable> GroupSync<D> {
    /// `len`: bytes of the file already durable (as opened).
    pub fn new(target: D, len: u64) -> GroupSync<D> {
        GroupSync {
            target,
            state: Mutex::new(State {
                written: len,
                synced: len,
                ..State::default()
            }),
            done: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file's length is `end` after a write (called under the ledger's lock, in order).
    pub fn wrote(&self, end: u64) {
        let mut s = self.lock();
        s.written = s.written.max(end);
    }

    /// Whether a sync has failed.
    pub fn failed(&self) -> bool {
        self.lock().failed
    }

    /// Bytes known durable.
    pub fn synced(&self) -> u64 {
        self.lock().synced
    }

    /// Until the file's first `end` bytes are durable. The first waiter to find no sync
    /// under way syncs everything written so far; the others wait for it, or for the next.
    pub fn wait(&self, end: u64) -> io::Result<()> {
        let mut s = self.lock();
        loop {
            if s.synced >= end {
                return Ok(());
            }
            if s.failed {
                return Err(io::Error::other(
                    "an earlier sync of the ledger failed; what it held is not known to be on disk",
                ));
            }
            if s.syncing {
                s = self.done.wait(s).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            s.syncing = true;
            let upto = s.written;
            drop(s);
            let r = self.target.sync();
            s = self.lock();
            s.syncing = false;
            match &r {
                Ok(()) => s.synced = s.synced.max(upto),
                Err(_) => s.failed = true,
            }
            self.done.notify_all();
            r?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts syncs; each takes a moment so that waiters pile up behind it.
    #[derive(Debug, Default)]
    struct Counted {
        syncs: AtomicUsize,
        fail: AtomicBool,
    }

    impl Durable for Arc<Counted> {
        fn sync(&self) -> io::Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(20));
            if self.fail.load(Ordering::SeqCst) {
                return Err(io::Error::other("injected"));
            }
            Ok(())
        }
    }

    #[test]
    fn writers_that_wait_together_share_a_sync() {
        let c = Arc::new(Counted::default());
        let g = Arc::new(GroupSync::new(c.clone(), 0));
        // Sixteen records written before anyone waits: one sync covers them all.
        for i in 1..=16u64 {
            g.wrote(i * 10);
        }
        let waiters: Vec<_> = (1..=16u64)
            .map(|i| {
                let g = g.clone();
                std::thread::spawn(move || g.wait(i * 10))
            })
            .collect();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        assert_eq!(c.syncs.load(Ordering::SeqCst), 1);
        assert_eq!(g.synced(), 160);
        // Nothing new written: waiting again costs no sync.
        g.wait(160).unwrap();
        assert_eq!(c.syncs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_write_after_a_sync_began_waits_for_the_next() {
        let c = Arc::new(Counted::default());
        let g = Arc::new(GroupSync::new(c.clone(), 5));
        g.wrote(10);
        let first = {
            let g = g.clone();
            std::thread::spawn(move || g.wait(10))
        };
        // The first sync is under way (it sleeps) before this write.
        while c.syncs.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        g.wrote(20);
        g.wait(20).unwrap();
        first.join().unwrap().unwrap();
        assert_eq!(c.syncs.load(Ordering::SeqCst), 2);
        assert_eq!(g.synced(), 20);
    }

    #[test]
    fn a_failed_sync_fails_its_waiters_and_every_later_one() {
        let c = Arc::new(Counted::default());
        let g = GroupSync::new(c.clone(), 0);
        c.fail.store(true, Ordering::SeqCst);
        g.wrote(10);
        assert!(g.wait(10).is_err());
        assert!(g.failed());
        c.fail.store(false, Ordering::SeqCst);
        g.wrote(20);
        assert!(g.wait(20).is_err());
        assert_eq!(g.synced(), 0);
        // What was durable before stays so.
        assert!(g.wait(0).is_ok());
    }
}
