//! Connection slots of the control socket: how many peers airlockd serves at once, decided
//! from the peer's kernel credentials (SO_PEERCRED) before the peer gets a slot, so no
//! operator, however many connections it opens, can keep an admin or root out:
//!
//! - each uid but root holds at most [`Limits::per_uid`] slots;
//! - the last [`Limits::admin_reserve`] slots are for admins and root only, and the last
//!   [`Limits::root_reserve`] of those for root alone.
//!
//! A slot is held while airlockd reads the request (bounded by the read timeout: a peer
//! that sends nothing is dropped) and answers it; a `launch --wait` gives it back once its
//! run has started (the run cap bounds those). The decision is [`admits`], pure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The shape of the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub total: usize,
    pub admin_reserve: usize,
    pub root_reserve: usize,
    pub per_uid: usize,
}

/// airlockd's: 128 slots, 16 of them admins' and root's, 4 of those root's; 8 per uid.
pub const LIMITS: Limits = Limits {
    total: 128,
    admin_reserve: 16,
    root_reserve: 4,
    per_uid: 8,
};

/// Who a peer is, for the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Root,
    Admin,
    /// An operator, or a peer in no group (refused once its request is read).
    Other,
}

/// Why a peer got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// Its uid holds its share already.
    PerUid(usize),
    /// Every slot its class may take is in use.
    Full,
}

impl Busy {
    /// What the peer is told.
    pub fn message(&self, uid: u32) -> String {
        match self {
            Busy::PerUid(n) => format!(
                "uid {uid} has {n} connections to airlockd open already, the most one user may; close one and try again"
            ),
            Busy::Full => {
                "airlockd has too many connections open; try again in a moment".to_string()
            }
        }
    }
}

/// Whether a peer of `class` gets one more slot when `in_use` are taken and its uid holds
/// `mine` of them.
pub fn admits(l: &Limits, class: Class, in_use: usize, mine: usize) -> Result<(), Busy> {
    let (cap, per_uid) = match class {
        Class::Root => (l.total, None),
        Class::Admin => (l.total - l.root_reserve, Some(l.per_uid)),
        Class::Other => (l.total - l.admin_reserve, Some(l.per_uid)),
    };
    if let Some(n) = per_uid.filter(|n| mine >= *n) {
        return Err(Busy::PerUid(n));
    }
    if in_use >= cap {
        return Err(Busy::Full);
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Held {
    in_use: usize,
    by_uid: HashMap<u32, usize>,
}

/// The slots in use, shared by every connection.
#[derive(Debug)]
pub struct Slots {
    limits: Limits,
    held: Mutex<Held>,
}

/// One slot, given back on drop.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    uid: u32,
}

impl Slots {
    pub fn new(limits: Limits) -> Arc<Slots> {
        Arc::new(Slots {
            limits,
            held: Mutex::new(Held::default()),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        // The counts stay consistent whatever panicked while holding the lock: each
        // change is one statement.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a peer `uid` of `class`, or why not.
    pub fn take(self: &Arc<Self>, uid: u32, class: Class) -> Result<Slot, Busy> {
        let mut h = self.held();
        let mine = h.by_uid.get(&uid).copied().unwrap_or(0);
        admits(&self.limits, class, h.in_use, mine)?;
        h.in_use += 1;
        *h.by_uid.entry(uid).or_insert(0) += 1;
        Ok(Slot {
            slots: self.clone(),
            uid,
        })
    }

    /// Slots taken now.
    pub fn in_use(&self) -> usize {
        self.held().in_use
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut h = self.slots.held();
        h.in_use = h.in_use.saturating_sub(1);
        if let Some(n) = h.by_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                h.by_uid.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_can_fill_neither_the_admins_nor_roots_slots() {
        let s = Slots::new(LIMITS);
        let mut held = Vec::new();
        // Operators, 8 each, until the shared slots are gone.
        let mut uid = 1000;
        loop {
            match s.take(uid, Class::Other) {
                Ok(slot) => held.push(slot),
                Err(Busy::PerUid(8)) => uid += 1,
                Err(Busy::Full) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(s.in_use(), 112);
        assert_eq!(s.take(5000, Class::Other).unwrap_err(), Busy::Full);
        // Admins get the reserve, 8 each, but never root's last 4.
        for a in 0..12 {
            held.push(s.take(900 + a / 8, Class::Admin).expect("admin slot"));
        }
        assert_eq!(s.take(902, Class::Admin).unwrap_err(), Busy::Full);
        for _ in 0..4 {
            held.push(s.take(0, Class::Root).expect("root slot"));
        }
        assert_eq!(s.take(0, Class::Root).unwrap_err(), Busy::Full);
        // Given back on drop.
        held.clear();
        assert_eq!(s.in_use(), 0);
        let one = s.take(1000, Class::Other).expect("free again");
        drop(one);
        assert!(s.held().by_uid.is_empty());
    }

    #[test]
    fn one_uid_holds_at_most_its_share() {
        let s = Slots::new(LIMITS);
        let held: Vec<Slot> = (0..8)
            .map(|_| s.take(1001, Class::Other).unwrap())
            .collect();
        assert_eq!(s.take(1001, Class::Other).unwrap_err(), Busy::PerUid(8));
        assert!(s.take(1002, Class::Other).is_ok());
        assert!(s.take(0, Class::Root).is_ok());
        drop(held);
        assert!(s.take(1001, Class::Other).is_ok());
    }
}
