//! Runs whose command side is rooted in an OCI image: images built here with Debian's
//! umoci from a small root (busybox-static; python3 with its libraries), imported with
//! `airlockctl image import`, granted with `environments:`; a Python agent on the (host's)
//! agent side sends commands through Airlock's bash tool, which run in the image.

mod common;

use std::path::Path;

use common::oci::*;
use common::*;
use serde_json::Value;

/// A host whose `code` role gets the image at `layout` (imported as `img`) and may run the
/// `bash` prefixes given.
fn host_with_image(layout: &Path, prefixes: &[&str]) -> Host {
    let h = Host::new(
        &[("tess", "code")],
        "images: {img: {path: /nonexistent-see-import}}\nenvironments: {code: img}\n",
    );
    let lines: String = prefixes.iter().map(|p| format!("    - {p}\n")).collect();
    h.local_role("code", |t| {
        t.replacen("  bash:\n", &format!("  bash:\n{lines}"), 1)
    });
    let o = h.ctl(&["image", "import", layout.to_str().unwrap(), "--name", "img"]);
    assert!(o.status.success(), "import: {}", stderr(&o));
    h
}

#[test]
fn a_bash_tool_command_sees_the_images_root_and_not_the_hosts_programs() {
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = work.path().join("root");
    busybox_root(&root);
    let layout = umoci_image(
        work.path(),
        &root,
        &["PATH=/bin", "IMAGE_MARK=from-the-image", "HOME=/image-home"],
    );
    let h = host_with_image(
        &layout,
        &[
            "cat /etc/os-release",
            "cat /etc/shadow",
            "python3 --version",
            "cat /proc/self/environ",
            "ls /usr/bin",
        ],
    );
    let o = h
        .launch(
            "code",
            "tess",
            &["--max-seconds", "120"],
            &[
                "/usr/bin/python3",
                "-c",
                AGENT,
                "cat /etc/os-release",
                "python3 --version",
                "cat /proc/self/environ",
                "cat /etc/shadow",
                "ls /usr/bin",
            ],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.len(), 5, "{out}");
    // The image's os-release (through its own /usr/lib symlink), not the host's.
    assert_eq!(r[0]["result"]["exit_code"], 0, "{}", r[0]);
    assert!(
        r[0]["result"]["stdout"]
            .as_str()
            .unwrap()
            .contains("ID=airlock-test-image"),
        "{}",
        r[0]
    );
    // The host has python3 (the agent is one); the image has not.
    assert_ne!(r[1]["result"]["exit_code"], 0, "{}", r[1]);
    assert!(
        !r[1]["result"]["stdout"]
            .as_str()
            .unwrap_or("")
            .contains("Python"),
        "{}",
        r[1]
    );
    // The image's Env applies, under Airlock's own variables.
    let env: Vec<&str> = r[2]["result"]["stdout"]
        .as_str()
        .unwrap()
        .split('\0')
        .collect();
    assert!(
        env.contains(&"IMAGE_MARK=from-the-image"),
        "{env:?} {}",
        r[2]
    );
    assert!(env.contains(&"PATH=/bin"), "{env:?}");
    assert!(env.contains(&"HOME=/home/tess"), "{env:?}");
    assert!(
        env.iter().any(|l| l.starts_with("AIRLOCK_RUN=r-")),
        "{env:?}"
    );
    // /etc is filtered from the image as from the host: no shadow.
    assert_ne!(r[3]["result"]["exit_code"], 0, "{}", r[3]);
    // The image has no /usr/bin: the host's is nowhere.
    assert_ne!(r[4]["result"]["exit_code"], 0, "{}", r[4]);

    // The run's records name the image and its digest.
    let run = run_id_of(&o);
    let show = h.show(&run);
    let ls = h.ctl(&["--json", "image", "ls"]);
    let listed: Value = serde_json::from_slice(&ls.stdout).unwrap();
    let digest = listed["images"][0]["digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:"), "{listed}");
    assert_eq!(listed["images"][0]["roles"][0], "code", "{listed}");
    assert!(show.contains(&format!("img ({digest})")), "{show}");
    let ledger = std::fs::read_to_string(h.state.join("ledger.jsonl")).unwrap();
    assert!(
        ledger.contains(&format!("\"image_digest\":\"{digest}\"")),
        "{ledger}"
    );

    // Removal is refused while the environment names it.
    let o = h.ctl(&["image", "rm", "img"]);
    assert!(
        !o.status.success() && stderr(&o).contains("environments.code"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_launch_whose_environment_names_no_imported_image_is_refused_naming_both() {
    let h = Host::new(
        &[("tess", "code")],
        "images: {missing: {path: /srv/none.tar}}\nenvironments: {code: missing}\n",
    );
    let o = h
        .launch("code", "tess", &[], &["/usr/bin/true"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    let e = stderr(&o);
    assert!(
        e.contains("environments.code") && e.contains("`missing`") && e.contains("`code`"),
        "{e}"
    );
}

#[test]
fn explain_names_the_environment_a_role_gets() {
    let h = Host::new(
        &[("tess", "code")],
        "images: {rust-dev: {ref: registry.example/acme/rust-dev:1.83}}\nenvironments: {code: rust-dev}\n",
    );
    let o = h.ctl(&["explain", "code", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["environment"]["image"], "rust-dev", "{v}");
    assert_eq!(v["environment"]["granted_by"], "environments.code", "{v}");
    assert_eq!(
        v["environment"]["ref"], "registry.example/acme/rust-dev:1.83",
        "{v}"
    );
    let o = h.ctl(&["explain", "code"]);
    assert!(
        stdout(&o).contains("rooted in image `rust-dev` (environments.code"),
        "{}",
        stdout(&o)
    );
    let o = h.ctl(&["explain", "review", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["environment"].is_null(), "{v}");
    assert!(stdout(&h.ctl(&["explain", "review"])).contains("the host's system folders"));
}

/// The escape battery, sent through the bash tool, on a command side rooted in an image of
/// python3 (the image's own, not the host's): every class holds as without an image. One
/// check is left out and why: `setuid_binary` needs a setuid program, and an image cannot
/// carry one (the unpacker refuses setuid files: tests/images.rs).
#[test]
fn the_escape_battery_holds_on_an_image_rooted_command_side() {
    require_journald();
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = work.path().join("root");
    python_root(&root);
    let layout = umoci_image(work.path(), &root, &["PATH=/usr/bin:/bin"]);
    let h = host_with_image(&layout, &["python3 escape_battery.py"]);
    let ws = h.workspace("ws", h.uids[0]);
    battery_into(&ws, h.uids[0]);
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port().to_string();
    let marker = format!("m{}", std::process::id());
    let command = format!(
        "python3 escape_battery.py --host-port {port} --host-path {} --host-path {} --max-procs 64 --daemon {marker} --skip setuid_binary",
        h.state.display(),
        h.cfg.display()
    );
    let o = h
        .launch(
            "code",
            "tess",
            &["--workspace", ws.to_str().unwrap(), "--max-seconds", "300"],
            &["/usr/bin/python3", "-c", AGENT, &command],
        )
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    let r = results(&out);
    assert_eq!(r.len(), 1, "{out}");
    let said = r[0]["result"]["stdout"].as_str().unwrap_or("");
    assert!(
        said.contains("BATTERY "),
        "{}\n{}",
        r[0],
        r[0]["result"]["stderr"]
    );
    assert_battery_held(said, &["setuid_binary"]);
    assert!(
        !battery_daemon_alive(&marker),
        "the battery's daemon outlived the run"
    );
}

/// `hire` says which image the new instance's commands run in, and where that is granted.
#[test]
fn hire_names_the_environment_of_the_new_instance() {
    require_journald();
    let h = Host::new(
        &[("tess", "code")],
        "images: {rust-dev: {ref: registry.example/acme/rust-dev:1.83}}\nenvironments: {hello: rust-dev}\n",
    );
    // The shipped smoke role: it needs no credential, so this host can hire it.
    let _d = Airlockd::start(&h);
    let o = h.ctl(&["hire", "rhea", "--role", "hello"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o)
            .contains("environment: its commands run in image `rust-dev` (environments.hello)"),
        "{}",
        stdout(&o)
    );
}
