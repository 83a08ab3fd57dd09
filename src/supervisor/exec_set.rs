//! The agent side's exec set ([`ExecAllow`]): the agent program, its script interpreter
//! (one level, and it must be the real runtime: `#!/usr/bin/env node` would need env to
//! start another program), the ELF interpreter, and the shared libraries the loader maps
//! for them. The libraries are listed by the system's own loader (`ld.so --list`, run as
//! the instance, never as root), so its search rules (RUNPATH, ld.so.cache, hwcaps) are
//! the ones that count.
//!
//! An interpreter also loads compiled modules of its own runtime (Python's lib-dynload):
//! those folders are mapped executable as a whole (never executable as programs), with
//! the libraries their modules link.
//!
//! Every file must be a regular file in a system directory the jail shows, owned by root
//! and writable by nobody else: the exec set is only as trustworthy as its files.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::sandbox::env::JAIL_PATH;
use crate::sandbox::spec::{in_exec_system_dirs, ExecAllow, MAX_EXEC_FILES};

/// Find `program` as the jail will (a path, or a name on its PATH) and list what it needs
/// to run. `uid`/`gid`: the instance, as whom the loader lists the libraries. Errors say
/// what to change; they name the program, which the operator chose.
pub fn exec_set(program: &str, uid: u32, gid: u32) -> Result<ExecAllow, String> {
    let path = resolve(program)?;
    // Listing runs the loader once per ELF (~2 ms; ~110 ms for CPython's modules): a set
    // already listed is reused while its programs are the same files, every file checked
    // again.
    let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(hit) = cache.get(&path).filter(|e| e.still_valid()) {
        return Ok(hit.set.clone());
    }
    drop(cache);
    let set = list(path.clone(), uid, gid)?;
    let entry = Cached {
        programs: set.programs.iter().map(|p| identity(p)).collect(),
        set: set.clone(),
    };
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.insert(path, entry);
    Ok(set)
}

/// Most exec sets kept (a host runs a handful of agent programs).
const MAX_CACHED: usize = 64;

static CACHE: std::sync::Mutex<std::collections::BTreeMap<PathBuf, Cached>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

struct Cached {
    set: ExecAllow,
    /// Each program's file identity when it was listed.
    programs: Vec<Option<FileId>>,
}

impl Cached {
    /// The same program files, and every file still passes the checks.
    fn still_valid(&self) -> bool {
        let x = &self.set;
        x.programs
            .iter()
            .map(|p| identity(p))
            .eq(self.programs.iter().cloned())
            && self.programs.iter().all(Option::is_some)
            && x.programs
                .iter()
                .chain(&x.libraries)
                .all(|p| checked(p, "").is_ok_and(|r| r == *p))
            && x.trees
                .iter()
                .all(|t| checked_dir(t).is_ok_and(|r| r == *t))
    }
}

/// A file's identity: device, inode, size, modification time (seconds, nanoseconds).
type FileId = (u64, u64, u64, i64, i64);

fn identity(p: &Path) -> Option<FileId> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// [`exec_set`] of a resolved program, listed afresh.
fn list(path: PathBuf, uid: u32, gid: u32) -> Result<ExecAllow, String> {
    let mut programs = vec![path.clone()];
    let mut elves = vec![path.clone()];
    if let Some(interp) = shebang(&path)? {
        let interp = checked(&interp, "its script interpreter")?;
        if shebang(&interp)?.is_some() {
            return Err(format!(
                "{}: the script interpreter {} is itself a script; name the runtime itself",
                path.display(),
                interp.display()
            ));
        }
        if is_trampoline(&interp) {
            return Err(format!(
                "{}: its interpreter {} starts another program, which the agent side cannot do; put the runtime itself on the #! line (e.g. #!/usr/bin/node)",
                path.display(),
                interp.display()
            ));
        }
        programs.push(interp.clone());
        elves = vec![interp];
    }
    let mut libraries = BTreeSet::new();
    let mut trees = Vec::new();
    for tree in elves.iter().flat_map(|e| runtime_trees(e)) {
        let tree = checked_dir(&tree)?;
        // The modules are loaded by the interpreter: list what each links, as for it.
        for module in modules_in(&tree) {
            let Some(loader) = elf_interpreter(&module).ok().flatten().or_else(|| {
                elves
                    .first()
                    .and_then(|e| elf_interpreter(e).ok().flatten())
            }) else {
                continue;
            };
            let loader = checked(&loader, "its ELF interpreter")?;
            for lib in loader_list(&loader, &module, uid, gid)? {
                if !lib.starts_with(&tree) {
                    libraries.insert(checked(&lib, "a library its runtime loads")?);
                }
            }
        }
        trees.push(tree);
    }
    for elf in &elves {
        let Some(loader) = elf_interpreter(elf)? else {
            continue; // Static: nothing else to load.
        };
        let loader = checked(&loader, "its ELF interpreter")?;
        for lib in loader_list(&loader, elf, uid, gid)? {
            libraries.insert(checked(&lib, "a library it loads")?);
        }
        if !programs.contains(&loader) {
            programs.push(loader);
        }
    }
    for p in &programs {
        libraries.remove(p);
    }
    let libraries: Vec<PathBuf> = libraries.into_iter().collect();
    if programs.len() + libraries.len() + trees.len() > MAX_EXEC_FILES {
        return Err(format!(
            "{}: it needs more than {MAX_EXEC_FILES} files to run",
            path.display()
        ));
    }
    Ok(ExecAllow {
        programs,
        libraries,
        trees,
    })
}

