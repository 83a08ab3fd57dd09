//! The two sides of a run are apart (the manual, docs/src/jail.md): a Python agent on the
//! agent side and its commands on the command side (sent through Airlock's bash tool) try
//! to reach each other: each other's processes by pid, the shepherd of a command, a unix
//! socket to pass a descriptor through, a SysV segment. tests/agents/side_probe.py holds
//! both halves; each scenario prints one `SIDES {json}` line with what was seen.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use common::*;
use serde_json::{json, Value};

/// The code role with `python3 side_probe.py` as a bash prefix, and a workspace holding
/// the probe, owned by the instance. Not below /tmp, as a run's own workspace is not
/// (sockets may then be made in a side's /tmp; a workspace below it keeps them out of
/// there too).
fn host() -> (Host, std::path::PathBuf, tempfile::TempDir) {
    let h = Host::new(&[("tess", "code")], "");
    h.local_role("code", |t| {
        t.replacen("  bash:\n", "  bash:\n    - python3 side_probe.py\n", 1)
    });
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::copy(
        Path::new(REPO).join("tests/agents/side_probe.py"),
        ws.join("side_probe.py"),
    )
    .unwrap();
    chown_tree(&ws, h.uids[0]);
    (h, ws, dir)
}

fn launch(h: &Host, ws: &Path, scenarios: &[&str]) -> std::process::Command {
    let mut argv = vec!["/usr/bin/python3", "side_probe.py", "agent"];
    argv.extend_from_slice(scenarios);
    h.launch(
        "code",
        "tess",
        &["--workspace", ws.to_str().unwrap(), "--max-seconds", "300"],
        &argv,
    )
}

/// The scenario's `SIDES` line.
fn seen(out: &str, scenario: &str) -> Value {
    out.lines()
        .filter_map(|l| l.strip_prefix("SIDES "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["scenario"] == scenario)
        .unwrap_or_else(|| panic!("no {scenario} line in:\n{out}"))
}

fn run(scenarios: &[&str]) -> String {
    let (h, ws, _dir) = host();
    let o = launch(&h, &ws, scenarios).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// Each side marks itself (its own RLIMIT_NOFILE soft limit) and looks through every pid
/// for the other's mark, trying prlimit, setpriority, sched_setaffinity, ioprio_set and
/// pidfd_open on what it finds: neither finds the other, and neither's limit changed.
#[test]
fn neither_side_can_name_or_touch_the_others_processes() {
    let out = run(&["prlimit"]);
    let r = seen(&out, "prlimit");
    assert_eq!(r["cmd_marked"], true, "{r}");
    assert_eq!(
        r["found_command"],
        json!({}),
        "the agent reached the command side: {r}"
    );
    assert_eq!(
        r["command"]["found_agent"],
        json!({}),
        "the command side reached the agent: {r}"
    );
    assert_eq!(r["own_soft_after"], 777, "{r}");
    assert_eq!(r["command"]["own_soft_after"], 779, "{r}");
}

/// A command that sets its shepherd's RLIMIT_NOFILE to 0 and leaves a double-forked,
/// setsid daemon: the call answers, and by then nothing of the command is alive (each
/// command has a cgroup of its own, killed whole; the shepherd's limits cannot be set).
#[test]
fn a_command_cannot_blind_its_shepherd_or_outlive_its_call() {
    let (h, ws, _dir) = host();
    let marker = format!("b{}", std::process::id());
    let scenario = format!("blind={marker}");
    let mut child = launch(&h, &ws, &[&scenario])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let want = format!("airlock-side-{marker}");
    let alive = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| c.starts_with(want.as_bytes()))
    };
    let mut out = String::new();
    let mut alive_at_answer = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("SIDES ") {
            alive_at_answer = Some(alive());
        }
        out.push_str(&line);
        out.push('\n');
    }
    assert!(child.wait().unwrap().success(), "{out}");
    let r = seen(&out, "blind");
    assert_eq!(
        alive_at_answer,
        Some(false),
        "the command's daemon outlived its call: {r}"
    );
    assert!(
        r["command"]["daemon"]
            .as_str()
            .is_some_and(|p| !p.is_empty()),
        "the daemon did not start: {r}"
    );
    assert_ne!(
        r["command"]["blind"], "ok",
        "the command set its shepherd's limits: {r}"
    );
}

