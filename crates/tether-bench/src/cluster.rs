//! The cluster figures (issue 12), side by side in one run, through the public HTTP API
//! only (so the same code measures whatever the build does):
//! - turns/s of N conversations running at once, and tether's share of one turn (HTTP in
//!   → `turn_completed` over SSE, minus the fake agent's own time over ACP), on SQLite,
//!   on PostgreSQL with one node, and on three nodes with the conversations spread over
//!   them (each conversation's messages to its node, its SSE on the *next* node: every
//!   event crosses the cluster through the tail);
//! - failover: SIGKILL of the node a conversation's messages went to → the first message
//!   sent to another node that is answered with a completed turn (the default lease);
//! - cross-node command latency: the reply to a message sent to a node that does not
//!   own the conversation, over the reply of its owner.
//!
//! The last two need ownership and routing (other lanes of issue 12). The bench checks
//! from the API whether a message sent to a non-owner ran there (its pool shows a live
//! session): if so, it prints the raw figure and says it is not a cross-node one.
//! PostgreSQL: `TETHER_TEST_DATABASE_URL`'s server, else a private one
//! (`tether_testkit::postgres`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tether_testkit::postgres::TestDatabase;
use tether_testkit::{SseStream, bin_path};

use crate::acp_client::AcpAgent;
use crate::daemon::{BenchDaemon, Home, Spec, str_field, wait_turn_end, write_config};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, count, ms, secs};

/// How many figures of each kind to take (`--cluster-*` flags).
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// Sequential turns for the share of a turn.
    pub turns: usize,
    /// Conversations running at once for turns/s.
    pub conversations: usize,
    /// Turns per conversation for turns/s.
    pub per_conversation: usize,
    /// Failovers (each a SIGKILL, a lease, a restart).
    pub failovers: usize,
    /// Messages each way for the cross-node latency.
    pub cross: usize,
}

const POOL_UNLIMITED: &str = "[pool]\nmax_live = 0\nmax_live_per_owner = 0\nidle_ttl_secs = 0\n";
const WARMUP: usize = 10;

/// Nodes on one store, with what it takes to kill and restart them.
struct Nodes {
    nodes: Vec<Option<BenchDaemon>>,
    configs: Vec<PathBuf>,
    homes: Vec<Home>,
    _database: Option<TestDatabase>,
}

impl Nodes {
    /// `n` nodes: on SQLite (`n` must be 1) or on one fresh PostgreSQL database, sharing
    /// the fake agent's state directory (the shared agent home).
    async fn start(n: usize, postgres: bool) -> Result<Nodes> {
        let database = if postgres {
            Some(
                tokio::time::timeout(Duration::from_secs(180), TestDatabase::create())
                    .await
                    .context("timed out creating a database")??,
            )
        } else {
            None
        };
        let store = match &database {
            Some(db) => format!("[store]\nurl = {:?}\n", db.url),
            None => String::new(),
        };
        let spec = Spec {
            extra_config: format!("{POOL_UNLIMITED}{store}"),
            ..Spec::default()
        };
        let mut homes = Vec::new();
        let mut configs = Vec::new();
        let mut nodes = Vec::new();
        for i in 0..n {
            let home = Home::new()?;
            configs.push(write_config(home.path(), &spec)?);
            if i > 0 {
                let first = homes_first(&homes);
                let shared = first.join("fake-state");
                std::fs::create_dir_all(&shared).context("creating the agent home")?;
                std::os::unix::fs::symlink(&shared, home.path().join("fake-state"))
                    .context("sharing the agent home")?;
                // One workspace for all nodes (a conversation's cwd is valid on each).
                let own = home.path().join("work").display().to_string();
                let text = std::fs::read_to_string(&configs[i])?
                    .replace(&own, &first.join("work").display().to_string());
                std::fs::write(&configs[i], text).context("writing the config")?;
            }
            nodes.push(Some(BenchDaemon::launch(home.path(), &configs[i]).await?));
            homes.push(home);
        }
        Ok(Nodes {
            nodes,
            configs,
            homes,
            _database: database,
        })
    }

