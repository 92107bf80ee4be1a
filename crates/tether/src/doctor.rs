//! `tether doctor`: what is configured, and whether each agent's command is installed.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tether_agents::AgentSpec;

use crate::config::Settings;

const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// What `doctor` found about one agent.
struct AgentReport {
    spec: AgentSpec,
    found: Option<PathBuf>,
    version: Option<String>,
}

/// Prints the report; never fails on a missing agent.
pub async fn run(settings: &Settings) -> String {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let checks: Vec<_> = settings
        .agents
        .values()
        .cloned()
        .map(|spec| {
            let found = find_command(&spec.command, &path_var);
            tokio::spawn(async move {
                let version = match &found {
                    Some(path) => Some(version_of(path, &spec).await),
                    None => None,
                };
                AgentReport {
                    spec,
                    found,
                    version,
                }
            })
        })
        .collect();
    let mut reports = Vec::new();
    for check in checks {
        if let Ok(report) = check.await {
            reports.push(report);
        }
    }
    let mut out = render(settings, &reports);
    out.push_str(&pool_report(settings).await);
    out
}

/// The pool's limits, and its live state when the daemon answers on its address.
async fn pool_report(settings: &Settings) -> String {
    let p = &settings.pool;
    let limit = |n: usize| {
        if n == 0 {
            "no limit".to_owned()
        } else {
            n.to_string()
        }
    };
    let ttl = p
        .idle_ttl
        .map_or("never".to_owned(), |d| format!("{}s", d.as_secs()));
    let mut out = format!(
        "\npool:\n  limits: {} live, {} per owner, idle TTL {ttl}\n",
        limit(p.max_live),
        limit(p.max_live_per_owner)
    );
    // Read the token without creating one: doctor changes nothing.
    let token = settings.token_override.clone().or_else(|| {
        std::fs::read_to_string(crate::token::token_path(&settings.data_dir))
            .ok()
            .map(|t| t.trim().to_owned())
    });
    let live = match token {
        Some(token) => daemon_pool(settings, &token).await,
        None => None,
    };
    let _ = match live {
        Some(s) => writeln!(
            out,
            "  daemon: {} live ({} busy, {} idle), {} evictions",
            s.live, s.busy, s.idle, s.evictions
        ),
        None => writeln!(out, "  daemon: not running at http://{}", settings.listen),
    };
    out
}

async fn daemon_pool(settings: &Settings, token: &str) -> Option<tether_proto::PoolStatus> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let resp = client
        .get(format!("http://{}/api/v1/pool", settings.listen))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    resp.json().await.ok()
}

fn render(settings: &Settings, reports: &[AgentReport]) -> String {
    let mut out = String::new();
    let config = match &settings.config_path {
        Some(p) => p.display().to_string(),
        None => "(none: built-in defaults)".to_owned(),
    };
    let roots: Vec<_> = settings
        .workspace_roots
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let _ = writeln!(out, "tether {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(out, "config:          {config}");
    let _ = writeln!(out, "data dir:        {}", settings.data_dir.display());
    let _ = writeln!(out, "listen:          http://{}", settings.listen);
    let _ = writeln!(out, "default agent:   {}", settings.default_agent);
    let _ = writeln!(out, "workspace roots: {}", roots.join(", "));
    let _ = writeln!(out, "default cwd:     {}", settings.default_cwd.display());
    let _ = writeln!(out, "\nagents:");
    for r in reports {
        let driver = format!("{:?}", r.spec.driver).to_lowercase();
        let command = std::iter::once(r.spec.command.as_str())
            .chain(r.spec.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let mark = if r.found.is_some() { "ok" } else { "--" };
        let _ = writeln!(out, "  [{mark}] {} (driver: {driver})", r.spec.name);
        let _ = writeln!(out, "       command: {command}");
        match &r.found {
            Some(path) => {
                let _ = writeln!(out, "       found:   {}", path.display());
                let v = r.version.as_deref().unwrap_or("unknown");
                let _ = writeln!(out, "       version: {v}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "       found:   NOT FOUND ({} is not on PATH)",
                    r.spec.command
                );
            }
        }
    }
    out
}

/// `command` itself when it contains a `/`, else the first executable of that name on
/// `path_var`.
pub fn find_command(command: &str, path_var: &std::ffi::OsStr) -> Option<PathBuf> {
    if command.contains('/') {
        let p = PathBuf::from(command);
        return is_executable(&p).then_some(p);
    }
    std::env::split_paths(path_var)
        .map(|dir| dir.join(command))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// First line of `<command> --version` (stdout, else stderr), within 5 s.
async fn version_of(path: &Path, spec: &AgentSpec) -> String {
    let mut cmd = tokio::process::Command::new(path);
    // The agent's own environment, as its driver would start it.
    cmd.arg("--version")
        .env_clear()
        .envs(tether_agents::env::spec_env(spec))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(VERSION_TIMEOUT, cmd.output()).await {
        Err(_) => {
            return format!(
                "unknown (`--version` did not answer within {}s)",
                VERSION_TIMEOUT.as_secs()
            );
        }
        Ok(Err(e)) => return format!("unknown (could not run: {e})"),
        Ok(Ok(output)) => output,
    };
    let first_line = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    };
    let line = first_line(&output.stdout).or_else(|| first_line(&output.stderr));
    match (line, output.status.success()) {
        (Some(line), true) => line,
        (Some(line), false) => format!("{line} (exit {})", output.status),
        (None, _) => format!("unknown (no output, {})", output.status),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tether_agents::DriverKind;

    use super::*;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn spec(command: &str) -> AgentSpec {
        AgentSpec {
            name: "x".into(),
            driver: DriverKind::Acp,
            command: command.into(),
            args: vec![],
            pass_env: vec![],
            env: BTreeMap::new(),
        }
    }

    #[test]
    fn finds_commands_on_path_or_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let exe = script(dir.path(), "agent", "echo hi");
        std::fs::write(dir.path().join("plain"), "").unwrap();
        let path_var =
            std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(find_command("agent", &path_var), Some(exe.clone()));
        assert_eq!(find_command("plain", &path_var), None);
        assert_eq!(find_command("missing", &path_var), None);
        assert_eq!(find_command(exe.to_str().unwrap(), &path_var), Some(exe));
    }

    #[tokio::test]
    async fn version_is_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let exe = script(dir.path(), "v", "echo; echo 'agent 1.2.3'; echo more");
        assert_eq!(version_of(&exe, &spec("v")).await, "agent 1.2.3");
        let exe = script(dir.path(), "e", "echo 'bad flag' >&2; exit 2");
        assert!(
            version_of(&exe, &spec("e"))
                .await
                .starts_with("bad flag (exit")
        );
    }
}
