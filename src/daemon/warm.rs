//! Jails built ahead of launches (warm jails). Each is a jail helper that has built the
//! part of the jail that is the same for every run (pid, mount, ipc, uts and network
//! namespaces, system directories, /etc, /dev, /proc) and the cgroups of the run it was
//! started for (the sides' too, limited once the spec comes), and waits for a spec. A
//! launch takes one, so only the run's own part of the jail is left between its record and
//! its agent's start.
//!
//! The pool keeps `warm: {ROLE: N}` jails for each named role's launches and one shared
//! jail for a launch of any role, `warm_max` at most in all (see [`crate::config::warm`]).
//! A jail serves one run only: taking it moves it out of the pool. One older than
//! [`MAX_AGE`], or built before the last reload, is dropped and never given; dropping it
//! kills its helper and removes its cgroups. Refills build one jail at a time, each helper
//! under SCHED_IDLE until its run comes (`airlock-jail --idle`). A warm jail
//! holds no ledger record, no credential and nothing of any instance: the run's identity,
//! home, workspace, limits and policy come with its spec. The run it gets is supervised by
//! a task of airlockd's runtime ([`runs::supervise_run`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::runs::{self, Go};
use super::Daemon;
use crate::control::protocol::WarmStatus;
use crate::sandbox::helper::Ahead;
use crate::sandbox::host_mounts::MountWatch;
use crate::supervisor::ahead_marks;
use crate::supervisor::launch::{self, LaunchError};
use crate::supervisor::process::{self, Spawned};

/// A jail older than this is replaced instead of used: its /etc is a copy as old as it
/// is. (Its copy of the host's mounts is thrown away at the host's next mount or unmount,
/// see [`Inner::host_mounts`].)
pub const MAX_AGE: Duration = Duration::from_secs(30);

/// How long after a launch took a role's warm jail its place is built again.
pub const REFILL_DELAY: Duration = Duration::from_millis(250);

/// Where a launch's jail came from, as the run's journal tells it (`AIRLOCK_JAIL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warmth {
    /// Kept warm for the run's role.
    Role,
    /// The shared jail, kept for a launch of any role.
    Shared,
    /// Started by the launch itself: none was ready.
    Cold,
}

impl Warmth {
    pub fn as_str(self) -> &'static str {
        match self {
            Warmth::Role => "warm-role",
            Warmth::Shared => "warm-shared",
            Warmth::Cold => "cold",
        }
    }
}

/// A helper waiting for its run.
struct Ready {
    helper: Spawned,
    /// The run id and cgroup parent it was started for: the run must use them.
    slot: Ahead,
    born: Instant,
    /// The pool's generation it was built in.
    generation: u64,
}

impl Ready {
    fn usable(&mut self, generation: u64) -> bool {
        self.generation == generation && self.born.elapsed() < MAX_AGE && self.helper.alive()
    }
}

/// Which part of the pool a jail belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Shared,
    Role(String),
}

#[derive(Default)]
struct Inner {
    shared: Option<Ready>,
    /// By role class; the oldest first, so the jails are used before they expire.
    roles: BTreeMap<String, VecDeque<Ready>>,
    /// Moved on by every reload: a jail of an older generation is never given.
    generation: u64,
    /// A refill is under way (one at a time builds the missing jails one by one).
    refilling: bool,
    /// The host's mount table, watched from the first jail on (see [`Inner::host_mounts`]).
    mounts: Option<MountWatch>,
}

impl Inner {
    fn len(&self) -> usize {
        usize::from(self.shared.is_some()) + self.roles.values().map(VecDeque::len).sum::<usize>()
    }

    /// The next jail a refill should build under `conf`, if one is missing: the roles'
    /// first (in name order), then the shared one, within the bound.
    fn missing(&self, conf: &crate::config::warm::WarmConf) -> Option<Place> {
        // Without a watch on the host's mounts no jail could be told current: none is built.
        if self.len() >= conf.max || self.mounts.is_none() {
            return None;
        }
        let have = |r: &str| self.roles.get(r).map_or(0, VecDeque::len);
        let short = conf
            .roles
            .iter()
            .map(|(r, n)| (crate::policy::classes::canonicalize(r), *n))
            .find(|(c, n)| have(c) < *n);
        if let Some((class, _)) = short {
            return Some(Place::Role(class.to_string()));
        }
        (self.shared.is_none() && conf.shared()).then_some(Place::Shared)
    }

