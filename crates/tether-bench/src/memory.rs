//! Figure 6, dormant half: tether's RSS growth per 10 000 dormant conversations. Each
//! conversation is created through the API and runs one turn with a fake-agent process;
//! the pool keeps at most 8 processes live, so every other session is evicted and left
//! dormant. RSS (`VmRSS` of the daemon only) is read after a warm-up and after N more
//! conversations, once the pool has settled.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};

use crate::daemon::{BenchDaemon, Home, Spec};
use crate::report::{Row, Verdict};
use crate::stats::{count, mb, secs};

const POOL: &str = "[pool]\nmax_live = 8\nmax_live_per_owner = 0\nidle_ttl_secs = 0\n";
const WARMUP: usize = 200;
const CONCURRENCY: usize = 16;

pub async fn run(n: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let spec = Spec {
        extra_config: POOL.to_string(),
        ..Spec::default()
    };
    let daemon = BenchDaemon::start(home.path(), &spec).await?;
    let d = &daemon;
    let start_mem = d.mem()?;
    make_dormant(d, WARMUP).await?;
    let base = settle(d).await?;
    let t0 = Instant::now();
    make_dormant(d, n).await?;
    let took = t0.elapsed();
    let after = settle(d).await?;
    let pool = d.get("/api/v1/pool").await?;
    daemon.stop().await?;

    let growth = after.rss_kb as i64 - base.rss_kb as i64;
    let per_10k = growth as f64 * 10_000.0 / n.max(1) as f64;
    Ok(vec![Row::new(
        "6",
        "memory per dormant conversation (tether's RSS; each conversation ran one turn, then its agent was evicted)",
        format!(
            "{:+.1} MB per 10 000 dormant conversations (≈ {:.2} KB each): RSS {} after {WARMUP} → {} after {} more\n(fresh daemon {}; {} conversations with a turn each in {}; {} evictions; {} processes still live, cap 8)",
            per_10k / 1024.0,
            growth as f64 / n.max(1) as f64,
            mb(base.rss_kb),
            mb(after.rss_kb),
            count(n as f64),
            mb(start_mem.rss_kb),
            count(n as f64),
            secs(took),
            pool["evictions"].as_u64().unwrap_or(0),
            pool["live"].as_u64().unwrap_or(0),
        ),
        "— (growth of RSS)",
        Verdict::Info,
    )])
}

/// Creates `n` conversations, each running one turn, `CONCURRENCY` at a time.
async fn make_dormant(d: &BenchDaemon, n: usize) -> Result<()> {
    futures::stream::iter(0..n)
        .map(|_| async move {
            let id = d.new_conversation(None).await?;
            let mut sse = d.events(&id).await?;
            d.turn(&id, &mut sse, "hello").await?;
            anyhow::Ok(())
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Waits until no session is busy, then reads memory. (The pool may stay above its cap:
/// a start exceeds it while every live session is busy, and idle sessions above the cap
/// are only evicted by the next start.)
async fn settle(d: &BenchDaemon) -> Result<crate::daemon::Mem> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pool = d.get("/api/v1/pool").await?;
        if pool["busy"] == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the pool did not settle: {pool}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    d.mem()
}
