//! Claude Code's own state file (`~/.claude.json`) for an interactive run (`launch
//! --tty`): without it, Claude Code's first-run screens (onboarding with its check that
//! the vendor's API is reachable, the folder trust dialog, "use this API key?") stand
//! between the person and the agent, and the onboarding one ends the run, as the jail
//! reaches no vendor. The run's answers are merged into whatever state the instance kept
//! from earlier runs: onboarding done, the run's working directory trusted, the run's
//! provider token (which changes every run) approved.
//!
//! None of this loosens anything: trust only lets Claude Code read the folder's own
//! settings, and the managed settings ignore a folder's rules, hooks and servers anyway.

use serde_json::{json, Map, Value};

/// The file, in the instance's home.
pub const STATE_FILE: &str = ".claude.json";
/// How many approved key suffixes are kept: one is added per run.
pub const KEPT_KEYS: usize = 16;

/// Claude Code remembers an approved key by its last 20 characters.
fn key_suffix(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    chars[chars.len().saturating_sub(20)..].iter().collect()
}

/// What a run merges into [`STATE_FILE`]: `cwd` is the agent's working directory in the
/// jail, `key` the run's provider token.
pub fn tty_seed(cwd: &str, key: Option<&str>) -> Value {
    let mut seed = json!({
        "hasCompletedOnboarding": true,
        "projects": { cwd: { "hasTrustDialogAccepted": true } },
    });
    if let Some(k) = key {
        seed["customApiKeyResponses"] = json!({ "approved": [key_suffix(k)] });
    }
    seed
}

/// `existing` (the file's bytes, or none) with `seed` merged in: objects key by key,
/// arrays gain the seed's items they lack (keeping the last [`KEPT_KEYS`]), anything else
/// the seed's value. A file that is not a JSON object is replaced (Claude Code would reset
/// it too).
pub fn merged(existing: Option<&[u8]>, seed: &Value) -> Vec<u8> {
    let mut state = existing
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    merge(&mut state, seed);
    let mut out = serde_json::to_vec_pretty(&state).unwrap_or_else(|_| b"{}".to_vec());
    out.push(b'\n');
    out
}

fn merge(into: &mut Value, seed: &Value) {
    match (into, seed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for v in b {
                if !a.contains(v) {
                    a.push(v.clone());
                }
            }
            let extra = a.len().saturating_sub(KEPT_KEYS);
            a.drain(..extra);
        }
        (slot, v) => *slot = v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_home_gets_the_seed() {
        let seed = tty_seed(
            "/workspace",
            Some("airlock-run-0123456789abcdefghijKLMNOPQRST"),
        );
        let v: Value = serde_json::from_slice(&merged(None, &seed)).unwrap();
        assert_eq!(v["hasCompletedOnboarding"], true);
        assert_eq!(v["projects"]["/workspace"]["hasTrustDialogAccepted"], true);
        assert_eq!(
            v["customApiKeyResponses"]["approved"],
            json!(["abcdefghijKLMNOPQRST"])
        );
    }

    #[test]
    fn kept_state_stays_and_keys_are_bounded() {
        let old = json!({
            "numStartups": 7,
            "hasCompletedOnboarding": false,
            "projects": {"/workspace": {"history": [1]}, "/other": {"x": 1}},
            "customApiKeyResponses": {"approved": (0..KEPT_KEYS).map(|i| format!("k{i}")).collect::<Vec<_>>(), "rejected": ["r"]},
        });
        let seed = tty_seed("/workspace", Some("new-key"));
        let v: Value =
            serde_json::from_slice(&merged(Some(old.to_string().as_bytes()), &seed)).unwrap();
        assert_eq!(v["numStartups"], 7);
        assert_eq!(v["hasCompletedOnboarding"], true);
        assert_eq!(v["projects"]["/workspace"]["history"], json!([1]));
        assert_eq!(v["projects"]["/workspace"]["hasTrustDialogAccepted"], true);
        assert_eq!(v["projects"]["/other"]["x"], 1);
        let approved = v["customApiKeyResponses"]["approved"].as_array().unwrap();
        assert_eq!(approved.len(), KEPT_KEYS);
        assert_eq!(approved.last().unwrap(), "new-key");
        assert_eq!(approved[0], "k1");
        assert_eq!(v["customApiKeyResponses"]["rejected"], json!(["r"]));
    }

    #[test]
    fn a_file_that_is_not_an_object_is_replaced() {
        let seed = tty_seed("/w", None);
        for bad in [&b"not json"[..], b"[1,2]", b"\"x\""] {
            let v: Value = serde_json::from_slice(&merged(Some(bad), &seed)).unwrap();
            assert_eq!(v["hasCompletedOnboarding"], true);
            assert!(v.get("customApiKeyResponses").is_none());
        }
    }
}
