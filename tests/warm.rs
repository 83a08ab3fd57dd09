//! Warm jails (issue 48), for real as root through airlockd: jails built ahead of launches
//! (`warm: {probe: N}`), each serving one run only, thrown away by a reload, carrying
//! nothing of a fired instance, leaving nothing when airlockd is killed, and holding the
//! escape battery like any other jail.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::sync::{RwLock, RwLockReadGuard};

use common::{cgroups_of, poll, run_id_of, stderr, stdout, Airlockd, Host};

/// Held for reading by each test that asserts which kind of jail served a run, for writing
/// by the one that mounts on the host: a mount throws every airlockd's warm jails away, so a
/// test running beside it would see cold jails.
static HOST_MOUNTS: RwLock<()> = RwLock::new(());

fn no_host_mounts_meanwhile() -> RwLockReadGuard<'static, ()> {
    HOST_MOUNTS.read().unwrap_or_else(|e| e.into_inner())
}

/// A host with `hires` of the workflow role `probe` (its command runs on the command side)
/// and `warm` (config lines) for the pool.
fn probe_host(hires: &[&str], warm: &str) -> Host {
    let hires: Vec<(&str, &str)> = hires.iter().map(|n| (*n, "probe")).collect();
    let h = Host::new(&hires, warm);
    common::write_probe_role(&h.root.join("roles.local"));
    h
}

/// The warm jails airlockd `daemon` keeps now: (helper pid, run id it was started for),
/// from the helpers it started with `--idle`.
fn warm_helpers(daemon: u32) -> BTreeSet<(u32, String)> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The parent pid is the second field after the command's closing parenthesis.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(daemon) {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.iter().any(|a| a == "--idle") {
            continue;
        }
        if let Some(i) = args.iter().position(|a| a == "--run-id") {
            out.insert((pid, args[i + 1].clone()));
        }
    }
    out
}

/// Until airlockd keeps `n` warm jails, each of whose helpers has put itself under
/// SCHED_IDLE (policy 5), which it returns.
fn wait_warm(d: &Airlockd, n: usize) -> BTreeSet<(u32, String)> {
    poll(30, || {
        let w = warm_helpers(d.pid());
        let idle = w
            .iter()
            .all(|(pid, _)| policy_of(&format!("/proc/{pid}/stat")) == "5");
        (w.len() == n && idle).then_some(w)
    })
    .unwrap_or_else(|| {
        panic!(
            "airlockd does not keep {n} warm jails: {:?}",
            warm_helpers(d.pid())
        )
    })
}

/// Where the run's jail came from and its helper's pid, as its journal tells.
fn jail_of(run: &str) -> (String, u32) {
    let recs = common::events(run, "run_started", 1);
    let r = recs
        .first()
        .unwrap_or_else(|| panic!("run {run} journaled no run_started"));
    let kind = r["AIRLOCK_JAIL"].as_str().unwrap_or_default().to_string();
    let pid = r["AIRLOCK_HELPER_PID"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("run {run}: no helper pid in {r}"));
    (kind, pid)
}

fn sh(h: &Host, instance: &str, script: &str) -> Output {
    Airlockd::launch(h, "probe", instance, &["--", "/bin/sh", "-c", script])
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "the run failed: {}\n{}",
        stdout(o),
        stderr(o)
    );
}

