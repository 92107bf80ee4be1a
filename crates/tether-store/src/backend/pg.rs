//! The PostgreSQL backend: one writer connection (so event ids are handed out in commit
//! order, as the feed needs) and four readers, migrations of its own
//! (`migrations/postgres/`). The SQL is the concept
//! folders' `sql*.rs` files (`backend_modules!`), compiled here with PostgreSQL's types.

use std::str::FromStr;
use std::sync::Arc;

use sqlx::ConnectOptions;
use sqlx::postgres::PgConnectOptions;

use crate::{Result, Shared};

pub(crate) type Sql = sqlx::Postgres;
/// How a write transaction begins (PostgreSQL's default `BEGIN`).
pub(crate) const BEGIN: Option<&str> = None;
pub(crate) type SqlConnection = sqlx::PgConnection;
pub(crate) type SqlRow = sqlx::postgres::PgRow;
pub(crate) type SqlQueryResult = sqlx::postgres::PgQueryResult;
pub(crate) type SqlStatement<'q> = sqlx::postgres::PgStatement<'q>;
pub(crate) type SqlConnectOptions = PgConnectOptions;

/// The SQL that differs between the backends.
pub(crate) mod dialect {
    /// How an outbox claim picks its rows: Rows another node is claiming at the same moment are passed over (outbox claims).
    pub const SKIP_LOCKED: &str = " FOR UPDATE SKIP LOCKED";
    /// The larger of two values.
    pub const GREATEST: &str = "GREATEST";
    /// A suspect connection is pinged (a reconnect costs several round trips); the
    /// server ends a transaction whose connection is gone.
    pub const REPLACE_SUSPECT: bool = false;
    /// How a fencing check locks the owners rows it reads: a take-over (an `UPDATE` of
    /// the row) waits for the checking transaction to commit.
    pub const FOR_SHARE: &str = " FOR SHARE";
    /// How long a take-over's recovery waits for a row lock: a node paused inside a
    /// transaction holds its locks until it resumes, and a survivor waiting on them would
    /// hold its only writer connection (its own heartbeat too). It gives up and retries.
    pub const RECOVERY_LOCK_TIMEOUT: Option<&str> = Some("SET LOCAL lock_timeout = '500ms'");
    /// Appends a history entry and touches its conversation's `updated_at`; returns the
    /// entry's id. One statement (a prepared statement holds one): the update is a
    /// data-modifying `WITH`.
    pub const ADD_MESSAGE: &str = "WITH m AS (INSERT INTO messages (conversation_id, role, \
         text, session_id, turn_id, at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id), \
         u AS (UPDATE conversations SET updated_at = $6 WHERE id = $1) SELECT id FROM m";
    /// A turn and the person's message that made it, atomically in one round trip (one
    /// statement: data-modifying `WITH`s): $1 turn, $2 session, $3 conversation, $4
    /// input, $5 status, $6 now, $7 the history line's role; returns the line's id.
    pub const ADD_TURN_WITH_MESSAGE: &str = "WITH t AS (INSERT INTO turns (id, session_id, \
         conversation_id, input, status, created_at) VALUES ($1, $2, $3, $4, $5, $6)), \
         m AS (INSERT INTO messages (conversation_id, role, text, session_id, turn_id, at) \
         VALUES ($3, $7, $4, $2, $1, $6) RETURNING id), \
         u AS (UPDATE conversations SET updated_at = $6 WHERE id = $3) SELECT id FROM m";
    /// Serialises, over every node, the transactions that count a parent's running
    /// children and add one (`$1` names the parent), until the transaction ends.
    pub const CHILDREN_LOCK: Option<&str> = Some("SELECT pg_advisory_xact_lock(hashtext($1))");
    /// Sends a notice on channel `$1` with payload `$2` when the transaction commits.
    pub const NOTIFY: Option<&str> = Some("SELECT pg_notify($1, $2)");
    /// Other nodes insert events too, so ids of one statement need not be consecutive:
    /// each row is returned (see SQLite's).
    pub const INSERTED_IDS: Option<&str> = None;
    /// No one-query group of events: a node may hold fencing epochs, checked before its
    /// transaction commits, and a round trip to the server costs no thread hand-off.
    pub const EVENTS_AT_ONCE: Option<(&str, &str)> = None;
    pub const EVENTS_WITH_SEQS: Option<(&str, &str)> = None;
    /// No one-query turn start or end either (see SQLite's): the general paths' round
    /// trips to the server cost no thread hand-off.
    pub const START_TURN_AT_ONCE: Option<&str> = None;
    pub const ADD_STARTED_TURN_AT_ONCE: Option<&str> = None;
    pub const FINISH_TURN_AT_ONCE: Option<(&str, &str)> = None;
    /// A claim (`cluster/sql_owners.rs`) and the owner row it left, in one statement:
    /// what goes around the claim's `INSERT … ON CONFLICT`. One row: `claimed` (the new
    /// epoch, or null), then, when null, the row as the claim saw it (read `FOR SHARE`:
    /// the latest version, which the claim's own lock keeps until the statement ends).
    /// Both null: another node's claim committed after this statement's snapshot (the
    /// upsert waited for it), and the caller reads its row again.
    pub const CLAIM_AND_OWNER: Option<(&str, &str)> = Some((
        "WITH c AS (",
        ") SELECT (SELECT epoch FROM c) AS claimed, o.conversation_id, o.node_id, o.epoch, \
         o.claimed_at, n.lease_until, n.started_at AS node_started_at FROM (SELECT 1) one \
         LEFT JOIN (SELECT * FROM owners WHERE conversation_id = $1 AND NOT EXISTS (SELECT \
         1 FROM c) FOR SHARE) o ON true LEFT JOIN nodes n ON n.id = o.node_id",
    ));
    /// A message's turn stored already running, with its fence, in one statement (see
    /// `conversations/sql_turns_fenced.rs`): `f` locks the conversation's `owners` row
    /// (shared) when $8, the epoch this node holds, is given, and `ok` says whether it
    /// is still ours; only then the turn ($1 turn, $2 session, $3 conversation, $4
    /// input, $5 now) when its session is the conversation's, the person's message ($6
    /// its role) with the conversation's `updated_at`, and the `turn_started` event ($7
    /// its payload; `seq` = the session's largest + 1). One row: `ok`, the event's id
    /// and `seq` (null: nothing stored), the turn's files (claimed for its id before),
    /// the owner's node and epoch.
    pub const ADD_STARTED_TURN_FENCED: Option<&str> = Some(
        "WITH f AS (SELECT node_id, epoch FROM owners WHERE conversation_id = $3 AND \
         $8::bigint IS NOT NULL FOR SHARE), ok AS (SELECT $8::bigint IS NULL OR EXISTS \
         (SELECT 1 FROM f WHERE f.epoch = $8 AND f.node_id <> '') AS ok), s AS (SELECT \
         s.num AS snum, c.num AS cnum FROM sessions s JOIN conversations c ON c.id = \
         s.conversation_id WHERE s.id = $2 AND s.conversation_id = $3 AND (SELECT ok FROM \
         ok)), t AS (INSERT INTO turns (id, session_id, conversation_id, input, status, \
         created_at, started_at) SELECT $1, $2, $3, $4, 'running', $5, $5 FROM s RETURNING \
         id), m AS (INSERT INTO messages (conversation_id, role, text, session_id, turn_id, \
         at) SELECT $3, $6, $4, $2, t.id, $5 FROM t), u AS (UPDATE conversations SET \
         updated_at = $5 WHERE id = $3 AND EXISTS (SELECT 1 FROM t)), e AS (INSERT INTO \
         events (conversation_num, session_num, seq, turn_id, at, kind, payload) SELECT \
         s.cnum, s.snum, COALESCE((SELECT x.seq FROM events x WHERE x.session_num = s.snum \
         ORDER BY x.seq DESC LIMIT 1), 0) + 1, t.id, $5, 'turn_started', $7 FROM s, t \
         RETURNING id, seq) SELECT (SELECT ok FROM ok), e.id, e.seq, (SELECT COUNT(*) FROM \
         attachments WHERE turn_id = $1), (SELECT node_id FROM f), (SELECT epoch FROM f) \
         FROM (SELECT 1) one LEFT JOIN e ON true",
    );
    /// A turn's end with its fence in one statement (see
    /// `conversations/sql_turns_fenced.rs`): what comes before the list of the statuses
    /// it may end from, what follows it, and the final `SELECT` (the usage row's step,
    /// `l`, goes between them when there is one; its id is the `SELECT`'s last column).
    /// `f` and `ok` as in [`ADD_STARTED_TURN_FENCED`] for conversation $13 under epoch
    /// $14; only while `ok`, the turn's row ($1 status, $2 result, $3 stop reason, $4
    /// error code, $5 error message, $6 usage, $7 now, $8 the turn, of conversation $13
    /// when given), then its events in one `INSERT` ($9 their kinds, $10 their payloads,
    /// JSON arrays of strings, the terminal event last; `seq`s the session's largest + 1
    /// on), and when $11 (the role) is not null its history line ($12 the text) with the
    /// conversation's `updated_at`. One row: `ok`, the turn's session and conversation
    /// (null: it did not end), the events' ids and `seq`s (JSON arrays in `seq` order),
    /// the owner's node and epoch.
    pub const FINISH_TURN_FENCED: Option<(&str, &str, &str)> = Some((
        "WITH f AS (SELECT node_id, epoch FROM owners WHERE conversation_id = $13 AND \
         $14::bigint IS NOT NULL FOR SHARE), ok AS (SELECT $14::bigint IS NULL OR EXISTS \
         (SELECT 1 FROM f WHERE f.epoch = $14 AND f.node_id <> '') AS ok), t AS (UPDATE \
         turns SET status = $1, result_text = $2, stop_reason = $3, error_code = $4, \
         error_message = $5, usage = $6, ended_at = $7 WHERE id = $8 AND ($13::text IS \
         NULL OR conversation_id = $13) AND (SELECT ok FROM ok) AND status IN ",
        " RETURNING session_id, conversation_id), s AS (SELECT s.num AS snum, c.num AS \
         cnum, COALESCE((SELECT x.seq FROM events x WHERE x.session_num = s.num ORDER BY \
         x.seq DESC LIMIT 1), 0) AS last FROM t JOIN sessions s ON s.id = t.session_id JOIN \
         conversations c ON c.id = t.conversation_id), e AS (INSERT INTO events \
         (conversation_num, session_num, seq, turn_id, at, kind, payload) SELECT s.cnum, \
         s.snum, s.last + v.n, $8, $7, v.kind, v.payload FROM s, ROWS FROM \
         (json_array_elements_text($9::json), json_array_elements_text($10::json)) WITH \
         ORDINALITY AS v(kind, payload, n) ORDER BY v.n RETURNING id, seq), m AS (INSERT \
         INTO messages (conversation_id, role, text, session_id, turn_id, at) SELECT \
         t.conversation_id, $11, $12, t.session_id, $8, $7 FROM t WHERE $11::text IS NOT \
         NULL), u AS (UPDATE conversations SET updated_at = $7 WHERE id IN (SELECT \
         conversation_id FROM t) AND $11::text IS NOT NULL)",
        " SELECT (SELECT ok FROM ok), (SELECT session_id FROM t), (SELECT conversation_id \
         FROM t), (SELECT json_agg(id ORDER BY seq)::text FROM e), (SELECT json_agg(seq \
         ORDER BY seq)::text FROM e), (SELECT node_id FROM f), (SELECT epoch FROM f), ",
    ));
}