    fn node(&self, i: usize) -> Result<&BenchDaemon> {
        self.nodes[i % self.nodes.len()]
            .as_ref()
            .with_context(|| format!("node {i} is down"))
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }

    async fn kill9(&mut self, i: usize) -> Result<()> {
        if let Some(d) = self.nodes[i].take() {
            d.kill9().await?;
        }
        Ok(())
    }

    async fn relaunch(&mut self, i: usize) -> Result<()> {
        let d = BenchDaemon::launch(self.homes[i].path(), &self.configs[i]).await?;
        self.nodes[i] = Some(d);
        Ok(())
    }

    async fn stop(self) -> Result<()> {
        for d in self.nodes.into_iter().flatten() {
            d.stop().await?;
        }
        Ok(())
    }
}

fn homes_first(homes: &[Home]) -> &Path {
    homes.first().map_or(Path::new("/nonexistent"), Home::path)
}

/// A message to `to`, its turn's end read on `sse`.
async fn turn_via(to: &BenchDaemon, conv: &str, sse: &mut SseStream, text: &str) -> Result<()> {
    let out = to.say(conv, text).await?;
    wait_turn_end(sse, &str_field(&out, "turn_id")?).await?;
    Ok(())
}

/// turns/s: `conversations` at once, conversation k's messages to node k, its SSE on
/// node k + 1 (the same node when there is one).
async fn turns_per_sec(nodes: &Nodes, c: &Counts) -> Result<(f64, usize)> {
    let mut convs = Vec::new();
    for k in 0..c.conversations {
        let conv = nodes.node(k)?.new_conversation(None).await?;
        let mut sse = nodes.node(k + 1)?.events(&conv).await?;
        turn_via(nodes.node(k)?, &conv, &mut sse, "hello").await?;
        convs.push((k, conv, sse));
    }
    let t0 = Instant::now();
    let per = c.per_conversation;
    futures::future::try_join_all(convs.into_iter().map(|(k, conv, mut sse)| async move {
        for i in 0..per {
            turn_via(nodes.node(k)?, &conv, &mut sse, &format!("turn {i}")).await?;
        }
        anyhow::Ok(())
    }))
    .await?;
    let done = c.conversations * per;
    Ok((done as f64 / t0.elapsed().as_secs_f64(), done))
}

/// Sequential turns of one conversation: messages to node 0, SSE on node 1 (node 0 when
/// alone); the total of each, and with more than one node how much later each turn's end
/// reached node 1's stream than a stream on node 0 (the tail's delay).
async fn turn_times(nodes: &Nodes, turns: usize) -> Result<(Samples, Option<Samples>)> {
    let conv = nodes.node(0)?.new_conversation(None).await?;
    let mut sse = nodes.node(1)?.events(&conv).await?;
    let mut home = if nodes.len() > 1 {
        Some(nodes.node(0)?.events(&conv).await?)
    } else {
        None
    };
    let mut totals = Vec::with_capacity(turns);
    let mut later = Vec::with_capacity(turns);
    for i in 0..WARMUP + turns {
        let text = format!("ping {i}");
        let t = Instant::now();
        let out = nodes.node(0)?.say(&conv, &text).await?;
        let turn_id = str_field(&out, "turn_id")?;
        let remote = async {
            wait_turn_end(&mut sse, &turn_id).await?;
            anyhow::Ok(Instant::now())
        };
        let local = async {
            if let Some(h) = home.as_mut() {
                wait_turn_end(h, &turn_id).await?;
            }
            anyhow::Ok(Instant::now())
        };
        let (remote, local) = tokio::join!(remote, local);
        let (remote, local) = (remote?, local?);
        if i >= WARMUP {
            totals.push(remote - t);
            later.push(remote.saturating_duration_since(local));
        }
    }
    Ok((Samples::new(totals), home.map(|_| Samples::new(later))))
}

