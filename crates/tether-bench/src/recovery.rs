//! Figure 4: recovery. A store with C conversations (each with one session, two turns,
//! four history messages) and E events is generated fast (`generate.rs`: the rows by
//! set-based SQL through sqlx) with the state a crash leaves: some sessions live,
//! their last turn running, some approvals and questions pending. Then `tether serve`
//! is started on it and timed from process start to the first `200` of
//! `/api/v1/health`; start-up runs recovery (turns → `interrupted`, approvals and
//! questions → `expired`, sessions → dormant, one notice per conversation). An empty
//! store's start and a second start on the big store (nothing left to recover) are
//! timed for comparison.

use std::time::Duration;

use anyhow::{Result, bail};

use crate::daemon::{BenchDaemon, Home, Spec, write_config};
use crate::generate::{OPEN_TURNS, big_store, dir_size, id};
use crate::report::{Row, Verdict};
use crate::stats::{count, mb, ms, secs};

pub async fn run(conversations: usize, events: usize) -> Result<Vec<Row>> {
    // Baseline: an empty store.
    let empty_home = Home::new()?;
    let d = BenchDaemon::start(empty_home.path(), &Spec::default()).await?;
    let empty_start = d.start_time;
    let empty_mem = d.mem()?;
    d.stop().await?;

    let home = Home::new()?;
    let config = write_config(home.path(), &Spec::default())?;
    let data = home.path().join("data");
    let gen_time = big_store(&data, conversations, events).await?;
    let db_size = dir_size(&data);

    let d = BenchDaemon::launch(home.path(), &config).await?;
    let first = d.start_time;
    let big_mem = d.mem()?;
    // Recovery really ran: a conversation that had a running turn got an `interrupted`.
    let probe = format!("/api/v1/sessions/{}/turns", id('s', 0));
    let turns = d.get(&probe).await?;
    let interrupted = turns
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["status"] == "interrupted"));
    if !interrupted {
        bail!("recovery did not interrupt the running turn: {turns}");
    }
    let d = d.restart().await?;
    let second = d.start_time;
    d.stop().await?;

    let met = first < Duration::from_secs(1);
    Ok(vec![Row::new(
        "4",
        format!(
            "recovery: start to serving (health 200) on a store with {} conversations and {} events",
            count(conversations as f64),
            count(events as f64)
        ),
        format!(
            "{} with {OPEN_TURNS} running turns to interrupt ({}x an empty store's {}); restart with nothing to recover {}\n(store {} generated in {}; tether RSS after start {} vs. {} on an empty store)",
            ms(first),
            format_args!(
                "{:.1}",
                first.as_secs_f64() / empty_start.as_secs_f64().max(1e-9)
            ),
            ms(empty_start),
            ms(second),
            mb(db_size / 1024),
            secs(gen_time),
            mb(big_mem.rss_kb),
            mb(empty_mem.rss_kb),
        ),
        "< 1 s",
        Verdict::of(met),
    )
    .was("182 ms (empty store 39.1 ms; restart 859 ms)")])
}
