//! Figure 4: recovery. A store with C conversations (each with one session, two turns,
//! four history messages) and E events is generated fast — the schema by
//! `tether_store::Store::open` (its migrations), the rows by set-based SQL over a
//! recursive counter through sqlx — with the state a crash leaves: some sessions live,
//! their last turn running, some approvals and questions pending. Then `tether serve`
//! is started on it and timed from process start to the first `200` of
//! `/api/v1/health`; start-up runs recovery (turns → `interrupted`, approvals and
//! questions → `expired`, sessions → dormant, one notice per conversation). An empty
//! store's start and a second start on the big store (nothing left to recover) are
//! timed for comparison.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};
use tether_proto::{Decision, EventPayload, NewSessionReason};

use crate::daemon::{BenchDaemon, Home, Spec, write_config};
use crate::report::{Row, Verdict};
use crate::stats::{count, mb, ms, secs};

/// Conversations whose last turn was running when the "crash" happened (their sessions
/// were live; a tenth of them also had an approval and a question pending).
const OPEN_TURNS: usize = 200;

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
    let t_gen = Instant::now();
    let store = tether_store::Store::open(&data).await?;
    store.close().await;
    generate(&data.join("tether.db"), conversations, events).await?;
    let gen_time = t_gen.elapsed();
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
    )])
}

/// A 32-hex-digit id like tether's, spread like random ids, from `prefix` and `n`.
pub fn id(prefix: char, n: usize) -> String {
    let p = prefix as u64;
    let n = n as u64;
    format!(
        "{:08x}{:08x}{:016x}",
        (n * 2_654_435_761 + p) % 4_294_967_291,
        (n * 40_503 + p * 7) % 4_294_967_291,
        n * 256 + p
    )
}

/// The same id computed in SQL for counter `i`.
fn id_sql(prefix: char, i: &str) -> String {
    let p = prefix as u64;
    format!(
        "printf('%08x%08x%016x', ({i} * 2654435761 + {p}) % 4294967291, ({i} * 40503 + {}) % 4294967291, {i} * 256 + {p})",
        p * 7
    )
}

fn counter(n: usize) -> String {
    format!(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {}) ",
        n.saturating_sub(1)
    )
}

