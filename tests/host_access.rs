//! Who may do what on the host, tested with real users and groups this suite creates
//! (useradd, groupadd) and removes again, also when a test fails: operators, admins who are
//! not operators, and a user in no group, each running the built `airlockctl` as itself
//! (setpriv with its NSS groups) against a real airlockd.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use common::{stderr, stdout, Airlockd, Host};

static NEXT: AtomicU32 = AtomicU32::new(0);

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// Users and groups made for one test, removed on drop (a panic included).
struct Accounts {
    tag: String,
    users: Vec<String>,
    groups: Vec<String>,
}

impl Accounts {
    fn new() -> Accounts {
        common::require_root();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        Accounts {
            tag: format!("{}{n}", std::process::id() % 100_000),
            users: Vec::new(),
            groups: Vec::new(),
        }
    }

    /// A new group; its gid.
    fn group(&mut self, base: &str) -> (String, u32) {
        let name = format!("al{base}{}", self.tag);
        let _ = run(Command::new("groupdel").arg(&name));
        let o = run(Command::new("groupadd").arg(&name));
        assert!(o.status.success(), "groupadd {name}: {}", stderr(&o));
        self.groups.push(name.clone());
        let gid = nix::unistd::Group::from_name(&name).unwrap().unwrap().gid;
        (name, gid.as_raw())
    }

    /// A new user with a group of its own and the supplementary `groups`; its uid.
    fn user(&mut self, base: &str, groups: &[&str]) -> (String, u32) {
        let name = format!("al{base}{}", self.tag);
        let _ = run(Command::new("userdel").arg(&name));
        let _ = run(Command::new("groupdel").arg(&name));
        let mut c = Command::new("useradd");
        c.args(["--no-create-home", "--home-dir", "/nonexistent"])
            .args(["--shell", "/usr/sbin/nologin", "--user-group"]);
        if !groups.is_empty() {
            c.arg("--groups").arg(groups.join(","));
        }
        let o = run(c.arg(&name));
        assert!(o.status.success(), "useradd {name}: {}", stderr(&o));
        self.users.push(name.clone());
        self.groups.push(name.clone());
        let uid = nix::unistd::User::from_name(&name).unwrap().unwrap().uid;
        (name, uid.as_raw())
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in &self.users {
            let _ = run(Command::new("userdel").arg(u));
        }
        for g in &self.groups {
            let _ = run(Command::new("groupdel").arg(g));
        }
    }
}

/// `cmd ARGS` as `user`, with the user's own groups (NSS), never root's.
fn as_user(user: &str, cmd: &Path, args: &[&str]) -> Output {
    run(Command::new("setpriv")
        .args(["--reuid", user, "--regid", user, "--init-groups", "--"])
        .arg(cmd)
        .args(args))
}

