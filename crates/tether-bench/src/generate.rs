//! Big stores for the figures that need one (4: recovery; 7 and 8: listing and the latest
//! page), generated fast: the schema by `tether_store::Store::open` (its migrations), the
//! rows by set-based SQL over a recursive counter through sqlx, then served by a real
//! `tether serve`.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Result;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tether_proto::{Decision, EventPayload, NewSessionReason};

/// The store of [`generate`] made once per run and copied for each figure that uses it
/// (generating 100 000 conversations takes tens of seconds; a copy, about one).
struct Cached {
    conversations: usize,
    events: usize,
    dir: tempfile::TempDir,
    took: Duration,
}

static CACHE: tokio::sync::Mutex<Option<Cached>> = tokio::sync::Mutex::const_new(None);

/// Puts a store of [`generate`]`(conversations, events)` at `data/tether.db` (migrated,
/// nothing else in `data`): a copy of the one made for an earlier figure of this run
/// with the same sizes, else a new one. Returns how long generating it took.
pub async fn big_store(data: &Path, conversations: usize, events: usize) -> Result<Duration> {
    let mut cache = CACHE.lock().await;
    let fits = cache
        .as_ref()
        .is_some_and(|c| c.conversations == conversations && c.events == events);
    if !fits {
        *cache = None;
        let dir = tempfile::Builder::new()
            .prefix("tether-bench-store-")
            .tempdir()?;
        let t = Instant::now();
        let store = tether_store::Store::open(dir.path()).await?;
        store.close().await;
        generate(&dir.path().join("tether.db"), conversations, events).await?;
        *cache = Some(Cached {
            conversations,
            events,
            dir,
            took: t.elapsed(),
        });
    }
    let c = cache
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no generated store"))?;
    std::fs::create_dir_all(data)?;
    std::fs::copy(c.dir.path().join("tether.db"), data.join("tether.db"))?;
    Ok(c.took)
}

/// Removes the generated store (statics are not dropped at exit).
pub async fn drop_cache() {
    *CACHE.lock().await = None;
}

/// Conversations whose last turn was running when the "crash" happened (their sessions
/// were live; a tenth of them also had an approval and a question pending).
pub const OPEN_TURNS: usize = 200;

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
pub(crate) fn id_sql(prefix: char, i: &str) -> String {
    let p = prefix as u64;
    format!(
        "printf('%08x%08x%016x', ({i} * 2654435761 + {p}) % 4294967291, ({i} * 40503 + {}) % 4294967291, {i} * 256 + {p})",
        p * 7
    )
}

pub(crate) fn counter(n: usize) -> String {
    format!(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {}) ",
        n.saturating_sub(1)
    )
}

pub(crate) async fn connect(path: &Path) -> Result<SqliteConnection> {
    let opts = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Off)
        .foreign_keys(false);
    Ok(opts.connect().await?)
}

/// Fills the (migrated, empty) database at `path`: `conversations` conversations, each
/// with one session, two turns, four history messages, and `events` events in all; the
/// first [`OPEN_TURNS`] were mid-turn when the daemon "crashed".
pub async fn generate(path: &Path, conversations: usize, events: usize) -> Result<()> {
    let mut conn = connect(path).await?;
    let c = conversations.max(1);
    let per = (events / c).max(4);
    let now = tether_store::now_ms();
    let cid = id_sql('c', "i");
    let sid = id_sql('s', "i");
    let t1 = id_sql('t', "i");
    let t2 = id_sql('u', "i");
    let open = OPEN_TURNS.min(c);
    let delta = json_template(&EventPayload::MessageDelta { text: "@".into() })?;
    let started = json_template(&EventPayload::TurnStarted {
        input: "@".into(),
        traceparent: None,
    })?;
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
             created_at, updated_at) \
             SELECT {sid}, {cid}, 'fake', NULL, '/work', CASE WHEN i < {open} THEN 'live' ELSE 'dormant' END, \
             lower(hex(randomblob(16))), {now} - i, {now} - i FROM n",
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
             INSERT INTO events (session_num, conversation_num, seq, turn_id, at, kind, payload) \
             SELECT (SELECT num FROM sessions WHERE id = {sid_s}), \
             (SELECT num FROM conversations WHERE id = {cid_s}), seq, \
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

