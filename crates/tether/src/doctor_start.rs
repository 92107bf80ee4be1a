//! `tether doctor` starts each installed agent far enough to catch what `--version`
//! cannot (issue 24, first use 2): missing credentials that fail `session/new`, arguments
//! that leave the CLI waiting for a terminal. It opens one session in an empty scratch
//! directory with the agent's own driver and environment, then ends it; no prompt is sent
//! (so no model is called).

use std::time::Duration;

use tether_agents::{AcpDriver, AgentDriver, AgentSpec, ClaudeDriver, CodexDriver, DriverKind};

/// Each step of a start (`initialize`, `session/new`) may take this long.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);

/// `Ok(what happened)` when a session opened, `Err(why not)` otherwise.
pub async fn try_start(spec: &AgentSpec) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!(
        "tether-doctor-{}-{}",
        std::process::id(),
        spec.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let result = start_in(spec, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn start_in(spec: &AgentSpec, dir: &std::path::Path) -> Result<String, String> {
    let driver: Box<dyn AgentDriver> = match spec.driver {
        DriverKind::Acp => Box::new(AcpDriver {
            start_timeout: STEP_TIMEOUT,
            ..AcpDriver::default()
        }),
        DriverKind::Codex => Box::new(CodexDriver {
            start_timeout: STEP_TIMEOUT,
            ..CodexDriver::default()
        }),
        DriverKind::Claude => Box::new(ClaudeDriver {
            start_timeout: STEP_TIMEOUT,
            ..ClaudeDriver::default()
        }),
    };
    let req = tether_agents::StartRequest {
        spec: spec.clone(),
        cwd: dir.to_path_buf(),
        model: None,
        resume: None,
        mcp_servers: Vec::new(),
        ceiling: None,
    };
    let started = tokio::time::timeout(STEP_TIMEOUT * 3, driver.start(req)).await;
    match started {
        Err(_) => Err(format!(
            "no session within {}s",
            (STEP_TIMEOUT * 3).as_secs()
        )),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(session)) => {
            session.shutdown().await;
            Ok("a session opens".to_owned())
        }
    }
}
