//! `tether doctor`: what is configured, and whether each agent's command is installed.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tether_agents::AgentSpec;

use crate::config::Settings;
use crate::daemon_record::{self, DaemonRecord, Found, Identity, TokenSource};

const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// What `doctor` found about one agent.
struct AgentReport {
    spec: AgentSpec,
    found: Option<PathBuf>,
    version: Option<String>,
    /// Whether a session opened (`None`: not tried).
    start: Option<Result<String, String>>,
}

/// What `doctor` found: the text, and what would stop `serve` (issue 24, first use 5:
/// a script can gate on the exit code).
pub struct Report {
    pub text: String,
    pub problems: Vec<String>,
}

/// The report; `problems` lists what stops `serve` (a missing default agent, a directory
/// that cannot be used, a store that cannot be reached).
pub async fn run(settings: &Settings, start_agents: bool) -> Report {
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
                let start = match &found {
                    Some(_) if start_agents => Some(crate::doctor_start::try_start(&spec).await),
                    _ => None,
                };
                AgentReport {
                    spec,
                    found,
                    version,
                    start,
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
    let mut problems = Vec::new();
    if let Some(r) = reports
        .iter()
        .find(|r| r.spec.name == settings.default_agent && r.found.is_none())
    {
        problems.push(format!(
            "the default agent {:?} is not installed ({} is not on PATH)",
            settings.default_agent, r.spec.command
        ));
    }
    if let Err(e) = settings.check_directories() {
        problems.push(format!("{e:#}"));
    }
    let (store_line, store_problem) = store_check(settings).await;
    problems.extend(store_problem);
    let mut out = render(settings, &reports);
    out.push_str(&store_line);
    out.push_str(&pool_report(settings).await);
    out.push_str(&channel_report(settings).await);
    out.push_str(&settings_checks(settings));
    if !problems.is_empty() {
        out.push_str("\nproblems (serve will not start):\n");
        for p in &problems {
            let _ = writeln!(out, "  ERROR: {p}");
        }
    }
    Report {
        text: out,
        problems,
    }
}

/// Whether the store can be reached: PostgreSQL answers (within 5 s); SQLite's file, if
/// it exists, can be read.
async fn store_check(settings: &Settings) -> (String, Option<String>) {
    match &settings.database_url {
        Some(url) => {
            let shown = crate::config_store::redacted(url);
            let reached =
                tokio::time::timeout(Duration::from_secs(5), tether_store::Store::ping_url(url))
                    .await;
            match reached {
                Ok(Ok(())) => (
                    "store check:     ok (PostgreSQL answers)\n".to_owned(),
                    None,
                ),
                Ok(Err(e)) => (
                    "store check:     UNREACHABLE\n".to_owned(),
                    Some(format!("the store at {shown} cannot be reached: {e}")),
                ),
                Err(_) => (
                    "store check:     UNREACHABLE\n".to_owned(),
                    Some(format!("the store at {shown} did not answer within 5 s")),
                ),
            }
        }
        None => {
            let db = settings.data_dir.join("tether.db");
            match std::fs::File::open(&db) {
                Ok(_) => (
                    "store check:     ok (the SQLite file is readable)\n".to_owned(),
                    None,
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
                    "store check:     ok (a new SQLite file will be made)\n".to_owned(),
                    None,
                ),
                Err(e) => (
                    "store check:     UNREADABLE\n".to_owned(),
                    Some(format!("{} cannot be read: {e}", db.display())),
                ),
            }
        }
    }
}

/// The pool's limits, and its live state when this data dir's daemon answers.
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
        "\npool:\n  limits: {} live, {} per owner, idle TTL {ttl}; {} sessions per process, \
         {} shared processes, empty ones kept {}s; Claude warm spare {}\n",
        limit(p.max_live),
        limit(p.max_live_per_owner),
        p.sessions_per_process.max(1),
        limit(p.max_processes),
        p.process_idle.as_secs(),
        if p.claude_spare { "on" } else { "off" }
    );
    let daemon = find_daemon(settings).await;
    let _ = match &daemon {
        Daemon::Verified { record, token } => match token {
            Some(token) => {
                let pool = match daemon_pool(record, token).await {
                    Ok(s) => {
                        let _ = writeln!(
                            out,
                            "  daemon: {} live ({} busy, {} idle), {} evictions, {} agent processes",
                            s.live, s.busy, s.idle, s.evictions, s.process_count
                        );
                        crate::doctor_pool::processes(&s.processes, &mut out)
                            .and_then(|()| crate::doctor_pool::spares(&s.spares, &mut out))
                    }
                    Err(why) => writeln!(out, "  daemon: {why}"),
                };
                out.push_str(&crate::cluster::doctor_report(&record.base_url(), token).await);
                pool
            }
            None => writeln!(
                out,
                "  daemon: not queried (it uses a token from its environment; run doctor \
                 with the same TETHER_TOKEN)"
            ),
        },
        _ => writeln!(out, "  daemon: not running"),
    };
    let mut section = String::from("\ndaemon:\n");
    daemon.describe(settings, &mut section);
    section.push_str(&out);
    section
}