/// The fake agent's own time per turn, driven over ACP without tether.
async fn agent_alone(turns: usize) -> Result<Duration> {
    let home = Home::new()?;
    let mut agent = AcpAgent::spawn(
        &bin_path("fake-agent"),
        &home.path().join("state"),
        &home.path().join("work"),
    )
    .await?;
    agent.new_session().await?;
    let mut times = Vec::with_capacity(turns);
    for i in 0..turns + WARMUP {
        let d = agent.prompt(&format!("ping {i}")).await?;
        if i >= WARMUP {
            times.push(d);
        }
    }
    Ok(Samples::new(times).p50())
}

/// Whether a message sent to node 1 for a conversation node 0 runs went to node 0 (node
/// 1's pool gains no live session) rather than running on node 1.
async fn routed(nodes: &Nodes) -> Result<bool> {
    let live = async |i: usize| -> Result<u64> {
        let pool = nodes.node(i)?.get("/api/v1/pool").await?;
        pool["live"]
            .as_u64()
            .with_context(|| format!("no live count in {pool}"))
    };
    let conv = nodes.node(0)?.new_conversation(None).await?;
    let mut sse = nodes.node(0)?.events(&conv).await?;
    turn_via(nodes.node(0)?, &conv, &mut sse, "owner first").await?;
    let before = live(1).await?;
    turn_via(nodes.node(1)?, &conv, &mut sse, "then via another node").await?;
    Ok(live(1).await? == before)
}

/// Reply times of messages sent to the owner and to another node, alternating.
async fn cross_node(nodes: &Nodes, n: usize) -> Result<(Samples, Samples)> {
    let conv = nodes.node(0)?.new_conversation(None).await?;
    let mut sse = nodes.node(0)?.events(&conv).await?;
    turn_via(nodes.node(0)?, &conv, &mut sse, "claim").await?;
    let (mut local, mut cross) = (Vec::new(), Vec::new());
    for i in 0..n * 2 {
        let (to, out) = if i % 2 == 0 {
            (nodes.node(0)?, &mut local)
        } else {
            // The two other nodes in turn.
            (nodes.node(1 + (i / 2) % 2)?, &mut cross)
        };
        let t = Instant::now();
        let reply = to.say(&conv, &format!("m {i}")).await?;
        out.push(t.elapsed());
        wait_turn_end(&mut sse, &str_field(&reply, "turn_id")?).await?;
    }
    Ok((Samples::new(local), Samples::new(cross)))
}

/// Failovers: a conversation answered on node 0, node 0 SIGKILLed, then messages to
/// node 1 until one ends in a completed turn; node 0 restarted before the next.
async fn failovers(nodes: &mut Nodes, n: usize) -> Result<Samples> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let conv = nodes.node(0)?.new_conversation(None).await?;
        let mut sse = nodes.node(1)?.events(&conv).await?;
        turn_via(nodes.node(0)?, &conv, &mut sse, "before the failover").await?;
        nodes.kill9(0).await?;
        let t0 = Instant::now();
        loop {
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("failover {i}: no answer within 120 s");
            }
            let answered = turn_via(nodes.node(1)?, &conv, &mut sse, "after").await;
            match answered {
                Ok(()) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "not answered yet");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // A stream on a node that gave up on the turn: open a fresh one.
                    sse = nodes.node(1)?.events(&conv).await?;
                }
            }
        }
        times.push(t0.elapsed());
        nodes.relaunch(0).await?;
    }
    Ok(Samples::new(times))
}

