//! A role file as an operator (or whoever can write roles.local/) hands it in: the YAML
//! pre-scan over libyaml's events, serde_yaml, then the schema validation and the model.
//! Invariants beyond "no panic": every problem names the file it was given, and a role
//! that loads is one whose bash prefixes compile under the built-in guards.
#![no_main]

use std::path::Path;

use airlock::policy::bash::{ArgGuards, BashPolicy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = Path::new("/fuzz/roles/x/role.yaml");
    match airlock::role::parse_role(file, text) {
        Ok((role, _doc)) => {
            // A valid role's prefixes were checked live at load: none may be dead.
            let policy = BashPolicy::compile(role.bash_prefixes(), &ArgGuards::builtin());
            assert!(
                policy.invalid_prefixes().is_empty(),
                "a role that validated carries a prefix the matcher refuses"
            );
        }
        Err(problems) => {
            assert!(!problems.is_empty(), "a refusal must say why");
            for p in &problems {
                assert_eq!(p.file, file, "a problem names another file");
            }
        }
    }
});