/// The agent listens on a unix socket in its /tmp, in the workspace and in the abstract
/// namespace; a command tries
/// to pass it an O_PATH descriptor of the command side's root (whose mounts are
/// executable) through either: no socket of one side is reachable from the other, and
/// neither side may make a socket in the workspace.
#[test]
fn no_descriptor_crosses_between_the_sides() {
    let out = run(&["fdpass"]);
    let r = seen(&out, "fdpass");
    assert_eq!(r["received"], json!([]), "a descriptor crossed: {r}");
    assert_eq!(r["bind_tmp"], "ok", "{r}");
    assert_eq!(r["bind_workspace"], "EACCES", "{r}");
    assert_eq!(r["command"]["tmp"], "ENOENT", "{r}");
    assert_eq!(r["command"]["workspace"], "ENOENT", "{r}");
    // An abstract socket of the agent's (both sides share the network namespace) is
    // scoped to its Landlock domain.
    assert_eq!(r["bind_abstract"], "ok", "{r}");
    assert_eq!(r["command"]["abstract"], "EPERM", "{r}");
}

/// A SysV shared-memory segment and message queue the agent makes are not there for the
/// command side: each side has an IPC namespace of its own.
#[test]
fn sysv_ipc_is_each_sides_own() {
    let out = run(&["sysv"]);
    let r = seen(&out, "sysv");
    assert_eq!(r["made_shm"], true, "{r}");
    assert_eq!(r["made_msg"], true, "{r}");
    assert_eq!(
        r["command"]["shm"], "ENOENT",
        "the command side saw the agent's segment: {r}"
    );
    assert_eq!(r["command"]["msg"], "ENOENT", "{r}");
}

