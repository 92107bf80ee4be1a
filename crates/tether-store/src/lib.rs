//! tether-store: durable state on sqlx, on SQLite (WAL; the embedded default) or
//! PostgreSQL: conversations, runtime sessions, turns, per-session events with a gap-free
//! `seq`, approvals, questions, message history and inbound dedupe keys. Writes that
//! belong together run in one transaction. One contract for both backends: the SQL is
//! written once (portable SQL, `$n` parameters) and compiled once per backend
//! (`backend::sqlite`, `backend::pg`; see `backend`), and [`Store`] runs the backend it
//! was opened on. Its calls are grouped by concept, one handle per concept folder
//! (`store.conversations()`, `store.events()`, `store.cluster()`, …; see `handles`).
//!
//! Must not depend on the agents, the channels or the web server. Writes go through one
//! writer connection per store (SQLite has one writer anyway; on PostgreSQL it keeps
//! event ids in commit order, which the feed needs); reads use four connections of their
//! own; on SQLite a third kind checkpoints the WAL in the background (commits never do,
//! see `checkpoint`). The connections are held directly, not in an sqlx pool (see
//! `backend/sql_conns.rs`). Committed events are published to their followers by the store
//! itself, in commit order (see `feed`).

mod backend;
mod backup;
mod channels;
mod clock;
mod cluster;
mod conversations;
mod delegation;
mod events;
mod handles;
mod ops;
mod people;
mod recovery;
mod requests;
mod rules;
mod schedules;
mod timers;
mod usage;
mod worktrees;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tether_proto::ConversationId;

use crate::backend::{Backend, health, pg, sqlite};

pub use backend::schema::{BREAKS_OLDER, tether_version};
pub use backup::{SnapshotInfo, backup_sqlite, check_sqlite};
pub use channels::{ChannelChat, NewOutbox, OutboxRow, OutboxStatus, Pairing, PendingInbound};
pub use clock::SystemClock;
pub use cluster::commands::{
    COMMANDS_CHANNEL, CommandRow, CommandStatus, NewCommand, REPLIES_CHANNEL, Wakeup,
};
pub use cluster::leaders::{LeaderClaim, LeaderRow};
pub use cluster::nodes::NodeRow;
pub use cluster::owners::{Claim, OwnerRow};
pub use cluster::pg_listen::Wakeups;
pub use cluster::pg_presence::Presence;
pub use cluster::tail::{TailHandle, TailOptions, TailStats};
pub use conversations::pages::{ListCursor, TurnPlace};
pub use conversations::view_parts::ViewParts;
pub use conversations::{
    ConversationRow, FinishedTurn, MessageTarget, NewConversation, NewMessage, NewSession, NewTurn,
    StartedTurn, TurnEnd,
};
pub use delegation::ledger::{CLAIM_STALE_MS, ContinuationClaim, LedgerEntry};
pub use delegation::{
    DelegationRow, DelegationTurnRow, EXTERNAL_SCOPE, NewDelegation, NewDelegationTurn,
};
pub use events::append::AppendStats;
pub use events::feed::{Batch, Follower, Scope};
pub use handles::{
    Attachments, Channels, Cluster, Conversations, Delegation, Events, People, Recovery, Requests,
    Schedules, Timers, Usage, Worktrees,
};
pub use ops::{COMMIT_SECONDS, GROUP_EVENTS, OpsCounts, OutboxBacklog, PoolUse};
pub use people::secret::{
    CODE_LEN, SESSION_PREFIX, TOKEN_PREFIX, display_code, hash_secret, new_code, new_secret,
    new_secret_with, new_token_id, normalize_code,
};
pub use people::{
    AccountRow, LinkCodeRow, NewAudit, NewPerson, NewToken, OidcLoginRow, PersonRow, TokenRow,
    WebSessionRow,
};
pub use recovery::{RecoveredConversation, RecoveryReport};
pub use requests::{NewApproval, NewQuestion, RequestPlace};
pub use schedules::{SCHEDULE_RUN, ScheduleRow};
pub use timers::{CONTINUE_AFTER_LIMIT, NewTimer, Timer};
pub use usage::{
    Bucket, Budget, BudgetHit, BudgetScope, BudgetUse, Counted, NewUsage, Parked, Recorded,
    SeriesPoint, TurnBudgets, UsageScope, UsageTotals,
};
pub use worktrees::{SweptWorktree, WORKTREE_REMOVAL, WORKTREE_SWEEP, WorktreeRow};

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A database URL that is neither `postgres://` / `postgresql://` nor `sqlite:`.
    #[error("unsupported database URL {0:?} (expected postgres://… or sqlite:…)")]
    UnsupportedUrl(String),
    #[error("corrupt row in {table}: {detail}")]
    Corrupt { table: &'static str, detail: String },
    /// A follower's topic closed (only when the store itself goes away).
    #[error("the event feed closed")]
    FeedClosed,
    /// An append's group commit ended without answering it (it panicked); nothing of it
    /// was stored.
    #[error("the append was abandoned before it was stored")]
    AppendAbandoned,
    /// Delegation: the task's parent already has `max` children running a turn; nothing
    /// was stored.
    #[error(
        "{running} delegated tasks of this parent are still running (limit {max}); \
         collect or cancel one first"
    )]
    ChildrenCap { running: usize, max: usize },
    /// Delegation: the continuation id is already in the ledger of this scope (the
    /// transaction that tried to record it was rolled back).
    #[error("continuation id {continuation_id:?} is already recorded in {scope}")]
    LedgerTaken {
        scope: String,
        continuation_id: String,
    },
    /// Fencing (issue 12): this node's epoch for the conversation is no longer the
    /// owner row's (another node took it over); nothing of the write was stored.
    #[error("conversation {conversation_id} is owned by another node now (epoch {epoch} is stale)")]
    Fenced {
        conversation_id: ConversationId,
        epoch: i64,
    },
    /// A row that must be unique exists already (a person's id or email); nothing was
    /// stored.
    #[error("that {what} exists already")]
    Duplicate { what: &'static str },
    /// The change would leave no enabled owner; nothing was changed.
    #[error("the team must keep at least one enabled owner")]
    LastOwner,
    /// Issue 31: the database was migrated by a newer tether whose migration `breaking`
    /// breaks older versions; this node stops before it writes anything.
    #[error(
        "this database's schema is at migration {db_migration} (tether {db_version}); this \
         tether {own_version} knows migrations up to {own_migration}, and migration \
         {breaking} breaks older versions: upgrade this node to tether {db_version} or newer"
    )]
    SchemaNewer {
        own_version: String,
        own_migration: i64,
        db_version: String,
        db_migration: i64,
        breaking: i64,
    },
}

