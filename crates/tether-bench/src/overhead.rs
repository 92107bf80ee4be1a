//! Figure 1: tether's own share of a turn. A message goes in through the HTTP API and the
//! bench waits for `turn_completed` on the conversation's SSE stream, with the fake agent
//! answering at once. The agent's own time is measured by driving the same fake agent
//! directly over ACP (no tether), interleaved turn by turn with the tether turns so both
//! see the same machine load; tether's share = total − the agent's median.

use std::time::Duration;

use anyhow::Result;
use tether_testkit::bin_path;

use crate::acp_client::AcpAgent;
use crate::daemon::{BenchDaemon, Home, Spec};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, ms};

/// A new session every this many turns keeps the fake agent's reply (which lists every
/// earlier message of the session) short, for tether and for the direct agent alike.
const ROTATE: usize = 100;
const WARMUP: usize = 20;

pub async fn run(turns: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let d = BenchDaemon::start(home.path(), &Spec::default()).await?;
    let conv = d.new_conversation(None).await?;
    let mut sse = d.events(&conv).await?;

    let direct_state = home.path().join("direct-state");
    let mut agent = AcpAgent::spawn(
        &bin_path("fake-agent"),
        &direct_state,
        &home.path().join("work"),
    )
    .await?;
    agent.new_session().await?;

    for i in 0..WARMUP {
        let text = format!("warm-up {i}");
        d.turn(&conv, &mut sse, &text).await?;
        agent.prompt(&text).await?;
    }
    let mut totals = Vec::with_capacity(turns);
    let mut direct = Vec::with_capacity(turns);
    let cpu0 = d.cpu_time()?;
    for i in 0..turns {
        if i > 0 && i % ROTATE == 0 {
            // Untimed: a new session (process start) for both.
            d.say(&conv, "/new").await?;
            d.turn(&conv, &mut sse, "first of a new session").await?;
            agent.new_session().await?;
            agent.prompt("first of a new session").await?;
        }
        let text = format!("ping {i}");
        direct.push(agent.prompt(&text).await?);
        let t0 = std::time::Instant::now();
        d.turn(&conv, &mut sse, &text).await?;
        totals.push(t0.elapsed());
    }
    let cpu = d.cpu_time()?.saturating_sub(cpu0);
    d.stop().await?;

    let total = Samples::new(totals);
    let direct = Samples::new(direct);
    let share = total.minus(direct.p50());
    let (p50, p99) = (share.p50(), share.p99());
    let met = p50 <= Duration::from_millis(1) && p99 <= Duration::from_millis(5);
    Ok(vec![Row::new(
        "1",
        "overhead: tether's share of a turn (HTTP message in → `turn_completed` out over SSE, fake agent answering at once)",
        format!(
            "p50 {} · p99 {}\n(total p50 {} / p99 {}; the agent alone over ACP p50 {} / p99 {}; tether CPU {} per turn; {} turns)",
            ms(p50),
            ms(p99),
            ms(total.p50()),
            ms(total.p99()),
            ms(direct.p50()),
            ms(direct.p99()),
            ms(cpu / turns.max(1) as u32),
            total.len()
        ),
        "p50 ≤ 1 ms, p99 ≤ 5 ms",
        Verdict::of(met),
    )
    .was("p50 1.61 ms · p99 2.67 ms")])
}
