//! Figure 3: streamed deltas persisted per second.
//!
//! End to end: S conversations (each with a live session and one SSE subscriber) run
//! `rate K 0` on the fake agent at once (K chunks without a pause: `stream K 0` paces
//! itself at about one chunk per millisecond, which would cap 100 streams at 100 000/s);
//! every `message_delta` goes agent → ACP driver → session actor → store → feed → SSE.
//! The bench counts the deltas each subscriber receives, then (daemon stopped) counts the
//! persisted ones in the database; both must equal the streamed total. Rate = delivered
//! deltas / wall time from the first message sent to the last turn's end; the daemon's CPU
//! time gives tether's cost per event. Store only: `Events::append_events` of tether-store's
//! public API, one event per call and in batches, on a fresh database. Both on SQLite and
//! on PostgreSQL (a fresh database on `TETHER_TEST_DATABASE_URL`'s server, or on a private
//! server the bench starts, as the cluster figures do).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};
use tether_proto::{
    ConversationId, ConversationKind, EventPayload, NewSessionReason, SessionId, TurnId,
};
use tether_store::{NewSession, Store};
use tether_testkit::postgres::TestDatabase;

use crate::daemon::{BenchDaemon, Home, Spec, TURN_LIMIT, cpu_time_of};
use crate::report::{Row, Verdict};
use crate::sse_count::read_events;
use crate::stats::{Samples, count, secs, us};

const POOL_UNLIMITED: &str = "[pool]\nmax_live = 0\nmax_live_per_owner = 0\nidle_ttl_secs = 0\n";
/// Events per call in the batched store figure.
const BATCH: usize = 64;
/// Point reads timed for the round-trip figure.
const POINT_READS: usize = 5_000;

pub async fn run(events: usize, streams: usize, store_events: usize) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut whole = None;
    if events > 0 {
        let (row, rate) = end_to_end(events, streams, None).await?;
        rows.push(row);
        whole = Some(rate);
    }
    let dir = tempfile::tempdir()?;
    let (row, ceiling) = on_a_worker(Store::open(dir.path()).await?, store_events, false).await?;
    rows.push(row);
    if let Some(whole) = whole {
        rows.push(ratio(whole, ceiling));
    }
    // The same on PostgreSQL, one node.
    let db = tokio::time::timeout(Duration::from_secs(180), TestDatabase::create())
        .await
        .map_err(|_| anyhow!("timed out creating a PostgreSQL database"))??;
    if events > 0 {
        rows.push(end_to_end(events, streams, Some(&db.url)).await?.0);
    }
    let other = tokio::time::timeout(Duration::from_secs(180), TestDatabase::create())
        .await
        .map_err(|_| anyhow!("timed out creating a PostgreSQL database"))??;
    let store = Store::connect(&other.url).await?;
    rows.push(on_a_worker(store, store_events, true).await?.0);
    Ok(rows)
}

/// End to end over the store's own ceiling (both SQLite, this run): how close the whole
/// path comes to what the store takes in calls of 64 (issue 33 item 1).
fn ratio(whole: f64, ceiling: f64) -> Row {
    let r = whole / ceiling.max(1.0);
    Row::new(
        "3",
        "event ingest, end to end over store only (SQLite, the two rows above)",
        format!("{r:.2}× ({} / {} events/s)", count(whole), count(ceiling)),
        "≥ 0.8× of the store's ceiling",
        Verdict::of(r >= 0.8),
    )
}

