//! Figure 5 (also issue 3's comparison): a follow-up turn with the real `codex` and
//! `claude` CLIs against the mock model server, three ways, in one run:
//! - **warm**: through tether on a live session (the process kept by the pool);
//! - **dormant**: through tether after the pool evicted the session (idle TTL 1 s): for
//!   codex a resume request on the shared app-server that still runs (issue 15: an empty
//!   process is kept for `process_idle_secs`), for claude a process start + strict resume;
//! - **per-turn process**: the CLI run once for the turn, the way per-message tools do
//!   (`codex exec resume <id> --json`, `claude -p --resume <id> --output-format json`),
//!   on the same native session while tether's is dormant.
//!
//! Tether's turns are timed from the HTTP message to `turn_completed` on SSE; the CLI
//! from spawn to exit. Each round runs warm, then per-turn process, then dormant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use tether_testkit::MockModel;
use tether_testkit::real_agents::{self, RealAgent};

use crate::daemon::{BenchDaemon, Home, Spec, str_field};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, ms, ratio};

const CLI_LIMIT: Duration = Duration::from_secs(120);

/// Whether the real CLI is installed (`tools/agents/install`), without the testkit's
/// panic message.
pub(crate) fn cli_installed(name: &str) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let found = std::panic::catch_unwind(|| tether_testkit::agent_cli(name)).is_ok();
    std::panic::set_hook(hook);
    found
}

struct Agent {
    name: &'static str,
    kind: RealAgent,
    env: BTreeMap<String, String>,
}

pub async fn run(rounds: usize) -> Result<Vec<Row>> {
    let wanted = ["codex", "claude"];
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|n| !cli_installed(n))
        .collect();
    if !missing.is_empty() {
        return Ok(vec![Row::new(
            "5",
            "warm vs dormant vs per-turn process (real codex and claude)",
            format!(
                "not run: {} not installed (run tools/agents/install)",
                missing.join(", ")
            ),
            "warm ≤ 0.5× per-turn process",
            Verdict::Skipped,
        )]);
    }
    let model = MockModel::start().await;
    let codex_home = real_agents::codex_home(&model.base_url());
    let claude_dir = tempfile::tempdir()?;
    let agents = [
        Agent {
            name: "codex",
            kind: RealAgent::Codex,
            env: real_agents::codex_env(codex_home.path()),
        },
        Agent {
            name: "claude",
            kind: RealAgent::Claude,
            env: real_agents::claude_env(&model.base_url(), claude_dir.path()),
        },
    ];
    let mut extra = String::new();
    for a in &agents {
        extra.push_str(&real_agents::agent_toml(a.name, a.kind, &a.env));
    }
    extra.push_str("[pool]\nidle_ttl_secs = 1\n");
    let home = Home::new()?;
    let daemon = BenchDaemon::start(
        home.path(),
        &Spec {
            extra_config: extra,
            ..Spec::default()
        },
    )
    .await?;
    let work = home.path().join("work");
    let mut rows = Vec::new();
    for a in &agents {
        let row = match measure(&daemon, a, rounds, &work).await {
            Ok(row) => row,
            Err(e) => Row::new(
                "5",
                format!("warm vs dormant vs per-turn process: {}", a.name),
                format!("failed: {e:#}"),
                "warm ≤ 0.5× per-turn process",
                Verdict::Error,
            ),
        };
        rows.push(row);
    }
    daemon.stop().await?;
    // Agents of a stopped daemon are ended by it; nothing of this run may linger.
    real_agents::AgentReaper::new("CODEX_HOME", &codex_home.path().display().to_string()).reap();
    real_agents::AgentReaper::new(
        "CLAUDE_CONFIG_DIR",
        &claude_dir.path().display().to_string(),
    )
    .reap();
    Ok(rows)
}

