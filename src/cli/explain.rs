//! `airlockctl explain ROLE`: everything Airlock would grant a run of the role, in one
//! place: class and protected authority, level and what it permits, tools, resources,
//! deny, args, bash prefixes, budgets, credential source, and the agent configuration
//! generated from the role.

use super::output;
use super::sources::{self, SourceArgs};
use crate::catalog::CatalogEntry;
use crate::cli::output::{out, outln};
use crate::config::Config;
use crate::policy::agent_config::{self, GatewayEndpoints};
use crate::policy::levels::LevelDef;
use crate::policy::Policies;
use crate::role::Role;
use serde_json::{json, Value};

pub fn run(args: &SourceArgs, config: &Config, name: &str, as_json: bool) -> i32 {
    let loaded = sources::load_one(args, config, name);
    let Some(policies) = &loaded.policies else {
        output::problems(&loaded.problems);
        eprintln!(
            "the policies are invalid, so no role is; fix them first (`airlockctl validate`)"
        );
        return output::ERROR;
    };
    let Some(entry) = &loaded.entry else {
        return not_found(name, &loaded.problems);
    };
    let mut report = report(entry, policies);
    report["limits"] = limits_json(config);
    let granted = crate::policy::egress::destinations::granted(
        &config.egress.lists,
        &entry.loaded.role.role,
        &entry.class,
        &config.egress.ports,
    );
    report["egress"]["destinations"] = destinations_json(&granted);
    report["environment"] = environment_json(config, &entry.loaded.role.role, &entry.class);
    if as_json {
        return output::json(&report);
    }
    print_human(entry, policies, &report, &granted);
    for line in limits_lines(config) {
        outln!("{line}");
    }
    outln!("{}", environment_line(&report["environment"]));
    output::OK
}

/// The image the host grants the role's command side (`environments`, by role name, then
/// class), or null: the host's own system folders.
pub fn environment_json(config: &Config, role: &str, class: &str) -> Value {
    use crate::config::images::ImageSource;
    let Some((key, image)) = config.images.environment_of(role, class) else {
        return Value::Null;
    };
    let mut v = json!({"image": image, "granted_by": format!("environments.{key}")});
    match config.images.images.get(image) {
        Some(ImageSource::Ref(r)) => v["ref"] = json!(r),
        Some(ImageSource::Path(p)) => v["path"] = json!(p.display().to_string()),
        None => {}
    }
    v
}

fn environment_line(env: &Value) -> String {
    match env["image"].as_str() {
        Some(image) => format!(
            "environment the command side is rooted in image `{image}` ({}; airlockctl image ls shows its digest)",
            env["granted_by"].as_str().unwrap_or("environments")
        ),
        None => "environment the host's system folders (no environments entry names this role or its class)".into(),
    }
}

/// The destinations the host grants the role (`egress.grants`), each with its grant.
pub fn destinations_json(granted: &[crate::policy::egress::destinations::Granted]) -> Value {
    Value::Array(
        granted
            .iter()
            .map(|g| {
                json!({
                    "name": g.name,
                    "from": format!("{} {}", g.from, g.name),
                    "hosts": g.hosts,
                    "ports": g.ports,
                    "methods": g.methods,
                    "paths": g.paths,
                    "credential": g.credential,
                    "terminated": g.terminated,
                })
            })
            .collect(),
    )
}

/// The host's limits on every run (config `limits`), the same for every role.
pub fn limits_json(config: &Config) -> Value {
    let l = &config.limits;
    let d = &config.disk;
    let bound = |b: Option<crate::supervisor::disk::Bound>| match b {
        Some(b) => json!({"disk_bytes": b.bytes, "disk_inodes": b.inodes}),
        None => Value::Null,
    };
    json!({
        "max_procs": l.max_procs,
        "memory_bytes": l.memory_bytes,
        "command_side": {
            "max_procs": l.command_procs(),
            "memory_bytes": l.memory_bytes.map(|m| l.command_memory(m)),
        },
        "tmp_bytes": l.tmp_bytes,
        "workspace": bound(d.workspace),
        "home": bound(d.home),
        "reserve": {"disk_bytes": d.reserve.bytes, "disk_inodes": d.reserve.inodes},
        "cpu_weight": l.cpu_weight,
        "cpu_max": l.cpu_max_millis.map(|m| m as f64 / 1000.0),
        "io_weight": l.io_weight,
    })
}

