//! Figure 11 (issue 15): a new Claude session's time to its first event with the warm
//! spare ready (`[pool] claude_spare = true`: a `claude` process started and initialised
//! ahead of need) against a cold start, with the real `claude` CLI against the mock model,
//! in one daemon. The cold start is a new conversation in another working directory,
//! which the spare (started in the default one) does not serve, so both go through the
//! same daemon and agent configuration. Timed from the HTTP message to the turn's first
//! `message_delta` on SSE, and to `turn_completed`. Each round waits for the spare to be
//! ready, runs the spare start, then the cold one, then lets both sessions go dormant
//! (idle TTL 1 s) so no live process of an earlier round competes.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};
use tether_testkit::MockModel;
use tether_testkit::real_agents::{self, RealAgent};

use crate::daemon::{BenchDaemon, Home, Spec, str_field, wait_turn_end};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, ms, ratio};

const WHAT: &str = "new Claude session, time to first event (real CLI, mock model): the warm spare ready vs a cold start";

pub async fn run(rounds: usize) -> Result<Vec<Row>> {
    if !crate::warm_cold::cli_installed("claude") {
        return Ok(vec![Row::new(
            "11",
            WHAT,
            "not run: claude not installed (run tools/agents/install)",
            "—",
            Verdict::Skipped,
        )]);
    }
    let model = MockModel::start().await;
    let claude_dir = tempfile::tempdir()?;
    let env = real_agents::claude_env(&model.base_url(), claude_dir.path());
    let mut extra = real_agents::agent_toml("claude", RealAgent::Claude, &env);
    extra.push_str("[pool]\nidle_ttl_secs = 1\nclaude_spare = true\n");
    let home = Home::new()?;
    let cold_dir = home.path().join("work").join("cold");
    std::fs::create_dir_all(&cold_dir)?;
    let daemon = BenchDaemon::start(
        home.path(),
        &Spec {
            extra_config: extra,
            ..Spec::default()
        },
    )
    .await?;
    let result = measure(&daemon, rounds, &cold_dir.display().to_string()).await;
    daemon.stop().await?;
    real_agents::AgentReaper::new(
        "CLAUDE_CONFIG_DIR",
        &claude_dir.path().display().to_string(),
    )
    .reap();
    Ok(vec![match result {
        Ok(row) => row,
        Err(e) => Row::new("11", WHAT, format!("failed: {e:#}"), "—", Verdict::Error),
    }])
}

/// Per round: (first event, whole turn) with the spare, then cold.
async fn measure(d: &BenchDaemon, rounds: usize, cold_cwd: &str) -> Result<Row> {
    let (mut spare_first, mut spare_turn, mut cold_first, mut cold_turn) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let pid = ready_spare(d).await?;
        let (first, turn, sid) = new_session(d, json!({ "agent": "claude" }), r).await?;
        if process_of(d, &sid).await? != Some(pid) {
            bail!("round {r}: the new session did not take the spare (pid {pid})");
        }
        spare_first.push(first);
        spare_turn.push(turn);
        let (first, turn, sid) =
            new_session(d, json!({ "agent": "claude", "cwd": cold_cwd }), r).await?;
        if process_of(d, &sid).await? == Some(pid) {
            bail!("round {r}: the cold session took the spare");
        }
        cold_first.push(first);
        cold_turn.push(turn);
        wait_no_live(d).await?;
    }
    let (sf, st, cf, ct) = (
        Samples::new(spare_first).p50(),
        Samples::new(spare_turn).p50(),
        Samples::new(cold_first).p50(),
        Samples::new(cold_turn).p50(),
    );
    Ok(Row::new(
        "11",
        WHAT,
        format!(
            "first event: spare {} · cold {} (spare = {} cold)\nwhole first turn: spare {} · cold {} (medians of {rounds})",
            ms(sf),
            ms(cf),
            ratio(sf, cf),
            ms(st),
            ms(ct),
        ),
        "faster than a cold start",
        Verdict::of(sf < cf),
    ))
}

/// A new conversation (`body`) and its first turn: (time to the first `message_delta`,
/// time to `turn_completed`, session id).
async fn new_session(
    d: &BenchDaemon,
    body: Value,
    r: usize,
) -> Result<(Duration, Duration, String)> {
    let conv = str_field(&d.post("/api/v1/conversations", body).await?, "id")?;
    let mut sse = d.events(&conv).await?;
    let t = Instant::now();
    let out = d.say(&conv, &format!("hello {r}")).await?;
    let turn_id = str_field(&out, "turn_id")?;
    let first = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(ev) = sse.next().await {
            match ev.event.as_deref() {
                Some("message_delta") => return Ok(t.elapsed()),
                Some("turn_failed" | "turn_interrupted" | "turn_cancelled") => {
                    bail!("the first turn ended without a message: {}", ev.json())
                }
                _ => {}
            }
        }
        bail!("the event stream ended")
    })
    .await
    .map_err(|_| anyhow!("no first event within 120 s"))??;
    wait_turn_end(&mut sse, &turn_id).await?;
    Ok((first, t.elapsed(), str_field(&out, "session_id")?))
}

/// The pid of the ready spare of `claude`.
async fn ready_spare(d: &BenchDaemon) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pool = d.get("/api/v1/pool").await?;
        let ready = pool["spares"].as_array().and_then(|s| {
            s.iter()
                .find(|s| s["agent"] == "claude" && s["ready"] == true)
                .and_then(|s| s["pid"].as_u64())
        });
        if let Some(pid) = ready {
            return Ok(pid);
        }
        if Instant::now() > deadline {
            bail!("no ready spare within 60 s: {pool}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pid of the process a live session runs in.
async fn process_of(d: &BenchDaemon, session: &str) -> Result<Option<u64>> {
    let pool = d.get("/api/v1/pool").await?;
    Ok(pool["processes"].as_array().and_then(|ps| {
        ps.iter()
            .find(|p| {
                p["sessions"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s == session))
            })
            .and_then(|p| p["pid"].as_u64())
    }))
}

/// Waits until the pool holds no live session (the idle TTL evicted them).
async fn wait_no_live(d: &BenchDaemon) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pool = d.get("/api/v1/pool").await?;
        if pool["live"] == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("sessions stayed live: {pool}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