/// An `INSERT`'s ids are not read from its result here (see SQLite's): `RETURNING` says them.
pub(crate) fn inserted_ids(_: &SqlQueryResult) -> Option<(i64, u64)> {
    None
}

backend_modules!();
#[path = "sql_clock.rs"]
mod clock;
// PostgreSQL only: the tail of other nodes' commits (see `crate::cluster::tail`).
#[path = "../cluster/pg_tail.rs"]
mod tail;

use conns::Conns;

/// A connection unused this long is checked before its next use: a server restarted
/// meanwhile has closed it (issue 25).
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// A PostgreSQL store's connections.
#[derive(Clone)]
pub(crate) struct Db {
    writer: Conns,
    reader: Conns,
    /// A connection of its own for small writes that must not queue behind the writer
    /// (issue 33 items 5, 6): heartbeats (a writer busy with group commits does not hold
    /// a node's lease up) and outbox rows marked sent (the window in which a killed sender
    /// leaves a sent reply to be sent again).
    side: Conns,
    shared: Arc<Shared>,
    /// For the tail's own connections (listener, notifier); boxed, as it is large and
    /// the SQLite side of `Store` is not.
    opts: Arc<PgConnectOptions>,
    /// Where it connected (a node's `LISTEN` connection opens its own, see `pg_listen`).
    url: Arc<str>,
}