fn limits_lines(config: &Config) -> Vec<String> {
    let d = &config.disk;
    let disk = |what: &str, b: Option<crate::supervisor::disk::Bound>| match b {
        Some(b) => format!(
            "{what}: {} bytes, {} inodes, on a filesystem of its own (ENOSPC past either)",
            b.bytes, b.inodes
        ),
        None => format!("{what}: not bounded (limits.{what} is null)"),
    };
    let l = &config.limits;
    let opt = |v: Option<u64>| v.map_or("not set".to_string(), |n| n.to_string());
    vec![
        format!("disk        {}", disk("workspace", d.workspace)),
        "            (an operator's --workspace DIR is not bounded by Airlock: the host's own limits apply there)".to_string(),
        format!("            {}", disk("home", d.home)),
        format!(
            "            reserve: no run starts while the state directory's filesystem would keep less than {} bytes or {} inodes free",
            d.reserve.bytes, d.reserve.inodes
        ),
        format!(
            "sides       the command side may have {} of the run's {} processes and {}; the agent keeps the rest (limits.agent_reserve)",
            l.command_procs(),
            l.max_procs,
            match l.memory_bytes {
                Some(m) => format!("{} of its {} bytes", l.command_memory(m), m),
                None => "no memory limit".to_string(),
            }
        ),
        format!(
            "cpu         weight {} (airlockd 100); ceiling {}; io weight {}",
            opt(l.cpu_weight),
            l.cpu_max_millis
                .map_or("none".to_string(), |m| format!("{} CPUs", m as f64 / 1000.0)),
            opt(l.io_weight)
        ),
    ]
}

/// A role that is absent may have failed validation: say so rather than "unknown".
pub fn not_found(name: &str, problems: &[crate::diag::Problem]) -> i32 {
    let canonical = crate::policy::classes::canonicalize(name);
    let failed: Vec<_> = problems
        .iter()
        .filter(|p| {
            p.file
                .parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d == canonical)
        })
        .cloned()
        .collect();
    if failed.is_empty() {
        eprintln!("no valid role `{canonical}` in the role directories; `airlockctl validate` lists the roles");
    } else {
        output::problems(&failed);
        eprintln!(
            "role `{canonical}` is invalid, so Airlock grants it nothing; fix the problems above"
        );
    }
    output::ERROR
}

/// What the role's credentials come from (`identity.key_store`).
pub fn credential_source(role: &Role) -> String {
    match role.identity.as_ref().and_then(|i| i.key_store.as_deref()).unwrap_or("github") {
        "airlock" => "airlock: a GitHub token minted for each run as the organization's Airlock App, held outside the jail and revoked when the run ends".into(),
        other => format!("{other}: a key of the role's own App kept outside Airlock; Airlock mints nothing for this role"),
    }
}

fn level_json(def: &LevelDef) -> Value {
    json!({
        "level": def.level,
        "summary": def.summary,
        "issues": def.issues,
        "pull_requests": def.pull_requests,
        "land": def.land.as_str(),
        "workflow_files": def.workflow_files,
    })
}

pub fn report(entry: &CatalogEntry, policies: &Policies) -> Value {
    let role = &entry.loaded.role;
    let gateway = GatewayEndpoints::at(&crate::sandbox::env::gateway_url(), role);
    let config_or_reason = |r: Result<Value, agent_config::AgentConfigError>| match r {
        Ok(v) => v,
        Err(e) => json!({ "none": e.to_string() }),
    };
    let claude = config_or_reason(agent_config::claude_settings(role, &gateway));
    let claude_mcp = config_or_reason(agent_config::claude_mcp_config(role, &gateway));
    let codex = match agent_config::codex_config(role, &gateway) {
        Ok(text) => Value::String(text),
        Err(e) => json!({ "none": e.to_string() }),
    };
    // The argv a launch runs, with the jail paths of its brief and configuration.
    let command = crate::supervisor::agent_files::agent_files(&entry.loaded, &gateway)
        .ok()
        .and_then(|f| f.argv)
        .map(Value::from)
        .unwrap_or(Value::Null);
    // A workflow role's own command is its script beside role.yaml, when it has one.
    let workflow = (role.kind == crate::role::Kind::Workflow).then(|| {
        let file = entry.loaded.dir.join(crate::role::WORKFLOW_FILE);
        let present = entry.loaded.workflow_text.is_some();
        json!({
            "file": file.display().to_string(),
            "present": present,
            "jail_path": crate::supervisor::agent_files::WORKFLOW_PATH,
            "side": "command",
        })
    });
    json!({
        "role": role.role,
        "file": entry.loaded.file.display().to_string(),
        "workflow": workflow,
        "layer": entry.layer_dir.display().to_string(),
        "kind": role.kind,
        "class": entry.class,
        "protected_authority": entry.authority,
        "level": level_json(policies.permits(role.level)),
        "writes": role.writes,
        "tools": role.tools,
        "resources": role.resources,
        "deny": role.deny,
        "args": role.args,
        "bash": role.bash_prefixes(),
        "builtin_tools": role.run.as_ref().map(|r| r.tools.clone()).unwrap_or_default(),
        "budget": role.budget,
        // What the run's proxy may reach beyond its provider (airlockd's config adds ports).
        "egress": {"public_web": crate::policy::egress::web_grant(role)},
        "credential_source": credential_source(role),
        "agent": {
            "provider": role.run.as_ref().map(|r| r.provider),
            "command": command,
            "claude_managed_settings": claude,
            "claude_managed_mcp": claude_mcp,
            "codex_config_toml": codex,
        },
    })
}

