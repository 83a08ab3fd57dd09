//! One compiled policy per frozen role revision, shared by every live run of it. Compiling a
//! role's decisions builds its regexes (bash prefixes, tool argument patterns): about 65 kB
//! per run that heaptrack found held by each of 200 live runs of the same revision, the
//! largest part of airlockd's memory per run. A revision's policy is a pure function of its
//! role and the set's policies, so the runs of one revision under one set can share it.
//!
//! Entries are weak: a revision no live run uses any more costs nothing, and its next run
//! compiles it again. The cache lives in the loaded set, so a reload (new policies) starts
//! empty.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Values of type `V` built from a source `S`, shared while anything holds them, looked up
/// by a key (a revision's class and sha256). The source is kept and compared on every
/// lookup: a value is only reused for the very source it was built from, whatever the key
/// says, so a revision folder changed under its name gets its own value.
pub struct Shared<S, V> {
    entries: Mutex<HashMap<String, (S, Weak<V>)>>,
}

impl<S: PartialEq + Clone, V> Default for Shared<S, V> {
    fn default() -> Self {
        Shared {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<S: PartialEq + Clone, V> Shared<S, V> {
    /// The value for `key` built from `source`: the one live runs already share, or a new
    /// one from `build`.
    pub fn get(&self, key: &str, source: &S, build: impl FnOnce() -> V) -> Arc<V> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, weak)) = entries.get(key) {
            if s == source {
                if let Some(v) = weak.upgrade() {
                    return v;
                }
            }
        }
        // Compiled under the lock: two launches of one revision build it once. A compile
        // takes milliseconds, against a launch's jail.
        let v = Arc::new(build());
        // What no run holds any more goes, so the map stays as small as the live revisions.
        entries.retain(|_, (_, w)| w.strong_count() > 0);
        entries.insert(key.to_string(), (source.clone(), Arc::downgrade(&v)));
        v
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_one_revision_share_one_value() {
        let cache: Shared<String, String> = Shared::default();
        let mut built = 0;
        let a = cache.get("code@aa", &"role a".to_string(), || {
            built += 1;
            "compiled a".into()
        });
        let b = cache.get("code@aa", &"role a".to_string(), || {
            built += 1;
            "compiled again".into()
        });
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(built, 1);
    }

    #[test]
    fn another_source_under_the_same_key_is_built_for_itself() {
        let cache: Shared<String, String> = Shared::default();
        let a = cache.get("code@aa", &"role a".to_string(), || "compiled a".into());
        let b = cache.get("code@aa", &"role edited".to_string(), || {
            "compiled b".into()
        });
        assert_eq!(*a, "compiled a");
        assert_eq!(*b, "compiled b");
        assert!(!Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn a_value_no_run_holds_is_dropped_and_built_again() {
        let cache: Shared<String, String> = Shared::default();
        let a = cache.get("code@aa", &"role a".to_string(), || "first".into());
        let weak = Arc::downgrade(&a);
        drop(a);
        assert!(weak.upgrade().is_none(), "the cache holds no value alive");
        let _other = cache.get("review@bb", &"role b".to_string(), || "b".into());
        assert_eq!(cache.len(), 1, "the dead entry was pruned");
        let again = cache.get("code@aa", &"role a".to_string(), || "second".into());
        assert_eq!(*again, "second");
    }
}