/// `postgres`: the database's URL (on SQLite when `None`).
/// The row and its rate (events/s).
async fn end_to_end(events: usize, streams: usize, postgres: Option<&str>) -> Result<(Row, f64)> {
    let home = Home::new()?;
    let store = postgres
        .map(|url| format!("[store]\nurl = {url:?}\n"))
        .unwrap_or_default();
    let spec = Spec {
        extra_config: format!("{POOL_UNLIMITED}{store}"),
        ..Spec::default()
    };
    let daemon = BenchDaemon::start(home.path(), &spec).await?;
    let d = &daemon;
    let streams = streams.max(1);
    let per = events.div_ceil(streams);
    // Each conversation gets a live session (one warm-up turn) and one subscriber that
    // resumes after that turn.
    let mut convs = Vec::new();
    for _ in 0..streams {
        let id = d.new_conversation(None).await?;
        let mut sse = d.events(&id).await?;
        let warm = d.turn(&id, &mut sse, "hello").await?;
        let after = warm["id"]
            .as_i64()
            .ok_or_else(|| anyhow!("no id in {warm}"))?;
        let resp = d
            .authed(d.client.get(d.url(&format!(
                "/api/v1/conversations/{id}/events?after_id={after}"
            ))))
            .send()
            .await?;
        if resp.status().as_u16() != 200 {
            bail!("SSE: HTTP {}", resp.status());
        }
        convs.push((id, resp));
    }
    let figures0 = d.get("/api/v1/runtime").await?;
    let cpu0 = d.cpu_time()?;
    let t0 = Instant::now();
    let counts: Vec<usize> = futures::stream::iter(convs)
        .map(|(id, resp)| async move {
            let reader = tokio::spawn(count_deltas(resp));
            d.say(&id, &format!("rate {per} 0")).await?;
            tokio::time::timeout(TURN_LIMIT, reader)
                .await
                .map_err(|_| anyhow!("streaming turn did not end within {TURN_LIMIT:?}"))??
        })
        .buffer_unordered(streams)
        .try_collect()
        .await?;
    let wall = t0.elapsed();
    let cpu = d.cpu_time()?.saturating_sub(cpu0);
    let figures1 = d.get("/api/v1/runtime").await?;
    let moved = |k: &str| {
        figures1[k].as_u64().unwrap_or(0) as f64 - figures0[k].as_u64().unwrap_or(0) as f64
    };
    let (batches, commits) = (moved("streamed_batches"), moved("event_commits"));
    daemon.stop().await?;
    let delivered: usize = counts.iter().sum();
    let persisted = persisted_deltas(&home.path().join("data/tether.db"), postgres).await?;
    // Each turn streams `per` chunks and one closing line.
    let streamed = streams * (per + 1);
    if delivered != streamed || persisted != streamed {
        bail!("{streamed} deltas streamed, {delivered} delivered over SSE, {persisted} persisted");
    }
    let rate = delivered as f64 / wall.as_secs_f64();
    let cpu_per_event = cpu.as_secs_f64() * 1e6 / delivered as f64;
    let (on, goal, verdict, was) = match postgres {
        None => (
            "",
            "≥ 100 000 events/s",
            Verdict::of(rate >= 100_000.0),
            "39 737 events/s (27.9 µs CPU per event)",
        ),
        // No goal of its own: the figure beside SQLite's (issue 33 item 1).
        Some(_) => (
            ", on PostgreSQL (one node, same machine)",
            "(beside SQLite's)",
            Verdict::Info,
            "—",
        ),
    };
    let row = Row::new(
        "3",
        format!(
            "event ingest, end to end{on}: {streams} concurrent streams, each delta persisted and delivered over SSE to a subscriber of its conversation (fake agent `rate N 0` → ACP → store → SSE)"
        ),
        format!(
            "{} events/s ({} deltas in {}, every one persisted and delivered; {} store batches in {} group commits); tether used {:.1} µs CPU per event (≈ {} events/s per core)",
            count(rate),
            count(delivered as f64),
            secs(wall),
            count(batches),
            count(commits),
            cpu_per_event,
            count(1e6 / cpu_per_event.max(0.001)),
        ),
        goal,
        verdict,
    )
    .was(was);
    Ok((row, rate))
}

/// Reads one subscription until its turn completes; the number of `message_delta`s.
async fn count_deltas(resp: reqwest::Response) -> Result<usize> {
    let mut n = 0;
    let mut ended = None;
    read_events(resp, |ev, _| match ev.kind {
        "message_delta" => {
            n += 1;
            true
        }
        "turn_completed" | "turn_failed" | "turn_cancelled" | "turn_interrupted" => {
            ended = Some(ev.kind.to_owned());
            false
        }
        _ => true,
    })
    .await?;
    match ended.as_deref() {
        Some("turn_completed") => Ok(n),
        Some(other) => bail!("streaming turn ended with {other}"),
        None => bail!("the event stream ended early"),
    }
}