/// A burst of launches: the warm jails go to one run each (no helper serves two), the
/// runs that found none got a jail of their own, and the pool is built again after.
#[test]
fn a_warm_jail_serves_one_run_only_and_the_pool_is_built_again() {
    let _mounts = no_host_mounts_meanwhile();
    let names = ["w0", "w1", "w2", "w3", "w4"];
    let h = probe_host(&names, "warm: {probe: 2}\nwarm_max: 3\n");
    let d = Airlockd::start(&h);
    // The role's two and the shared one, each waiting under SCHED_IDLE.
    let before = wait_warm(&d, 3);
    let status = h.ctl(&["status", "--json"]);
    let s: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert_eq!(s["warm"]["roles"]["probe"], 2, "{s}");
    assert_eq!(s["warm"]["shared"], 1, "{s}");

    // The run's own processes are back under SCHED_OTHER (policy 0 in field 41).
    let script = "id -u; awk '{print \"policy\", $41}' /proc/self/stat";
    let outs: Vec<Output> = std::thread::scope(|scope| {
        let hs: Vec<_> = names
            .iter()
            .map(|n| {
                let h = &h;
                scope.spawn(move || sh(h, n, script))
            })
            .collect();
        hs.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut helpers = BTreeSet::new();
    let mut warm_role = 0;
    for (i, o) in outs.iter().enumerate() {
        assert_ok(o);
        assert!(
            stdout(o).contains(&h.uids[i].to_string()),
            "run {i} ran as another uid: {}",
            stdout(o)
        );
        assert!(
            stdout(o).contains("policy 0"),
            "run {i} is not under SCHED_OTHER: {}",
            stdout(o)
        );
        let (kind, pid) = jail_of(&run_id_of(o));
        assert!(
            ["warm-role", "warm-shared", "cold"].contains(&kind.as_str()),
            "{kind}"
        );
        warm_role += usize::from(kind == "warm-role");
        assert!(helpers.insert(pid), "helper {pid} served two runs");
    }
    let warm_pids: BTreeSet<u32> = before.iter().map(|(p, _)| *p).collect();
    let used: BTreeSet<u32> = helpers.intersection(&warm_pids).copied().collect();
    assert!(
        warm_role >= 2 && used.len() >= 2,
        "the burst did not get the role's warm jails: {warm_role} warm-role, used {used:?} of {warm_pids:?}"
    );
    // Used, a jail is gone for good; the pool is whole again with new ones.
    let after = wait_warm(&d, 3);
    assert!(
        after.iter().all(|(p, _)| !helpers.contains(p)),
        "a helper that served a run waits as a warm jail again: {after:?}"
    );
    // One more run: a warm jail no run had.
    let o = sh(&h, "w0", "true");
    assert_ok(&o);
    let (kind, pid) = jail_of(&run_id_of(&o));
    assert_eq!(kind, "warm-role");
    assert!(!helpers.contains(&pid), "helper {pid} served a second run");
}

/// The scheduling policy (field 41) in a `/proc/PID/stat` file.
fn policy_of(stat: &str) -> String {
    let text = std::fs::read_to_string(stat).unwrap_or_default();
    text.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(38))
        .unwrap_or_default()
        .to_string()
}

/// `reload` throws every warm jail away (it was built for the set in force before) and
/// builds the pool again; the next run gets a new one.
#[test]
fn a_reload_discards_the_warm_jails() {
    let _mounts = no_host_mounts_meanwhile();
    let h = probe_host(&["r0"], "warm: {probe: 2}\n");
    let d = Airlockd::start(&h);
    let old = wait_warm(&d, 3);
    // The role changes on disk: a run's minutes.
    let role = h.root.join("roles.local/probe/role.yaml");
    let text = std::fs::read_to_string(&role).unwrap();
    std::fs::write(
        &role,
        text.replace("minutes_per_run: 30", "minutes_per_run: 20"),
    )
    .unwrap();
    let o = h.ctl(&["reload"]);
    assert!(o.status.success(), "reload: {}", stderr(&o));
    let old_pids: BTreeSet<u32> = old.iter().map(|(p, _)| *p).collect();
    let renewed = poll(30, || {
        let now = warm_helpers(d.pid());
        (now.len() == 3 && now.iter().all(|(p, _)| !old_pids.contains(p))).then_some(now)
    });
    assert!(
        renewed.is_some(),
        "the warm jails were not all replaced: before {old:?}, now {:?}",
        warm_helpers(d.pid())
    );
    for (pid, run) in &old {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "helper {pid} outlived the reload"
        );
        assert!(
            cgroups_of(run).is_empty(),
            "the cgroups of discarded jail {run} are left: {:?}",
            cgroups_of(run)
        );
    }
    let o = sh(&h, "r0", "true");
    assert_ok(&o);
    let (kind, pid) = jail_of(&run_id_of(&o));
    assert_eq!(kind, "warm-role");
    assert!(!old_pids.contains(&pid), "a discarded jail served a run");
}

