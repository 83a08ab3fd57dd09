//! A run's role decisions, replaceable while the run lives: a change decision that only
//! narrows (issue 45) reaches the run at its next gateway call. The gateway reads the
//! current policy once per call ([`LivePolicy::get`]); airlockd, which owns the run, is the
//! only one that replaces it ([`LivePolicy::narrow`]).

use std::sync::{Arc, RwLock};

use crate::policy::RolePolicy;

#[derive(Debug, Clone)]
pub struct LivePolicy(Arc<RwLock<Arc<RolePolicy>>>);

impl LivePolicy {
    pub fn new(p: Arc<RolePolicy>) -> LivePolicy {
        LivePolicy(Arc::new(RwLock::new(p)))
    }

    /// The decisions in force now (one call decides by one policy throughout).
    pub fn get(&self) -> Arc<RolePolicy> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the decisions: the caller has checked that `p` grants nothing the policy in
    /// force does not.
    pub fn narrow(&self, p: Arc<RolePolicy>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = p;
    }
}