impl StoreError {
    /// Whether the store cannot serve now but will by itself once the database is back
    /// (issue 25): unreachable, restarting, or (SQLite) out of space or read-only. Served
    /// as `store_unavailable` (503, retryable).
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Db(e) => health::unavailable(e),
            StoreError::Migrate(sqlx::migrate::MigrateError::Execute(e)) => health::unavailable(e),
            StoreError::Migrate(_)
            | StoreError::DataDir { .. }
            | StoreError::UnsupportedUrl(_)
            | StoreError::Corrupt { .. }
            | StoreError::FeedClosed
            | StoreError::AppendAbandoned
            | StoreError::ChildrenCap { .. }
            | StoreError::LedgerTaken { .. }
            | StoreError::Fenced { .. }
            | StoreError::Duplicate { .. }
            | StoreError::LastOwner
            | StoreError::SchemaNewer { .. } => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The database handle. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// Calls made through this store (all clones), each one round trip to the database.
    calls: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend_name())
            .finish_non_exhaustive()
    }
}

/// How long one store call waits for PostgreSQL by default (`[store] query_timeout_secs`).
pub const DEFAULT_QUERY_TIMEOUT_MS: u64 = 15_000;

/// How many nodes a store serves (see [`Store::topology`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One node: SQLite's file, locked by one daemon.
    Single,
    /// Any number of nodes on one PostgreSQL database.
    Cluster,
}

