//! Setting up the real agent CLIs (`codex`, `claude`, `gemini`, `codex-acp`) to run
//! offline against a [`crate::MockModel`]: isolated config homes, the environment of each
//! CLI (see AGENT-CLIS.md), and the `[agents.NAME]` TOML that registers one with a test
//! daemon through [`crate::DaemonOptions::extra_config`].

use std::collections::BTreeMap;
use std::path::Path;

use crate::agent_cli;

/// The real agents tether can drive, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealAgent {
    /// `codex app-server` (driver `codex`).
    Codex,
    /// `claude -p` stream-json (driver `claude`).
    Claude,
    /// `gemini --acp` (driver `acp`).
    Gemini,
    /// `codex-acp -c approval_policy="untrusted"` (driver `acp`).
    CodexAcp,
}

/// A TOML basic string.
pub fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Variables every CLI gets in tests: stray outbound calls go to a closed local port.
pub fn offline_env() -> BTreeMap<String, String> {
    [
        ("HTTPS_PROXY", "http://127.0.0.1:9"),
        ("HTTP_PROXY", "http://127.0.0.1:9"),
        ("https_proxy", "http://127.0.0.1:9"),
        ("http_proxy", "http://127.0.0.1:9"),
        ("NO_PROXY", "127.0.0.1,localhost"),
        ("no_proxy", "127.0.0.1,localhost"),
        ("IS_SANDBOX", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Writes the Codex configuration for a mock model at `mock_url` (`http://127.0.0.1:P`)
/// into `dir/config.toml` (read by `codex` and `codex-acp` as `$CODEX_HOME`).
pub fn write_codex_config(dir: &Path, mock_url: &str) -> std::io::Result<()> {
    let config = format!(
        r#"model = "gpt-5.5"
model_provider = "mock"
web_search = "disabled"
check_for_update_on_startup = false

[model_providers.mock]
name = "mock"
base_url = {base}
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
plugin_sharing = false
"#,
        base = toml_str(&format!("{}/v1", mock_url.trim_end_matches('/')))
    );
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("config.toml"), config)
}

/// A fresh `$CODEX_HOME` configured for the mock model at `mock_url`.
pub fn codex_home(mock_url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    write_codex_config(dir.path(), mock_url).unwrap_or_else(|e| panic!("codex config: {e}"));
    dir
}

/// The environment of `codex` / `codex-acp` with `$CODEX_HOME` = `home`.
pub fn codex_env(home: &Path) -> BTreeMap<String, String> {
    let mut env = offline_env();
    env.insert("CODEX_HOME".into(), home.display().to_string());
    // The agent's shell tools must not read the machine's shell start-up files (a pyenv
    // rehash lock there stalled commands under load): give them their own HOME.
    env.insert("HOME".into(), home.display().to_string());
    env.insert("MOCK_API_KEY".into(), "mock-key".into());
    env
}

/// The environment of `claude` talking to the mock model at `mock_url`, with its
/// configuration in `dir` (`CLAUDE_CONFIG_DIR`).
pub fn claude_env(mock_url: &str, dir: &Path) -> BTreeMap<String, String> {
    let mut env = offline_env();
    for (k, v) in [
        ("ANTHROPIC_BASE_URL", mock_url.trim_end_matches('/')),
        ("ANTHROPIC_API_KEY", "mock-key"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_MAX_RETRIES", "0"),
    ] {
        env.insert(k.into(), v.into());
    }
    env.insert("CLAUDE_CONFIG_DIR".into(), dir.display().to_string());
    env.insert("HOME".into(), dir.display().to_string());
    env
}

/// The environment of `gemini` talking to the mock model at `mock_url`, with
/// `GEMINI_CLI_HOME` = `dir`. Writes `dir/.gemini/settings.json` (API-key auth, no
/// update checks, no usage statistics, no telemetry, and one model: gemini's "auto"
/// router asks a small model to choose before each turn and reports none of those tokens
/// over ACP, see D225).
pub fn gemini_env(mock_url: &str, dir: &Path) -> BTreeMap<String, String> {
    let settings = serde_json::json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "model": {"name": "gemini-3.8-flash"},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
    });
    let gemini_dir = dir.join(".gemini");
    std::fs::create_dir_all(&gemini_dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
    std::fs::write(gemini_dir.join("settings.json"), settings.to_string())
        .unwrap_or_else(|e| panic!("gemini settings: {e}"));
    let mut env = offline_env();
    env.insert("GEMINI_API_KEY".into(), "mock-key".into());
    env.insert(
        "GOOGLE_GEMINI_BASE_URL".into(),
        mock_url.trim_end_matches('/').into(),
    );
    env.insert("GEMINI_CLI_HOME".into(), dir.display().to_string());
    env.insert("GEMINI_CLI_TRUST_WORKSPACE".into(), "true".into());
    env
}

/// Variables of the test machine that would change how a CLI authenticates or where it
/// sends requests; [`cli_command`] removes them.
pub(crate) const FOREIGN_ENV: &[&str] = &[
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_HOME",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_MODEL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDECODE",
    "GOOGLE_API_KEY",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// A command running the real CLI `cli` (see [`crate::agent_cli`]) directly, with the
/// inherited environment minus [`FOREIGN_ENV`] plus `env`, standard input from
/// `/dev/null`, output piped, killed on drop.
pub fn cli_command(cli: &str, env: &BTreeMap<String, String>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(agent_cli(cli));
    for key in FOREIGN_ENV {
        cmd.env_remove(key);
    }
    cmd.envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// `(driver, CLI name, args)` tether uses for `agent`.
pub fn agent_launch(agent: RealAgent) -> (&'static str, &'static str, Vec<&'static str>) {
    match agent {
        RealAgent::Codex => ("codex", "codex", vec!["app-server"]),
        RealAgent::Claude => (
            "claude",
            "claude",
            vec![
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-prompt-tool",
                "stdio",
                "--include-partial-messages",
            ],
        ),
        RealAgent::Gemini => ("acp", "gemini", vec!["--acp"]),
        RealAgent::CodexAcp => (
            "acp",
            "codex-acp",
            vec!["-c", "approval_policy=\"untrusted\""],
        ),
    }
}

/// The `[agents.NAME]` table registering the real `agent` (found with
/// [`crate::agent_cli`]) with environment `env`, for `DaemonOptions::extra_config`.
pub fn agent_toml(name: &str, agent: RealAgent, env: &BTreeMap<String, String>) -> String {
    let (driver, cli, args) = agent_launch(agent);
    let command = agent_cli(cli);
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    let mut out = format!(
        "[agents.{name}]\ndriver = {}\ncommand = {}\nargs = [{}]\n\n[agents.{name}.env]\n",
        toml_str(driver),
        toml_str(&command.display().to_string()),
        args.join(", ")
    );
    for (k, v) in env {
        out.push_str(&format!("{k} = {}\n", toml_str(v)));
    }
    out.push('\n');
    out
}

/// Ids of the processes whose environment holds `key=value` (read from `/proc`).
pub fn pids_with_env(key: &str, value: &str) -> Vec<u32> {
    let needle = format!("{key}={value}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Kills (SIGKILL) the agent processes a test started, found by a variable only they
/// have (e.g. their own `CODEX_HOME`), when dropped. A daemon killed with SIGKILL (as
/// `Daemon::restart` and `Daemon`'s drop do) leaves its agents running, and `codex-acp`
/// does not exit when its standard input closes; put this after the `Daemon` in a struct
/// so it runs once the daemon is gone.
#[derive(Debug)]
pub struct AgentReaper {
    pub key: String,
    pub value: String,
}

impl AgentReaper {
    pub fn new(key: &str, value: &str) -> AgentReaper {
        AgentReaper {
            key: key.to_string(),
            value: value.to_string(),
        }
    }

    /// Kills every matching process now; returns how many there were.
    pub fn reap(&self) -> usize {
        let pids = pids_with_env(&self.key, &self.value);
        for pid in &pids {
            let _ = std::process::Command::new("kill")
                .arg("-9")
                .arg(pid.to_string())
                .stderr(std::process::Stdio::null())
                .status();
        }
        pids.len()
    }
}

impl Drop for AgentReaper {
    fn drop(&mut self) {
        self.reap();
    }
}

/// The real `codex` and `claude` registered as agents `codex` and `claude` against the
/// mock at `mock_url`: the daemon's `extra_config`, and their homes (kept for the test).
pub struct CodexAndClaude {
    pub config: String,
    _codex_home: tempfile::TempDir,
    _claude_dir: tempfile::TempDir,
    /// With [`codex_claude_and_gemini`]: gemini's home, and the reaper of the gemini
    /// processes a killed daemon leaves behind.
    _gemini: Option<(AgentReaper, tempfile::TempDir)>,
}

pub fn codex_and_claude(mock_url: &str) -> CodexAndClaude {
    let codex_home = codex_home(mock_url);
    let claude_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut config = agent_toml("codex", RealAgent::Codex, &codex_env(codex_home.path()));
    config.push_str(&agent_toml(
        "claude",
        RealAgent::Claude,
        &claude_env(mock_url, claude_dir.path()),
    ));
    CodexAndClaude {
        config,
        _codex_home: codex_home,
        _claude_dir: claude_dir,
        _gemini: None,
    }
}

/// [`codex_and_claude`] and the real `gemini --acp` registered as agent `gemini`.
pub fn codex_claude_and_gemini(mock_url: &str) -> CodexAndClaude {
    let mut agents = codex_and_claude(mock_url);
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let env = gemini_env(mock_url, home.path());
    agents
        .config
        .push_str(&agent_toml("gemini", RealAgent::Gemini, &env));
    let reaper = AgentReaper::new("GEMINI_CLI_HOME", &home.path().display().to_string());
    agents._gemini = Some((reaper, home));
    agents
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_strings_escape() {
        assert_eq!(toml_str(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(
            toml_str("approval_policy=\"untrusted\""),
            r#""approval_policy=\"untrusted\"""#
        );
    }
}