/// One request line sent straight to airlockd's socket as `user` (no airlockctl, whose
/// own checks run as the user anyway): the answer lines.
fn request_as(h: &Host, user: &str, req: &serde_json::Value) -> Vec<serde_json::Value> {
    let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall(sys.argv[2].encode()+b'\\n')\nsys.stdout.write(s.makefile().read())\n";
    let sock = h.root.join("airlockd.sock");
    let o = as_user(
        user,
        Path::new("/usr/bin/python3"),
        &["-c", script, sock.to_str().unwrap(), &req.to_string()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The refusal's message of a launch answered with one error line.
fn refusal(r: &[serde_json::Value]) -> String {
    assert_eq!(r[0]["ok"], false, "{r:?}");
    r[0]["error"]["message"].as_str().unwrap().to_string()
}

fn ctl_as(h: &Host, user: &str, args: &[&str]) -> Output {
    let cfg = h.cfg.to_str().unwrap().to_string();
    let mut all = vec!["--config", cfg.as_str()];
    all.extend_from_slice(args);
    as_user(user, Path::new(env!("CARGO_BIN_EXE_airlockctl")), &all)
}

/// A host whose files other users can reach (the socket, the config), with the admin and
/// operator groups configured by name.
fn host(admins: &str, operators: &str, hires: &[(&str, &str)]) -> Host {
    host_with(admins, operators, hires, "")
}

/// [`host`] where the code role can be hired: what its runs use is configured (nothing is
/// read before a run needs it; a run of its own agent would then fail).
fn hiring_host(admins: &str, operators: &str, hires: &[(&str, &str)]) -> Host {
    let for_code = "credentials:\n  gh: /etc/airlock/credentials/gh.pem\nproviders:\n  claude: {url: \"http://127.0.0.1:9\"}\nmcp_connectors:\n  board: {url: \"http://127.0.0.1:9/mcp\"}\n  github: {url: \"http://127.0.0.1:9/mcp\"}\ngithub: {app_id: 7, private_key: gh}\n";
    host_with(admins, operators, hires, for_code)
}

fn host_with(admins: &str, operators: &str, hires: &[(&str, &str)], extra: &str) -> Host {
    let h = Host::new(
        hires,
        &format!("admin_group: {admins}\noperator_group: {operators}\n{extra}"),
    );
    std::fs::set_permissions(&h.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    h
}

fn mkdir_owned(p: &Path, uid: u32, mode: u32) {
    std::fs::create_dir_all(p).unwrap();
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A bind mount, undone on drop.
struct Bind(std::path::PathBuf);

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn a_workspace_is_one_the_requester_may_use_decided_as_the_requester() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    let (review, review_uid) = acc.user("rv", &[&ops]);
    let (other, other_uid) = acc.user("ot", &[&ops]);
    let (admin, _) = acc.user("ad", &[&adm]);
    let h = host(&adm, &ops, &[("tess", "code")]);
    let _d = Airlockd::start(&h);
    let launch = |user: &str, ws: &Path| {
        request_as(
            &h,
            user,
            &serde_json::json!({"v": 1, "op": "launch", "role": "code", "instance": "tess",
                "workspace": ws.to_str().unwrap(), "wait": true, "command": ["/bin/true"]}),
        )
    };
    let exited = |r: &[serde_json::Value]| {
        r.iter()
            .find(|l| l["data"]["frame"] == "exited" || l["data"]["exit_code"].is_number())
            .cloned()
    };
    // review's private directory (its home is 0700): another operator cannot use it, and
    // is told the same as for a path that does not exist.
    let home = h.root.join("home-review");
    mkdir_owned(&home, review_uid, 0o700);
    mkdir_owned(&home.join("proj/out"), review_uid, 0o755);
    std::fs::write(home.join("proj/out/result.txt"), "review's result").unwrap();
    let theirs = refusal(&launch(&other, &home.join("proj/out")));
    let absent = refusal(&launch(&other, &h.root.join("no-such-dir")));
    assert!(theirs.contains("--workspace"), "{theirs}");
    assert_eq!(theirs, absent);
    // Root's view of the host is not probed for an operator either.
    assert_eq!(refusal(&launch(&other, Path::new("/root/.bashrc"))), absent);
    assert_eq!(
        refusal(&launch(&other, Path::new("/root/nonexistent-airlock-test"))),
        absent
    );
    // Its owner may.
    let mine = launch(&review, &home.join("proj/out"));
    assert!(exited(&mine).is_some(), "{mine:?}");

    // A directory the instance owns (or anyone else) is not the operator's to hand over.
    let inst = h.root.join("instance-owned");
    mkdir_owned(&inst, h.uids[0], 0o755);
    assert!(refusal(&launch(&other, &inst)).contains("owned by you"));
    let own = h.root.join("other-owned");
    mkdir_owned(&own, other_uid, 0o755);
    assert!(exited(&launch(&other, &own)).is_some());

    // The state directory through a second path (a bind mount): refused for an operator
    // (not theirs to reach) and for an admin (the same directory by device and inode).
    let bind = h.root.join("state-again");
    std::fs::create_dir(&bind).unwrap();
    nix::mount::mount(
        Some(&h.state),
        &bind,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    let _bind = Bind(bind.clone());
    assert_eq!(refusal(&launch(&other, &bind.join("homes/tess"))), absent);
    assert!(refusal(&launch(&admin, &bind)).contains("state directory"));
    // An admin reaches only what it may reach itself (homes/ is root's); root reaches
    // every directory, and the state directory's own are refused by device and inode.
    assert_eq!(refusal(&launch(&admin, &bind.join("homes/tess"))), absent);
    let o = h.ctl(&[
        "launch",
        "code",
        "--instance",
        "tess",
        "--workspace",
        bind.join("homes/tess").to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert!(stderr(&o).contains("state directory"), "{}", stderr(&o));
}

#[test]
fn a_user_in_no_group_can_take_no_lock_and_read_no_state() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    let (nobody, _) = acc.user("ng", &[]);
    let h = host(&adm, &ops, &[("tess", "code")]);
    let _d = Airlockd::start(&h);
    // Everything exists: a registry, its lock, a ledger, a run's files.
    let o = h.ctl(&[
        "launch",
        "code",
        "--instance",
        "tess",
        "--wait",
        "--",
        "/bin/true",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    let mut files = Vec::new();
    let mut todo = vec![h.state.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                files.push(e.path());
            }
        }
    }
    for lock in ["instances.lock", "locks/instances.lock"] {
        let p = h.state.join(lock);
        if !files.contains(&p) {
            files.push(p);
        }
    }
    for f in &files {
        // flock(1) opens the file (read-only if it must) and takes the lock: what the
        // review's user did to stall airlockd.
        let o = as_user(
            &nobody,
            Path::new("/usr/bin/flock"),
            &["--nonblock", f.to_str().unwrap(), "/bin/true"],
        );
        assert!(
            !o.status.success(),
            "a user in no group could open and lock {}",
            f.display()
        );
    }
    let reg = std::fs::metadata(h.state.join("instances.json")).unwrap();
    assert_eq!(reg.mode() & 0o777, 0o600);

    // And every operation goes on.
    for args in [
        &[
            "launch",
            "code",
            "--instance",
            "tess",
            "--wait",
            "--",
            "/bin/true",
        ][..],
        &["instances"],
        &["fire", "tess"],
    ] {
        let o = h.ctl(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn a_fired_uid_is_never_handed_out_again() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    // In both groups: what is tested here is not reaching the socket.
    let (admin, _) = acc.user("ad", &[&adm, &ops]);
    let h = hiring_host(&adm, &ops, &[("old", "code")]);
    let old_uid = h.uids[0];
    // The range holds just `old`'s uid and one more.
    let text = std::fs::read_to_string(&h.cfg).unwrap();
    let (head, _) = text.split_once("instances:").unwrap();
    let head: String = head
        .lines()
        .map(|l| {
            if l.starts_with("uid_range:") {
                format!("uid_range: {old_uid}-{}\n", old_uid + 1)
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(
        &h.cfg,
        format!("{head}instances:\n  old: {{role: code, uid: {old_uid}}}\n"),
    )
    .unwrap();
    let _d = Airlockd::start(&h);

    let o = ctl_as(&h, &admin, &["fire", "old"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Gone from the config, reloaded: its uid is still not free.
    std::fs::write(&h.cfg, format!("{head}instances: {{}}\n")).unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // An admin who is not an owner raises the hire; its credential lines wait for an owner
    // (root), who approves it against its digest (seed 003).
    let o = ctl_as(&h, &admin, &["hire", "newbie", "--role", "code", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let raised: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(raised["state"], "pending", "{raised}");
    let d = &raised["decision"];
    let o = h.ctl(&[
        "approve",
        d["id"].as_str().unwrap(),
        "--digest",
        d["digest"].as_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let hired: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(hired["uid"], old_uid + 1, "{hired}");
    // A new config instance given that uid is refused at load, naming the key.
    std::fs::write(
        &h.cfg,
        format!("{head}instances:\n  again: {{role: code, uid: {old_uid}}}\n"),
    )
    .unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("instances.again.uid") && stderr(&o).contains("`old`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn config_and_role_files_anyone_could_write_are_refused() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    // In both groups: what is tested here is not reaching the socket.
    let (admin, _) = acc.user("ad", &[&adm, &ops]);
    let (nobody, _) = acc.user("ng", &[]);
    let h = host(&adm, &ops, &[("tess", "code")]);
    h.local_role("code", |t| t);
    let _d = Airlockd::start(&h);

    // A config anyone may write: a user in no group makes its own group the operators'.
    std::fs::set_permissions(&h.cfg, std::fs::Permissions::from_mode(0o666)).unwrap();
    let text = std::fs::read_to_string(&h.cfg).unwrap();
    let edited = text.replace(
        &format!("operator_group: {ops}"),
        &format!("operator_group: {nobody}"),
    );
    let o = as_user(
        &nobody,
        Path::new("/bin/sh"),
        &[
            "-c",
            "printf '%s' \"$1\" > \"$2\"",
            "sh",
            &edited,
            h.cfg.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&h.cfg).unwrap(), edited);
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(
        e.contains(h.cfg.to_str().unwrap()) && e.contains("0666"),
        "{e}"
    );
    // The old set stays: the user is still not an operator.
    let o = ctl_as(&h, &nobody, &["ps"]);
    assert!(!o.status.success(), "{}", stdout(&o));

    std::fs::write(&h.cfg, &text).unwrap();
    std::fs::set_permissions(&h.cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let role = h.root.join("roles.local/code/role.yaml");
    std::fs::set_permissions(&role, std::fs::Permissions::from_mode(0o664)).unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("code/role.yaml") && e.contains("0664"),
        "{e}"
    );
    std::fs::set_permissions(&role, std::fs::Permissions::from_mode(0o644)).unwrap();
    let dir = h.root.join("roles.local/code");
    std::os::unix::fs::chown(&dir, Some(h.uids[0]), None).unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(!o.status.success() && stderr(&o).contains("roles.local/code"));
    std::os::unix::fs::chown(&dir, Some(0), None).unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn admins_who_are_not_operators_reach_the_socket_and_errors_name_the_groups() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    let (admin, _) = acc.user("ad", &[&adm]);
    let (operator, _) = acc.user("op", &[&ops]);
    let (nobody, _) = acc.user("ng", &[]);
    let h = host(&adm, &ops, &[("tess", "code")]);
    let _d = Airlockd::start(&h);

    for args in [&["status"][..], &["reload"], &["instances"]] {
        let o = ctl_as(&h, &admin, args);
        assert!(o.status.success(), "admin {args:?}: {}", stderr(&o));
    }
    // An operator is refused what only admins may, in words naming the configured group.
    let o = ctl_as(&h, &operator, &["reload"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains(&format!("`{adm}`")), "{}", stderr(&o));
    assert!(!stderr(&o).contains("airlock-admin"), "{}", stderr(&o));
    // Someone in neither group cannot connect, and is told which groups can.
    let o = ctl_as(&h, &nobody, &["status"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains(&format!("`{ops}`")) && e.contains(&format!("`{adm}`")),
        "{e}"
    );
    assert!(!e.contains("airlock-operators"), "{e}");
}

#[test]
fn only_a_runs_launcher_or_an_admin_stops_it_and_every_operator_sees_it() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    let (first, _) = acc.user("o1", &[&ops]);
    let (second, _) = acc.user("o2", &[&ops]);
    let (admin, _) = acc.user("ad", &[&adm]);
    let h = host(&adm, &ops, &[("tess", "code"), ("max", "code")]);
    let _d = Airlockd::start(&h);
    let start = |user: &str, inst: &str| {
        let o = ctl_as(
            &h,
            user,
            &[
                "launch",
                "code",
                "--instance",
                inst,
                "--",
                "/bin/sleep",
                "300",
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).trim().to_string()
    };
    let run = start(&first, "tess");
    let o = ctl_as(&h, &second, &["show", &run]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = ctl_as(&h, &second, &["stop", &run]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("another user launched it"),
        "{}",
        stderr(&o)
    );
    let o = ctl_as(&h, &first, &["stop", &run]);
    assert!(o.status.success(), "{}", stderr(&o));
    let run2 = start(&first, "max");
    let o = ctl_as(&h, &admin, &["stop", &run2]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `roles.local/code` made a link to `to` (the folder moved there, root's); `to`'s parent
/// directories are made as `mkdir -p` would, root's.
fn role_folder_behind_a_link(h: &Host, to: &Path) {
    let at = h.root.join("roles.local/code");
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
        let old = std::fs::read_link(&at).unwrap();
        std::fs::remove_file(&at).unwrap();
        std::fs::rename(old, to).unwrap();
    } else {
        std::fs::rename(&at, to).unwrap();
    }
    std::os::unix::fs::symlink(to, &at).unwrap();
}

#[test]
fn a_role_folder_that_is_a_link_is_checked_where_it_leads_and_all_it_holds() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    let (admin, _) = acc.user("ad", &[&adm]);
    let (someone, someone_uid) = acc.user("so", &[]);
    let h = host(&adm, &ops, &[("tess", "code")]);
    h.local_role("code", |t| t);
    let _d = Airlockd::start(&h);

    // Behind a link, everything root's: taken.
    let elsewhere = h.root.join("elsewhere/code");
    role_folder_behind_a_link(&h, &elsewhere);
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The role file where the link leads is someone else's: they could rewrite the role.
    let role = elsewhere.join("role.yaml");
    std::os::unix::fs::chown(&role, Some(someone_uid), None).unwrap();
    let o = as_user(
        &someone,
        Path::new("/bin/sh"),
        &[
            "-c",
            "echo '# theirs' >> \"$1\"",
            "sh",
            role.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = ctl_as(&h, &admin, &["reload"]);
    let e = stderr(&o);
    assert!(
        !o.status.success(),
        "a role file someone else owns was taken"
    );
    assert!(
        e.contains(role.to_str().unwrap()) && e.contains(&format!("uid {someone_uid}")),
        "{e}"
    );
    std::os::unix::fs::chown(&role, Some(0), None).unwrap();
    // A brief in the linked folder that anyone may write.
    let brief = elsewhere.join("brief.md");
    std::fs::set_permissions(&brief, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(
        !o.status.success() && stderr(&o).contains("brief.md") && stderr(&o).contains("0666"),
        "{}",
        stderr(&o)
    );
    std::fs::set_permissions(&brief, std::fs::Permissions::from_mode(0o644)).unwrap();

    // The link leads into a directory someone else owns (their home, say): refused there,
    // though every file in it is root's.
    let home = h.root.join("home-of-someone");
    mkdir_owned(&home, someone_uid, 0o755);
    role_folder_behind_a_link(&h, &home.join("code"));
    std::os::unix::fs::chown(home.join("code"), Some(0), Some(0)).unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    let e = stderr(&o);
    assert!(
        !o.status.success()
            && e.contains(home.to_str().unwrap())
            && e.contains(&format!("uid {someone_uid}")),
        "{e}"
    );

    // Root's again: taken.
    std::os::unix::fs::chown(&home, Some(0), Some(0)).unwrap();
    let o = ctl_as(&h, &admin, &["reload"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A client of airlockd's socket as `user`, holding as many connections as it may (up to
/// `want`), in the background: once every connection is answered, says how many airlockd
/// held until its read timeout closed them (they sent nothing) and how many it refused
/// busy, with what words. It then keeps reconnecting as fast as it can until killed.
fn hold_connections(h: &Host, user: &str, want: usize) -> (std::process::Child, serde_json::Value) {
    use std::io::BufRead;
    let script = r#"
import json, select, socket, sys, time
path, want = sys.argv[1], int(sys.argv[2])
def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s
socks = [conn() for _ in range(want)]
# Every connection is answered: at once when refused (busy), after airlockd's read timeout
# when held (it sent nothing). Told apart by what the answer says, not by when it came.
held, busy, msg, other = 0, 0, "", []
deadline, waiting = time.time() + 60, list(socks)
while waiting and time.time() < deadline:
    r, _, _ = select.select(waiting, [], [], 0.5)
    for s in r:
        data = s.recv(65536)
        waiting.remove(s)
        s.close()
        if b'"busy"' in data:
            busy += 1
            msg = json.loads(data.split(b"\n")[0])["error"]["message"]
        elif b"no complete request line" in data:
            held += 1
        else:
            other.append(data.decode(errors="replace"))
print(json.dumps({"held": held, "busy": busy, "message": msg, "other": other, "unanswered": len(waiting)}), flush=True)
# From here, as an attacker would: every connection closed is opened again at once.
socks = []
while True:
    while len(socks) < want:
        try:
            socks.append(conn())
        except OSError:
            break
    r, _, _ = select.select(socks, [], [], 0.05)
    for s in r:
        s.close()
        socks.remove(s)
"#;
    let sock = h.root.join("airlockd.sock");
    let mut child = Command::new("setpriv")
        .args(["--reuid", user, "--regid", user, "--init-groups", "--"])
        .args(["/usr/bin/python3", "-c", script])
        .arg(&sock)
        .arg(want.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let first: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line:?}"));
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, first)
}

#[test]
fn an_operator_holding_all_the_connections_it_may_locks_no_admin_root_or_operator_out() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    let (flooder, flooder_uid) = acc.user("fl", &[&ops]);
    let (other_op, _) = acc.user("op", &[&ops]);
    let (admin, _) = acc.user("ad", &[&adm]);
    let h = host(&adm, &ops, &[("tess", "code")]);
    let _d = Airlockd::start(&h);

    // More than every slot airlockd has: it gets its share, the rest are told why.
    let (mut flood, first) = hold_connections(&h, &flooder, 140);
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut flood);
    // Its share, each closed by airlockd for sending nothing; the rest told why.
    assert_eq!(first["held"], 8, "{first}");
    assert_eq!(first["busy"], 132, "{first}");
    let msg = first["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("uid {flooder_uid}")) && msg.contains("8 connections"),
        "{msg}"
    );
    assert_eq!(first["other"], serde_json::json!([]), "{first}");

    // Now it reconnects as fast as it can; root, an admin and another operator get in.
    std::thread::sleep(std::time::Duration::from_millis(500));
    for _ in 0..5 {
        let o = h.ctl(&["status"]);
        assert!(o.status.success(), "root: {}", stderr(&o));
        let o = ctl_as(&h, &admin, &["status"]);
        assert!(o.status.success(), "admin: {}", stderr(&o));
        let o = ctl_as(&h, &other_op, &["ps"]);
        assert!(o.status.success(), "operator: {}", stderr(&o));
    }
}

#[test]
fn an_instance_uid_of_root_or_of_a_host_account_is_refused_at_load() {
    let mut acc = Accounts::new();
    let (ops, _) = acc.group("ops");
    let (adm, _) = acc.group("adm");
    let (_, someone_uid) = acc.user("so", &[]);
    let h = host(&adm, &ops, &[("tess", "code")]);
    let _d = Airlockd::start(&h);
    let text = std::fs::read_to_string(&h.cfg).unwrap();
    let cfg = h.cfg.to_str().unwrap();

    for (uid, words) in [
        (0, "system accounts"),
        (someone_uid, "belongs to an existing account"),
    ] {
        std::fs::write(&h.cfg, format!("{text}  bad: {{role: code, uid: {uid}}}\n")).unwrap();
        let o = h.ctl(&["reload"]);
        let e = stderr(&o);
        assert!(!o.status.success(), "uid {uid} was taken: {}", stdout(&o));
        assert!(
            e.contains(cfg) && e.contains("instances.bad.uid") && e.contains(words),
            "{e}"
        );
    }
    // A range holding a host account.
    let range = text
        .lines()
        .find(|l| l.starts_with("uid_range:"))
        .unwrap()
        .to_string();
    std::fs::write(
        &h.cfg,
        text.replace(
            &range,
            &format!("uid_range: {}-{}", someone_uid - 1, someone_uid + 1),
        ),
    )
    .unwrap();
    let o = h.ctl(&["reload"]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains(cfg) && e.contains("uid_range"),
        "{e}"
    );
    std::fs::write(&h.cfg, &text).unwrap();
    let o = h.ctl(&["reload"]);
    assert!(o.status.success(), "{}", stderr(&o));
}