pub async fn run(c: Counts) -> Result<Vec<Row>> {
    let agent = agent_alone(c.turns).await?;
    let mut rates = Vec::new();
    let mut shares = Vec::new();
    let mut three = None;
    let mut tail_delay = None;
    let mut pg_one_node = None;
    for (name, n, pg) in [
        ("SQLite", 1, false),
        ("PostgreSQL, 1 node", 1, true),
        ("PostgreSQL, 3 nodes", 3, true),
    ] {
        eprintln!("tether-bench: cluster: {name} ...");
        let nodes = Nodes::start(n, pg).await?;
        let (times, later) = turn_times(&nodes, c.turns).await?;
        if later.is_some() {
            tail_delay = later;
        }
        let (rate, done) = turns_per_sec(&nodes, &c).await?;
        let share = times.minus(agent);
        if pg && n == 1 {
            pg_one_node = Some(share.p50());
        }
        shares.push(format!(
            "{name}: p50 {} · p99 {}",
            ms(share.p50()),
            ms(share.p99())
        ));
        rates.push(format!("{name}: {} turns/s ({done} turns)", count(rate)));
        if n == 3 {
            three = Some(nodes);
        } else {
            nodes.stop().await?;
        }
    }
    let mut rows = vec![
        Row::new(
            "C1",
            format!(
                "cluster throughput: {} conversations at once, {} turns each (3 nodes: \
                 conversations spread over the nodes, each one's SSE on another node)",
                c.conversations, c.per_conversation
            ),
            rates.join("\n"),
            "— (side by side)",
            Verdict::Info,
        ),
        Row::new(
            "C2",
            "cluster: tether's share of a turn (HTTP in → `turn_completed` over SSE; 3 nodes: the SSE on another node than the message)",
            format!(
                "{}\n(agent alone over ACP p50 {}; {} turns each)",
                shares.join("\n"),
                ms(agent),
                c.turns
            ),
            "PostgreSQL, 1 node: p50 ≤ 3 ms (issue 33 item 2; the others side by side)",
            pg_one_node.map_or(Verdict::Info, |p50| {
                Verdict::of(p50 <= Duration::from_millis(3))
            }),
        ),
    ];
    if let Some(later) = &tail_delay {
        rows.push(Row::new(
            "C5",
            "cluster: how much later a turn's end reaches an SSE stream on another node than one on the node that ran it (the tail: NOTIFY, then a read of the store)",
            format!(
                "p50 {} · p99 {} ({} turns)",
                ms(later.p50()),
                ms(later.p99()),
                later.len()
            ),
            "—",
            Verdict::Info,
        ));
    }
    let Some(mut nodes) = three else {
        return Ok(rows);
    };
    if nodes.len() < 3 {
        return Ok(rows);
    }
    let is_routed = routed(&nodes).await?;
    let not_cross = "not a cross-node figure on this build: a message sent to a non-owner ran there (needs ownership and routing)";
    let not_failover = "not a failover on this build: the other node ran the message at once, without taking the conversation over (needs ownership and routing)";
    let (local, cross) = cross_node(&nodes, c.cross).await?;
    let over = cross.minus(local.p50());
    rows.push(Row::new(
        "C3",
        "cluster: a message's reply through a node that does not own the conversation, over the owner's reply",
        format!(
            "over: p50 {} · p99 {}\n(owner p50 {} / p99 {}; other node p50 {} / p99 {}; {} each{})",
            ms(over.p50()),
            ms(over.p99()),
            ms(local.p50()),
            ms(local.p99()),
            ms(cross.p50()),
            ms(cross.p99()),
            local.len(),
            if is_routed { String::new() } else { format!("; {not_cross}") }
        ),
        "p99 ≤ 20 ms over",
        if is_routed {
            Verdict::of(over.p99() <= Duration::from_millis(20))
        } else {
            Verdict::Info
        },
    ));
    let fail = failovers(&mut nodes, c.failovers).await?;
    rows.push(Row::new(
        "C4",
        "cluster failover: SIGKILL of a conversation's node → first message answered on another node (default lease 10 s)",
        format!(
            "p50 {} · p99 {} ({} failover(s){})",
            secs(fail.p50()),
            secs(fail.p99()),
            fail.len(),
            if is_routed { String::new() } else { format!("; {not_failover}") }
        ),
        "p99 ≤ 10 s",
        if is_routed {
            Verdict::of(fail.p99() <= Duration::from_secs(10))
        } else {
            Verdict::Info
        },
    ));
    nodes.stop().await?;
    Ok(rows)
}
