//! The SQLite backend (the embedded default): one database file in WAL mode, one writer
//! connection, four read-only ones and a background checkpointer. The SQL is the concept
//! folders' `sql*.rs` files (`backend_modules!`), compiled here with SQLite's types.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use crate::{Result, Shared};

pub(crate) type Sql = sqlx::Sqlite;
/// How a write transaction begins: `IMMEDIATE` takes the write lock at once, waiting for
/// it with the busy handler. A deferred one takes it at its first write, holding a read
/// snapshot; if a truncating checkpoint (D246) holds the write lock then, SQLite refuses
/// at once (`SQLITE_BUSY` without the busy handler, to avoid a deadlock), and the
/// writers saw the store as down for a moment.
pub(crate) const BEGIN: Option<&str> = Some("BEGIN IMMEDIATE");
pub(crate) type SqlConnection = sqlx::SqliteConnection;
pub(crate) type SqlRow = sqlx::sqlite::SqliteRow;
pub(crate) type SqlQueryResult = sqlx::sqlite::SqliteQueryResult;
pub(crate) type SqlStatement<'q> = sqlx::sqlite::SqliteStatement<'q>;
pub(crate) type SqlConnectOptions = SqliteConnectOptions;

/// The SQL that differs between the backends.
pub(crate) mod dialect {
    /// How an outbox claim picks its rows: SQLite has one writer: a claim is one write transaction, nothing to skip.
    pub const SKIP_LOCKED: &str = "";
    /// The larger of two values.
    pub const GREATEST: &str = "MAX";
    /// A connection whose last user met an error is replaced, not pinged: SQLite may
    /// keep a transaction open after a failed `COMMIT` (a full disk), and a ping cannot
    /// tell; a new connection costs a file open.
    pub const REPLACE_SUSPECT: bool = true;
    /// How a fencing check locks the owners rows it reads: SQLite's one writer already
    /// serialises every write.
    pub const FOR_SHARE: &str = "";
    /// How long a take-over's recovery waits for a row lock (SQLite: no row locks).
    pub const RECOVERY_LOCK_TIMEOUT: Option<&str> = None;
    /// Appends a history entry and touches its conversation's `updated_at`; returns the
    /// entry's id. Two statements in one query (SQLite runs them in turn).
    pub const ADD_MESSAGE: &str = "INSERT INTO messages (conversation_id, role, text, \
         session_id, turn_id, at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id; \
         UPDATE conversations SET updated_at = $6 WHERE id = $1";
    /// A turn and the person's message that made it, atomically in one round trip (the
    /// statements begin and commit their own transaction, so it runs on a connection
    /// outside one): $1 turn, $2 session, $3 conversation, $4 input, $5 status, $6 now,
    /// $7 the history line's role; returns the line's id.
    pub const ADD_TURN_WITH_MESSAGE: &str = "BEGIN IMMEDIATE; INSERT INTO turns (id, \
         session_id, conversation_id, input, status, created_at) VALUES ($1, $2, $3, $4, \
         $5, $6); INSERT INTO messages (conversation_id, role, text, session_id, turn_id, at) \
         VALUES ($3, $7, $4, $2, $1, $6) RETURNING id; UPDATE conversations SET \
         updated_at = $6 WHERE id = $3; COMMIT";
    /// A turn's start in one query that begins and commits its own transaction (see
    /// `conversations/sql_turns_at_once.rs`): the queued turn marked running ($1 now, $2
    /// the turn), then its `turn_started` event (its payload made by the statement from
    /// the turn's input, with $3 the trace context when not null; `seq` = the session's
    /// largest + 1), only when the turn changed (`changes()`: the last statement's
    /// count). The turn changes only with its session and conversation there, so its
    /// event is always stored with it. Returns the turn's session, conversation, input
    /// and number of files, then the event's id and `seq`; no row when the turn was not
    /// queued.
    pub const START_TURN_AT_ONCE: Option<&str> = Some(
        "BEGIN IMMEDIATE; UPDATE turns SET status = 'running', started_at = $1 WHERE id = $2 \
         AND status = 'queued' AND EXISTS (SELECT 1 FROM sessions s JOIN conversations c ON \
         c.id = s.conversation_id WHERE s.id = turns.session_id) RETURNING session_id, \
         conversation_id, input, (SELECT COUNT(*) FROM attachments WHERE turn_id = $2); \
         INSERT INTO events (conversation_num, session_num, seq, turn_id, at, kind, payload) \
         SELECT c.num, s.num, COALESCE((SELECT e.seq FROM events e WHERE e.session_num = \
         s.num ORDER BY e.seq DESC LIMIT 1), 0) + 1, t.id, $1, 'turn_started', CASE WHEN $3 \
         IS NULL THEN json_object('type', 'turn_started', 'input', t.input) ELSE \
         json_object('type', 'turn_started', 'input', t.input, 'traceparent', $3) END FROM \
         turns t JOIN sessions s ON s.id = t.session_id JOIN conversations c ON c.id = \
         t.conversation_id WHERE t.id = $2 AND changes() = 1 RETURNING id, seq; COMMIT",
    );
    /// A message's turn stored already running, in one query that begins and commits its
    /// own transaction (see `conversations/sql_turns_at_once.rs`): the turn ($1 turn, $2
    /// session, $3 conversation, $4 input, $5 now) only when its session is the
    /// conversation's, then the person's message ($6 its role) with the conversation's
    /// `updated_at`, then its `turn_started` event (payload made by the statement, with
    /// $7 the trace context when not null; `seq` = the session's largest + 1), each step
    /// only when the one before changed a row (`changes()`). Returns the message's id,
    /// then the event's id and `seq` with the number of files given to the turn (claimed
    /// for its id before); no row when the session is not the conversation's.
    pub const ADD_STARTED_TURN_AT_ONCE: Option<&str> = Some(
        "BEGIN IMMEDIATE; INSERT INTO turns (id, session_id, conversation_id, input, status, \
         created_at, started_at) SELECT $1, $2, $3, $4, 'running', $5, $5 FROM sessions s \
         WHERE s.id = $2 AND s.conversation_id = $3; INSERT INTO messages (conversation_id, \
         role, text, session_id, turn_id, at) SELECT $3, $6, $4, $2, $1, $5 WHERE changes() \
         = 1 RETURNING id; UPDATE conversations SET updated_at = $5 WHERE id = $3 AND \
         changes() = 1; INSERT INTO events (conversation_num, session_num, seq, turn_id, at, \
         kind, payload) SELECT c.num, s.num, COALESCE((SELECT e.seq FROM events e WHERE \
         e.session_num = s.num ORDER BY e.seq DESC LIMIT 1), 0) + 1, $1, $5, 'turn_started', \
         CASE WHEN $7 IS NULL THEN json_object('type', 'turn_started', 'input', $4) ELSE \
         json_object('type', 'turn_started', 'input', $4, 'traceparent', $7) END FROM \
         sessions s JOIN conversations c ON c.id = s.conversation_id WHERE s.id = $2 AND \
         changes() = 1 RETURNING id, seq, (SELECT COUNT(*) FROM attachments WHERE turn_id = \
         $1); COMMIT",
    );
    /// A turn's end in one query that begins and commits its own transaction (see
    /// `conversations/sql_turns_at_once.rs`): what comes before the list of the statuses it may end from
    /// and after. The turn's row ($1 status, $2 result, $3 stop reason, $4 error code, $5
    /// error message, $6 usage, $7 now, $8 the turn), its terminal event ($9 kind, $10
    /// payload; `seq` = the session's largest + 1) and, when $11 (the role) is not null,
    /// its history line ($12 the text) with the conversation's `updated_at`. Each step
    /// runs only when the one before changed a row (`changes()`: the last statement's
    /// count), so a turn that had already ended changes nothing; the turn changes only
    /// with its session and conversation there, so its event is always stored with it
    /// (the transaction is committed before anyone could check). Returns the turn's
    /// session and conversation, then the event's id and `seq`; no row when the turn
    /// could not end. The caller ends it with `; COMMIT`, after the turn's usage row when
    /// it has one (`conversations/sql_turns.rs`).
    pub const FINISH_TURN_AT_ONCE: Option<(&str, &str)> = Some((
        "BEGIN IMMEDIATE; UPDATE turns SET status = $1, result_text = $2, stop_reason = $3, \
         error_code = $4, error_message = $5, usage = $6, ended_at = $7 WHERE id = $8 AND \
         EXISTS (SELECT 1 FROM sessions s JOIN conversations c ON c.id = s.conversation_id \
         WHERE s.id = turns.session_id) AND status IN ",
        " RETURNING session_id, conversation_id; INSERT INTO events (conversation_num, \
         session_num, seq, turn_id, at, kind, payload) SELECT c.num, s.num, COALESCE((SELECT \
         e.seq FROM events e WHERE e.session_num = s.num ORDER BY e.seq DESC LIMIT 1), 0) + 1, \
         t.id, $7, $9, $10 FROM turns t JOIN sessions s ON s.id = t.session_id JOIN \
         conversations c ON c.id = t.conversation_id WHERE t.id = $8 AND changes() = 1 \
         RETURNING id, seq; INSERT INTO messages (conversation_id, role, text, session_id, \
         turn_id, at) SELECT t.conversation_id, $11, $12, t.session_id, t.id, $7 FROM turns t \
         WHERE t.id = $8 AND $11 IS NOT NULL AND changes() = 1; UPDATE conversations SET \
         updated_at = $7 WHERE id = (SELECT conversation_id FROM turns WHERE id = $8) AND $11 \
         IS NOT NULL AND changes() = 1",
    ));
    /// No data-modifying `WITH` in SQLite: a claim that claims nothing reads the row
    /// after it (and SQLite's single node never claims).
    pub const CLAIM_AND_OWNER: Option<(&str, &str)> = None;
    /// No fence to check in the statement: SQLite's single node never claims.
    pub const ADD_STARTED_TURN_FENCED: Option<&str> = None;
    pub const FINISH_TURN_FENCED: Option<(&str, &str, &str)> = None;
    /// SQLite's one writer already serialises every write.
    pub const CHILDREN_LOCK: Option<&str> = None;
    /// SQLite has no notices (and is one node: nobody to wake).
    pub const NOTIFY: Option<&str> = None;
    /// What follows a multi-row `INSERT` of events to learn their ids: one writer, and a
    /// new row's id is the largest + 1, so the rows of one statement get consecutive
    /// ids in `VALUES` order; the last one and the count come back as one row instead of
    /// a row per event (sqlx's SQLite thread sends each row on its own).
    pub const INSERTED_IDS: Option<&str> = Some("; SELECT last_insert_rowid(), changes()");
    /// A group of events in one query of two statements (see
    /// `events/sql_append_at_once.rs`): what comes before its `VALUES` and after. Each
    /// row is (conversation, session, place among the group's events of its session,
    /// turn, at, kind, payload); a padding row is all `NULL`. The `INSERT` is one
    /// statement, so it commits on its own, all of it or nothing (and, a write statement,
    /// it takes the write lock before it reads, waiting with the busy handler like
    /// `BEGIN IMMEDIATE`); its `SELECT` reads the table it inserts into, so SQLite
    /// computes every row (each `seq`) before it inserts one. The second statement reads
    /// back the new rows' `seq`s in id order (one row: a JSON array); the ids and the
    /// count come with the `INSERT`'s own result ([`super::inserted_ids`]).
    pub const EVENTS_AT_ONCE: Option<(&str, &str)> = Some((
        "INSERT INTO events (conversation_num, session_num, seq, turn_id, at, kind, \
         payload) SELECT column1, column2, COALESCE((SELECT e.seq FROM events e WHERE \
         e.session_num = column2 ORDER BY e.seq DESC LIMIT 1), 0) + column3, column4, \
         column5, column6, column7 FROM (",
        ") WHERE column1 IS NOT NULL; SELECT json_group_array(seq) FROM (SELECT seq FROM \
         events WHERE id > last_insert_rowid() - changes() AND id <= last_insert_rowid() \
         ORDER BY id)",
    ));
    /// A group of events whose `seq`s this process knows (`events/numbers.rs`): one
    /// `INSERT` (rows as in [`EVENTS_AT_ONCE`], the third column the `seq` itself), no
    /// read; a `seq` the database already has is refused by `events_by_session`.
    pub const EVENTS_WITH_SEQS: Option<(&str, &str)> = Some((
        "INSERT INTO events (conversation_num, session_num, seq, turn_id, at, kind, \
         payload) SELECT column1, column2, column3, column4, column5, column6, column7 FROM (",
        ") WHERE column1 IS NOT NULL",
    ));
}