/// The daemon as `doctor` found it.
enum Daemon {
    /// No record, or a stale one; `other` is whoever answers on the configured address.
    NotRunning {
        stale: Option<DaemonRecord>,
        other: Identity,
    },
    /// A live record, but its address does not prove to be that daemon.
    Unverified {
        record: DaemonRecord,
        found: Identity,
    },
    /// The data dir's daemon, proven by its instance id; `token` is the one to use with
    /// it, when this process knows it.
    Verified {
        record: DaemonRecord,
        token: Option<String>,
    },
}

async fn find_daemon(settings: &Settings) -> Daemon {
    let stale = match daemon_record::find(&settings.data_dir) {
        Found::Running(record) => {
            return match daemon_record::identify(&record.base_url(), Some(&record.instance_id))
                .await
            {
                Identity::Verified => {
                    let token = match record.token {
                        // Read without creating one: doctor changes nothing.
                        TokenSource::File => {
                            std::fs::read_to_string(crate::token::token_path(&settings.data_dir))
                                .ok()
                                .map(|t| t.trim().to_owned())
                                .filter(|t| !t.is_empty())
                        }
                        TokenSource::Environment => settings.token_override.clone(),
                    };
                    Daemon::Verified { record, token }
                }
                found => Daemon::Unverified { record, found },
            };
        }
        Found::Stale(record) => Some(record),
        Found::None => None,
    };
    // Nothing of ours runs; say whether something else holds the configured address (it
    // never gets the token).
    let other = daemon_record::identify(&format!("http://{}", settings.listen), None).await;
    Daemon::NotRunning { stale, other }
}

impl Daemon {
    fn describe(&self, settings: &Settings, out: &mut String) {
        let _ = match self {
            Daemon::Verified { record, .. } => {
                let token = match record.token {
                    TokenSource::File => "from the token file (`tether token` prints it)",
                    TokenSource::Environment => {
                        "from the daemon's environment (TETHER_TOKEN), not the token file"
                    }
                };
                writeln!(
                    out,
                    "  running: pid {} at {} (tether {})\n  token:   {token}",
                    record.pid,
                    record.base_url(),
                    record.version
                )
            }
            Daemon::Unverified { record, found } => {
                let what = match found {
                    Identity::Unreachable => "does not answer",
                    Identity::Verified | Identity::Other => {
                        "answers with another instance id (not this data dir's daemon)"
                    }
                };
                writeln!(
                    out,
                    "  recorded: pid {} at {}, but that address {what}; the token was not sent",
                    record.pid,
                    record.base_url()
                )
            }
            Daemon::NotRunning { stale, other } => {
                let _ = writeln!(
                    out,
                    "  not running (no daemon serves {})",
                    settings.data_dir.display()
                );
                if let Some(record) = stale {
                    let _ = writeln!(
                        out,
                        "  (a stale record of pid {} at {} was left by a daemon that did not exit cleanly)",
                        record.pid,
                        record.base_url()
                    );
                }
                match other {
                    Identity::Unreachable => Ok(()),
                    Identity::Verified | Identity::Other => writeln!(
                        out,
                        "  something else answers at http://{} (another data dir's daemon, or \
                         another program); the token was not sent",
                        settings.listen
                    ),
                }
            }
        };
    }
}

