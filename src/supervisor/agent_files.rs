//! What a run's jail is given of its role besides the jail itself: the brief (and goals) as
//! files, the agent's generated configuration at the paths its CLI reads, the environment
//! that points the CLI there, and the default argv that starts it.
//!
//! The brief travels as a file, never in argv: a brief may be 1 MiB, and the kernel refuses
//! an exec with any single argument over 128 KiB (MAX_ARG_STRLEN).

use crate::policy::agent_config::{
    self, AgentConfigError, GatewayEndpoints, CLAUDE_MANAGED_MCP_PATH, CLAUDE_MANAGED_SETTINGS_PATH,
};
use crate::role::{LoadedRole, Provider};
use crate::sandbox::spec::JailFile;

/// Where the jail shows the role's brief.
pub const BRIEF_PATH: &str = "/etc/airlock/brief.md";
/// Where the jail shows the role's goals, when it has any.
pub const GOALS_PATH: &str = "/etc/airlock/goals.md";
/// Where the jail shows a workflow role's own script (`roles/<role>/workflow.sh`).
pub const WORKFLOW_PATH: &str = "/etc/airlock/workflow.sh";
/// What runs a workflow role's script: the script is read, never executed itself (the jail
/// file has no exec bit and sits on a read-only mount).
pub const WORKFLOW_SHELL: &str = "/bin/sh";
/// Codex's managed config: read-only, and above the user layer in `~/.codex`, so one run
/// cannot loosen the next run's configuration.
pub const CODEX_CONFIG_PATH: &str = "/etc/codex/managed_config.toml";
/// Every jail file is read-only to everyone: root owns it and the mount is read-only too.
const MODE: u32 = 0o444;

/// The files, environment and default argv of a run of one role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFiles {
    pub files: Vec<JailFile>,
    pub env: Vec<(String, String)>,
    /// The role's own command: the agent's, or for a workflow role with a
    /// `workflow.sh`, `/bin/sh` [`WORKFLOW_PATH`] (run on the command side). `None` for a
    /// role that has neither (a workflow role without the script, or an agent role without
    /// `run`), which can be launched only with `-- CMD`.
    pub argv: Option<Vec<String>>,
}

fn file(path: &str, contents: String) -> JailFile {
    JailFile {
        path: path.into(),
        contents,
        mode: MODE,
    }
}

/// Build what the jail is given for a run of `loaded` reaching its gateway at `gateway`.
///
/// The brief and goals are always there. The agent's configuration is there whenever the
/// role runs an agent, also when `-- CMD` replaces the agent command: that command may be a
/// wrapper that starts the agent, which must then find the same managed settings. A role
/// that runs no agent gets only the brief, and a workflow role its script as well. A role
/// whose configuration cannot be generated
/// is refused either way (fail closed): the error names the key path.
pub fn agent_files(
    loaded: &LoadedRole,
    gateway: &GatewayEndpoints,
) -> Result<AgentFiles, AgentConfigError> {
    let role = &loaded.role;
    let mut files = vec![file(
        BRIEF_PATH,
        crate::policy::brief::with_floors(&loaded.brief_text, &role.floors),
    )];
    if let Some(goals) = &loaded.goals_text {
        files.push(file(GOALS_PATH, goals.clone()));
    }
    let mut env = Vec::new();
    if role.kind == crate::role::Kind::Workflow {
        // Not an agent: nothing to configure; its own command is its script, if it has one.
        let argv = loaded.workflow_text.as_ref().map(|text| {
            files.push(file(WORKFLOW_PATH, text.clone()));
            vec![WORKFLOW_SHELL.to_string(), WORKFLOW_PATH.to_string()]
        });
        return Ok(AgentFiles { files, env, argv });
    }
    let provider = match &role.run {
        Some(run) => run.provider,
        // Not an agent: nothing to configure, no command of its own.
        None => {
            return Ok(AgentFiles {
                files,
                env,
                argv: None,
            })
        }
    };
    // Where the CLI reads its provider's base URL from the environment: the gateway's route.
    if let (Some(var), Some(url)) = (
        agent_config::provider_env(provider).1,
        &gateway.provider_url,
    ) {
        env.push((var.to_string(), url.clone()));
    }
    let settings_path = match provider {
        Provider::Claude => {
            let settings = agent_config::claude_settings(role, gateway)?;
            let mcp = agent_config::claude_mcp_config(role, gateway)?;
            files.push(file(CLAUDE_MANAGED_SETTINGS_PATH, pretty(&settings)));
            files.push(file(CLAUDE_MANAGED_MCP_PATH, pretty(&mcp)));
            env.extend(agent_config::claude_env(role));
            // `--settings` names the managed file itself: one copy of the settings, and the
            // managed-only keys take effect from where Claude Code reads them.
            CLAUDE_MANAGED_SETTINGS_PATH
        }
        Provider::Codex => {
            // Codex's own state (sessions, its database) goes to ~/.codex in the instance's
            // home, which it must be able to write; the configuration is the managed layer,
            // which nothing there can override.
            files.push(file(
                CODEX_CONFIG_PATH,
                agent_config::codex_config(role, gateway)?,
            ));
            CODEX_CONFIG_PATH
        }
    };
    let argv = agent_config::agent_command(role, BRIEF_PATH, settings_path)?;
    Ok(AgentFiles {
        files,
        env,
        argv: Some(argv),
    })
}

