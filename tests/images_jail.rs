//! Runs whose command side is rooted in an OCI image: images built here with Debian's
//! umoci from a small root (busybox-static; python3 with its libraries), imported with
//! `airlockctl image import`, granted with `environments:`; a Python agent on the (host's)
//! agent side sends commands through Airlock's bash tool, which run in the image.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

fn sh(cmd: &mut Command) {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/install-deps.sh installs umoci)"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An OCI layout at `layout` holding one image whose root is the folder `root`, with Env.
fn umoci_image(work: &Path, root: &Path, env: &[&str]) -> PathBuf {
    let layout = work.join("layout");
    let bundle = work.join("bundle");
    sh(Command::new("umoci")
        .args(["init", "--layout"])
        .arg(&layout));
    sh(Command::new("umoci")
        .args(["new", "--image"])
        .arg(format!("{}:t", layout.display())));
    sh(Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:t", layout.display()))
        .arg(&bundle));
    sh(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", root.display()))
        .arg(bundle.join("rootfs")));
    sh(Command::new("umoci")
        .args(["repack", "--image"])
        .arg(format!("{}:t", layout.display()))
        .arg(&bundle));
    let mut c = Command::new("umoci");
    c.args(["config", "--image"])
        .arg(format!("{}:t", layout.display()));
    for e in env {
        c.arg("--config.env").arg(e);
    }
    sh(&mut c);
    layout
}

/// A root of busybox-static alone, with its own /etc/os-release.
fn busybox_root(at: &Path) {
    let bin = at.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .expect("/bin/busybox (busybox-static: scripts/install-deps.sh)");
    for applet in ["sh", "cat", "ls", "id", "echo"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    std::fs::create_dir_all(at.join("usr/lib")).unwrap();
    std::fs::write(
        at.join("usr/lib/os-release"),
        "ID=airlock-test-image\nNAME=\"Airlock test image\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(at.join("etc")).unwrap();
    // As Debian has it: /etc/os-release a symlink into /usr/lib.
    std::os::unix::fs::symlink("../usr/lib/os-release", at.join("etc/os-release")).unwrap();
    std::fs::write(at.join("etc/shadow"), "root:image-secret:1::::::\n").unwrap();
}

/// The python3 agent: each argument a bash tool command; prints one `CMD {json}` line
/// per command with its structured result.
const AGENT: &str = r#"
import json, os, sys, urllib.request
def bash(command):
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": meta, "name": "bash", "arguments": {"command": command, "timeout_ms": 300000}}})
    req = urllib.request.Request(os.environ["AIRLOCK_GATEWAY"] + "/mcp/airlock", data=body.encode(), method="POST",
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream",
                 "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "bash"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=600) as r:
        answer = json.loads(r.read())
    res = answer["result"]
    return res.get("structuredContent") or {"refused": res.get("content")}
for c in sys.argv[1:]:
    print("CMD " + json.dumps({"command": c, "result": bash(c)}), flush=True)
"#;

fn results(out: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| l.strip_prefix("CMD "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

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