impl Db {
    /// Connects to `url` (`postgres://…`) and runs the migrations.
    pub(crate) async fn connect(url: &str, shared: Arc<Shared>) -> Result<Db> {
        // A node cut off the network inside a transaction would hold its row locks (and
        // its presence lock) until the server noticed, which without these is hours: the
        // server ends such a transaction after 15 s idle, and probes a silent client
        // after 10 s (every 5 s, 3 times).
        let opts = PgConnectOptions::from_str(url)?.options([
            ("idle_in_transaction_session_timeout", "15s"),
            ("tcp_keepalives_idle", "10"),
            ("tcp_keepalives_interval", "5"),
            ("tcp_keepalives_count", "3"),
        ]);
        let mut first = opts.connect().await?;
        // sqlx holds an advisory lock while migrating: nodes starting together take turns.
        sql_schema::migrate(&mut first, &sqlx::migrate!("./migrations/postgres")).await?;
        Ok(Db {
            writer: Conns::from_connection(first, &opts, Some(IDLE_CHECK), &shared.clock),
            reader: Conns::open(&opts, 4, Some(IDLE_CHECK), &shared.clock).await?,
            side: Conns::open(&opts, 1, Some(IDLE_CHECK), &shared.clock).await?,
            shared,
            opts: Arc::new(opts),
            url: Arc::from(url),
        })
    }

