//! OCI images the tests build themselves with Debian's umoci from a small root
//! (busybox-static), and the python3 agent that sends bash tool commands (tests/images_jail.rs,
//! tests/images_pull.rs).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub fn sh(cmd: &mut Command) {
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
pub fn umoci_image(work: &Path, root: &Path, env: &[&str]) -> PathBuf {
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
pub fn busybox_root(at: &Path) {
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
pub const AGENT: &str = r#"
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

pub fn results(out: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| l.strip_prefix("CMD "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Copy the host's `bin` into the root `at` at the same path, with every library ldd names
/// for it (at the paths ldd gives).
fn copy_with_libs(at: &Path, bin: &Path) {
    let put = |from: &Path| {
        let to = at.join(from.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if !to.exists() {
            std::fs::copy(from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        }
    };
    put(bin);
    let o = Command::new("ldd").arg(bin).output().unwrap();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let lib = match l.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => l.split_whitespace().next(),
        };
        if let Some(lib) = lib.filter(|p| p.starts_with('/')) {
            put(Path::new(lib));
        }
    }
}

/// A root with the host's python3 (its binary, standard library and C extensions, with the
/// libraries they link), util-linux's unshare and busybox-static for the rest, and its own
/// os-release: enough for tests/agents/escape_battery.py.
pub fn python_root(at: &Path) {
    busybox_root(at);
    // Real programs, not busybox applets: the battery runs them under other argv[0]s.
    for prog in ["/bin/true", "/bin/sleep"] {
        copy_with_libs(at, &std::fs::canonicalize(prog).unwrap());
        let name = Path::new(prog).file_name().unwrap();
        if !at.join("bin").join(name).exists() {
            let real = std::fs::canonicalize(prog).unwrap();
            std::os::unix::fs::symlink(&real, at.join("bin").join(name)).unwrap();
        }
    }
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    copy_with_libs(at, &python);
    std::os::unix::fs::symlink(python.file_name().unwrap(), at.join("usr/bin/python3")).unwrap();
    copy_with_libs(at, Path::new("/usr/bin/unshare"));
    let name = python.file_name().unwrap().to_str().unwrap().to_string();
    let stdlib = Path::new("/usr/lib").join(&name);
    sh(Command::new("cp")
        .arg("-a")
        .arg(&stdlib)
        .arg(at.join("usr/lib")));
    // What the battery never loads, left out to keep the image small.
    for big in [
        "test",
        "idlelib",
        "tkinter",
        "ensurepip",
        "lib2to3",
        "pydoc_data",
    ] {
        let _ = std::fs::remove_dir_all(at.join("usr/lib").join(&name).join(big));
    }
    for so in std::fs::read_dir(stdlib.join("lib-dynload"))
        .unwrap()
        .flatten()
    {
        copy_with_libs(at, &so.path());
    }
}
