//! The read commands when airlockd is not running: `ps`, `runs`, `show` and `instances`
//! (and the run check of `logs`) read the ledger, the instance registry and the runs'
//! [`alive`] files themselves, and answer with the `data` airlockd would send, so the
//! output is the same. Nothing here writes: an open record whose supervisor is gone is
//! reported as `unsupervised`, and left for the next owner of the ledger to close.

use serde_json::{json, Value};

use crate::config::Config;
use crate::control::protocol::{self, ErrorBody, ErrorCode, InstanceInfo, Op, RunInfo};
use crate::daemon::runs::{open_leases, run_info, with_leases};
use crate::supervisor::alive::{self, Liveness};
use crate::supervisor::{instances, ledger};

/// The state of an open record nobody supervises.
pub const UNSUPERVISED: &str = "unsupervised";

/// Whether `op` is answered here when airlockd is not running.
pub fn reads(op: &Op) -> bool {
    matches!(
        op,
        Op::Ps | Op::Runs { .. } | Op::Show { .. } | Op::Instances
    )
}

/// The answer airlockd would give to a read, from the files; `None` for anything else.
pub fn answer(cfg: &Config, op: &Op) -> Option<Result<Value, ErrorBody>> {
    Some(match op {
        Op::Ps => active(cfg).map(|runs| json!({ "runs": runs })),
        Op::Runs { last } => {
            let last = last
                .unwrap_or(protocol::RUNS_DEFAULT)
                .clamp(1, protocol::RUNS_MAX);
            ledger::recent_runs(&ledger_path(cfg), last as usize)
                .map_err(|e| internal(&e.to_string()))
                .map(|(runs, more)| {
                    let runs: Vec<RunInfo> = runs.into_iter().map(|r| info(cfg, r)).collect();
                    json!({ "runs": runs, "more": more })
                })
        }
        Op::Show { run } => match find(cfg, run) {
            Ok(Some(info)) => Ok(json!({ "run": with_leases(info, &cfg.state_dir) })),
            Ok(None) => Err(ErrorBody {
                code: ErrorCode::NotFound,
                message: "no run with this id in the ledger; `airlockctl runs` lists them".into(),
            }),
            Err(e) => Err(e),
        },
        Op::Instances => instances_now(cfg).map(|i| json!({ "instances": i })),
        _ => return None,
    })
}

/// One run as `show` reports it; `None` when the ledger has no such run.
pub fn find(cfg: &Config, run: &str) -> Result<Option<RunInfo>, ErrorBody> {
    ledger::find_run(&ledger_path(cfg), run)
        .map(|found| found.map(|r| info(cfg, r)))
        .map_err(|e| internal(&e.to_string()))
}

/// Who supervises an open run, when its file says: `(standalone, pid)`.
pub fn supervisor_of(cfg: &Config, run: &str) -> Option<(bool, Option<u32>)> {
    match alive::probe(&cfg.state_dir, run) {
        Ok(Liveness::Held { supervisor, pid }) => {
            Some((supervisor == Some(alive::Supervisor::Standalone), pid))
        }
        _ => None,
    }
}

fn ledger_path(cfg: &Config) -> std::path::PathBuf {
    cfg.state_dir.join(ledger::FILE_NAME)
}

fn internal(e: &str) -> ErrorBody {
    ErrorBody {
        code: ErrorCode::Internal,
        message: format!(
            "{e} (reading without airlockd needs root, or read access to the state directory)"
        ),
    }
}

/// A ledger run, with an open record told by its alive file: running while its
/// supervisor holds it, unsupervised once nobody does; as the ledger says when the file
/// cannot be read.
fn info(cfg: &Config, r: ledger::RunRecords) -> RunInfo {
    let open = r.1.is_none();
    let mut info = run_info(r);
    if open {
        if let Ok(Liveness::Left(_) | Liveness::Missing) = alive::probe(&cfg.state_dir, &info.run) {
            info.state = UNSUPERVISED.into();
            info.reason = Some("its supervisor is gone; the next start of airlockd or `airlockctl launch --standalone` closes the record as aborted".into());
        }
    }
    info
}

/// The runs some process supervises now: the open records whose alive file is held.
fn active(cfg: &Config) -> Result<Vec<RunInfo>, ErrorBody> {
    let runs = alive::list(&cfg.state_dir).map_err(|e| internal(&e.to_string()))?;
    let mut out = Vec::new();
    for run in runs {
        if !matches!(
            alive::probe(&cfg.state_dir, &run),
            Ok(Liveness::Held { .. })
        ) {
            continue;
        }
        if let Some(info) = find(cfg, &run)? {
            if info.ended_at.is_none() {
                out.push(info);
            }
        }
    }
    Ok(out)
}

fn instances_now(cfg: &Config) -> Result<Vec<InstanceInfo>, ErrorBody> {
    let list = instances::list(cfg).map_err(|e| internal(&e.to_string()))?;
    let active = active(cfg)?;
    let mut leases = open_leases(&cfg.state_dir);
    Ok(list
        .into_iter()
        .map(|e| {
            let (role_sha256, rev, template_changed) =
                crate::supervisor::decisions::pins::revision_of(&cfg.state_dir, &e.name, |role| {
                    // The last layer holding the role decides, as in the catalog.
                    cfg.roles
                        .iter()
                        .rev()
                        .map(|d| d.join(role))
                        .find(|d| d.join("role.yaml").is_file())
                });
            InstanceInfo {
                role_sha256,
                rev,
                template_changed,
                leases: leases.remove(&e.name).unwrap_or_default(),
                active_runs: active.iter().filter(|r| r.instance == e.name).count(),
                // 0: a config instance whose uid is allocated on its first run.
                uid: e.uid.unwrap_or(0),
                instance: e.name,
                role: e.role,
                source: e.source.as_str().to_string(),
                fired: e.fired,
            }
        })
        .collect())
}
