//! Figure 10 (issue 15): live sessions held within 4 GB of agent RSS, with the real
//! `codex app-server` and `gemini --acp` against the mock model, side by side in one run:
//! **before**, a process per session (`[pool] sessions_per_process = 1`), and **after**,
//! sessions sharing processes (the default). Each of `n` conversations runs one turn and
//! stays live; the agents' resident memory is the sum the daemon reports per process
//! (`GET /api/v1/pool`, each process group's `VmRSS`), read after the first session
//! (`base`) and after all `n`. Per session: before, `RSS ÷ n`; after, the marginal cost
//! `(RSS − base) ÷ (n − 1)` plus the base spread over a full process (the default
//! 32 sessions per process). Sessions within 4 GB = 4 GiB ÷ that; a small `n` is enough.

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
                    "process per session: {:.0} MB per session → {:.0} sessions · shared ({} process): base {:.0} MB + {:.1} MB per session → {:.0} sessions",
                    b.whole_mb() / n as f64,
                    BUDGET / (b.total as f64 / n as f64),
                    a.processes,
                    mb(a.base),
                    a.marginal_mb(n),
                    a.within_shared(n)
                ),
                "≥ 200 each",
                Verdict::of(a.within_shared(n) >= GOAL),
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
    processes: usize,
    /// Agent RSS with one live session, and with all `n`.
    base: u64,
    total: u64,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Sessions per shared process by default (`[pool] sessions_per_process`).
const PER_PROCESS: f64 = 32.0;

impl Held {
    fn whole_mb(&self) -> f64 {
        mb(self.total)
    }

    fn marginal_mb(&self, n: usize) -> f64 {
        mb(self.total.saturating_sub(self.base)) / (n.max(2) - 1) as f64
    }

    /// Sessions within the budget when each process holds [`PER_PROCESS`] sessions.
    fn within_shared(&self, n: usize) -> f64 {
        let per_session = self.marginal_mb(n) + mb(self.base) / PER_PROCESS;
        mb(BUDGET as u64) / per_session
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
    let mut base = 0;
    let mut pool = serde_json::Value::Null;
    for i in 0..n {
        let conv = d.new_conversation(Some(name)).await?;
        let mut sse = d.events(&conv).await?;
        d.turn(&conv, &mut sse, &format!("hello {i}")).await?;
        pool = d.get("/api/v1/pool").await?;
        if i == 0 {
            base = agent_rss(&pool, name).1;
        }
    }
    let (sessions, total, processes) = {
        let (sessions, total) = agent_rss(&pool, name);
        let processes = pool["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["agent"] == name)
            .count();
        (sessions, total, processes)
    };
    let held = Held {
        processes,
        base,
        total,
    };
    d.stop().await?;
    if sessions != n || held.total == 0 {
        bail!("expected {n} live sessions with known RSS, the pool says {pool}");
    }
    Ok(held)
}

/// (live sessions, summed RSS) of `name`'s processes in a pool status.
fn agent_rss(pool: &serde_json::Value, name: &str) -> (usize, u64) {
    let processes = pool["processes"].as_array().into_iter().flatten();
    processes
        .filter(|p| p["agent"] == name)
        .fold((0, 0), |(s, r), p| {
            (
                s + p["sessions"].as_array().map_or(0, Vec::len),
                r + p["rss_bytes"].as_u64().unwrap_or(0),
            )
        })
}