/// The per-user kernel counts are each side's own (issue 43): a command holding every
/// inotify instance the kernel gives it (fs.inotify.max_user_instances) leaves the agent
/// able to open one, and the other way round. The command side runs in a user namespace
/// of its own that maps the instance uid onto itself, so it counts apart.
#[test]
fn a_side_exhausting_its_per_user_counts_leaves_the_other_its_own() {
    let out = run(&["inotify"]);
    let r = seen(&out, "inotify");
    let cmd = &r["cmd_holding"];
    assert_eq!(r["cmd_held_in_time"], true, "{r}");
    assert_eq!(cmd["agent_done"], true, "{r}");
    // The command reached the kernel's per-user bound, not its descriptor limit.
    assert_eq!(cmd["stopped_by"], "EMFILE", "{r}");
    let max: u64 = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(cmd["held"].as_u64().unwrap() + 8 >= max, "{r}");
    assert_eq!(
        r["agent_while_cmd_holds"], "ok",
        "the command's inotify instances were counted against the agent: {r}"
    );
    // The other way round.
    assert_eq!(r["agent_holding"]["stopped_by"], "EMFILE", "{r}");
    assert!(
        r["agent_holding"]["held"].as_u64().unwrap() + 8 >= max,
        "{r}"
    );
    assert_eq!(
        r["cmd_while_agent_holds"]["try"], "ok",
        "the agent's inotify instances were counted against its commands: {r}"
    );
    // The command's user namespace maps the instance uid onto itself and nothing else, so
    // its files are the agent's and the workspace is shared as before.
    let map: Vec<&str> = cmd["uid_map"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(map.len(), 3, "{r}");
    assert_eq!(map[0], map[1], "{r}");
    assert_eq!(map[2], "1", "{r}");
}

/// Pending signals too: a command keeping 64 real-time signals pending does not count
/// against the agent, whose own RLIMIT_SIGPENDING is lowered to 32 and which then queues
/// one (sigqueue refuses with EAGAIN once the user's count reaches the limit).
#[test]
fn pending_signals_of_one_side_do_not_count_against_the_other() {
    let out = run(&["sigpending"]);
    let r = seen(&out, "sigpending");
    assert_eq!(r["cmd_held_in_time"], true, "{r}");
    assert_eq!(r["cmd"]["pending"], 64, "{r}");
    assert_eq!(r["cmd"]["agent_done"], true, "{r}");
    assert_eq!(r["agent_limit_lowered"], true, "{r}");
    assert_eq!(
        r["agent_queued"], 1,
        "the command's pending signals were counted against the agent: {r}"
    );
}

/// POSIX message queue bytes (RLIMIT_MSGQUEUE, counted per user and, since Linux 5.14,
/// per user namespace), both ways: a command holding queues until the kernel refuses one
/// leaves the agent able to open one, and the other way round.
#[test]
fn message_queue_bytes_of_one_side_do_not_count_against_the_other() {
    let out = run(&["mqueue"]);
    let r = seen(&out, "mqueue");
    let cmd = &r["cmd_holding"];
    assert_eq!(r["cmd_held_in_time"], true, "{r}");
    assert_eq!(cmd["agent_done"], true, "{r}");
    if cmd["held"] == 0 && r["agent_holding"]["held"] == 0 {
        // Neither side may make a queue at all (Landlock refuses the mqueue file system's
        // paths: EACCES), so neither holds a byte of the other's.
        for v in [
            &cmd["stopped_by"],
            &r["agent_holding"]["stopped_by"],
            &r["agent_while_cmd_holds"],
            &r["cmd_while_agent_holds"]["try"],
        ] {
            assert_eq!(v, "EACCES", "{r}");
        }
        return;
    }
    // Stopped by the per-user byte limit (EMFILE), having held some.
    assert_eq!(cmd["stopped_by"], "EMFILE", "{r}");
    assert!(cmd["held"].as_u64().unwrap() >= 2, "{r}");
    assert_eq!(
        r["agent_while_cmd_holds"], "ok",
        "the command's queues were counted against the agent: {r}"
    );
    assert_eq!(r["agent_holding"]["stopped_by"], "EMFILE", "{r}");
    assert_eq!(
        r["cmd_while_agent_holds"]["try"], "ok",
        "the agent's queues were counted against its commands: {r}"
    );
}

/// Processes (RLIMIT_NPROC), both ways: a command keeping 40 children does not count
/// against the agent, whose own RLIMIT_NPROC (in a child of it) is lowered to the tasks it
/// sees of its own plus 20 and which then forks; and the other way round (a command's
/// fork under the same lowered limit with nothing held is the control).
#[test]
fn processes_of_one_side_do_not_count_against_the_other() {
    let out = run(&["nproc"]);
    let r = seen(&out, "nproc");
    assert_eq!(r["cmd_control"]["fork"], "ok", "{r}");
    // The probe sees a count where one is shared: a second command, beside the first's
    // 40 children on the same side, is refused.
    assert_eq!(r["cmd_beside_cmd"]["fork"], "EAGAIN", "{r}");
    assert_eq!(r["cmd_held_in_time"], true, "{r}");
    assert_eq!(r["cmd_holding"]["children"], 40, "{r}");
    assert_eq!(r["cmd_holding"]["agent_done"], true, "{r}");
    let a = &r["agent_while_cmd_holds"];
    assert_eq!(a["lowered"], true, "{r}");
    assert_eq!(
        a["fork"], "ok",
        "the command's processes were counted against the agent: {r}"
    );
    assert_eq!(r["agent_children"], 40, "{r}");
    let c = &r["cmd_while_agent_holds"];
    assert_eq!(c["lowered"], true, "{r}");
    assert_eq!(
        c["fork"], "ok",
        "the agent's processes were counted against its commands: {r}"
    );
}

/// What the command side's own user namespace gives a command: nothing. It holds no
/// capability, may not unshare or join a namespace, write its maps or setgroups, change
/// its ids (to root, or to the namespace's owner uid, which nothing runs as), or give a
/// file to that owner; its maps name the instance uid alone; and the agent, outside that
/// namespace, holds none over it either.
#[test]
fn the_command_sides_user_namespace_gives_a_command_nothing() {
    let out = run(&["userns"]);
    let r = seen(&out, "userns");
    let c = &r["command"];
    let a = &r["agent"];
    let uid = a["status"]["Uid"][0].as_str().unwrap().to_string();
    assert_ne!(
        c["ns_user"], a["ns_user"],
        "one user namespace for both: {r}"
    );
    assert_eq!(c["uid_map"], json!([uid, uid, "1"]), "{r}");
    for side in [c, a] {
        for cap in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
            assert_eq!(
                side["status"][cap],
                json!(["0000000000000000"]),
                "{cap}: {r}"
            );
        }
        assert_eq!(side["status"]["NoNewPrivs"], json!(["1"]), "{r}");
        for k in [
            "unshare_user",
            "unshare_mount",
            "unshare_net",
            "setns_own_user",
            "setns_pid1_user",
            "write_uid_map",
            "write_setgroups",
            "setgroups",
            "setresuid_root",
            "setresuid_owner",
            "chown_to_owner",
        ] {
            let v = side[k].as_str().unwrap_or("missing");
            assert!(v != "ok" && v != "missing", "{k} went through: {r}");
        }
    }
}

/// Inotify watches too (fs.inotify.max_user_watches, a per-user count like the
/// instances), both ways: a command adding watches on system files until the kernel
/// refuses one (ENOSPC) leaves the agent able to add one, and the other way round.
#[test]
fn inotify_watches_of_one_side_do_not_count_against_the_other() {
    let out = run(&["watches"]);
    let r = seen(&out, "watches");
    let max: u64 = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cmd = &r["cmd_holding"];
    assert_eq!(r["cmd_held_in_time"], true, "{r}");
    assert_eq!(cmd["agent_done"], true, "{r}");
    assert_eq!(cmd["stopped_by"], "ENOSPC", "{r}");
    assert!(cmd["watches"].as_u64().unwrap() + 64 >= max, "{r}");
    assert_eq!(
        r["agent_while_cmd_holds"], "ok",
        "the command's watches were counted against the agent: {r}"
    );
    assert_eq!(r["agent_holding"]["stopped_by"], "ENOSPC", "{r}");
    assert_eq!(
        r["cmd_while_agent_holds"]["try"], "ok",
        "the agent's watches were counted against its commands: {r}"
    );
}