/// `message_delta` rows of the `rate` turns in the (stopped) daemon's database: the
/// SQLite file `db`, or the PostgreSQL database at `postgres`.
async fn persisted_deltas(db: &Path, postgres: Option<&str>) -> Result<usize> {
    const COUNT: &str = "SELECT count(*) FROM events e JOIN turns t ON t.id = e.turn_id \
         WHERE e.kind = 'message_delta' AND t.input LIKE 'rate %'";
    let n: i64 = match postgres {
        None => {
            let opts = SqliteConnectOptions::new().filename(db).read_only(true);
            let mut conn = opts.connect().await?;
            let n = sqlx::query_scalar(COUNT).fetch_one(&mut conn).await?;
            conn.close().await?;
            n
        }
        Some(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await?;
            let n = sqlx::query_scalar(COUNT).fetch_one(&mut conn).await?;
            conn.close().await?;
            n
        }
    };
    Ok(usize::try_from(n).unwrap_or(0))
}

/// [`store_only`] in a task of the runtime, as the daemon calls the store (its callers
/// are tasks): called from the bench's main thread instead, each call would add two
/// wake-ups of another thread (measured: ~168 000 instead of ~200 000–220 000 events/s in calls of 64).
async fn on_a_worker(store: Store, events: usize, postgres: bool) -> Result<(Row, f64)> {
    tokio::spawn(store_only(store, events, postgres)).await?
}

/// `postgres`: the store is PostgreSQL's (SQLite's when `false`). The row and the rate
/// in calls of 64 (events/s).
async fn store_only(store: Store, events: usize, postgres: bool) -> Result<(Row, f64)> {
    let conv = ConversationId::from(uuid::Uuid::new_v4().simple().to_string());
    store
        .conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &conv,
            kind: ConversationKind::Chat,
            title: "bench",
            agent: "fake",
            model: None,
            cwd: "/tmp",
            parent_conversation_id: None,
            owner_id: None,
            visibility: tether_proto::Visibility::Private,
        })
        .await?;
    let session = NewSession {
        id: SessionId::from(uuid::Uuid::new_v4().simple().to_string()),
        conversation_id: conv.clone(),
        agent: "fake".into(),
        model: None,
        cwd: "/tmp".into(),
    };
    store
        .conversations()
        .start_session(&session, NewSessionReason::Unbound, None)
        .await?;
    let turn = TurnId::from("turn");
    let delta = |i: usize| EventPayload::MessageDelta {
        text: format!("chunk {i} "),
    };

    let single_n = events / 2;
    let t0 = Instant::now();
    for i in 0..single_n {
        store
            .events()
            .append_events(&session.id, Some(&turn), &[delta(i)])
            .await?;
    }
    let single = rate(single_n, t0.elapsed());

    let t0 = Instant::now();
    let all: Vec<EventPayload> = (0..events).map(delta).collect();
    for chunk in all.chunks(BATCH) {
        store
            .events()
            .append_events(&session.id, Some(&turn), chunk)
            .await?;
    }
    let batched = rate(events, t0.elapsed());
    // One store round trip: a point read (one statement on sqlx's SQLite worker thread).
    let mut reads = Vec::with_capacity(POINT_READS);
    let cpu0 = cpu_time_of(std::process::id())?;
    for _ in 0..POINT_READS {
        let t = Instant::now();
        store.conversations().get_conversation(&conv).await?;
        reads.push(t.elapsed());
    }
    let read_cpu = cpu_time_of(std::process::id())?.saturating_sub(cpu0) / POINT_READS as u32;
    let reads = Samples::new(reads);
    store.close().await;
    let (what, trip, was) = match postgres {
        false => (
            "SQLite WAL",
            "one round trip to sqlx's SQLite thread",
            "7 328 events/s one per call; 60 465 events/s in calls of 64",
        ),
        true => (
            "PostgreSQL, one node on the same machine",
            "one round trip to the server",
            "—",
        ),
    };
    let row = Row::new(
        "3",
        format!("event ingest, store only (`Store::append_events`, {what})"),
        format!(
            "{} events/s one event per call; {} events/s in calls of {BATCH}\n(one point read, i.e. {trip}: p50 {} / p99 {}, {} CPU)",
            count(single),
            count(batched),
            us(reads.p50()),
            us(reads.p99()),
            us(read_cpu),
        ),
        match postgres {
            false => "≥ 250 000 events/s in calls of 64 (the ceiling for the end-to-end figure)",
            true => "(beside SQLite's)",
        },
        match postgres {
            false => Verdict::of(batched >= 250_000.0),
            true => Verdict::Info,
        },
    )
    .was(was);
    Ok((row, batched))
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}