/// What every backend shares: the live parts that are not rows.
pub(crate) struct Shared {
    /// Ids of conversations whose row changed (see `pages`).
    pub(crate) changes: tokio::sync::broadcast::Sender<ConversationId>,
    /// Followers of live events (see `feed`).
    pub(crate) feed: events::feed::Hub,
    /// Event batches waiting for a group commit (see `append`).
    pub(crate) appends: events::append::Appends,
    /// Sessions' integer numbers, read once (see `numbers`).
    pub(crate) numbers: events::numbers::Numbers,
    /// The conversation epochs this node holds (see `owners`).
    pub(crate) held: cluster::owners::Held,
    /// Notices of this node's commits for the other nodes (see `tail`).
    pub(crate) outbound: cluster::tail::Outbound,
    /// How long one store call may wait for PostgreSQL's answer, in ms (see
    /// [`Store::set_query_timeout`]).
    pub(crate) query_timeout_ms: std::sync::atomic::AtomicU64,
    /// The clock every write reads its time from (see `clock`).
    pub(crate) clock: clock::StoreClock,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            changes: tokio::sync::broadcast::channel(conversations::pages::CHANGES_BUFFER).0,
            feed: events::feed::Hub::default(),
            appends: events::append::Appends::default(),
            numbers: events::numbers::Numbers::default(),
            held: cluster::owners::Held::default(),
            outbound: cluster::tail::Outbound::default(),
            query_timeout_ms: std::sync::atomic::AtomicU64::new(DEFAULT_QUERY_TIMEOUT_MS),
            clock: clock::StoreClock::default(),
        })
    }

    /// Tells the followers that conversation `id` changed (after the write committed).
    pub(crate) fn changed(&self, id: &ConversationId) {
        self.changed_here(id);
        self.outbound.changed(id);
    }

    /// Tells this node's followers only (a change another node committed, see `tail`).
    pub(crate) fn changed_here(&self, id: &ConversationId) {
        // No follower is not an error (and costs no copy of the id).
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(id.clone());
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Whether `url` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

impl Store {
    /// Opens (creating if needed) `<data_dir>/tether.db` and runs the migrations.
    pub async fn open(data_dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_path_buf(),
            source,
        })?;
        Self::open_file(&data_dir.join("tether.db")).await
    }

    /// Opens a SQLite database file directly.
    pub async fn open_file(path: &Path) -> Result<Store> {
        Ok(Store {
            backend: Backend::Sqlite(sqlite::Db::open(path, Shared::new()).await?),
            calls: Arc::default(),
        })
    }

    /// Connects to the database named by `url` and runs its migrations:
    /// `postgres://…` (PostgreSQL) or `sqlite:<path>` (a SQLite file).
    pub async fn connect(url: &str) -> Result<Store> {
        if is_postgres_url(url) {
            return Ok(Store {
                backend: Backend::Postgres(pg::Db::connect(url, Shared::new()).await?),
                calls: Arc::default(),
            });
        }
        match url
            .strip_prefix("sqlite://")
            .or(url.strip_prefix("sqlite:"))
        {
            Some(path) if !path.is_empty() => Self::open_file(Path::new(path)).await,
            _ => Err(StoreError::UnsupportedUrl(url.to_string())),
        }
    }

    /// Whether this store is one node's own (SQLite) or shared by the nodes of a cluster
    /// (PostgreSQL): decided once, by the backend, and asked for instead of its name.
    pub fn topology(&self) -> Topology {
        match &self.backend {
            Backend::Sqlite(_) => Topology::Single,
            Backend::Postgres(_) => Topology::Cluster,
        }
    }

    /// `"sqlite"` or `"postgres"` (for people: logs, `doctor`, the cluster view).
    /// Store calls made since the store was opened (each one round trip to the database;
    /// a group commit counts once per caller): the figure behind "round trips per
    /// message".
    pub fn calls(&self) -> u64 {
        self.calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn count_call(&self) {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    pub(crate) fn shared(&self) -> &Shared {
        match &self.backend {
            Backend::Sqlite(db) => db.shared(),
            Backend::Postgres(db) => db.shared(),
        }
    }

    /// Writes refused by fencing since the store opened.
    pub fn fenced_writes(&self) -> u64 {
        self.shared().held.refusals()
    }

    /// How appends were grouped so far (group commits taken, batches in them).
    pub fn append_stats(&self) -> AppendStats {
        self.shared().appends.stats()
    }

    /// Whether the database is sound: SQLite's `PRAGMA integrity_check`; on PostgreSQL,
    /// which checks its pages itself, that the server answers.
    pub async fn integrity_check(&self) -> Result<bool> {
        match &self.backend {
            Backend::Sqlite(db) => db.integrity_check().await,
            Backend::Postgres(db) => db.integrity_check().await,
        }
    }

    /// Whether a PostgreSQL server answers at `url` (one connection, closed again; no
    /// migrations): `doctor`'s check.
    pub async fn ping_url(url: &str) -> Result<()> {
        use sqlx::{ConnectOptions, Connection};
        let opts = <sqlx::postgres::PgConnectOptions as std::str::FromStr>::from_str(url)?;
        let mut conn = opts.connect().await?;
        conn.ping().await?;
        let _ = conn.close().await;
        Ok(())
    }

    /// How long one call waits for PostgreSQL's answer before it fails as unavailable
    /// (issue 25: a connection whose server stopped answering without closing it, a
    /// network black hole, would otherwise hold its caller until the kernel gives up,
    /// many minutes later); every connection is then checked before its next use.
    /// SQLite's calls are not bounded (a local file answers or fails).
    pub fn set_query_timeout(&self, timeout: std::time::Duration) {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.shared()
            .query_timeout_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes every write of this store (and its clones) read the time from `clock`
    /// instead of the system clock (what it stores as `created_at`, `at` and the like;
    /// times callers pass in, `now_ms` arguments, stay theirs).
    pub fn set_clock(&self, clock: Arc<dyn tether_core::Clock>) {
        self.shared().clock.set(clock);
    }

    /// Whether the store serves now (issue 25, `GET /api/v1/ready`): a read answers within
    /// about two seconds and no connection is waiting to reconnect. The error says why
    /// not.
    pub async fn ready(&self) -> Result<()> {
        let check = async {
            match &self.backend {
                Backend::Sqlite(db) => db.ready().await,
                Backend::Postgres(db) => db.ready().await,
            }
        };
        match tokio::time::timeout(std::time::Duration::from_secs(3), check).await {
            Ok(r) => r,
            Err(_) => Err(health::unreachable_error("no answer within 3 s").into()),
        }
    }

    /// Whether the store lost the database (or could not reach it) within the last
    /// `within`: the failover sweep takes nobody over for a lease after an outage, since
    /// every node's heartbeat and presence lapsed with it (issue 25).
    pub fn troubled_within(&self, within: std::time::Duration) -> bool {
        match &self.backend {
            Backend::Sqlite(db) => db.troubled_within(within),
            Backend::Postgres(db) => db.troubled_within(within),
        }
    }

    /// Closes every connection.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(db) => db.close().await,
            Backend::Postgres(db) => db.close().await,
        }
    }
}