    /// A `LISTEN` connection for forwarded commands' wake-ups.
    pub(crate) async fn wakeups(&self) -> Result<crate::cluster::pg_listen::Wakeups> {
        crate::cluster::pg_listen::Wakeups::connect(&self.url).await
    }

    /// This node's presence connection (see `pg_presence`).
    pub(crate) async fn presence(&self, id: &str) -> Result<crate::cluster::pg_presence::Presence> {
        crate::cluster::pg_presence::Presence::hold(&self.opts, id).await
    }

    /// Whether node `id` holds its presence lock.
    pub(crate) async fn node_present(&self, id: &str) -> Result<bool> {
        crate::cluster::pg_presence::present(&self.reader, id).await
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Runs one call within the query time-out (see `Store::set_query_timeout`): past it
    /// the call fails as unavailable and every connection is checked (and, silent,
    /// replaced) before its next use.
    pub(crate) async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let ms = self
            .shared
            .query_timeout_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        match tokio::time::timeout(std::time::Duration::from_millis(ms), call).await {
            Ok(done) => done,
            Err(_) => {
                self.writer.trouble();
                self.reader.trouble();
                Err(crate::StoreError::Db(
                    crate::backend::health::unreachable_error(&format!(
                        "the database gave no answer within {ms} ms"
                    )),
                ))
            }
        }
    }

    /// PostgreSQL checks its own pages (and has no `integrity_check`): `true` when the
    /// server answers.
    pub(crate) async fn integrity_check(&self) -> Result<bool> {
        let (one,): (i32,) = sqlx::query_as("SELECT 1").fetch_one(&self.reader).await?;
        Ok(one == 1)
    }

    /// Whether any connection saw the server go away within the last `within`.
    pub(crate) fn troubled_within(&self, within: std::time::Duration) -> bool {
        self.writer.troubled_within(within) || self.reader.troubled_within(within)
    }

    /// Whether the store serves now: a reader answers and neither set is reconnecting
    /// (see `Store::ready`).
    pub(crate) async fn ready(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        if self.writer.degraded() {
            return Err(
                crate::backend::health::unreachable_error("the writer is reconnecting").into(),
            );
        }
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}
