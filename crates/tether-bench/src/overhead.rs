//! Figure 1: tether's own share of a turn. A message goes in through the HTTP API and the
//! bench waits for `turn_completed` on the conversation's SSE stream, with the fake agent
//! answering at once. The agent's own time is measured by driving the same fake agent
//! directly over ACP (no tether), interleaved turn by turn with the tether turns so both
//! see the same machine load; tether's share = total − the agent's median. Figure 1b runs
//! the same as a member with a personal token, side by side (issue 28): the two series
//! in blocks taken in turn, so their ratio does not move with the machine's speed.
//!
//! Per step (issue 33 item 2), from the bench's side of each timed turn: the HTTP answer
//! to the message (the turn stored and handed to its session), `turn_started` read on the
//! stream, the agent's first event read, its last, and `turn_completed` read; each step's
//! median is printed, with the context switches of tether's threads per turn (most of a
//! turn's CPU on a VM: every store statement is a hand-off to sqlx's SQLite thread and
//! back).

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use tether_testkit::bin_path;

use crate::acp_client::AcpAgent;
use crate::daemon::{BenchDaemon, Home, Spec, TURN_LIMIT, str_field};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, ms};
use tether_testkit::SseStream;

/// A new session every this many turns keeps the fake agent's reply (which lists every
/// earlier message of the session) short, for tether and for the direct agent alike.
const ROTATE: usize = 100;
const WARMUP: usize = 20;

pub async fn run(turns: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let mut d = BenchDaemon::start(home.path(), &Spec::default()).await?;
    let direct_state = home.path().join("direct-state");
    let mut agent = AcpAgent::spawn(
        &bin_path("fake-agent"),
        &direct_state,
        &home.path().join("work"),
    )
    .await?;
    // The same with authorisation doing all its work (issue 28): a member's personal token
    // (found by its hash on every request) on their own private conversation, the two
    // series turn by turn in turn (see `timed_pair`).
    let token = d
        .post(
            "/api/v1/people",
            serde_json::json!({"name": "bench member", "role": "member"}),
        )
        .await?;
    let person = token["id"].as_str().unwrap_or_default().to_owned();
    let made = d
        .post(
            "/api/v1/tokens",
            serde_json::json!({"name": "bench", "person_id": person}),
        )
        .await?;
    let secret = made["secret"].as_str().unwrap_or_default().to_owned();
    let (member, owner) = timed_pair(&mut d, &mut agent, turns, &secret).await?;
    d.stop().await?;

    let (p50, p99) = (owner.share.p50(), owner.share.p99());
    let met = p50 <= Duration::from_millis(1) && p99 <= Duration::from_millis(5);
    let ratio = member.share.p50().as_secs_f64() / p50.as_secs_f64().max(1e-9);
    Ok(vec![
        Row::new(
            "1",
            "overhead: tether's share of a turn (HTTP message in → `turn_completed` out over SSE, fake agent answering at once)",
            owner.describe(turns),
            "p50 ≤ 1 ms, p99 ≤ 5 ms",
            Verdict::of(met),
        )
        .was("p50 2.51 ms · p99 7.05 ms"),
        Row::new(
            "1b",
            "the same as a member with a personal token (hash look-up per request, role and visibility checked on every call) instead of the bootstrap owner token",
            format!(
                "{}\n(member p50 / owner p50 = {ratio:.2})",
                member.describe(turns)
            ),
            "no worse than the owner's (ratio ≤ 1.1)",
            Verdict::of(ratio <= 1.1),
        ),
    ])
}

/// One series of turns: tether's share per turn, the totals, the agent alone, tether's CPU.
struct Timed {
    share: Samples,
    total: Samples,
    direct: Samples,
    cpu: Duration,
    /// Context switches of tether's threads over the timed turns.
    switches: u64,
    steps: Vec<Steps>,
}

/// When each step of one turn was seen, from the message's `POST` on.
#[derive(Clone, Copy)]
struct Steps {
    /// The `POST`'s answer.
    accepted: Duration,
    /// `turn_started` read on the stream.
    started: Duration,
    /// The agent's first and last event read.
    first: Duration,
    last: Duration,
    /// `turn_completed` read.
    completed: Duration,
}

impl Timed {
    /// The median of one step's durations.
    fn step(&self, f: impl Fn(&Steps) -> Duration) -> Duration {
        Samples::new(self.steps.iter().map(f).collect()).p50()
    }
}

impl Timed {
    fn describe(&self, turns: usize) -> String {
        format!(
            "p50 {} · p99 {}\n(total p50 {} / p99 {}; the agent alone over ACP p50 {} / p99 {}; tether CPU {} per turn; {} context switches of tether's threads per turn; {} turns)\nsteps, medians from the `POST`: answered {} · `turn_started` read {} · the agent's first event read {} (+{} after `turn_started`, the agent's own time included) · its last {} · `turn_completed` read {} (+{} after the agent's last event)",
            ms(self.share.p50()),
            ms(self.share.p99()),
            ms(self.total.p50()),
            ms(self.total.p99()),
            ms(self.direct.p50()),
            ms(self.direct.p99()),
            ms(self.cpu / turns.max(1) as u32),
            self.switches / turns.max(1) as u64,
            self.total.len(),
            ms(self.step(|s| s.accepted)),
            ms(self.step(|s| s.started)),
            ms(self.step(|s| s.first)),
            ms(self.step(|s| s.first.saturating_sub(s.started))),
            ms(self.step(|s| s.last)),
            ms(self.step(|s| s.completed)),
            ms(self.step(|s| s.completed.saturating_sub(s.last))),
        )
    }
}