/// The daemon's pool, or what it answered instead (issue 24, first use 5: a 401 is not
/// "did not answer").
async fn daemon_pool(
    record: &DaemonRecord,
    token: &str,
) -> Result<tether_proto::PoolStatus, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| e.to_string())?;
    let resp = client
        .get(format!("{}/api/v1/pool", record.base_url()))
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| format!("did not answer /api/v1/pool: {e}"))?;
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return Err(
            "answered 401 to /api/v1/pool: it runs with another token (TETHER_TOKEN \
                    or a token file changed since it started)"
                .to_owned(),
        );
    }
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(format!(
            "answered {status} to /api/v1/pool: {}",
            body.trim()
        ));
    }
    resp.json()
        .await
        .map_err(|e| format!("answered /api/v1/pool with something unreadable: {e}"))
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
    let store = match &settings.database_url {
        Some(url) => format!("postgres {}", crate::config_store::redacted(url)),
        None => format!("sqlite {}", settings.data_dir.join("tether.db").display()),
    };
    let _ = writeln!(out, "store:           {store}");
    let _ = writeln!(out, "listen:          http://{}", settings.listen);
    let _ = writeln!(out, "default agent:   {}", settings.default_agent);
    let _ = writeln!(out, "workspace roots: {}", roots.join(", "));
    let _ = writeln!(out, "default cwd:     {}", settings.default_cwd.display());
    let _ = writeln!(out, "\nagents:");
    for r in reports {
        let driver = format!("{:?}", r.spec.driver).to_lowercase();
        let command = std::iter::once(r.spec.command.clone())
            .chain(crate::doctor_redact::redact_args(&r.spec.args))
            .collect::<Vec<_>>()
            .join(" ");
        let mark = match (&r.found, &r.start) {
            (None, _) => "--",
            (Some(_), Some(Err(_))) => "!!",
            (Some(_), _) => "ok",
        };
        let _ = writeln!(out, "  [{mark}] {} (driver: {driver})", r.spec.name);
        let _ = writeln!(out, "       command: {command}");
        match &r.found {
            Some(path) => {
                let _ = writeln!(out, "       found:   {}", path.display());
                let v = r.version.as_deref().unwrap_or("unknown");
                let _ = writeln!(out, "       version: {v}");
                match &r.start {
                    Some(Ok(ok)) => {
                        let _ = writeln!(out, "       starts:  ok ({ok})");
                    }
                    Some(Err(why)) => {
                        let _ = writeln!(out, "       starts:  FAILED: {why}");
                    }
                    None => {}
                }
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

/// Each configured channel's credentials, tried against its platform.
async fn channel_report(settings: &Settings) -> String {
    let checks = tether_channels::doctor::check_credentials(&settings.channels).await;
    if checks.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "
channels:
",
    );
    for c in checks {
        let _ = match c.result {
            Ok(ok) => writeln!(out, "  {}: ok: {ok}", c.channel),
            Err(e) => writeln!(out, "  {}: ERROR: {e}", c.channel),
        };
    }
    out
}

/// Risky settings and what would stop `serve` from starting.
fn settings_checks(settings: &Settings) -> String {
    let mut out = String::new();
    let warnings = crate::warnings::risky_settings(settings);
    if !warnings.is_empty() {
        out.push_str("\nwarnings:\n");
        for w in warnings {
            let _ = writeln!(out, "  WARNING: {w}");
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