/// The runtime folders an interpreter maps modules from: CPython's lib-dynload.
fn runtime_trees(elf: &Path) -> Vec<PathBuf> {
    let Some(name) = elf.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let python = name
        .strip_prefix("python3.")
        .is_some_and(|minor| !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()));
    if !python {
        return Vec::new();
    }
    ["/usr/lib", "/usr/local/lib"]
        .iter()
        .map(|base| Path::new(base).join(name).join("lib-dynload"))
        .filter(|p| p.is_dir())
        .collect()
}

/// The shared objects directly in `dir`.
fn modules_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "so") && p.is_file())
        .collect();
    v.sort();
    v
}

/// Canonical, a root-owned directory writable only by root, in a system directory.
fn checked_dir(p: &Path) -> Result<PathBuf, String> {
    let real = p
        .canonicalize()
        .map_err(|e| format!("{}: a runtime folder: {}", p.display(), e.kind()))?;
    let meta = std::fs::metadata(&real)
        .map_err(|e| format!("{}: a runtime folder: {}", real.display(), e.kind()))?;
    let in_system = in_exec_system_dirs(&real);
    if !in_system || !meta.is_dir() || meta.uid() != 0 || meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "{}: a runtime folder must be a root-owned system directory writable by nobody else",
            real.display()
        ));
    }
    Ok(real)
}

/// The program's real file: as given when it has a slash, else the first on the jail's
/// PATH (the same search the jail makes).
fn resolve(program: &str) -> Result<PathBuf, String> {
    let found = if program.contains('/') {
        PathBuf::from(program)
    } else {
        JAIL_PATH
            .split(':')
            .map(|d| Path::new(d).join(program))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                format!("{program}: no such agent program on the jail's PATH ({JAIL_PATH})")
            })?
    };
    checked(&found, "the agent program")
}

/// Canonical, a regular root-owned file writable only by root, in a system directory.
fn checked(p: &Path, what: &str) -> Result<PathBuf, String> {
    let real = p
        .canonicalize()
        .map_err(|e| format!("{}: {what}: {}", p.display(), e.kind()))?;
    let in_system = in_exec_system_dirs(&real);
    if !in_system {
        return Err(format!(
            "{}: {what} is outside the system directories the jail shows (/usr, /lib...); install it under /usr",
            real.display()
        ));
    }
    let meta = std::fs::metadata(&real)
        .map_err(|e| format!("{}: {what}: {}", real.display(), e.kind()))?;
    if !meta.is_file() {
        return Err(format!("{}: {what} is not a regular file", real.display()));
    }
    if meta.uid() != 0 || meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "{}: {what} must be owned by root and writable by nobody else",
            real.display()
        ));
    }
    Ok(real)
}

/// Programs that exist to start another program: as a script interpreter they would leave
/// the agent side nothing it may run.
fn is_trampoline(p: &Path) -> bool {
    matches!(
        p.file_name().and_then(|n| n.to_str()),
        Some("env" | "sh" | "bash" | "dash" | "busybox")
    )
}