    /// Every jail out of the pool if the host's mounts changed since the last look (a new
    /// generation): each jail's mount namespace is a copy of the host's as it was built, and
    /// its run's workspace and home are opened through it, so after a mount or unmount it
    /// would bind another directory than the one the launch checked. Not knowing (no
    /// watch) counts as a change, and then [`Inner::missing`] builds nothing.
    fn host_mounts(&mut self) -> Vec<Ready> {
        let changed = match &self.mounts {
            Some(w) => w.changed(),
            None => {
                self.mounts = MountWatch::open().ok();
                true
            }
        };
        if !changed {
            return Vec::new();
        }
        self.generation += 1;
        self.drain()
    }

    /// Every jail out of the pool (to be abandoned outside the lock).
    fn drain(&mut self) -> Vec<Ready> {
        let mut out: Vec<Ready> = self.shared.take().into_iter().collect();
        for (_, q) in std::mem::take(&mut self.roles) {
            out.extend(q);
        }
        out
    }
}

#[derive(Default)]
pub struct WarmPool {
    inner: Mutex<Inner>,
}

/// Start a helper ahead of its run with the state directory's note of it, made first: the
/// helper makes the run's cgroups at once, and if it is killed with airlockd, the next
/// start removes them ([`ahead_marks`]).
fn spawn_marked(
    d: &Daemon,
    slot: &Ahead,
    spawn: impl FnOnce(&Ahead) -> Result<Spawned, LaunchError>,
) -> Result<Spawned, LaunchError> {
    let mark = ahead_marks::Mark::make(&d.set().config.state_dir, slot);
    let mut helper = spawn(slot)?;
    helper.keep_mark(mark);
    Ok(helper)
}

/// Kill and reap each helper, removing the cgroups it made. Blocking.
fn abandon_all(jails: Vec<Ready>) {
    for r in jails {
        r.helper.abandon();
    }
}

impl WarmPool {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A jail for one launch of role `class`: one kept for the role, else the shared one,
    /// else a new one started now. Blocking (stale jails are reaped, a new one spawned).
    pub fn take(d: &Arc<Daemon>, class: &str) -> Taken {
        let mut stale;
        let found = {
            let mut p = d.warm.lock();
            stale = p.host_mounts();
            let generation = p.generation;
            let mut found = None;
            if let Some(q) = p.roles.get_mut(class) {
                while let Some(mut r) = q.pop_front() {
                    if r.usable(generation) {
                        found = Some((r, Warmth::Role));
                        break;
                    }
                    stale.push(r);
                }
            }
            if found.is_none() {
                if let Some(mut r) = p.shared.take() {
                    if r.usable(generation) {
                        found = Some((r, Warmth::Shared));
                    } else {
                        stale.push(r);
                    }
                }
            }
            found
        };
        // One that died while waiting (killed by hand, say) is replaced too; after a change
        // of the host's mounts the pool is built again for the new table.
        let remounted = found.is_none() && !stale.is_empty();
        abandon_all(stale);
        if remounted {
            WarmPool::kick_later(d);
        }
        match found {
            Some((r, warmth)) => {
                // A role's place is built again shortly, so a long run does not leave its
                // role without one; the shared jail is rebuilt when a run ends.
                if warmth == Warmth::Role {
                    WarmPool::kick_later(d);
                }
                Taken {
                    slot: r.slot,
                    helper: Ok(r.helper),
                    warmth,
                }
            }
            None => {
                let slot = launch::new_slot(d.cgroup_parent.clone());
                let helper = spawn_marked(d, &slot, |s| process::spawn_helper(Some(s), None));
                Taken {
                    slot,
                    helper,
                    warmth: Warmth::Cold,
                }
            }
        }
    }

    /// A helper of its own for a `--tty` launch: `stdio` becomes the jail's socket the
    /// pty's master comes back on (a warm jail has none). Blocking (a spawn).
    pub fn take_with_stdio(d: &Arc<Daemon>, stdio: &std::os::fd::OwnedFd) -> Taken {
        let slot = launch::new_slot(d.cgroup_parent.clone());
        let helper = spawn_marked(d, &slot, |s| process::spawn_helper(Some(s), Some(stdio)));
        Taken {
            slot,
            helper,
            warmth: Warmth::Cold,
        }
    }