fn print_human(
    entry: &CatalogEntry,
    policies: &Policies,
    report: &Value,
    granted: &[crate::policy::egress::destinations::Granted],
) {
    let role = &entry.loaded.role;
    let def = policies.permits(role.level);
    let list = |v: &[String]| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(", ")
        }
    };
    outln!(
        "role        {} ({})",
        role.role,
        entry.loaded.file.display()
    );
    outln!("class       {}", entry.class);
    outln!("authority   {}", list(&entry.authority));
    outln!("level       {}: {}", role.level, def.summary);
    outln!("  issues          {}", list(&def.issues));
    outln!("  pull requests   {}", list(&def.pull_requests));
    outln!("  landing         {}", def.land.as_str());
    outln!(
        "  workflow files  {}",
        if def.workflow_files {
            "may propose"
        } else {
            "no"
        }
    );
    outln!("  (a change's effective level is the stricter of this and the repository's level for its path)");
    let w = &role.writes;
    outln!("writes      repos: {}", list(&w.repos));
    outln!(
        "            issues: {}; pull requests: {}",
        list(&w.issues),
        list(&w.pull_requests)
    );
    outln!(
        "            board: {}; workflows: {}; dispatch: {}",
        list(&w.board),
        w.workflows,
        w.dispatch
    );
    outln!("tools");
    for (c, pats) in &role.tools {
        outln!("  {c}: {}", pats.join(", "));
    }
    for (title, map) in [("resources", &role.resources), ("deny", &role.deny)] {
        outln!("{title}");
        for (c, pats) in map {
            outln!("  {c}: {}", pats.join(", "));
        }
    }
    outln!("args");
    for (c, tools) in &role.args {
        for (t, params) in tools {
            for (p, rule) in params {
                outln!(
                    "  {c}.{t}.{p}: {}",
                    serde_json::to_string(rule).unwrap_or_default()
                );
            }
        }
    }
    outln!("bash        {}", list(role.bash_prefixes()));
    match (crate::policy::egress::web_grant(role), granted.is_empty()) {
        (Some(rule), _) => outln!(
            "egress      the public web ({rule}) on the ports airlockd's egress config allows; model traffic takes the provider route"
        ),
        (None, true) => outln!(
            "egress      nothing (run.tools grants no WebFetch or WebSearch); model traffic takes the provider route"
        ),
        (None, false) => outln!(
            "egress      the destinations below only (run.tools grants no WebFetch or WebSearch); model traffic takes the provider route"
        ),
    }
    for g in granted {
        outln!("  {}", crate::policy::egress::destinations::describe(g));
    }
    let b = &role.budget;
    let n = |v: Option<u64>| {
        v.map(|x| x.to_string())
            .unwrap_or_else(|| "unbounded".into())
    };
    outln!(
        "budget      runs/week {}; minutes/run {}; GitHub writes/run {}; spend USD {}",
        n(b.runs_per_week),
        n(b.minutes_per_run),
        n(b.github_writes_per_run),
        b.spend_usd.unwrap_or(0.0)
    );
    outln!("credentials {}", credential_source(role));
    let agent = &report["agent"];
    if role.kind == crate::role::Kind::Workflow {
        print_workflow(entry);
        return;
    }
    outln!("agent command  {}", agent["command"]);
    outln!(
        "claude code managed settings (dontAsk; built-in Bash off, airlock's bash tool instead):"
    );
    outln!(
        "{}",
        serde_json::to_string_pretty(&agent["claude_managed_settings"]).unwrap_or_default()
    );
    outln!("codex config.toml:");
    match &agent["codex_config_toml"] {
        Value::String(s) => out!("{s}"),
        other => outln!("{other}"),
    }
}

/// A workflow role runs no model: its own command is its script, on the command side.
fn print_workflow(entry: &CatalogEntry) {
    let file = entry.loaded.dir.join(crate::role::WORKFLOW_FILE);
    let jail = crate::supervisor::agent_files::WORKFLOW_PATH;
    let shell = crate::supervisor::agent_files::WORKFLOW_SHELL;
    if entry.loaded.workflow_text.is_some() {
        outln!(
            "workflow    {}: a launch without -- CMD runs `{shell} {jail}` (the script, read-only in the jail) on the command side, where system programs may run; no model, no agent configuration",
            file.display()
        );
    } else {
        outln!(
            "workflow    none: {} does not exist, so a launch must give -- CMD ARGS (add the script to give the role a command of its own)",
            file.display()
        );
    }
    outln!("            `-- CMD ARGS` replaces the script, under the same jail and budgets");
}