/// Events per turn in [`long_conversation`] (the web UI's first page, 300 events, then
/// holds the whole last turn, as it does for most conversations).
pub const LONG_TURN: usize = 100;

/// Adds one conversation with `events` events to the (generated) database at `path`: one
/// dormant session, turns of [`LONG_TURN`] events (`turn_started`, deltas,
/// `turn_completed`) with a user and an agent history message each; it is the most
/// recently updated conversation. Returns its id.
pub async fn long_conversation(path: &Path, events: usize) -> Result<String> {
    let mut conn = connect(path).await?;
    let now = tether_store::now_ms() + 1;
    let (cid, sid) = (id('L', 0), id('M', 0));
    let events = events.max(2);
    let turns = (events - 1).div_ceil(LONG_TURN);
    let tid = id_sql('T', "i");
    let delta = json_template(&EventPayload::MessageDelta { text: "@".into() })?;
    let started = json_template(&EventPayload::TurnStarted {
        input: "@".into(),
        traceparent: None,
    })?;
    let completed = json_template(&EventPayload::TurnCompleted {
        stop_reason: Some("end_turn".into()),
        text: "@".into(),
    })?;
    let session_started = json_template(&EventPayload::SessionStarted {
        agent: "fake".into(),
        model: None,
        reason: NewSessionReason::Unbound,
    })?;
    let mut tx = conn.begin().await?;
    let statements = [
        format!(
            "INSERT INTO conversations (id, kind, title, agent, model, cwd, archived, \
             bound_session_id, parent_conversation_id, next_session_reason, created_at, updated_at) \
             VALUES ('{cid}', 'chat', 'a long conversation', 'fake', NULL, '/work', 0, '{sid}', \
             NULL, NULL, {now}, {now})"
        ),
        format!(
            "INSERT INTO sessions (id, conversation_id, agent, model, cwd, status, external_id, \
             created_at, updated_at) VALUES ('{sid}', '{cid}', 'fake', NULL, '/work', \
             'dormant', lower(hex(randomblob(16))), {now}, {now})"
        ),
        format!(
            "{} INSERT INTO turns (id, session_id, conversation_id, input, status, result_text, \
             stop_reason, created_at, started_at, ended_at) \
             SELECT {tid}, '{sid}', '{cid}', 'message ' || i, 'completed', 'reply ' || i, \
             'end_turn', {now}, {now}, {now} FROM n",
            counter(turns)
        ),
        format!(
            "{} INSERT INTO messages (conversation_id, role, text, session_id, turn_id, at) \
             SELECT '{cid}', CASE WHEN j % 2 = 0 THEN 'user' ELSE 'agent' END, \
             CASE WHEN j % 2 = 0 THEN 'message ' ELSE 'reply ' END || (j / 2), '{sid}', {}, {now} \
             FROM (SELECT i AS j FROM n)",
            counter(turns * 2),
            id_sql('T', "(j / 2)"),
        ),
        // seq 1 = session_started; then turn k has seqs 2 + k * LONG_TURN ...
        format!(
            "{} INSERT INTO events (session_num, conversation_num, seq, turn_id, at, kind, payload) \
             SELECT (SELECT num FROM sessions WHERE id = '{sid}'), \
             (SELECT num FROM conversations WHERE id = '{cid}'), seq, CASE WHEN seq = 1 THEN NULL ELSE {t} END, {now}, \
             CASE WHEN seq = 1 THEN 'session_started' WHEN p = 0 THEN 'turn_started' \
                  WHEN p = {last} OR seq = {events} THEN 'turn_completed' ELSE 'message_delta' END, \
             CASE WHEN seq = 1 THEN {ss} WHEN p = 0 THEN replace({st}, '@', 'message ' || k) \
                  WHEN p = {last} OR seq = {events} THEN replace({co}, '@', 'reply ' || k) \
                  ELSE replace({de}, '@', 'chunk ' || p || ' ') END \
             FROM (SELECT i + 1 AS seq, (i - 1) / {LONG_TURN} AS k, (i - 1) % {LONG_TURN} AS p FROM n)",
            counter(events),
            t = id_sql('T', "k"),
            last = LONG_TURN - 1,
            ss = sql_str(&session_started),
            st = sql_str(&started),
            co = sql_str(&completed),
            de = sql_str(&delta),
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
    Ok(cid)
}

/// The payload as JSON with `@` where the text goes.
fn json_template(p: &EventPayload) -> Result<String> {
    Ok(serde_json::to_string(p)?)
}

/// A SQL string literal.
fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Gives the store's conversations to `people` people (`p0` … made here, members): the
/// i-th conversation to `p<i mod people>`, every tenth shared with the team, the rest
/// private (issue 28's listing figure: what one member sees of many people's).
pub async fn spread_owners(path: &Path, people: usize) -> Result<()> {
    let mut conn = connect(path).await?;
    let now = tether_store::now_ms();
    let mut tx = conn.begin().await?;
    sqlx::query(&format!(
        "{} INSERT INTO people (id, name, role, disabled, created_at) \
         SELECT 'p' || i, 'person ' || i, 'member', 0, {now} FROM n",
        counter(people.max(1))
    ))
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "UPDATE conversations SET owner_id = 'p' || (rowid % {n}), \
         visibility = CASE WHEN rowid % 10 = 0 THEN 'team' ELSE 'private' END",
        n = people.max(1)
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// How many conversations `person` may list after [`spread_owners`]: theirs and the
/// team's.
pub async fn visible_to(path: &Path, person: &str) -> Result<usize> {
    let mut conn = connect(path).await?;
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM conversations WHERE owner_id = ? OR visibility = 'team'",
    )
    .bind(person)
    .fetch_one(&mut conn)
    .await?;
    Ok(usize::try_from(n)?)
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
            .conversations()
            .get_conversation(&id('c', 250).into())
            .await?
            .expect("conversation");
        assert_eq!(
            conv.bound_session_id.as_deref(),
            Some(id('s', 250).as_str())
        );
        let events = store
            .events()
            .session_events(&id('s', 250).into(), 0, 100)
            .await?;
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
        let events = store
            .events()
            .session_events(&id('s', 7).into(), 0, 100)
            .await?;
        assert_eq!(
            events.last().map(|e| e.payload.kind()),
            Some("message_delta")
        );
        let open = store.conversations().open_turns(&id('c', 0).into()).await?;
        assert_eq!(open.len(), 1);
        let report = store
            .recovery()
            .recover(|_| "restarted".to_string())
            .await?;
        assert_eq!(report.sessions_made_dormant, OPEN_TURNS);
        assert_eq!(report.conversations.len(), OPEN_TURNS);
        // The appended events (interrupted, notice) continue the seq without a clash.
        let events = store
            .events()
            .session_events(&id('s', 150).into(), 0, 100)
            .await?;
        assert_eq!(events.len(), 10 + 2);
        Ok(())
    }

    #[tokio::test]
    async fn long_conversation_is_consistent() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let store = tether_store::Store::open(dir.path()).await?;
        store.close().await;
        generate(&dir.path().join("tether.db"), 10, 100).await?;
        let cid = long_conversation(&dir.path().join("tether.db"), 1001).await?;
        let store = tether_store::Store::open(dir.path()).await?;
        assert!(store.integrity_check().await?);
        let events = store
            .events()
            .session_events(&id('M', 0).into(), 0, 2000)
            .await?;
        assert_eq!(events.len(), 1001);
        assert!(events.iter().all(|e| e.conversation_id == cid));
        let kinds: Vec<&str> = events.iter().map(|e| e.payload.kind()).collect();
        assert_eq!(kinds[0], "session_started");
        assert_eq!(kinds[1], "turn_started");
        assert_eq!(kinds[LONG_TURN], "turn_completed");
        assert_eq!(kinds[LONG_TURN + 1], "turn_started");
        assert_eq!(kinds[1000], "turn_completed");
        assert_eq!(
            kinds.iter().filter(|k| **k == "turn_started").count(),
            1000 / LONG_TURN
        );
        let history = store
            .events()
            .history(&cid.as_str().into(), 0, 1000)
            .await?;
        assert_eq!(history.len(), 2 * 1000 / LONG_TURN);
        Ok(())
    }
}
