//! deploy/: each deployment file parses (systemd INI, Nomad's JSON job spec, Kubernetes
//! YAML) and names what airlockd needs: the binary, its config, its state and the host
//! resources it uses.

use std::path::Path;

use serde_json::Value;

fn read(p: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(p)).unwrap()
}

/// `[Section]` and `Key=Value` lines, comments and blanks allowed, nothing else.
fn ini(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        let (k, v) = l
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: not Key=Value", i + 1));
        assert!(!section.is_empty(), "line {}: outside a section", i + 1);
        out.push((section.clone(), k.to_string(), v.to_string()));
    }
    out
}

#[test]
fn the_systemd_drop_in_loads_the_store_credential() {
    let kv = ini(&read("systemd/airlockd.service.d/store.conf"));
    let get = |s: &str, k: &str| {
        kv.iter()
            .find(|(a, b, _)| a == s && b == k)
            .map(|x| x.2.clone())
    };
    let cred = get("Service", "LoadCredential").unwrap();
    assert!(cred.starts_with("airlock-db:/"), "{cred}");
    assert!(get("Unit", "After")
        .unwrap()
        .contains("network-online.target"));
    assert_eq!(get("Service", "Restart").as_deref(), Some("on-failure"));
}

#[test]
fn the_nomad_job_runs_one_airlockd_per_node_with_raw_exec() {
    let v: Value = serde_json::from_str(&read("nomad/airlockd.nomad.json")).unwrap();
    let job = &v["Job"];
    assert_eq!(job["Type"], "system");
    let task = &job["TaskGroups"][0]["Tasks"][0];
    assert_eq!(task["Driver"], "raw_exec");
    assert_eq!(task["Config"]["command"], "/usr/bin/airlockd");
    let args: Vec<&str> = task["Config"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["--config", "/etc/airlock/airlock.yaml"]);
    assert_eq!(task["KillSignal"], "SIGTERM");
}

#[test]
fn the_daemonset_is_privileged_with_the_host_pids_cgroups_and_state() {
    let v: serde_yaml::Value =
        serde_yaml::from_str(&read("kubernetes/airlockd-daemonset.yaml")).unwrap();
    assert_eq!(v["kind"].as_str(), Some("DaemonSet"));
    let spec = &v["spec"]["template"]["spec"];
    assert_eq!(spec["hostPID"].as_bool(), Some(true));
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["privileged"].as_bool(), Some(true));
    let cmd: Vec<&str> = c["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(
        cmd,
        ["/usr/bin/airlockd", "--config", "/etc/airlock/airlock.yaml"]
    );
    let host_paths: Vec<(&str, &str)> = spec["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap(),
                v["hostPath"]["path"].as_str().unwrap(),
            )
        })
        .collect();
    let mounts: Vec<(&str, &str)> = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["mountPath"].as_str().unwrap(),
            )
        })
        .collect();
    for need in [
        "/etc/airlock",
        "/var/lib/airlock",
        "/run/airlock",
        "/sys/fs/cgroup",
    ] {
        let name = host_paths
            .iter()
            .find(|(_, p)| *p == need)
            .unwrap_or_else(|| panic!("no hostPath {need}"))
            .0;
        assert!(
            mounts.contains(&(name, need)),
            "{need} not mounted at the same path: {mounts:?}"
        );
    }
}