    /// Refill the pool in the background (a blocking task of the runtime), unless a
    /// refill is under way; without a runtime, here and now.
    pub fn kick(d: &Arc<Daemon>) {
        let d2 = d.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || WarmPool::refill(&d2));
            }
            Err(_) => WarmPool::refill(&d2),
        }
    }

    /// [`WarmPool::kick`] after [`REFILL_DELAY`]: building a jail takes kernel locks the
    /// launch that just took one needs for its own setup (the mount and network namespace
    /// locks know no CPU priority), so the refill waits until that setup is done.
    fn kick_later(d: &Arc<Daemon>) {
        let d2 = d.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    tokio::time::sleep(REFILL_DELAY).await;
                    WarmPool::kick(&d2);
                });
            }
            Err(_) => WarmPool::refill(&d2),
        }
    }

    /// Build the jails the config asks for and the pool lacks, one at a time, unless the
    /// daemon is draining or another refill is under way. Best effort: a jail that cannot
    /// be started now is left to the next refill, and its launch starts its own helper.
    /// Blocking (spawns).
    pub fn refill(d: &Arc<Daemon>) {
        {
            let mut p = d.warm.lock();
            if p.refilling {
                return;
            }
            p.refilling = true;
        }
        loop {
            let next = {
                let mut p = d.warm.lock();
                let stale = p.host_mounts();
                if !stale.is_empty() {
                    drop(p);
                    abandon_all(stale);
                    p = d.warm.lock();
                }
                // Read under the lock: a reload swaps the set before its `clear` takes the
                // lock, so this is the set of the generation taken below (read before the
                // lock, it could be the replaced one, built for under the new generation:
                // a jail after a reload to `warm_max: 0`).
                let conf = d.set().config.warm.clone();
                match p.missing(&conf).filter(|_| !d.is_draining()) {
                    Some(place) => Some((place, p.generation)),
                    None => {
                        p.refilling = false;
                        None
                    }
                }
            };
            let Some((place, generation)) = next else {
                return;
            };
            let slot = launch::new_slot(d.cgroup_parent.clone());
            let Ok(helper) = spawn_marked(d, &slot, process::spawn_warm_helper) else {
                d.warm.lock().refilling = false;
                return;
            };
            let ready = Ready {
                helper,
                slot,
                born: Instant::now(),
                generation,
            };
            let mut p = d.warm.lock();
            // Built across a reload or into a drain: not for any launch. After a reload the
            // loop goes on for the new set (the reload's own refill found this one under way).
            if p.generation != generation || d.is_draining() {
                drop(p);
                ready.helper.abandon();
                continue;
            }
            match place {
                Place::Shared => p.shared = Some(ready),
                Place::Role(r) => p.roles.entry(r).or_default().push_back(ready),
            }
        }
    }

    /// Drop every jail and wait until its helper is gone and its cgroups are removed
    /// (the daemon is draining, or a reload changed what a jail may be). Blocking.
    pub fn clear(&self) {
        let all = {
            let mut p = self.lock();
            p.generation += 1;
            p.drain()
        };
        abandon_all(all);
    }

    /// Drop jails older than [`MAX_AGE`] (or whose helper died). The roles' are built
    /// again (the config asks for them); the shared one is not, until the next run ends,
    /// so a host without `warm` keeps no copy of its mounts busy longer than that after
    /// its last run. Blocking.
    pub fn expire(d: &Arc<Daemon>) {
        let stale = {
            let mut p = d.warm.lock();
            let mut stale = p.host_mounts();
            let generation = p.generation;
            if p.shared.as_mut().is_some_and(|r| !r.usable(generation)) {
                stale.extend(p.shared.take());
            }
            for q in p.roles.values_mut() {
                for mut r in std::mem::take(q) {
                    if r.usable(generation) {
                        q.push_back(r);
                    } else {
                        stale.push(r);
                    }
                }
            }
            stale
        };
        abandon_all(stale);
        if !d.set().config.warm.roles.is_empty() {
            WarmPool::refill(d);
        }
    }

    /// How many jails wait, for `status`.
    pub fn status(&self) -> WarmStatus {
        let p = self.lock();
        WarmStatus {
            shared: usize::from(p.shared.is_some()),
            roles: p
                .roles
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(r, q)| (r.clone(), q.len()))
                .collect(),
        }
    }
}

/// A helper taken by a launch: it either gets the launch's run or is abandoned.
pub struct Taken {
    /// The run id and cgroup parent the run must use (its helper was started for them).
    pub slot: Ahead,
    helper: Result<Spawned, LaunchError>,
    pub warmth: Warmth,
}

impl Taken {
    /// Hand the helper its run, supervised from here on by a task of airlockd's runtime.
    /// False: no runtime to supervise it on (the helper is gone, and the run with it).
    pub fn start(self, d: &Arc<Daemon>, go: Go) -> bool {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(runs::supervise_run(d.clone(), Box::new(go), self.helper));
                true
            }
            Err(_) => {
                self.abandon();
                false
            }
        }
    }

    /// The launch was refused: end the helper and wait until it is gone and the cgroups it
    /// made for the run are removed, so a refused launch leaves nothing behind even when
    /// airlockd exits right after. Blocking.
    pub fn abandon(self) {
        if let Ok(sp) = self.helper {
            sp.abandon();
        }
    }
}
