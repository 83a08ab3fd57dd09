//! Disk bounds and the reserve, for real (as root): runs that write past their workspace's
//! and home's bytes and inodes (plain writes and fallocate) on a filesystem of the test's
//! own, so the host's free space is measured exactly; the home's bound across runs; nothing
//! left (images, mounts, loop devices) after a run, after kill -9 of airlockd and its
//! restart; a launch refused below the reserve with the ledger intact; the ledger and the
//! journal's fallback file on a full disk.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use airlock::supervisor::ledger;
use airlock::supervisor::loopdev;
use common::{poll, require_journald, require_root, stderr, stdout, write_probe_role};
use serde_json::{json, Value};

static NEXT: AtomicU32 = AtomicU32::new(0);

const MIB: u64 = 1 << 20;

fn sh(args: &[&str]) {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An ext4 filesystem of the test's own (a loop-mounted image), so free space is the
/// test's alone; unmounted and detached on drop, whatever happened.
struct SmallFs {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
    dev: String,
}

impl SmallFs {
    fn new(bytes: u64) -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&img).unwrap().set_len(bytes).unwrap();
        sh(&[
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal",
            img.to_str().unwrap(),
        ]);
        let o = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&img)
            .output()
            .unwrap();
        assert!(o.status.success(), "losetup: {}", stderr(&o));
        let dev = stdout(&o).trim().to_string();
        let fs = SmallFs {
            _dir: dir,
            mnt: mnt.clone(),
            dev,
        };
        sh(&["mount", &fs.dev, mnt.to_str().unwrap()]);
        fs
    }

    fn free(&self) -> u64 {
        airlock::supervisor::reserve::free_under(&self.mnt)
            .unwrap()
            .bytes
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A host whose state directory is `state`: roles.local with the probe role (its command
/// runs on the command side, with a shell), instance `tess`, `limits` as given.
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cfg: PathBuf,
    state: PathBuf,
    sock: PathBuf,
    uid: u32,
    daemon: Option<Child>,
}

impl Host {
    fn new(state: &Path, limits: &str) -> Host {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let layer = root.join("roles.local");
        write_probe_role(&layer);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        // Apart from every other suite's uids.
        let uid = 1_880_098_000 + (std::process::id() % 40) * 20 + n % 20;
        let sock = root.join("airlockd.sock");
        let cfg = root.join("airlock.yaml");
        std::fs::write(
            &cfg,
            format!(
                "roles: [{repo}/roles, {layer}]\npolicies: {repo}/policies\nstate_dir: {state}\nsocket: {sock}\nuid_range: 1880099000-1880099900\ngrace_seconds: 2\nlimits: {{max_procs: 64, tmp_bytes: 8388608, {limits}}}\ninstances:\n  tess: {{role: probe, uid: {uid}}}\n",
                repo = common::REPO,
                layer = layer.display(),
                state = state.display(),
                sock = sock.display(),
            ),
        )
        .unwrap();
        Host {
            _dir: dir,
            root,
            cfg,
            state: state.to_path_buf(),
            sock,
            uid,
            daemon: None,
        }
    }

    fn launch(&self, extra: &[&str], script: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
        c.arg("--config")
            .arg(&self.cfg)
            .args([
                "launch",
                "probe",
                "--instance",
                "tess",
                "--standalone",
                "--wait",
            ])
            .args(extra)
            .args(["--", "/bin/sh", "-c", script])
            .stdin(Stdio::null());
        c
    }

    fn start_daemon(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlockd"))
            .arg("--config")
            .arg(&self.cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let up = poll(30, || {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("airlockd exited early ({st})");
            }
            let r = self.request(&json!({"v":1,"op":"status"})).ok()?;
            (r.first()?["ok"] == true).then_some(())
        });
        assert!(up.is_some(), "airlockd never became ready");
        self.daemon = Some(child);
    }

    /// SIGTERM, and wait for airlockd to exit 0.
    fn stop_daemon(&mut self) {
        let mut c = self.daemon.take().expect("a running airlockd");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let st = c.wait().unwrap();
        assert!(st.success(), "airlockd exited with {st}");
    }

    fn request(&self, v: &Value) -> std::io::Result<Vec<Value>> {
        let mut s = UnixStream::connect(&self.sock)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        s.write_all(format!("{v}\n").as_bytes())?;
        let mut out = Vec::new();
        for line in BufReader::new(s).lines() {
            out.push(serde_json::from_str(&line?).map_err(std::io::Error::other)?);
        }
        Ok(out)
    }

    /// What is left of the runs' bounded filesystems on the host: workspace images, loop
    /// devices backed by a file under the state directory, mounts of them. The images
    /// airlockd's pool holds ready are its own, not a run's.
    fn leftovers(&self) -> Vec<String> {
        self.left_but(&[self.state.join(airlock::supervisor::image_pool::DIR)])
    }

    /// The same, without the homes a running airlockd keeps between an instance's runs.
    fn leftovers_of_runs(&self) -> Vec<String> {
        self.left_but(&[
            self.state.join(airlock::supervisor::image_pool::DIR),
            self.state.join("homes"),
        ])
    }

    fn left_but(&self, theirs: &[PathBuf]) -> Vec<String> {
        let mut left: Vec<String> = loopdev::attached_under(&self.state)
            .iter()
            .filter(|p| !p.ends_with("fs.img") && !theirs.iter().any(|d| p.starts_with(d)))
            .map(|p| format!("loop device on {}", p.display()))
            .collect();
        if let Ok(runs) = std::fs::read_dir(self.state.join("runs")) {
            for r in runs.flatten() {
                let img = r.path().join("workspace.img");
                if img.exists() {
                    left.push(format!("image {}", img.display()));
                }
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        for l in mounts.lines() {
            if l.contains(self.state.join("runs").to_str().unwrap())
                || l.contains(self.state.join("homes").to_str().unwrap())
            {
                left.push(format!("mount {l}"));
            }
        }
        left
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(c) = self.daemon.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for pid in airlock::supervisor::process::pids_of_uid(self.uid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // The loop devices detach once the runs' processes are gone.
        let _ = poll(10, || self.leftovers().is_empty().then_some(()));
    }
}

/// Read the child's stdout until a line equal to `marker`; the lines before it.
fn lines_until(out: &mut impl BufRead, marker: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        if line == marker {
            return lines;
        }
        lines.push(line);
    }
    panic!("no `{marker}` line; got {lines:?}");
}

fn value_of(lines: &[String], key: &str) -> String {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {lines:?}"))
        .to_string()
}

const WS: u64 = 64 * MIB;
const HOME: u64 = 32 * MIB;

#[test]
fn writes_past_the_workspace_and_home_bounds_get_enospc_and_the_host_loses_no_more() {
    require_journald();
    let fs = SmallFs::new(512 * MIB);
    let host = Host::new(
        &fs.mnt.join("state"),
        &format!(
            "workspace: {{disk_bytes: {WS}, disk_inodes: 1000}}, home: {{disk_bytes: {HOME}, disk_inodes: 256}}, reserve: {{disk_bytes: {}, disk_inodes: 100}}",
            16 * MIB
        ),
    );
    // The state directory's layout and the home's image exist after a first run: measure
    // from there.
    let o = host.launch(&[], "true").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let before = fs.free();
    let script = "
dd if=/dev/zero of=w1 bs=1M count=200 2>/dev/null; echo dd=$?
fallocate -l 200M w2 2>/dev/null; echo fallocate=$?
dd if=/dev/zero of=$HOME/h1 bs=1M count=100 2>/dev/null; echo hdd=$?
fallocate -l 100M $HOME/h2 2>/dev/null; echo hfallocate=$?
echo ws_used=$(du -sk . | cut -f1)
echo filled
sleep 60
";
    let mut child = host
        .launch(&[], script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let lines = lines_until(&mut out, "filled");
    // dd and fallocate say ENOSPC by failing (exit 1).
    for k in ["dd", "fallocate", "hdd", "hfallocate"] {
        assert_eq!(value_of(&lines, k), "1", "{k}: {lines:?}");
    }
    let used_kib: u64 = value_of(&lines, "ws_used").parse().unwrap();
    assert!(used_kib * 1024 <= WS, "{used_kib} KiB used");
    assert!(
        used_kib * 1024 >= WS / 2,
        "the bound is the filesystem: {used_kib} KiB"
    );
    // The host's filesystem lost no more than the bounds (and a little for the run's
    // own files: its directory, the ledger's records).
    let lost = before.saturating_sub(fs.free());
    assert!(
        lost <= WS + HOME + 2 * MIB,
        "the host lost {} MiB",
        lost / MIB
    );
    // A full run filesystem is the run's problem alone: the host takes new files.
    std::fs::write(fs.mnt.join("host-file"), b"still writable").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130));
    let clean = poll(10, || {
        let l = host.leftovers();
        l.is_empty().then_some(()).ok_or(l).ok()
    });
    assert!(
        clean.is_some(),
        "left after the run: {:?}",
        host.leftovers()
    );
    // Its workspace's space is back; the home keeps what it holds.
    let back = poll(10, || {
        (before.saturating_sub(fs.free()) <= HOME + 2 * MIB).then_some(())
    });
    assert!(
        back.is_some(),
        "{} MiB not given back",
        before.saturating_sub(fs.free()) / MIB
    );
}

#[test]
fn creating_files_past_disk_inodes_is_stopped_by_the_kernel() {
    let fs = SmallFs::new(256 * MIB);
    let host = Host::new(
        &fs.mnt.join("state"),
        &format!(
            "workspace: {{disk_bytes: {WS}, disk_inodes: 500}}, home: {{disk_bytes: {HOME}, disk_inodes: 200}}, reserve: {{disk_bytes: 0, disk_inodes: 0}}"
        ),
    );
    let script = "
i=0; while [ $i -lt 3000 ]; do true > f$i 2>/dev/null || break; i=$((i+1)); done; echo files=$i
i=0; while [ $i -lt 3000 ]; do true > $HOME/f$i 2>/dev/null || break; i=$((i+1)); done; echo hfiles=$i
true > one-more; echo err=$?
";
    let o = host.launch(&[], script).output().unwrap();
    let lines: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert!(!lines.is_empty(), "{}", stderr(&o));
    let files: u64 = value_of(&lines, "files").parse().unwrap();
    let hfiles: u64 = value_of(&lines, "hfiles").parse().unwrap();
    // mke2fs rounds the inode count up to whole groups; ext4 keeps 11 for itself.
    assert!(
        (400..=520).contains(&files),
        "{files} files in the workspace"
    );
    assert!((150..=260).contains(&hfiles), "{hfiles} files in the home");
    assert_ne!(value_of(&lines, "err"), "0");
    assert!(
        stderr(&o).contains("No space left on device"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_home_bound_holds_across_runs_of_one_instance() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new(
        &dir.path().join("state"),
        &format!(
            "workspace: {{disk_bytes: {WS}, disk_inodes: 500}}, home: {{disk_bytes: {HOME}, disk_inodes: 200}}, reserve: {{disk_bytes: 0, disk_inodes: 0}}"
        ),
    );
    let o = host
        .launch(
            &[],
            "dd if=/dev/zero of=$HOME/first bs=1M count=20 2>/dev/null; echo dd=$?",
        )
        .output()
        .unwrap();
    assert!(stdout(&o).contains("dd=0"), "{}{}", stdout(&o), stderr(&o));
    let o = host
        .launch(
            &[],
            "ls $HOME; dd if=/dev/zero of=$HOME/second bs=1M count=30 2>/dev/null; echo dd=$?; echo used=$(du -sk $HOME | cut -f1)",
        )
        .output()
        .unwrap();
    let lines: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert!(lines.iter().any(|l| l == "first"), "{lines:?}");
    assert_eq!(value_of(&lines, "dd"), "1", "{lines:?}");
    let used: u64 = value_of(&lines, "used").parse().unwrap();
    assert!(used * 1024 <= HOME, "{used} KiB in the home");
    assert!(
        host.leftovers().is_empty()
            || poll(10, || host.leftovers().is_empty().then_some(())).is_some()
    );
}

#[test]
fn an_operators_workspace_keeps_the_hosts_limits_and_the_journal_says_which() {
    require_journald();
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new(
        &dir.path().join("state"),
        &format!(
            "workspace: {{disk_bytes: {WS}, disk_inodes: 500}}, home: {{disk_bytes: {HOME}, disk_inodes: 200}}, reserve: {{disk_bytes: 0, disk_inodes: 0}}"
        ),
    );
    let ws = host.root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    common::chown_tree(&ws, host.uid);
    let o = host
        .launch(&["--workspace", ws.to_str().unwrap()], "echo kept > here")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(ws.join("here")).unwrap(), "kept\n");
    let run = common::run_id_of(&o);
    let text = common::journal_text(&run);
    assert!(
        text.contains("disk: workspace not bounded by Airlock; the host's own limits apply"),
        "{text}"
    );
    assert!(text.contains("disk: home bounded by the kernel"), "{text}");
    assert!(text.contains("cpu weight: cgroup"), "{text}");
    let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&host.cfg)
        .args(["explain", "probe"])
        .output()
        .unwrap();
    assert!(
        stdout(&o).contains("--workspace DIR is not bounded by Airlock"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn nothing_is_left_after_kill_9_of_airlockd_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = Host::new(
        &dir.path().join("state"),
        &format!(
            "workspace: {{disk_bytes: {WS}, disk_inodes: 500}}, home: {{disk_bytes: {HOME}, disk_inodes: 200}}, reserve: {{disk_bytes: 0, disk_inodes: 0}}"
        ),
    );
    host.start_daemon();
    let r = host
        .request(&json!({"v":1,"op":"launch","role":"probe","instance":"tess","command":["/bin/sh","-c","echo x > f; sleep 100"]}))
        .unwrap();
    let run = r[0]["data"]["run"]
        .as_str()
        .unwrap_or_else(|| panic!("{r:?}"))
        .to_string();
    assert_eq!(r[0]["data"]["frame"], "started", "{r:?}");
    // The run's workspace and home (the pool's ready images are airlockd's).
    let pool = host.state.join(airlock::supervisor::image_pool::DIR);
    let runs = || {
        loopdev::attached_under(&host.state)
            .into_iter()
            .filter(|p| !p.starts_with(&pool))
            .count()
    };
    let attached = poll(20, || (runs() == 2).then_some(()));
    assert!(
        attached.is_some(),
        "{:?}",
        loopdev::attached_under(&host.state)
    );
    let mut d = host.daemon.take().unwrap();
    d.kill().unwrap();
    d.wait().unwrap();
    // The run dies with its supervisor, and its mounts and loop devices with it.
    let gone = poll(15, || {
        loopdev::attached_under(&host.state)
            .is_empty()
            .then_some(())
    });
    assert!(gone.is_some(), "{:?}", loopdev::attached_under(&host.state));
    host.start_daemon();
    let clean = poll(10, || host.leftovers().is_empty().then_some(()));
    assert!(
        clean.is_some(),
        "left after the restart: {:?}",
        host.leftovers()
    );
    let (_, closed) = ledger::find_run(&host.state.join("ledger.jsonl"), &run)
        .unwrap()
        .unwrap();
    assert_eq!(closed.unwrap().outcome, ledger::Outcome::Aborted);
    // The next run of the instance finds its home as the last one left it.
    let r = host
        .request(&json!({"v":1,"op":"launch","role":"probe","instance":"tess","wait":true,"command":["/bin/sh","-c","ls $HOME; df -k $HOME | tail -1"]}))
        .unwrap();
    let out: String = r
        .iter()
        .filter(|l| l["data"]["frame"] == "output")
        .filter_map(|l| l["data"]["data"].as_str())
        .collect();
    assert!(out.contains("/dev/loop"), "{r:?}");
}

#[test]
fn a_launch_below_the_reserve_is_refused_and_a_full_disk_tears_no_record() {
    require_journald();
    let fs = SmallFs::new(128 * MIB);
    let host = Host::new(
        &fs.mnt.join("state"),
        &format!(
            "workspace: {{disk_bytes: {}, disk_inodes: 200}}, home: null, reserve: {{disk_bytes: {}, disk_inodes: 100}}",
            16 * MIB,
            48 * MIB
        ),
    );
    let o = host.launch(&[], "echo ok").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let ledger_path = host.state.join("ledger.jsonl");
    let records = std::fs::read_to_string(&ledger_path)
        .unwrap()
        .lines()
        .count();
    // Leave 40 MiB free: the next run's 16 MiB workspace would eat into the 48 MiB reserve.
    let filler = fs.mnt.join("filler");
    let fill = fs.free() - 40 * MIB;
    sh(&[
        "fallocate",
        "-l",
        &fill.to_string(),
        filler.to_str().unwrap(),
    ]);
    let o = host.launch(&[], "echo never").output().unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("limits.reserve.disk_bytes"), "{err}");
    assert!(err.contains(host.state.to_str().unwrap()), "{err}");
    assert!(!stdout(&o).contains("never"));
    assert_eq!(
        std::fs::read_to_string(&ledger_path)
            .unwrap()
            .lines()
            .count(),
        records,
        "a refused launch records nothing"
    );
    assert!(ledger::verify(&ledger_path).is_ok());

    // A full disk: an append either lands whole or not at all.
    let rest = fs.free().saturating_sub(MIB);
    let more = fs.mnt.join("more");
    sh(&["fallocate", "-l", &rest.to_string(), more.to_str().unwrap()]);
    // What is left: take it with plain writes until ENOSPC.
    let mut f = std::fs::File::create(fs.mnt.join("last")).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    drop(f);
    let len = std::fs::metadata(&ledger_path).unwrap().len();
    let mut l = ledger::Ledger::open(&ledger_path).unwrap();
    let big = "x".repeat(64 * 1024);
    let appended = l.append(ledger::LedgerEvent::RunClosed(ledger::RunClosed {
        run: "r-20260101-deadbeef".into(),
        ended_at: ledger::now_ms(),
        outcome: ledger::Outcome::Aborted,
        exit_code: None,
        signal: None,
        reason: big.clone(),
        calls: None,
        spend: None,
        github: None,
        egress: None,
    }));
    assert!(appended.is_err(), "appended on a full disk?");
    drop(l);
    assert_eq!(std::fs::metadata(&ledger_path).unwrap().len(), len);
    assert!(ledger::verify(&ledger_path).is_ok());
    let jpath = host.state.join("journal/r-full.journal");
    let mut fb = airlock::journal::fallback::FallbackFile::new(jpath.clone());
    assert!(fb.append(&[("MESSAGE", big.as_bytes())]).is_err());
    assert_eq!(std::fs::metadata(&jpath).map(|m| m.len()).unwrap_or(0), 0);
}

#[test]
fn a_hundred_launches_at_once_with_the_default_limits_all_start() {
    // Each one attaches a workspace image to a loop device at the same time as the others:
    // none may be refused because another took the free device first.
    const N: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let mut host = Host::new(&dir.path().join("state"), "cpu_weight: 50");
    let mut cfg = std::fs::read_to_string(&host.cfg).unwrap();
    cfg.push_str("max_concurrent_runs: 128\n");
    std::fs::write(&host.cfg, cfg).unwrap();
    host.start_daemon();
    let clients: Vec<_> = (0..N)
        .map(|_| {
            let sock = host.sock.clone();
            std::thread::spawn(move || {
                let mut s = UnixStream::connect(&sock).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
                let req = json!({"v":1,"op":"launch","role":"probe","instance":"tess","wait":true,
                    "command":["/bin/sh","-c","df -k . | tail -1"]});
                s.write_all(format!("{req}\n").as_bytes()).unwrap();
                BufReader::new(s)
                    .lines()
                    .map(|l| serde_json::from_str::<Value>(&l.unwrap()).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut refused = Vec::new();
    for c in clients {
        let frames = c.join().unwrap();
        let exited = frames.iter().find(|f| f["data"]["frame"] == "exited");
        let out: String = frames
            .iter()
            .filter(|l| l["data"]["frame"] == "output")
            .filter_map(|l| l["data"]["data"].as_str())
            .collect();
        match exited {
            // Its workspace was its own bounded filesystem.
            Some(e) if e["data"]["exit_code"] == 0 && out.contains("/dev/loop") => {}
            _ => refused.push(frames),
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {N} launches did not run on a bounded workspace; the first: {:?}",
        refused.len(),
        refused[0]
    );
    let clean = poll(30, || host.leftovers_of_runs().is_empty().then_some(()));
    assert!(clean.is_some(), "left: {:?}", host.leftovers_of_runs());
    // airlockd made its pool of empty workspace images again, ready for the next launches.
    let pool = host.state.join(airlock::supervisor::image_pool::DIR);
    let ready = || {
        std::fs::read_dir(&pool)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension() == Some("img".as_ref()))
                    .count()
            })
            .unwrap_or(0)
    };
    let full = poll(30, || {
        (ready() == airlock::supervisor::image_pool::POOL_IMAGES).then_some(())
    });
    assert!(full.is_some(), "{} images ready", ready());
    // Stopped, airlockd lets go of the home it kept and of its pool: nothing stays attached.
    host.stop_daemon();
    let gone = poll(10, || {
        loopdev::attached_under(&host.state)
            .is_empty()
            .then_some(())
    });
    assert!(gone.is_some(), "{:?}", loopdev::attached_under(&host.state));
}

#[test]
fn an_unbounded_fresh_workspace_goes_with_its_run_and_root_follows_none_of_its_links() {
    let dir = tempfile::tempdir().unwrap();
    let mut host = Host::new(
        &dir.path().join("state"),
        "workspace: null, home: null, reserve: {disk_bytes: 0, disk_inodes: 0}",
    );
    // What root must never reach through the run's links while removing the workspace.
    let victim = host.root.join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("keep"), "root's\n").unwrap();
    let victim_file = host.root.join("victim-file");
    std::fs::write(&victim_file, "root's\n").unwrap();
    let plant = format!(
        "mkdir -p a/b && echo x > a/b/f && ln -s {v} a/dirlink && chmod 500 a && ln -s {v} dirlink && ln -s {f} filelink && ln -s {v}/keep keeplink",
        v = victim.display(),
        f = victim_file.display()
    );
    let intact = || {
        assert_eq!(
            std::fs::read_to_string(victim.join("keep")).unwrap(),
            "root's\n"
        );
        assert_eq!(std::fs::read_to_string(&victim_file).unwrap(), "root's\n");
    };

    // A run that ends: its workspace goes with it.
    let o = host.launch(&[], &plant).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run = common::run_id_of(&o);
    let ws = host.state.join("runs").join(&run).join("workspace");
    assert!(
        std::fs::symlink_metadata(&ws).is_err(),
        "{} is left: {:?}",
        ws.display(),
        std::fs::read_dir(&ws).map(|d| d.count())
    );
    // And so does its directory: nothing of a run stays under runs/ (one per run, for
    // ever, was what the soak found).
    let run_dir = host.state.join("runs").join(&run);
    assert!(
        std::fs::symlink_metadata(&run_dir).is_err(),
        "{} is left",
        run_dir.display()
    );
    intact();

    // A run whose airlockd is killed: the next start removes it.
    host.start_daemon();
    let r = host
        .request(&json!({"v":1,"op":"launch","role":"probe","instance":"tess","command":["/bin/sh","-c",format!("{plant} && touch ready && sleep 100")]}))
        .unwrap();
    let run = r[0]["data"]["run"]
        .as_str()
        .unwrap_or_else(|| panic!("{r:?}"))
        .to_string();
    let ws = host.state.join("runs").join(&run).join("workspace");
    assert!(
        poll(30, || ws.join("ready").exists().then_some(())).is_some(),
        "the run never got going"
    );
    let mut d = host.daemon.take().unwrap();
    d.kill().unwrap();
    d.wait().unwrap();
    host.start_daemon();
    assert!(
        poll(15, || std::fs::symlink_metadata(&ws).is_err().then_some(())).is_some(),
        "{} is left after the restart",
        ws.display()
    );
    let run_dir = host.state.join("runs").join(&run);
    assert!(
        poll(15, || std::fs::symlink_metadata(&run_dir)
            .is_err()
            .then_some(()))
        .is_some(),
        "{} is left after the restart",
        run_dir.display()
    );
    intact();
}