/// An instance is fired: the role's warm jails still serve its other instances, and a run
/// in one sees nothing of the fired instance's (its uid's files, in home, /tmp, /dev/shm
/// or anywhere else in its view).
#[test]
fn a_fired_instances_role_is_still_served_warm_with_nothing_of_it() {
    let _mounts = no_host_mounts_meanwhile();
    let h = probe_host(&["fa", "fb"], "warm: {probe: 2}\n");
    let d = Airlockd::start(&h);
    wait_warm(&d, 3);
    let marks =
        "for d in \"$HOME\" /tmp /dev/shm; do echo left > \"$d/airlock-mark-fa\"; done; id -u";
    let o = sh(&h, "fa", marks);
    assert_ok(&o);
    assert_eq!(jail_of(&run_id_of(&o)).0, "warm-role");
    let f = h.ctl(&["fire", "fa"]);
    assert!(f.status.success(), "fire: {}\n{}", stdout(&f), stderr(&f));
    wait_warm(&d, 3);
    let a_uid = h.uids[0];
    let look = format!(
        "id -u; ls -A \"$HOME\" /tmp /dev/shm; find / -xdev \\( -uid {a_uid} -o -name 'airlock-mark-*' \\) -print 2>/dev/null; echo END"
    );
    let o = sh(&h, "fb", &look);
    assert_ok(&o);
    assert_eq!(jail_of(&run_id_of(&o)).0, "warm-role");
    let out = stdout(&o);
    assert!(
        out.starts_with(&h.uids[1].to_string()),
        "not the second instance's uid: {out}"
    );
    assert!(out.contains("END"), "{out}");
    assert!(
        !out.contains("airlock-mark") && !out.contains(&format!("/{a_uid}")),
        "the fired instance's files reached the next run: {out}"
    );
    // And the fired one gets no run at all.
    let o = sh(&h, "fa", "true");
    assert!(!o.status.success(), "a fired instance ran");
}

/// Killed with warm jails waiting, airlockd leaves nothing of them: their helpers end with
/// it, and after the next start no process, mount, loop device or cgroup of theirs is left.
#[test]
fn killing_airlockd_leaves_nothing_of_its_warm_jails() {
    let _mounts = no_host_mounts_meanwhile();
    let h = probe_host(&["k0"], "warm: {probe: 3}\n");
    let d = Airlockd::start(&h);
    let old = wait_warm_with_cgroups(&d, 4);
    d.kill9();
    let d = Airlockd::start(&h);
    let new = wait_warm(&d, 4);
    let left = poll(20, || {
        let l: Vec<String> = old.iter().flat_map(|(p, r)| leftovers(*p, r)).collect();
        l.is_empty().then_some(())
    });
    assert!(
        left.is_some(),
        "left of the killed airlockd's warm jails: {:?}",
        old.iter()
            .flat_map(|(p, r)| leftovers(*p, r))
            .collect::<Vec<_>>()
    );
    assert!(old.is_disjoint(&new), "{old:?} {new:?}");
    let o = sh(&h, "k0", "true");
    assert_ok(&o);
}

/// Killed together with its waiting helpers (systemd's SIGKILL to the whole unit), airlockd
/// leaves their runs' cgroups behind, which no helper lives to remove and no ledger record
/// names: the next start removes them, from the state directory's notes of the helpers.
#[test]
fn killing_airlockd_with_its_helpers_leaves_no_cgroup_after_the_next_start() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let _mounts = no_host_mounts_meanwhile();
    let h = probe_host(&["k1"], "warm: {probe: 2}\n");
    let d = Airlockd::start(&h);
    let old = wait_warm_with_cgroups(&d, 3);
    // Stopped first, so airlockd cannot clean up after the helpers it sees die.
    let dpid = Pid::from_raw(d.pid() as i32);
    kill(dpid, Signal::SIGSTOP).unwrap();
    for (pid, _) in &old {
        let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
    d.kill9();
    // Nothing removes them meanwhile: the helpers are gone, their cgroups stay.
    let gone = poll(20, || {
        old.iter()
            .all(|(p, _)| !Path::new(&format!("/proc/{p}")).exists())
            .then_some(())
    });
    assert!(gone.is_some(), "the helpers {old:?} did not die");
    assert!(
        old.iter().all(|(_, run)| !cgroups_of(run).is_empty()),
        "the killed helpers' cgroups went without a new start: the test sees nothing"
    );
    let d = Airlockd::start(&h);
    wait_warm(&d, 3);
    let left: Vec<String> = old.iter().flat_map(|(p, r)| leftovers(*p, r)).collect();
    assert!(left.is_empty(), "left after the next start: {left:?}");
    let o = sh(&h, "k1", "true");
    assert_ok(&o);
}

