//! Figure 10 (issue 15): live sessions held within 4 GB of agent RSS, with the real
//! `codex app-server` and `gemini --acp` against the mock model, side by side in one run:
//! **before**, a process per session (`[pool] sessions_per_process = 1`), and **after**,
//! sessions sharing processes (the default). Each of `n` conversations runs one turn and
//! stays live; the agents' resident memory is the sum the daemon reports per process
//! (`GET /api/v1/pool`, each process group's `VmRSS`). Sessions within 4 GB =
//! 4 GiB ÷ (RSS ÷ `n`): linear in `n`, so a small `n` extrapolates (the base cost of a
//! shared process is spread over `n` only, so a small `n` under-states "after").

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use tether_testkit::MockModel;
use tether_testkit::real_agents::{self, RealAgent};

use crate::daemon::{BenchDaemon, Home, Spec};
use crate::report::{Row, Verdict};

const BUDGET: f64 = 4.0 * 1024.0 * 1024.0 * 1024.0;
const GOAL: f64 = 200.0;

pub async fn run(n: usize) -> Result<Vec<Row>> {
    let model = MockModel::start().await;
    let codex_home = real_agents::codex_home(&model.base_url());
    let gemini_home = tempfile::tempdir()?;
    let agents = [
        (
            "codex",
            RealAgent::Codex,
            real_agents::codex_env(codex_home.path()),
        ),
        (
            "gemini",
            RealAgent::Gemini,
            real_agents::gemini_env(&model.base_url(), gemini_home.path()),
        ),
    ];
    let mut rows = Vec::new();
    for (name, kind, env) in &agents {
        let before = held(name, *kind, env, n, 1).await;
        let after = held(name, *kind, env, n, n.max(2)).await;
        rows.push(match (before, after) {
            (Ok(b), Ok(a)) => Row::new(
                "10",
                format!("live {name} sessions within 4 GB of agent RSS (real CLI, {n} live)"),
                format!(
                    "process per session: {:.0} MB per session → {:.0} sessions · shared: {:.0} MB per session in {} process(es) → {:.0} sessions",
                    b.per_session_mb(),
                    b.within_budget(),
                    a.per_session_mb(),
                    a.processes,
                    a.within_budget()
                ),
                "≥ 200 each",
                Verdict::of(a.within_budget() >= GOAL),
            ),
            (Err(e), _) | (_, Err(e)) => Row::new(
                "10",
                format!("live {name} sessions within 4 GB of agent RSS"),
                format!("failed: {e:#}"),
                "≥ 200 each",
                Verdict::Error,
            ),
        });
    }
    real_agents::AgentReaper::new("CODEX_HOME", &codex_home.path().display().to_string()).reap();
    real_agents::AgentReaper::new("GEMINI_CLI_HOME", &gemini_home.path().display().to_string())
        .reap();
    Ok(rows)
}

struct Held {
    sessions: usize,
    processes: usize,
    rss_bytes: u64,
}

impl Held {
    fn per_session_mb(&self) -> f64 {
        self.rss_bytes as f64 / self.sessions.max(1) as f64 / (1024.0 * 1024.0)
    }

    fn within_budget(&self) -> f64 {
        BUDGET / (self.rss_bytes as f64 / self.sessions.max(1) as f64)
    }
}

/// `n` live sessions of `name` with `per_process` sessions per process; what they hold.
async fn held(
    name: &str,
    kind: RealAgent,
    env: &BTreeMap<String, String>,
    n: usize,
    per_process: usize,
) -> Result<Held> {
    let extra = format!(
        "{}[pool]\nmax_live = 0\nidle_ttl_secs = 0\nsessions_per_process = {per_process}\nmax_processes = 0\n",
        real_agents::agent_toml(name, kind, env)
    );
    let home = Home::new()?;
    let d = BenchDaemon::start(
        home.path(),
        &Spec {
            extra_config: extra,
            ..Spec::default()
        },
    )
    .await?;
    for i in 0..n {
        let conv = d.new_conversation(Some(name)).await?;
        let mut sse = d.events(&conv).await?;
        d.turn(&conv, &mut sse, &format!("hello {i}")).await?;
    }
    let pool = d.get("/api/v1/pool").await?;
    let processes: Vec<&serde_json::Value> = pool["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["agent"] == name)
        .collect();
    let held = Held {
        sessions: processes
            .iter()
            .map(|p| p["sessions"].as_array().map_or(0, Vec::len))
            .sum(),
        processes: processes.len(),
        rss_bytes: processes
            .iter()
            .filter_map(|p| p["rss_bytes"].as_u64())
            .sum(),
    };
    d.stop().await?;
    if held.sessions != n || held.rss_bytes == 0 {
        bail!("expected {n} live sessions with known RSS, the pool says {pool}");
    }
    Ok(held)
}
