//! A stand-in GitHub for the tests (tests/agents/standin_github.py): an App key pair, two
//! bare repositories (example-org/example-repo, with a README and a workflow on main, and
//! example-org/scratch with the same tree), the server on loopback, and what it logged.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{stderr, REPO};

pub struct StandInGithub {
    child: std::process::Child,
    pub dir: tempfile::TempDir,
    pub port: u16,
}

fn sh(cmd: &str, cwd: &Path) {
    let o = Command::new("/bin/sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(o.status.success(), "{cmd}: {}", stderr(&o));
}

/// The host programs these tests drive: Debian's gh, git (with git-http-backend), curl and
/// openssl.
fn require_tools() {
    for p in [
        "/usr/bin/gh",
        "/usr/bin/git",
        "/usr/lib/git-core/git-http-backend",
        "/usr/bin/curl",
        "/usr/bin/openssl",
    ] {
        assert!(
            Path::new(p).exists(),
            "{p} is missing: install the Debian packages gh, git, curl and openssl (scripts/install-deps.sh)"
        );
    }
}

impl StandInGithub {
    pub fn start() -> StandInGithub {
        use std::os::unix::fs::PermissionsExt;
        require_tools();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // GitHub hands out PKCS#1 keys ("BEGIN RSA PRIVATE KEY").
        sh(
            "openssl genrsa -traditional -out app.key 2048 2>/dev/null && openssl rsa -in app.key -pubout -out app.pub.pem 2>/dev/null",
            d,
        );
        assert!(std::fs::read_to_string(d.join("app.key"))
            .unwrap()
            .starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        std::fs::set_permissions(d.join("app.key"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        // One repository with a main branch and a workflow.
        let bare = d.join("repos/example-org/example-repo.git");
        std::fs::create_dir_all(&bare).unwrap();
        sh("git init -q --bare -b main .", &bare);
        let seed = d.join("seed");
        std::fs::create_dir_all(seed.join(".github/workflows")).unwrap();
        std::fs::write(seed.join("README.md"), "hello\n").unwrap();
        std::fs::write(seed.join(".github/workflows/ci.yml"), "on: push\n").unwrap();
        sh(
            &format!(
                "git init -q -b main . && git add -A && git -c user.name=t -c user.email=t@t commit -qm seed && git push -q {} main",
                bare.display()
            ),
            &seed,
        );
        // The installation's second repository (example-org/scratch), with the same tree:
        // a role writing both clones both when it names no run.clone.
        let scratch = d.join("repos/example-org/scratch.git");
        std::fs::create_dir_all(&scratch).unwrap();
        sh("git init -q --bare -b main .", &scratch);
        sh(&format!("git push -q {} main", scratch.display()), &seed);
        let child = Command::new("/usr/bin/python3")
            .arg(Path::new(REPO).join("tests/agents/standin_github.py"))
            .arg(d)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(d.join("port"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                break p;
            }
            assert!(
                Instant::now() < deadline,
                "the stand-in GitHub did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        StandInGithub { child, dir, port }
    }

    /// airlockd config lines for the App at this stand-in (with its own `credentials:`).
    pub fn config(&self) -> String {
        format!("credentials:\n{}{}", self.credential(), self.github())
    }

    /// The same, beside another config's `credentials:` (the stand-in model's).
    pub fn config_beside(&self, other: &str) -> String {
        let merged = other.replacen(
            "credentials:\n",
            &format!("credentials:\n{}", self.credential()),
            1,
        );
        assert_ne!(merged, other, "the other config has no credentials: key");
        format!("{merged}{}", self.github())
    }

    fn credential(&self) -> String {
        format!("  gh-app: {}\n", self.dir.path().join("app.key").display())
    }

    fn github(&self) -> String {
        format!(
            "github:\n  api_url: \"http://127.0.0.1:{p}\"\n  git_url: \"http://127.0.0.1:{p}/git\"\n  app_id: 4242\n  private_key: gh-app\nmcp_connectors:\n  github: {{url: \"http://127.0.0.1:{p}/mcp\"}}\n",
            p = self.port
        )
    }

    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The installation tokens it minted.
    pub fn tokens(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter_map(|r| r["token"].as_str().map(str::to_string))
            .collect()
    }

    /// The MCP tool calls it answered (name, arguments, Authorization).
    pub fn mcp_calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("mcp_calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// An installation token minted straight at the stand-in (an App JWT signed here), for
    /// a test's own setup (someone else's pull request, say).
    pub fn mint_token(&self) -> String {
        let script = r#"
import base64, json, subprocess, sys, time, urllib.request
d, port = sys.argv[1], sys.argv[2]
b = lambda x: base64.urlsafe_b64encode(x).rstrip(b"=").decode()
now = int(time.time())
h = b(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
c = b(json.dumps({"iss": "4242", "iat": now - 5, "exp": now + 300}).encode())
sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", d + "/app.key"],
                     input=(h + "." + c).encode(), capture_output=True, check=True).stdout
req = urllib.request.Request("http://127.0.0.1:%s/app/installations/77/access_tokens" % port,
    data=json.dumps({"repositories": ["example-repo", "scratch"]}).encode(),
    headers={"Authorization": "Bearer " + h + "." + c + "." + b(sig)}, method="POST")
print(json.load(urllib.request.urlopen(req))["token"])
"#;
        let o = Command::new("/usr/bin/python3")
            .args(["-c", script])
            .arg(self.dir.path())
            .arg(self.port.to_string())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// POST a JSON body straight to the stand-in with `token`: its answer.
    pub fn post(&self, path: &str, token: &str, body: &str) -> Value {
        let o = Command::new("/usr/bin/curl")
            .args([
                "-s",
                "-H",
                &format!("Authorization: token {token}"),
                "-d",
                body,
            ])
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .unwrap();
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
    }

    pub fn bare(&self) -> PathBuf {
        self.dir.path().join("repos/example-org/example-repo.git")
    }
}

impl Drop for StandInGithub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An MCP client on the agent side (GitHub's connector through the run's gateway): initialize, then each tools/call of its argument
/// (a JSON list of [name, arguments]), printing each result as a JSON line.
pub const MCP_AGENT: &str = r#"
import json, os, sys, urllib.request
url = os.environ["AIRLOCK_GATEWAY"] + "/mcp/github"
V = "2025-06-18"
def post(msg, session=None):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        h["Mcp-Session-Id"] = session
        h["MCP-Protocol-Version"] = V
    req = urllib.request.Request(url, data=json.dumps(msg).encode(), headers=h, method="POST")
    with urllib.request.urlopen(req) as r:
        body = r.read()
        return r.headers.get("Mcp-Session-Id"), (json.loads(body) if body else None)
s, init = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
post({"jsonrpc": "2.0", "method": "notifications/initialized"}, s)
for i, (name, args) in enumerate(json.loads(sys.argv[1])):
    _, r = post({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                 "params": {"name": name, "arguments": args}}, s)
    res = r.get("result", {})
    print(json.dumps({"step": i, "error": res.get("isError", False),
                      "text": res.get("content", [{}])[0].get("text", "")}))
"#;