fn pretty(v: &serde_json::Value) -> String {
    // A Value of maps, strings, numbers and bools always serializes; keep the fallback
    // total anyway rather than panic.
    let mut text = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn shipped(name: &str) -> LoadedRole {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("roles")
            .join(name);
        crate::role::load_role_dir(&dir).expect("shipped role loads")
    }

    fn content<'a>(f: &'a AgentFiles, path: &str) -> &'a str {
        &f.files
            .iter()
            .find(|x| x.path == Path::new(path))
            .unwrap_or_else(|| panic!("{path} missing"))
            .contents
    }

    #[test]
    fn claude_role_gets_brief_managed_settings_and_the_generated_argv() {
        let loaded = shipped("code");
        let gw = GatewayEndpoints::at(&crate::sandbox::env::gateway_url(), &loaded.role);
        let f = agent_files(&loaded, &gw).unwrap();
        assert_eq!(
            f.argv.as_deref(),
            Some(
                &agent_config::agent_command(
                    &loaded.role,
                    BRIEF_PATH,
                    CLAUDE_MANAGED_SETTINGS_PATH
                )
                .unwrap()[..]
            )
        );
        let argv = f.argv.as_ref().unwrap();
        assert!(!argv.iter().any(|a| a.contains(&loaded.brief_text)));
        assert!(argv.iter().all(|a| a.len() < 128 << 10));
        // The role's floors travel with its brief (seed 000), each on a line of its own.
        let brief = content(&f, BRIEF_PATH);
        assert!(brief.starts_with(&loaded.brief_text), "{brief}");
        let tail = &brief[loaded.brief_text.len()..];
        assert!(!loaded.role.floors.is_empty());
        for floor in &loaded.role.floors {
            assert!(tail.contains(&format!("\n- {floor}\n")), "{tail}");
        }
        assert!(tail.contains("never do"), "{tail}");
        let settings: serde_json::Value =
            serde_json::from_str(content(&f, CLAUDE_MANAGED_SETTINGS_PATH)).unwrap();
        assert_eq!(settings["permissions"]["defaultMode"], "dontAsk");
        assert_eq!(
            settings,
            agent_config::claude_settings(&loaded.role, &gw).unwrap()
        );
        let mcp: serde_json::Value =
            serde_json::from_str(content(&f, CLAUDE_MANAGED_MCP_PATH)).unwrap();
        assert_eq!(
            mcp,
            agent_config::claude_mcp_config(&loaded.role, &gw).unwrap()
        );
        // The provider's base URL is the gateway's route; its key (a run token) is added
        // when the run's leases are issued.
        assert_eq!(
            f.env[0],
            (
                "ANTHROPIC_BASE_URL".to_string(),
                gw.provider_url.clone().unwrap()
            )
        );
        assert_eq!(&f.env[1..], agent_config::claude_env(&loaded.role));
        assert!(f.files.iter().all(|x| x.mode == 0o444));
    }

    #[test]
    fn codex_role_gets_its_managed_config_and_no_codex_home() {
        let loaded = shipped("review");
        let gw = GatewayEndpoints::at(&crate::sandbox::env::gateway_url(), &loaded.role);
        let f = agent_files(&loaded, &gw).unwrap();
        assert_eq!(
            content(&f, CODEX_CONFIG_PATH),
            agent_config::codex_config(&loaded.role, &gw).unwrap()
        );
        assert!(f.env.iter().all(|(k, _)| k != "CODEX_HOME"), "{:?}", f.env);
        assert_eq!(
            f.argv.unwrap(),
            agent_config::agent_command(&loaded.role, BRIEF_PATH, CODEX_CONFIG_PATH).unwrap()
        );
        assert!(!f
            .files
            .iter()
            .any(|x| x.path.starts_with("/etc/claude-code")));
    }

    #[test]
    fn goals_are_shown_when_the_role_has_them() {
        let mut loaded = shipped("code");
        loaded.goals_text = Some("Ship it.\n".into());
        let gw = GatewayEndpoints::at(&crate::sandbox::env::gateway_url(), &loaded.role);
        let f = agent_files(&loaded, &gw).unwrap();
        assert_eq!(content(&f, GOALS_PATH), "Ship it.\n");
    }

    #[test]
    fn a_role_without_a_run_gets_only_its_brief() {
        let mut loaded = shipped("code");
        loaded.role.run = None;
        let gw = GatewayEndpoints::at(&crate::sandbox::env::gateway_url(), &loaded.role);
        let f = agent_files(&loaded, &gw).unwrap();
        assert_eq!(f.argv, None);
        assert_eq!(f.files.len(), 1);
        assert_eq!(f.files[0].path, Path::new(BRIEF_PATH));
    }

    #[test]
    fn a_workflow_role_runs_its_script_with_the_shell() {
        let loaded = shipped("hello");
        assert_eq!(loaded.role.kind, crate::role::Kind::Workflow);
        let script = loaded
            .workflow_text
            .clone()
            .expect("hello has a workflow.sh");
        let gw = GatewayEndpoints::at(&crate::sandbox::env::gateway_url(), &loaded.role);
        let f = agent_files(&loaded, &gw).unwrap();
        assert_eq!(
            f.argv.as_deref(),
            Some(&[WORKFLOW_SHELL.to_string(), WORKFLOW_PATH.to_string()][..])
        );
        assert_eq!(content(&f, WORKFLOW_PATH), script);
        assert_eq!(
            content(&f, BRIEF_PATH),
            crate::policy::brief::with_floors(&loaded.brief_text, &loaded.role.floors)
        );
        assert_eq!(f.files.len(), 2, "no agent configuration for a workflow");
        assert!(f.env.is_empty());
        assert!(f.files.iter().all(|x| x.mode == 0o444));

        // Without the script: no command of its own, only the brief.
        let mut bare = loaded;
        bare.workflow_text = None;
        let f = agent_files(&bare, &gw).unwrap();
        assert_eq!(f.argv, None);
        assert_eq!(f.files.len(), 1);
    }

    #[test]
    fn a_missing_gateway_endpoint_is_an_error_naming_the_key() {
        let loaded = shipped("code");
        let has_gateway_mcp = loaded.role.run.as_ref().is_some_and(|r| {
            r.mcp
                .values()
                .any(|c| matches!(c, crate::role::McpConnector::Gateway { .. }))
        });
        assert!(
            has_gateway_mcp,
            "the shipped code role reaches MCP through Airlock"
        );
        // Without the connectors' endpoints the configuration cannot be generated.
        let mut bare = GatewayEndpoints::at(&crate::sandbox::env::gateway_url(), &loaded.role);
        bare.mcp.clear();
        let err = agent_files(&loaded, &bare).unwrap_err();
        assert!(err.to_string().starts_with("run.mcp."), "{err}");
    }
}