/// One series being timed: its conversation and stream, and what its turns took.
struct Series {
    conv: String,
    sse: SseStream,
    totals: Vec<Duration>,
    steps: Vec<Steps>,
    cpu: Duration,
    switches: u64,
}

impl Series {
    /// A new conversation of whoever `d` acts as, warmed up.
    async fn open(d: &BenchDaemon) -> Result<Series> {
        let conv = d.new_conversation(None).await?;
        let mut sse = d.events(&conv).await?;
        for i in 0..WARMUP {
            d.turn(&conv, &mut sse, &format!("warm-up {i}")).await?;
        }
        Ok(Series {
            conv,
            sse,
            totals: Vec::new(),
            steps: Vec::new(),
            cpu: Duration::ZERO,
            switches: 0,
        })
    }

    /// `n` timed turns, each after the same prompt to the agent alone, with the daemon's
    /// CPU and context switches over them (read around the block: read around each turn,
    /// `/proc` itself slowed the turns); first a new session (untimed: a process start)
    /// after the first block.
    async fn block(
        &mut self,
        d: &BenchDaemon,
        agent: &mut AcpAgent,
        direct: &mut Vec<Duration>,
        n: usize,
    ) -> Result<()> {
        if !self.totals.is_empty() {
            d.say(&self.conv, "/new").await?;
            d.turn(&self.conv, &mut self.sse, "first of a new session")
                .await?;
        }
        agent.new_session().await?;
        agent.prompt("first of a new session").await?;
        let (cpu0, switches0) = (d.cpu_time()?, d.context_switches()?);
        for k in 0..n {
            let text = format!("ping {k}");
            direct.push(agent.prompt(&text).await?);
            let t = stepped(d, &self.conv, &mut self.sse, &text).await?;
            self.totals.push(t.completed);
            self.steps.push(t);
        }
        self.cpu += d.cpu_time()?.saturating_sub(cpu0);
        self.switches += d.context_switches()?.saturating_sub(switches0);
        Ok(())
    }

    fn timed(self, direct: &Samples) -> Timed {
        let total = Samples::new(self.totals);
        Timed {
            share: total.minus(direct.p50()),
            total,
            direct: direct.clone(),
            cpu: self.cpu,
            switches: self.switches,
            steps: self.steps,
        }
    }
}

/// `turns` timed turns of the member (token `secret`) and of the owner, each on a new
/// conversation, in blocks of [`ROTATE`] turns taken in turn (which goes first
/// alternates), each turn after the same prompt to the agent alone: the two series see
/// the machine alike. Run one after the other, a VM whose speed drifted between them put
/// the ratio anywhere from 0.91 to 1.24 in three runs of one build; taken turn by turn,
/// two conversations at work at once slowed both (and the agent alone) by about 0.4 ms.
async fn timed_pair(
    d: &mut BenchDaemon,
    agent: &mut AcpAgent,
    turns: usize,
    secret: &str,
) -> Result<(Timed, Timed)> {
    d.act_as(secret);
    let mut member = Series::open(d).await?;
    d.act_as_owner();
    let mut owner = Series::open(d).await?;
    agent.new_session().await?;
    for i in 0..WARMUP {
        agent.prompt(&format!("warm-up {i}")).await?;
    }
    let mut direct = Vec::with_capacity(2 * turns);
    for block in 0..turns.div_ceil(ROTATE) {
        let n = ROTATE.min(turns - block * ROTATE);
        for member_now in [block.is_multiple_of(2), !block.is_multiple_of(2)] {
            let series = if member_now {
                d.act_as(secret);
                &mut member
            } else {
                d.act_as_owner();
                &mut owner
            };
            series.block(d, agent, &mut direct, n).await?;
        }
    }
    d.act_as_owner();
    let direct = Samples::new(direct);
    Ok((member.timed(&direct), owner.timed(&direct)))
}

/// One turn as [`BenchDaemon::turn`] runs it, each step's time noted.
async fn stepped(d: &BenchDaemon, conv: &str, sse: &mut SseStream, text: &str) -> Result<Steps> {
    let t0 = Instant::now();
    let out = d.say(conv, text).await?;
    let accepted = t0.elapsed();
    let turn_id = str_field(&out, "turn_id")?;
    let (mut started, mut first, mut last) = (None, None, None);
    loop {
        let ev = tokio::time::timeout(TURN_LIMIT, sse.next())
            .await
            .map_err(|_| anyhow!("turn {turn_id} did not end within {TURN_LIMIT:?}"))?
            .ok_or_else(|| anyhow!("the event stream ended before turn {turn_id} did"))?;
        let at = t0.elapsed();
        let env = ev.json();
        if env["turn_id"] != turn_id.as_str() {
            continue;
        }
        match ev.event.as_deref().unwrap_or("") {
            "turn_started" => started = Some(at),
            "turn_completed" => {
                let started = started.unwrap_or(accepted);
                return Ok(Steps {
                    accepted,
                    started,
                    first: first.unwrap_or(started),
                    last: last.unwrap_or(started),
                    completed: at,
                });
            }
            kind @ ("turn_failed" | "turn_cancelled" | "turn_interrupted") => {
                bail!("turn {turn_id} ended with {kind}: {}", env["payload"])
            }
            _ => {
                first.get_or_insert(at);
                last = Some(at);
            }
        }
    }
}