/// The interpreter of a `#!` script, if `p` is one.
fn shebang(p: &Path) -> Result<Option<PathBuf>, String> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(p)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| format!("{}: {}", p.display(), e.kind()))?;
    let head = &head[..n];
    let Some(rest) = head.strip_prefix(b"#!") else {
        return Ok(None);
    };
    let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    match line.split_whitespace().next() {
        Some(i) if i.starts_with('/') => Ok(Some(PathBuf::from(i))),
        _ => Err(format!(
            "{}: its #! line names no absolute interpreter",
            p.display()
        )),
    }
}

/// PT_INTERP of an ELF64 little-endian file; None for a static one. Not an ELF file: an
/// error (the kernel would not run it either).
pub fn elf_interpreter(p: &Path) -> Result<Option<PathBuf>, String> {
    use std::os::unix::fs::FileExt;
    let bad = || format!("{}: not an x86-64 ELF program", p.display());
    let f = std::fs::File::open(p).map_err(|e| format!("{}: {}", p.display(), e.kind()))?;
    // Only what is needed: the ELF header, the program headers, the interpreter's name (an
    // agent program may be hundreds of MiB).
    let read = |off: u64, len: usize| -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, off).map_err(|_| bad())?;
        Ok(buf)
    };
    let le = |b: &[u8]| {
        b.iter()
            .rev()
            .fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
    };
    let head = read(0, 64)?;
    // 64-bit, little-endian.
    if head[..6] != [0x7f, b'E', b'L', b'F', 2, 1] {
        return Err(bad());
    }
    const PT_INTERP: u64 = 3;
    let phoff = le(&head[0x20..0x28]);
    let phentsize = le(&head[0x36..0x38]) as usize;
    let phnum = le(&head[0x38..0x3a]) as usize;
    if phentsize < 0x38 || phentsize * phnum > 64 << 10 {
        return Err(bad());
    }
    let table = read(phoff, phentsize * phnum)?;
    for ph in table.chunks_exact(phentsize) {
        if le(&ph[0..4]) != PT_INTERP {
            continue;
        }
        let size = le(&ph[32..40]);
        if size == 0 || size > 4096 {
            return Err(bad());
        }
        let raw = read(le(&ph[8..16]), size as usize)?;
        let name = raw.split(|b| *b == 0).next().unwrap_or_default();
        let name = std::str::from_utf8(name).map_err(|_| bad())?;
        return Ok(Some(PathBuf::from(name)));
    }
    Ok(None)
}

/// The libraries `loader --list elf` resolves, run as the instance with an empty
/// environment (no LD_ variable can steer it).
fn loader_list(loader: &Path, elf: &Path, uid: u32, gid: u32) -> Result<Vec<PathBuf>, String> {
    let out = Command::new(loader)
        .arg("--list")
        .arg(elf)
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        // std drops the supplementary groups too when it changes a root process's uid.
        .uid(uid)
        .gid(gid)
        .output()
        .map_err(|e| format!("{}: cannot list its libraries: {e}", elf.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{}: the loader could not list its libraries (a library missing?)",
            elf.display()
        ));
    }
    Ok(parse_loader_list(&String::from_utf8_lossy(&out.stdout)))
}

/// Paths in `ld.so --list` output: `name => /path (0x...)` and `/path (0x...)` lines.
fn parse_loader_list(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = match l.split_once("=> ") {
                Some((_, rest)) => rest,
                None => l,
            };
            let p = p.split(" (0x").next()?.trim();
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_listing_is_read_for_paths_only() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibgone.so => not found\n";
        assert_eq!(
            parse_loader_list(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn a_dynamic_program_brings_its_loader_and_libraries() {
        let x = exec_set("true", 65534, 65534).unwrap();
        assert!(x.programs[0].ends_with("true"), "{x:?}");
        assert!(
            x.programs
                .iter()
                .any(|p| p.to_string_lossy().contains("ld-linux")),
            "{x:?}"
        );
        assert!(
            x.libraries
                .iter()
                .any(|p| p.to_string_lossy().contains("libc.so")),
            "{x:?}"
        );
        assert!(!x.libraries.iter().any(|p| x.programs.contains(p)));
    }

    #[test]
    fn refusals_say_what_to_change() {
        let e = exec_set("no-such-agent-program", 65534, 65534).unwrap_err();
        assert!(e.contains("no such agent program"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("agent");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        let e = exec_set(prog.to_str().unwrap(), 65534, 65534).unwrap_err();
        assert!(e.contains("outside the system directories"), "{e}");
        assert!(elf_interpreter(&prog).is_err());
    }
}
