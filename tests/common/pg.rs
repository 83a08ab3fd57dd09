//! A throwaway PostgreSQL cluster for the fleet tests: Debian's `postgresql` binaries
//! (scripts/install-deps.sh), `initdb` and `pg_ctl` run as the `postgres` user on a unix
//! socket in a temporary directory (no TCP), stopped and removed on drop. Never a mock.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Postgres {
    _dir: tempfile::TempDir,
    pub data: PathBuf,
    /// The directory holding the socket (`host=` in a conninfo).
    pub socket_dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
}

/// The newest installed server's bin directory (/usr/lib/postgresql/N/bin).
fn bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("no /usr/lib/postgresql: scripts/install-deps.sh installs Debian's postgresql")
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let b = e.path().join("bin");
            b.join("initdb").exists().then_some((v, b))
        })
        .collect();
    versions.sort();
    versions.pop().expect("no PostgreSQL server binaries").1
}

fn as_postgres(bin: &Path, prog: &str, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(bin.join(prog))
        .args(args)
        .current_dir("/")
        .output()
        .unwrap()
}

fn check(o: Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Postgres {
    /// initdb and start a cluster; create database `airlock`.
    pub fn start() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        // The postgres user must reach its directory; nothing else needs to.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.path().join("data");
        let socket_dir = dir.path().join("sock");
        std::fs::create_dir(&socket_dir).unwrap();
        let pg = nix::unistd::User::from_name("postgres")
            .unwrap()
            .expect("no postgres user: install Debian's postgresql");
        std::os::unix::fs::chown(&socket_dir, Some(pg.uid.as_raw()), Some(pg.gid.as_raw()))
            .unwrap();
        std::os::unix::fs::chown(dir.path(), Some(pg.uid.as_raw()), Some(pg.gid.as_raw())).unwrap();
        check(
            as_postgres(
                &bin,
                "initdb",
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
            ),
            "initdb",
        );
        // A port of its own per cluster: the socket's name carries it.
        let port = 20000 + (std::process::id() % 20000) as u16;
        let mut p = Postgres {
            _dir: dir,
            data,
            socket_dir,
            port,
            bin,
        };
        p.pg_ctl_start();
        p.psql_db("postgres", "CREATE DATABASE airlock");
        p
    }

    fn pg_ctl_start(&mut self) {
        let opts = format!(
            "-k {} -c listen_addresses='' -p {} -c fsync=off -c max_connections=100",
            self.socket_dir.display(),
            self.port
        );
        check(
            as_postgres(
                &self.bin,
                "pg_ctl",
                &[
                    "-D",
                    self.data.to_str().unwrap(),
                    "-o",
                    &opts,
                    "-l",
                    self.data.join("log").to_str().unwrap(),
                    "-w",
                    "-t",
                    "30",
                    "start",
                ],
            ),
            "pg_ctl start",
        );
    }

    /// Stop the server (fast: connections are cut), as an outage does.
    pub fn stop(&self) {
        check(
            as_postgres(
                &self.bin,
                "pg_ctl",
                &[
                    "-D",
                    self.data.to_str().unwrap(),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ],
            ),
            "pg_ctl stop",
        );
    }

    /// Start it again after [`stop`].
    pub fn restart(&mut self) {
        self.pg_ctl_start();
    }

    /// The conninfo of database `airlock` as the superuser.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} dbname=airlock user=postgres",
            self.socket_dir.display(),
            self.port
        )
    }

    /// psql as `user` on database `db`, stopping at the first error.
    fn psql_run(&self, user: &str, db: &str, sql: &str) -> std::process::Output {
        Command::new(self.bin.join("psql"))
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                user,
                "-d",
                db,
                "-c",
                sql,
            ])
            .output()
            .unwrap()
    }

    fn psql_db(&self, db: &str, sql: &str) -> String {
        let o = self.psql_run("postgres", db, sql);
        check(o.clone(), &format!("psql {sql}"));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Run SQL in database `airlock`; its unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_db("airlock", sql)
    }

    /// Run SQL in database `airlock` as the role `user` (the cluster trusts its socket):
    /// its unaligned output, or what psql said when the statement failed.
    pub fn psql_as(&self, user: &str, sql: &str) -> Result<String, String> {
        let o = self.psql_run(user, "airlock", sql);
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = as_postgres(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}
