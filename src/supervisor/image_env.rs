//! A run's environment: the image the host grants its role (`environments`, by role name
//! then class) as the root of its command side, looked up in the image store and pinned
//! for the run's life, so `airlockctl image rm` is refused while the run lasts.

use crate::config::Config;
use crate::images::Store;
use crate::sandbox::spec::ImageRoot;

/// The run's image and the pin that holds it (dropped with the run).
pub struct Chosen {
    pub root: ImageRoot,
    pub pin: std::fs::File,
}

/// The image for a run of `role` (of `class`), if the host grants one. Refused, naming the
/// role and the image, when the image is not in the store.
pub fn choose(cfg: &Config, role: &str, class: &str) -> Result<Option<Chosen>, String> {
    let Some((who, name)) = cfg.images.environment_of(role, class) else {
        return Ok(None);
    };
    let store = Store::existing(&cfg.state_dir);
    let missing = || {
        format!(
            "{}: environments.{who} gives role `{role}` the image `{name}`, which is not in the image store: airlockctl image import PATH --name {name} (or image pull REF --name {name})",
            cfg.file.display()
        )
    };
    let rec = store
        .get(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(missing)?;
    let digest = rec.manifest_digest().ok_or_else(missing)?;
    let tree = store.tree_path(&digest);
    if !tree.is_dir() {
        return Err(missing());
    }
    let pin = store.pin(&digest).map_err(|e| e.to_string())?;
    Ok(Some(Chosen {
        root: ImageRoot {
            name: name.to_string(),
            digest: rec.digest,
            tree,
            env: rec.env,
        },
        pin,
    }))
}
