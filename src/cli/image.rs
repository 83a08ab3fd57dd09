//! `airlockctl image import|pull|ls|rm`: the host's image store (`<state_dir>/images/`, root's).
//! Changing it is an administrator's act on the host: the store is root's alone, so these
//! run as root (sudo), never as the operator group, and never through a run.

use std::path::Path;

use serde_json::json;

use super::output;
use super::remote::Ctx;
use super::table;
use crate::config::Config;
use crate::images::{import, pull, reference::Reference, Store};

fn must_be_root(what: &str) -> Result<(), i32> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        eprintln!(
            "airlockctl image {what}: the image store is root's: run it as root (an administrator of this host, e.g. with sudo)"
        );
        Err(output::ERROR)
    }
}

fn config(ctx: &Ctx, what: &str) -> Result<Config, i32> {
    must_be_root(what)?;
    ctx.load_config()
}

/// `image import PATH --name NAME`.
pub fn import(ctx: &Ctx, path: &Path, name: &str) -> i32 {
    let cfg = match config(ctx, "import") {
        Ok(c) => c,
        Err(code) => return code,
    };
    let store = match Store::open(&cfg.state_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("airlockctl image import: {e}");
            return output::ERROR;
        }
    };
    match import::import(&store, name, path, cfg.images.max_bytes) {
        Ok(rec) => {
            if ctx.json {
                return output::json(
                    &json!({"name": name, "digest": rec.digest, "size": rec.size}),
                );
            }
            println!("{name} {} ({} bytes)", rec.digest, rec.size);
            output::OK
        }
        Err(e) => {
            eprintln!("airlockctl image import: {e}");
            output::NO
        }
    }
}

/// `image pull REF --name NAME`: over the host's network, with what `registries` names
/// for the reference's host (its credential, read here, and its CA).
pub fn pull(ctx: &Ctx, reference: &str, name: &str) -> i32 {
    let cfg = match config(ctx, "pull") {
        Ok(c) => c,
        Err(code) => return code,
    };
    let host = match Reference::parse(reference) {
        Ok(r) => r.host,
        Err(why) => {
            eprintln!("airlockctl image pull: {why}");
            return output::ERROR;
        }
    };
    let mut access = pull::Access::default();
    if let Some(reg) = cfg.images.registries.get(&host) {
        access.ca_file = reg.ca_file.clone();
        if let Some(cred) = &reg.credential {
            let secret = cfg
                .credentials
                .get(cred)
                .ok_or_else(|| format!("credentials.{cred}: not configured"))
                .and_then(|src| crate::credentials::read(cred, src));
            match secret {
                Ok(s) if s.expose().contains(':') => {
                    access.credential = Some((cred.clone(), s.expose().to_string()))
                }
                Ok(_) => {
                    eprintln!("airlockctl image pull: registries.{host}.credential: the credential `{cred}` must hold USER:PASSWORD (or USER:TOKEN), as `docker login` takes them");
                    return output::ERROR;
                }
                Err(e) => {
                    eprintln!("airlockctl image pull: registries.{host}.credential: {e}");
                    return output::ERROR;
                }
            }
        }
    }
    let store = match Store::open(&cfg.state_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("airlockctl image pull: {e}");
            return output::ERROR;
        }
    };
    match pull::pull(&store, name, reference, &access, cfg.images.max_bytes) {
        Ok(rec) => {
            if ctx.json {
                return output::json(
                    &json!({"name": name, "digest": rec.digest, "size": rec.size, "source": rec.source}),
                );
            }
            println!("{name} {} ({} bytes)", rec.digest, rec.size);
            output::OK
        }
        Err(e) => {
            eprintln!("airlockctl image pull: {e}");
            output::NO
        }
    }
}

/// `image ls [--json]`: name, digest, size, the roles (environments) using it.
pub fn ls(ctx: &Ctx) -> i32 {
    let cfg = match config(ctx, "ls") {
        Ok(c) => c,
        Err(code) => return code,
    };
    let all = match Store::existing(&cfg.state_dir).list() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("airlockctl image ls: {e}");
            return output::ERROR;
        }
    };
    if ctx.json {
        let list: Vec<serde_json::Value> = all
            .iter()
            .map(|(name, r)| {
                json!({
                    "name": name,
                    "digest": r.digest,
                    "size": r.size,
                    "roles": cfg.images.users_of(name),
                    "source": r.source,
                    "imported_at": r.imported_at,
                })
            })
            .collect();
        return output::json(&json!({ "images": list }));
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|(name, r)| {
            let roles = cfg.images.users_of(name);
            vec![
                table::clean(name),
                table::clean(&r.digest),
                r.size.to_string(),
                if roles.is_empty() {
                    "-".into()
                } else {
                    roles.join(",")
                },
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(&["NAME", "DIGEST", "SIZE", "ROLES"], &rows)
    );
    output::OK
}

/// `image rm NAME`: refused while an environment names it or a live run holds it.
pub fn rm(ctx: &Ctx, name: &str) -> i32 {
    let cfg = match config(ctx, "rm") {
        Ok(c) => c,
        Err(code) => return code,
    };
    let store = Store::existing(&cfg.state_dir);
    let result = store
        .lock()
        .and_then(|lock| store.remove(&lock, name, &cfg.images.users_of(name)));
    match result {
        Ok(()) => {
            println!("removed {name}");
            output::OK
        }
        Err(e) => {
            eprintln!("airlockctl image rm: {e}");
            output::NO
        }
    }
}
