//! Issue 30: scheduled turns at scale. With `stored` schedules waiting (every hour, in
//! 100 conversations), what the due-time check costs the daemon while nothing is due
//! (its CPU over an idle window, as a share of one core: an upper bound, everything else
//! the idle daemon does included), and how late runs start: `runs` one-off runs due half
//! a second apart, each a turn of the fake agent, timed from its due time to its turn's
//! start.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::json;

use crate::daemon::{BenchDaemon, Home, Spec};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, ms};

/// Conversations the stored schedules are spread over.
const CONVERSATIONS: usize = 100;
/// The idle window.
const IDLE: Duration = Duration::from_secs(20);

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub async fn run(stored: usize, runs: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let per = stored.div_ceil(CONVERSATIONS).max(1);
    let daemon = BenchDaemon::start(
        home.path(),
        &Spec {
            extra_config: format!(
                "[schedules]\nmax_per_conversation = {}\ntime_zone = \"UTC\"\n",
                per.max(runs) + 1
            ),
            ..Spec::default()
        },
    )
    .await?;
    let result = measure(&daemon, stored, per, runs).await;
    daemon.stop().await?;
    result
}

async fn measure(daemon: &BenchDaemon, stored: usize, per: usize, runs: usize) -> Result<Vec<Row>> {
    let made = Instant::now();
    let mut convs = Vec::new();
    for _ in 0..CONVERSATIONS {
        convs.push(daemon.new_conversation(None).await?);
    }
    let mut n = 0;
    'all: for c in &convs {
        for _ in 0..per {
            if n == stored {
                break 'all;
            }
            daemon
                .post(
                    "/api/v1/schedules",
                    json!({"conversation_id": c, "every": "1h", "prompt": format!("check {n}")}),
                )
                .await?;
            n += 1;
        }
    }
    let making = made.elapsed();
    // Let the writes settle, then the idle window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu0 = daemon.cpu_time()?;
    let t0 = Instant::now();
    tokio::time::sleep(IDLE).await;
    let idle_cpu = daemon.cpu_time()? - cpu0;
    let share = idle_cpu.as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0;

    // One-off runs due half a second apart, starting in 5 s, each in a conversation of
    // its own (so no run waits for another's turn).
    let first = unix_ms() / 1000 + 5;
    let mut due = Vec::new();
    for i in 0..runs {
        let c = daemon.new_conversation(None).await?;
        let at_ms = first * 1000 + (i as i64) * 500;
        let at = tether_testkit::utc_of(at_ms.div_euclid(1000));
        // `at` takes whole seconds: two runs share a second, the later one half a
        // second after the due time is counted from that second.
        daemon
            .post(
                "/api/v1/schedules",
                json!({"conversation_id": c, "at": at, "time_zone": "UTC",
                       "prompt": format!("run {i}")}),
            )
            .await?;
        due.push((c, at_ms.div_euclid(1000) * 1000));
    }
    let limit = Instant::now() + Duration::from_secs(60 + runs as u64);
    let mut late = Vec::new();
    for (c, due_ms) in &due {
        loop {
            let conv = daemon.get(&format!("/api/v1/conversations/{c}")).await?;
            if let Some(sid) = conv["binding"]["session_id"].as_str() {
                let turns = daemon.get(&format!("/api/v1/sessions/{sid}/turns")).await?;
                if let Some(started) = turns
                    .as_array()
                    .and_then(|a| a.first())
                    .and_then(|t| t["started_at_ms"].as_i64())
                {
                    late.push(Duration::from_millis((started - due_ms).max(0) as u64));
                    break;
                }
            }
            if Instant::now() > limit {
                bail!("a scheduled run did not start within a minute of its time");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let late = Samples::new(late);
    let p99 = late.p99();
    Ok(vec![
        Row::new(
            "12a",
            format!(
                "{stored} schedules stored: the idle daemon's CPU (the due-time check and all else) over {} s",
                IDLE.as_secs()
            ),
            format!(
                "{share:.2} % of one core ({} ms of CPU); made in {:.1} s",
                idle_cpu.as_millis(),
                making.as_secs_f64()
            ),
            "< 1 %",
            if share < 1.0 {
                Verdict::Met
            } else {
                Verdict::Missed
            },
        ),
        Row::new(
            "12b",
            format!(
                "{} scheduled runs: due time to the turn's start",
                late.len()
            ),
            format!("p50 {} / p99 {}", ms(late.p50()), ms(p99)),
            "p99 ≤ 1 s",
            if p99 <= Duration::from_secs(1) {
                Verdict::Met
            } else {
                Verdict::Missed
            },
        ),
    ])
}