async fn measure(d: &BenchDaemon, a: &Agent, rounds: usize, work: &Path) -> Result<Row> {
    let conv = d.new_conversation(Some(a.name)).await?;
    let mut sse = d.events(&conv).await?;
    let first = d
        .turn(&conv, &mut sse, &format!("hello {}", a.name))
        .await?;
    let sid = str_field(&first, "session_id")?;
    let session = d.get(&format!("/api/v1/sessions/{sid}")).await?;
    let external = str_field(&session, "external_id")?;

    // Codex's per-turn runs continue a native session of their own: tether's shared
    // app-server keeps its threads' writers while it runs (issue 15), so `codex exec
    // resume` could not take tether's thread. Same CLI, same kind of resume.
    let cli_session = match a.kind {
        RealAgent::Codex => new_codex_thread(a, work).await?,
        _ => external.clone(),
    };
    let (mut warm, mut cold, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let t = Instant::now();
        d.turn(&conv, &mut sse, &format!("warm follow-up {r}"))
            .await?;
        warm.push(t.elapsed());

        wait_dormant(d, &conv).await?;
        let text = format!("per-turn process {r}");
        cli.push(run_cli(a, &cli_session, &text, work).await?);

        let t = Instant::now();
        let env = d
            .turn(&conv, &mut sse, &format!("dormant follow-up {r}"))
            .await?;
        cold.push(t.elapsed());
        if env["session_id"] != sid.as_str() {
            bail!("the dormant follow-up went to another session: {env}");
        }
    }
    let session = d.get(&format!("/api/v1/sessions/{sid}")).await?;
    if session["external_id"] != external.as_str() {
        bail!("the native session changed: {session}");
    }
    let (warm, cold, cli) = (Samples::new(warm), Samples::new(cold), Samples::new(cli));
    let (w, c, p) = (warm.p50(), cold.p50(), cli.p50());
    let cli_cmd = match a.kind {
        RealAgent::Codex => "`codex exec resume <id> --json`",
        _ => "`claude -p --resume <id> --output-format json`",
    };
    Ok(Row::new(
        "5",
        format!(
            "follow-up turn, {} (real CLI, mock model): warm (live) vs dormant (start + resume) vs per-turn process {cli_cmd}",
            a.name
        ),
        format!(
            "warm {} · dormant {} · per-turn process {}\nwarm = {} per-turn · dormant = {} per-turn · warm = {} dormant (medians of {rounds})",
            ms(w),
            ms(c),
            ms(p),
            ratio(w, p),
            ratio(c, p),
            ratio(w, c)
        ),
        match a.kind {
            // Issue 33 item 4: the dormant codex follow-up resumes on the process it left.
            RealAgent::Codex => "warm ≤ 0.5× per-turn process; dormant ≤ 0.45× per-turn process",
            _ => "warm ≤ 0.5× per-turn process",
        },
        Verdict::of(
            w.as_secs_f64() <= 0.5 * p.as_secs_f64()
                && (a.kind != RealAgent::Codex || c.as_secs_f64() <= 0.45 * p.as_secs_f64()),
        ),
    )
    .was(match a.kind {
        RealAgent::Codex => "warm 108 ms · dormant 318 ms · per-turn 330 ms",
        _ => "warm 119 ms · dormant 1040 ms · per-turn 1044 ms",
    }))
}

/// Polls the conversation until its bound session is dormant (the pool's idle TTL).
async fn wait_dormant(d: &BenchDaemon, conv: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = d.conversation(conv).await?;
        if c["binding"]["status"] == "dormant" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the session did not go dormant: {c}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A new codex thread made by `codex exec --json`; its id (from `thread.started`).
async fn new_codex_thread(a: &Agent, cwd: &Path) -> Result<String> {
    let mut cmd = real_agents::cli_command(a.name, &a.env);
    cmd.args(["exec", "--json", "--skip-git-repo-check", "hello per-turn"])
        .current_dir(PathBuf::from(cwd))
        .stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(CLI_LIMIT, cmd.output())
        .await
        .map_err(|_| anyhow!("codex exec did not finish within {CLI_LIMIT:?}"))?
        .context("running codex exec")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "thread.started")
        .and_then(|v| v["thread_id"].as_str().map(str::to_owned))
        .ok_or_else(|| anyhow!("codex exec reported no thread ({})", out.status))
}

/// Runs the CLI once for one turn on the native session `external`; its wall time.
async fn run_cli(a: &Agent, external: &str, text: &str, cwd: &Path) -> Result<Duration> {
    let mut cmd = real_agents::cli_command(a.name, &a.env);
    match a.kind {
        RealAgent::Codex => cmd.args([
            "exec",
            "resume",
            "--json",
            "--skip-git-repo-check",
            external,
            text,
        ]),
        _ => cmd.args(["-p", "--resume", external, "--output-format", "json", text]),
    };
    cmd.current_dir(PathBuf::from(cwd));
    let t = Instant::now();
    let out = tokio::time::timeout(CLI_LIMIT, cmd.output())
        .await
        .map_err(|_| anyhow!("{} did not finish within {CLI_LIMIT:?}", a.name))?
        .with_context(|| format!("running {}", a.name))?;
    let took = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains(&format!("mock reply to: {text}")) {
        bail!(
            "{} per-turn run failed ({}): {}\n{}",
            a.name,
            out.status,
            stdout.chars().take(800).collect::<String>(),
            String::from_utf8_lossy(&out.stderr)
                .chars()
                .take(800)
                .collect::<String>()
        );
    }
    Ok(took)
}