/// The last id and the number of rows an `INSERT` statement stored, from its result:
/// one writer, and a new row's id is the largest + 1, so the rows of one statement have
/// consecutive ids in `VALUES` order.
pub(crate) fn inserted_ids(r: &SqlQueryResult) -> Option<(i64, u64)> {
    Some((r.last_insert_rowid(), r.rows_affected()))
}

backend_modules!();
#[path = "sql_clock.rs"]
mod clock;
// SQLite only: the background checkpointer, and the connection set's tests.
#[path = "sqlite_checkpoint.rs"]
mod checkpoint;
#[cfg(test)]
#[path = "sql_conns_tests.rs"]
mod conns_tests;

use conns::Conns;

/// A SQLite store's connections.
#[derive(Clone)]
pub(crate) struct Db {
    writer: Conns,
    reader: Conns,
    /// Where small writes that must not queue behind the writer go (heartbeats, outbox
    /// marks): the writer itself (SQLite has one).
    side: Conns,
    checkpointer: Arc<checkpoint::Checkpointer>,
    shared: Arc<Shared>,
}

impl Db {
    /// Opens a database file (creating it if needed) and runs the migrations.
    pub(crate) async fn open(path: &std::path::Path, shared: Arc<Shared>) -> Result<Db> {
        let opts = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10))
            // Commits never checkpoint; a background task does (see `checkpoint`).
            .pragma("wal_autocheckpoint", "0")
            // After a checkpoint lets the WAL restart, a file grown by a burst shrinks.
            .pragma("journal_size_limit", "67108864")
            // Statement journals (a multi-row INSERT with a UNIQUE index inside a
            // transaction keeps one) in memory, not in temp files.
            .pragma("temp_store", "MEMORY");
        // The writer's page cache holds a group commit's dirty pages (16 MiB instead of
        // SQLite's 2 MiB: a full group spilled pages to the WAL mid-transaction).
        let mut first = opts
            .clone()
            .pragma("cache_size", "-16384")
            .connect()
            .await?;
        sql_schema::migrate(&mut first, &sqlx::migrate!("./migrations")).await?;
        // A SQLite connection does not die with a server; one is only checked again
        // after its user met an error (never for idling).
        let writer_opts = opts.clone().pragma("cache_size", "-16384");
        let writer = Conns::from_connection(first, &writer_opts, None, &shared.clock);
        let reader = Conns::open(&opts.clone().read_only(true), 4, None, &shared.clock).await?;
        let checkpoint_opts = opts.clone().busy_timeout(checkpoint::TRUNCATE_WAIT);
        let checkpointer = Arc::new(checkpoint::Checkpointer::start(
            Conns::open(&checkpoint_opts, 1, None, &shared.clock).await?,
        ));
        Ok(Db {
            side: writer.clone(),
            writer,
            reader,
            checkpointer,
            shared,
        })
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// SQLite's calls are not bounded (see `Store::set_query_timeout`).
    pub(crate) async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        call.await
    }

    /// `PRAGMA integrity_check` → `true` when the database is sound.
    pub(crate) async fn integrity_check(&self) -> Result<bool> {
        let row: (String,) = sqlx::query_as("PRAGMA integrity_check")
            .fetch_one(&self.reader)
            .await?;
        Ok(row.0 == "ok")
    }

    /// Whether any connection met trouble within the last `within` (SQLite connections
    /// do not lose a server; only a failed check counts).
    pub(crate) fn troubled_within(&self, within: Duration) -> bool {
        self.writer.troubled_within(within) || self.reader.troubled_within(within)
    }

    /// Whether the store serves now (see `Store::ready`): a read, and a write, since a
    /// full disk or a read-only file system fails only writes.
    pub(crate) async fn ready(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        sqlx::query(
            "INSERT INTO ready_probe (id, at) VALUES (1, $1) \
             ON CONFLICT (id) DO UPDATE SET at = excluded.at",
        )
        .bind(self.now_ms())
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.checkpointer.close().await;
        self.writer.close().await;
        self.reader.close().await;
    }
}
