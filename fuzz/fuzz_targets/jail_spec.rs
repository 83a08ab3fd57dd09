//! The run spec airlock-jail reads on stdin: JSON into a RunSpec, then its pure checks
//! (names, ids, paths, environment, limits), as the helper's parse_spec does. Invariant: a
//! spec that validates still validates after a JSON round trip.
#![no_main]

use airlock::sandbox::spec::{in_exec_system_dirs, valid_cgroup_parent, RunSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = serde_json::from_slice::<RunSpec>(data) else {
        if let Ok(s) = std::str::from_utf8(data) {
            let p = std::path::Path::new(s);
            let _ = in_exec_system_dirs(p);
            let _ = valid_cgroup_parent(p);
        }
        return;
    };
    if spec.validate().is_ok() {
        let text = serde_json::to_vec(&spec).expect("a spec serializes");
        let back: RunSpec = serde_json::from_slice(&text).expect("a serialized spec parses");
        assert_eq!(back, spec, "a spec changed in a JSON round trip");
        assert!(back.validate().is_ok(), "a valid spec stopped validating");
        let _ = spec.jail_home();
    }
});