/// Fills the (migrated, empty) database at `path`.
async fn generate(path: &Path, conversations: usize, events: usize) -> Result<()> {
    let opts = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Off)
        .foreign_keys(false);
    let mut conn = opts.connect().await?;
    let c = conversations.max(1);
    let per = (events / c).max(4);
    let now = tether_store::now_ms();
    let cid = id_sql('c', "i");
    let sid = id_sql('s', "i");
    let t1 = id_sql('t', "i");
    let t2 = id_sql('u', "i");
    let open = OPEN_TURNS.min(c);
    let delta = json_template(&EventPayload::MessageDelta { text: "@".into() })?;
    let started = json_template(&EventPayload::TurnStarted { input: "@".into() })?;
    let completed = json_template(&EventPayload::TurnCompleted {
        stop_reason: Some("end_turn".into()),
        text: "@".into(),
    })?;
    let session_started = json_template(&EventPayload::SessionStarted {
        agent: "fake".into(),
        model: None,
        reason: NewSessionReason::Unbound,
    })?;
    let options = serde_json::to_string(&[Decision::Allow, Decision::AllowAlways, Decision::Deny])?;

    let mut tx = conn.begin().await?;
    let statements = [
        format!(
            "{} INSERT INTO conversations (id, kind, title, agent, model, cwd, archived, \
             bound_session_id, parent_conversation_id, next_session_reason, created_at, updated_at) \
             SELECT {cid}, 'chat', 'conversation ' || i, 'fake', NULL, '/work', 0, {sid}, NULL, NULL, \
             {now} - i, {now} - i FROM n",
            counter(c)
        ),
        format!(
            "{} INSERT INTO sessions (id, conversation_id, agent, model, cwd, status, external_id, \
             last_seq, created_at, updated_at) \
             SELECT {sid}, {cid}, 'fake', NULL, '/work', CASE WHEN i < {open} THEN 'live' ELSE 'dormant' END, \
             lower(hex(randomblob(16))), {per}, {now} - i, {now} - i FROM n",
            counter(c)
        ),
        format!(
            "{} INSERT INTO turns (id, session_id, conversation_id, input, status, result_text, \
             stop_reason, created_at, started_at, ended_at) \
             SELECT {t1}, {sid}, {cid}, 'first message ' || i, 'completed', 'reply ' || i, 'end_turn', \
             {now} - i, {now} - i, {now} - i FROM n \
             UNION ALL \
             SELECT {t2}, {sid}, {cid}, 'second message ' || i, \
             CASE WHEN i < {open} THEN 'running' ELSE 'completed' END, \
             CASE WHEN i < {open} THEN NULL ELSE 'reply two ' || i END, \
             CASE WHEN i < {open} THEN NULL ELSE 'end_turn' END, \
             {now} - i, {now} - i, CASE WHEN i < {open} THEN NULL ELSE {now} - i END FROM n",
            counter(c)
        ),
        format!(
            "{} INSERT INTO messages (conversation_id, role, text, session_id, turn_id, at) \
             SELECT {cid}, 'user', 'first message ' || i, {sid}, {t1}, {now} - i FROM n \
             UNION ALL SELECT {cid}, 'agent', 'reply ' || i, {sid}, {t1}, {now} - i FROM n \
             UNION ALL SELECT {cid}, 'user', 'second message ' || i, {sid}, {t2}, {now} - i FROM n \
             UNION ALL SELECT {cid}, 'agent', 'reply two ' || i, {sid}, {t2}, {now} - i FROM n WHERE i >= {open}",
            counter(c)
        ),
        // Events: per session, seq 1 = session_started; then two turns, each
        // turn_started, deltas, turn_completed (the running turn has no completion yet:
        // a delta instead).
        format!(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last}), \
             e AS (SELECT i / {per} AS s, i % {per} + 1 AS seq FROM n) \
             INSERT INTO events (session_id, conversation_id, seq, turn_id, at, kind, payload) \
             SELECT {sid_s}, {cid_s}, seq, \
             CASE WHEN seq = 1 THEN NULL WHEN seq <= {half} THEN {t1_s} ELSE {t2_s} END, \
             {now} - s, \
             CASE WHEN seq = 1 THEN 'session_started' \
                  WHEN seq = 2 OR seq = {half} + 1 THEN 'turn_started' \
                  WHEN seq = {half} OR (seq = {per} AND s >= {open}) THEN 'turn_completed' \
                  ELSE 'message_delta' END, \
             CASE WHEN seq = 1 THEN {ss} \
                  WHEN seq = 2 OR seq = {half} + 1 THEN replace({st}, '@', 'message ' || s) \
                  WHEN seq = {half} OR (seq = {per} AND s >= {open}) THEN replace({co}, '@', 'reply ' || s) \
                  ELSE replace({de}, '@', 'chunk ' || seq || ' of session ' || s || ' ') END \
             FROM e",
            last = c * per - 1,
            half = per / 2,
            sid_s = id_sql('s', "s"),
            cid_s = id_sql('c', "s"),
            t1_s = id_sql('t', "s"),
            t2_s = id_sql('u', "s"),
            ss = sql_str(&session_started),
            st = sql_str(&started),
            co = sql_str(&completed),
            de = sql_str(&delta),
        ),
        format!(
            "{} INSERT INTO approvals (id, conversation_id, session_id, turn_id, title, kind, detail, \
             options, status, decided_by, created_at, deadline, resolved_at) \
             SELECT {}, {cid}, {sid}, {t2}, 'run make', 'execute', NULL, {}, 'pending', NULL, \
             {now}, {now} + 1800000, NULL FROM n",
            counter(open / 10),
            id_sql('a', "i"),
            sql_str(&options)
        ),
        format!(
            "{} INSERT INTO questions (id, conversation_id, session_id, turn_id, prompt, status, \
             answer, answered_by, created_at, deadline, resolved_at) \
             SELECT {}, {cid}, {sid}, {t2}, 'which branch?', 'pending', NULL, NULL, \
             {now}, {now} + 1800000, NULL FROM n WHERE i >= {}",
            counter(open / 5),
            id_sql('q', "i"),
            open / 10
        ),
    ];
    for sql in &statements {
        sqlx::query(sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await?;
    sqlx::query("ANALYZE").execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// The payload as JSON with `@` where the text goes.
fn json_template(p: &EventPayload) -> Result<String> {
    Ok(serde_json::to_string(p)?)
}

/// A SQL string literal.
fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn generated_store_is_consistent_and_ids_match() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let store = tether_store::Store::open(dir.path()).await?;
        store.close().await;
        generate(&dir.path().join("tether.db"), 300, 3000).await?;
        let store = tether_store::Store::open(dir.path()).await?;
        assert!(store.integrity_check().await?);
        let conv = store
            .get_conversation(&id('c', 250))
            .await?
            .expect("conversation");
        assert_eq!(
            conv.bound_session_id.as_deref(),
            Some(id('s', 250).as_str())
        );
        let events = store.session_events(&id('s', 250), 0, 100).await?;
        assert_eq!(events.len(), 10);
        assert_eq!(events.last().map(|e| e.seq), Some(10));
        let kinds: Vec<&str> = events.iter().map(|e| e.payload.kind()).collect();
        assert_eq!(
            kinds,
            [
                "session_started",
                "turn_started",
                "message_delta",
                "message_delta",
                "turn_completed",
                "turn_started",
                "message_delta",
                "message_delta",
                "message_delta",
                "turn_completed"
            ]
        );
        // A conversation caught mid-turn: its last event is a delta.
        let events = store.session_events(&id('s', 7), 0, 100).await?;
        assert_eq!(
            events.last().map(|e| e.payload.kind()),
            Some("message_delta")
        );
        let open = store.open_turns(&id('c', 0)).await?;
        assert_eq!(open.len(), 1);
        let report = store.recover(|_| "restarted".to_string()).await?;
        assert_eq!(report.sessions_made_dormant, OPEN_TURNS);
        assert_eq!(report.conversations.len(), OPEN_TURNS);
        // The appended events (interrupted, notice) continue the seq without a clash.
        let events = store.session_events(&id('s', 150), 0, 100).await?;
        assert_eq!(events.len(), 10 + 2);
        Ok(())
    }
}
