//! Figure 3: streamed deltas persisted per second.
//!
//! End to end: S conversations run `stream K 0` on the fake agent at once; every
//! `message_delta` goes agent → ACP driver → session actor → store → bus → SSE. The bench
//! counts the deltas it receives over SSE (the stream is read from the store, so each one
//! was persisted) and divides by the wall time; it also reads the daemon's CPU time to
//! give tether's cost per event. Store only: `Store::append_events` of tether-store's
//! public API, one event per call and in batches, on a fresh database.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use tether_proto::{ConversationKind, EventPayload, NewSessionReason};
use tether_store::{NewSession, Store};
use tether_testkit::SseStream;

use crate::daemon::{BenchDaemon, Home, Spec, TURN_LIMIT, cpu_time_of, str_field};
use crate::report::{Row, Verdict};
use crate::stats::{Samples, count, secs, us};

const POOL_UNLIMITED: &str = "[pool]\nmax_live = 0\nmax_live_per_owner = 0\nidle_ttl_secs = 0\n";
/// Events per call in the batched store figure.
const BATCH: usize = 64;
/// Point reads timed for the round-trip figure.
const POINT_READS: usize = 5_000;

pub async fn run(events: usize, streams: usize, store_events: usize) -> Result<Vec<Row>> {
    let mut rows = if events > 0 {
        end_to_end(events, streams).await?
    } else {
        Vec::new()
    };
    rows.extend(store_only(store_events).await?);
    Ok(rows)
}

async fn end_to_end(events: usize, streams: usize) -> Result<Vec<Row>> {
    let home = Home::new()?;
    let spec = Spec {
        extra_config: POOL_UNLIMITED.to_string(),
        ..Spec::default()
    };
    let daemon = BenchDaemon::start(home.path(), &spec).await?;
    let d = &daemon;
    let streams = streams.max(1);
    let per = events.div_ceil(streams);
    let mut convs = Vec::new();
    for _ in 0..streams {
        let id = d.new_conversation(None).await?;
        let mut sse = d.events(&id).await?;
        d.turn(&id, &mut sse, "hello").await?;
        convs.push((id, sse));
    }
    let cpu0 = d.cpu_time()?;
    let t0 = Instant::now();
    let counts: Vec<usize> = futures::stream::iter(convs)
        .map(|(id, mut sse)| async move {
            let out = d.say(&id, &format!("stream {per} 0")).await?;
            let turn_id = str_field(&out, "turn_id")?;
            count_deltas(&mut sse, &turn_id).await
        })
        .buffer_unordered(streams)
        .try_collect()
        .await?;
    let wall = t0.elapsed();
    let cpu = d.cpu_time()?.saturating_sub(cpu0);
    daemon.stop().await?;
    let deltas: usize = counts.iter().sum();
    // Each turn streams `per` chunks and one closing line.
    if deltas < streams * per {
        bail!(
            "only {deltas} deltas arrived for {} streamed",
            streams * per
        );
    }
    let rate = deltas as f64 / wall.as_secs_f64();
    let cpu_per_event = cpu.as_secs_f64() * 1e6 / deltas as f64;
    Ok(vec![Row::new(
        "3",
        "event ingest, end to end: streamed deltas persisted per second (fake agent `stream K 0` → ACP → store → SSE)",
        format!(
            "{} events/s ({} deltas from {streams} concurrent streams in {}); tether used {:.0} µs CPU per event (≈ {} events/s per core)",
            count(rate),
            count(deltas as f64),
            secs(wall),
            cpu_per_event,
            count(1e6 / cpu_per_event.max(0.001)),
        ),
        "≥ 50 000 events/s",
        Verdict::of(rate >= 50_000.0),
    )])
}

/// Reads `sse` until `turn_id` completes; the number of its `message_delta` events.
async fn count_deltas(sse: &mut SseStream, turn_id: &str) -> Result<usize> {
    let read = async {
        let mut n = 0;
        while let Some(ev) = sse.next().await {
            match ev.event.as_deref() {
                Some("message_delta") => n += 1,
                Some("turn_completed") if ev.json()["turn_id"] == turn_id => return Ok(n),
                Some("turn_failed" | "turn_cancelled" | "turn_interrupted")
                    if ev.json()["turn_id"] == turn_id =>
                {
                    bail!("streaming turn ended badly: {}", ev.data)
                }
                _ => {}
            }
        }
        bail!("the event stream ended early")
    };
    tokio::time::timeout(TURN_LIMIT, read)
        .await
        .map_err(|_| anyhow!("streaming turn did not end within {TURN_LIMIT:?}"))?
}

async fn store_only(events: usize) -> Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path()).await?;
    let conv = uuid::Uuid::new_v4().simple().to_string();
    store
        .create_conversation(
            &conv,
            ConversationKind::Chat,
            "bench",
            "fake",
            None,
            "/tmp",
            None,
        )
        .await?;
    let session = NewSession {
        id: uuid::Uuid::new_v4().simple().to_string(),
        conversation_id: conv.clone(),
        agent: "fake".into(),
        model: None,
        cwd: "/tmp".into(),
    };
    store
        .start_session(&session, NewSessionReason::Unbound, None)
        .await?;
    let delta = |i: usize| EventPayload::MessageDelta {
        text: format!("chunk {i} "),
    };

    let single_n = events / 2;
    let t0 = Instant::now();
    for i in 0..single_n {
        store
            .append_events(&session.id, Some("turn"), &[delta(i)])
            .await?;
    }
    let single = rate(single_n, t0.elapsed());

    let t0 = Instant::now();
    let all: Vec<EventPayload> = (0..events).map(delta).collect();
    for chunk in all.chunks(BATCH) {
        store
            .append_events(&session.id, Some("turn"), chunk)
            .await?;
    }
    let batched = rate(events, t0.elapsed());
    // One store round trip: a point read (one statement on sqlx's SQLite worker thread).
    let mut reads = Vec::with_capacity(POINT_READS);
    let cpu0 = cpu_time_of(std::process::id())?;
    for _ in 0..POINT_READS {
        let t = Instant::now();
        store.get_conversation(&conv).await?;
        reads.push(t.elapsed());
    }
    let read_cpu = cpu_time_of(std::process::id())?.saturating_sub(cpu0) / POINT_READS as u32;
    let reads = Samples::new(reads);
    store.close().await;
    Ok(vec![Row::new(
        "3",
        "event ingest, store only (`Store::append_events`, SQLite WAL)",
        format!(
            "{} events/s one event per call; {} events/s in calls of {BATCH}\n(one point read, i.e. one round trip to sqlx's SQLite thread: p50 {} / p99 {}, {} CPU)",
            count(single),
            count(batched),
            us(reads.p50()),
            us(reads.p99()),
            us(read_cpu),
        ),
        "(ceiling for the end-to-end figure)",
        Verdict::Info,
    )])
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}