/// [`wait_warm`], then until each jail has made its cgroups: built under SCHED_IDLE, a jail
/// on a busy host makes them a while after its helper starts, and a test of what is left
/// would otherwise see nothing.
fn wait_warm_with_cgroups(d: &Airlockd, n: usize) -> BTreeSet<(u32, String)> {
    let jails = wait_warm(d, n);
    let built = poll(30, || {
        jails
            .iter()
            .all(|(_, run)| !cgroups_of(run).is_empty())
            .then_some(())
    });
    assert!(built.is_some(), "the warm jails {jails:?} made no cgroups");
    jails
}

/// What is left on the host of a warm jail: its helper, mounts, loop devices, cgroups.
fn leftovers(pid: u32, run: &str) -> Vec<String> {
    let mut left = Vec::new();
    if Path::new(&format!("/proc/{pid}")).exists() {
        left.push(format!("helper {pid}"));
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    left.extend(
        mounts
            .lines()
            .filter(|l| l.contains(run))
            .map(|m| format!("mount {m}")),
    );
    let loops = std::process::Command::new("losetup")
        .args(["--list", "--noheadings", "-O", "NAME,BACK-FILE"])
        .output()
        .unwrap();
    left.extend(
        stdout(&loops)
            .lines()
            .filter(|l| l.contains(run))
            .map(|l| format!("loop device {l}")),
    );
    left.extend(cgroups_of(run).into_iter().map(|c| format!("cgroup {c}")));
    left
}

/// The whole escape battery in a run that got its role's warm jail: every class holds, and
/// the daemon it leaves does not outlive the run.
#[test]
fn the_escape_battery_holds_in_a_warm_jail() {
    battery_in("warm: {probe: 1}\n", 2, "warm-role");
}

/// The same in the shared warm jail (the one a launch of any role may take).
#[test]
fn the_escape_battery_holds_in_the_shared_warm_jail() {
    battery_in("warm_max: 1\n", 1, "warm-shared");
}

/// The escape battery in a run of a host whose config adds `warm` (`jails` warm jails kept),
/// served by a jail of kind `kind`.
fn battery_in(warm: &str, jails: usize, kind: &str) {
    let _mounts = no_host_mounts_meanwhile();
    let h = probe_host(&["eb"], warm);
    let d = Airlockd::start(&h);
    wait_warm(&d, jails);
    let ws = h.workspace("ws", h.uids[0]);
    common::battery_into(&ws, h.uids[0]);
    let port_holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = port_holder.local_addr().unwrap().port().to_string();
    // Apart for each test: the two battery tests run at once in this binary, and each must
    // not find the other's daemon alive.
    let marker = format!("w{}{}", std::process::id(), kind.replace('-', ""));
    let state = h.state.display().to_string();
    let cfg = h.cfg.display().to_string();
    let mut args = vec!["--workspace", ws.to_str().unwrap(), "--"];
    let battery = common::battery_argv(&port, &state, &cfg, &marker);
    args.extend(battery.iter().map(String::as_str));
    let o = Airlockd::launch(&h, "probe", "eb", &args);
    assert_ok(&o);
    assert_eq!(jail_of(&run_id_of(&o)).0, kind);
    common::assert_battery_held(&stdout(&o), &[]);
    assert!(
        !common::battery_daemon_alive(&marker)
            && airlock::supervisor::process::pids_of_uid(h.uids[0]).is_empty(),
        "the battery's daemon (or another process of the instance uid) outlived the run"
    );
}

/// Unmounts `0` when dropped (a test that fails leaves no mount on the host).
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A workspace on a file system mounted on the host after the warm jails were built: the
/// run binds the mounted one, as the launch checked it, not the directory under the mount
/// (a jail's mounts are a copy of the host's from its build, so the pool is thrown away at
/// the host's mount); and an unmount throws away the jails that held the mount.
#[test]
fn a_mount_on_the_host_after_the_jails_were_built_is_what_the_run_gets() {
    let _mounts = HOST_MOUNTS.write().unwrap_or_else(|e| e.into_inner());
    let h = probe_host(&["mw"], "warm: {probe: 1}\n");
    let d = Airlockd::start(&h);
    let old = wait_warm(&d, 2);
    let ws = h.workspace("mounted", h.uids[0]);
    std::fs::write(ws.join("under-the-mount"), "").unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o"])
        .arg(format!("uid={0},gid={0},mode=0755,size=1m", h.uids[0]))
        .arg("airlock-warm-test")
        .arg(&ws)
        .status()
        .unwrap();
    assert!(st.success(), "mount a tmpfs on {}", ws.display());
    let mounted = Mounted(ws.clone());
    std::fs::write(ws.join("on-the-mount"), "").unwrap();
    let script = "ls -A \"$AIRLOCK_WORKSPACE\"; touch \"$AIRLOCK_WORKSPACE/written-by-run\"";
    let o = Airlockd::launch(
        &h,
        "probe",
        "mw",
        &[
            "--workspace",
            ws.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
    );
    assert_ok(&o);
    let out = stdout(&o);
    let (kind, pid) = jail_of(&run_id_of(&o));
    assert!(
        out.contains("on-the-mount") && !out.contains("under-the-mount"),
        "the run ({kind} jail, helper {pid}) got the directory under the host's new mount: {out}"
    );
    assert!(ws.join("written-by-run").exists(), "{out}");
    // Built again after the mount, with none of the jails from before it.
    let old_pids: BTreeSet<u32> = old.iter().map(|(p, _)| *p).collect();
    let fresh = |before: &BTreeSet<u32>| {
        poll(30, || {
            let now = wait_warm(&d, 2);
            now.iter().all(|(p, _)| !before.contains(p)).then_some(now)
        })
    };
    let new = fresh(&old_pids).unwrap_or_else(|| {
        panic!(
            "the jails from before the mount still wait: {:?}",
            warm_helpers(d.pid())
        )
    });
    drop(mounted);
    assert!(
        std::fs::read_dir(&ws).unwrap().flatten().count() == 1,
        "the run wrote under the mount: {:?}",
        std::fs::read_dir(&ws)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect::<Vec<_>>()
    );
    // The unmount: the jails that hold a copy of the mount are thrown away too.
    let new_pids: BTreeSet<u32> = new.iter().map(|(p, _)| *p).collect();
    assert!(
        fresh(&new_pids).is_some(),
        "the jails holding the unmounted file system still wait: {:?}",
        warm_helpers(d.pid())
    );
}

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A waiting jail whose net namespace maker is killed (a stray kill from the host) could
/// only fail the run it is given: it ends itself, leaving no cgroup, and the next launch
/// runs.
#[test]
fn a_warm_jail_whose_net_namespace_maker_died_is_not_given() {
    let _mounts = no_host_mounts_meanwhile();
    let h = probe_host(&["nm"], "warm: {probe: 1}\nwarm_max: 1\n");
    let d = Airlockd::start(&h);
    let w = wait_warm(&d, 1);
    let (helper, run) = w.iter().next().cloned().unwrap();
    // The helper's child is the jail's pid 1; pid 1's first child makes the net namespace.
    let maker = poll(30, || {
        let pid1 = children(helper).first().copied()?;
        children(pid1).first().copied()
    })
    .expect("the warm jail's pid 1 started no net namespace maker");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(maker as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Exited (a zombie has no command line): not among the waiting helpers. Polled for less
    // than warm::MAX_AGE (30 s), after which airlockd would throw the jail away itself.
    let gone = poll(15, || {
        (!warm_helpers(d.pid()).iter().any(|(p, _)| *p == helper)).then_some(())
    });
    assert!(
        gone.is_some(),
        "the jail whose maker {maker} died still waits (helper {helper})"
    );
    let o = sh(&h, "nm", "echo ran");
    assert_ok(&o);
    assert!(stdout(&o).contains("ran"), "{}", stdout(&o));
    assert_ne!(
        jail_of(&run_id_of(&o)).1,
        helper,
        "the broken jail served the run"
    );
    assert!(
        poll(30, || cgroups_of(&run).is_empty().then_some(())).is_some(),
        "the broken jail's cgroups are left: {:?}",
        cgroups_of(&run)
    );
}

/// What one side of [`two_live_runs_in_warm_jails_reach_nothing_of_each_other`] runs (as
/// python3's `-c`, on the command side): it leaves a mark in /tmp and /dev/shm, SysV
/// objects and an abstract listener named `airlock-live-TAG`, prints its namespaces, says
/// it is ready in its workspace and waits for the host's word there; then it looks for the
/// other run's (`OTHER`) and prints what it found.
const LIVE_RUN: &str = r#"
import ctypes, os, socket, sys, time
tag, other = sys.argv[1], sys.argv[2]
ws = os.environ["AIRLOCK_WORKSPACE"]
for d in ("/tmp", "/dev/shm"):
    open(os.path.join(d, "airlock-live-" + tag), "w").write(tag)
libc = ctypes.CDLL(None, use_errno=True)
made = [libc.shmget(0, 4096, 0o1666), libc.msgget(0, 0o1666)]
print("IPC-MADE", made, flush=True)
for n in ("net", "uts", "ipc", "mnt", "pid"):
    print("NS", n, os.readlink("/proc/self/ns/" + n), flush=True)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0airlock-live-" + tag)
s.listen(1)
open(os.path.join(ws, "ready"), "w").close()
for _ in range(1200):
    if os.path.exists(os.path.join(ws, "go")):
        break
    time.sleep(0.05)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    c.connect("\0airlock-live-" + other)
    print("REACHED the other's abstract socket")
except OSError as e:
    print("abstract refused", e.errno)
for d in ("/tmp", "/dev/shm"):
    for f in os.listdir(d):
        if f.startswith("airlock-live-") and f != "airlock-live-" + tag:
            print("MARK-FOUND", d, f)
ipc = [l for f in ("shm", "msg", "sem") for l in open("/proc/sysvipc/" + f).read().splitlines()[1:]]
print("IPC-SEEN", len(ipc))
print("END", flush=True)
"#;

/// The namespaces `NS kind id` lines of a run's output name.
fn namespaces_in(out: &str) -> std::collections::BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("NS "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The network and uts namespaces of the `n` jails airlockd `daemon` keeps waiting (its
/// `--idle` helpers still under SCHED_IDLE: one that took its run is back under SCHED_OTHER):
/// a jail's uts namespace is its pid 1's, its network namespace its maker's (pid 1's first
/// child), which the run joins. Polled until `n` wait, each with its maker.
fn waiting_namespaces(daemon: u32, n: usize) -> Vec<(u32, String, String)> {
    let ns = |pid: u32, kind: &str| {
        std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
            .ok()
            .map(|p| p.display().to_string())
    };
    poll(60, || {
        let waiting: Vec<u32> = warm_helpers(daemon)
            .iter()
            .map(|(pid, _)| *pid)
            .filter(|pid| policy_of(&format!("/proc/{pid}/stat")) == "5")
            .collect();
        if waiting.len() != n {
            return None;
        }
        waiting
            .iter()
            .map(|helper| {
                let pid1 = children(*helper).first().copied()?;
                let maker = children(pid1).first().copied()?;
                Some((*helper, ns(maker, "net")?, ns(pid1, "uts")?))
            })
            .collect::<Option<Vec<_>>>()
    })
    .unwrap_or_else(|| {
        panic!(
            "airlockd does not keep {n} waiting jails with their net namespace makers: {:?}",
            warm_helpers(daemon)
        )
    })
}

/// Two instances' runs live at once, each in a warm jail of the role: neither reaches the
/// other's abstract socket, sees its /tmp, /dev/shm or SysV objects, or shares a
/// namespace with it; neither shares its network or uts namespace with any jail waiting
/// meanwhile for a later run; and when they end nothing of either is left on the host.
#[test]
fn two_live_runs_in_warm_jails_reach_nothing_of_each_other() {
    let _mounts = no_host_mounts_meanwhile();
    let h = probe_host(&["la", "lb"], "warm: {probe: 2}\nwarm_max: 3\n");
    let d = Airlockd::start(&h);
    wait_warm(&d, 3);
    let ws = [h.workspace("wa", h.uids[0]), h.workspace("wb", h.uids[1])];
    let (outs, waiting) = std::thread::scope(|scope| {
        let runs: Vec<_> = [("la", "a", "b", &ws[0]), ("lb", "b", "a", &ws[1])]
            .into_iter()
            .map(|(inst, tag, other, w)| {
                let h = &h;
                scope.spawn(move || {
                    let args = [
                        "--workspace",
                        w.to_str().unwrap(),
                        "--",
                        "/usr/bin/python3",
                        "-c",
                        LIVE_RUN,
                        tag,
                        other,
                    ];
                    Airlockd::launch(h, "probe", inst, &args)
                })
            })
            .collect();
        let ready = poll(60, || {
            ws.iter().all(|w| w.join("ready").exists()).then_some(())
        });
        // Both live: the pool has been built again meanwhile.
        let waiting = ready.map(|()| waiting_namespaces(d.pid(), 3));
        for w in &ws {
            std::fs::write(w.join("go"), "").unwrap();
        }
        let outs: Vec<Output> = runs.into_iter().map(|t| t.join().unwrap()).collect();
        (outs, waiting)
    });
    for o in &outs {
        assert_ok(o);
    }
    let waiting = waiting.unwrap_or_else(|| {
        panic!(
            "the two runs were never live at once:\n{}\n{}",
            stdout(&outs[0]),
            stdout(&outs[1])
        )
    });
    let runs: Vec<String> = outs.iter().map(run_id_of).collect();
    for (o, run) in outs.iter().zip(&runs) {
        assert_eq!(jail_of(run).0, "warm-role", "{}", stdout(o));
        let out = stdout(o);
        assert!(out.contains("END"), "{out}");
        assert!(
            out.contains("abstract refused")
                && !out.contains("REACHED")
                && !out.contains("MARK-FOUND")
                && out.contains("IPC-SEEN 2"),
            "a run reached or saw the other live run's: {out}"
        );
    }
    let (a, b) = (
        namespaces_in(&stdout(&outs[0])),
        namespaces_in(&stdout(&outs[1])),
    );
    for kind in ["net", "uts", "ipc", "mnt", "pid"] {
        assert!(
            a.contains_key(kind) && a.get(kind) != b.get(kind),
            "the two runs share their {kind} namespace: {a:?} {b:?}"
        );
    }
    for (helper, net, uts) in &waiting {
        for (run, ns) in runs.iter().zip([&a, &b]) {
            assert!(
                ns["net"] != *net && ns["uts"] != *uts,
                "run {run} shares a namespace with the jail waiting in helper {helper}: {ns:?} {net} {uts}"
            );
        }
    }
    // Nothing of either run is left on the host: no process of its uid, no cgroup.
    for (uid, run) in h.uids.iter().zip(&runs) {
        let gone = poll(30, || {
            (airlock::supervisor::process::pids_of_uid(*uid).is_empty()
                && cgroups_of(run).is_empty())
            .then_some(())
        });
        assert!(
            gone.is_some(),
            "run {run} left processes {:?} or cgroups {:?}",
            airlock::supervisor::process::pids_of_uid(*uid),
            cgroups_of(run)
        );
    }
}
