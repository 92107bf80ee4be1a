//! The store's connections (compiled once per backend), held directly instead of in an `sqlx::Pool`.
//!
//! sqlx's pool spawns a task and pings the connection (one more round trip to sqlx's
//! SQLite worker thread) every time a connection goes back to the pool, i.e. after every
//! query and every transaction; with one writer connection the next write waits for that.
//! tether-bench measured these thread hand-offs as the largest part of tether's cost per
//! turn. [`Conns`] is a fixed set of connections behind a semaphore and a mutex each:
//! taking one and giving it back costs nothing on the SQLite thread. It is an
//! [`Executor`] like the pool (`.fetch_one(&self.reader)`), and [`Conns::begin`] gives a
//! transaction that rolls back when dropped without `commit`, like sqlx's.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use sqlx::{
    ConnectOptions, Connection, Database, Describe, Either, Execute, Executor,
};
use tokio::sync::{Mutex, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

type Slot = Arc<Mutex<SlotState>>;

use super::{Sql, SqlConnectOptions, SqlConnection, SqlQueryResult, SqlRow, SqlStatement};
use crate::backend::health::{self, Backoff};
// The transaction type lives beside (`sql_tx.rs`); the SQL names it `conns::Tx`.
pub(crate) use super::tx::Tx;

/// One connection's place: the connection (none while it is being replaced), whether it
/// must be checked before its next use, and since when it idles.
pub(crate) struct SlotState {
    conn: Option<SqlConnection>,
    /// Checked (pinged) before its next use: its last user saw an error, or another
    /// connection of the set saw the server go away (`checked < Inner::generation`).
    suspect: bool,
    checked: u64,
    last_used: Instant,
}

/// A fixed set of connections to one database. Cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct Conns(Arc<Inner>);

struct Inner {
    slots: Vec<Slot>,
    free: Arc<Semaphore>,
    closed: AtomicBool,
    /// How to open a replacement.
    opts: SqlConnectOptions,
    /// A connection unused for this long is checked before use (PostgreSQL: a server
    /// restarted meanwhile closed it; SQLite: never).
    idle_check: Option<Duration>,
    /// Moved on when any connection of the set sees the server go away: every other one
    /// is checked before its next use.
    generation: AtomicU64,
    /// When a replacement may be tried again after failed ones (back-off with jitter).
    backoff: Backoff,
    /// Failed replacements in a row (0: the database answers).
    failures: AtomicU32,
    /// When a connection of the set last saw the server go away or failed to reach it.
    last_trouble: std::sync::Mutex<Option<Instant>>,
    /// The store's clock, for the statements of its transactions (see `sql_clock.rs`).
    clock: crate::clock::StoreClock,
}

impl Inner {
    fn trouble(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.last_trouble.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns")
            .field("size", &self.0.slots.len())
            .finish_non_exhaustive()
    }
}

/// One connection, exclusively held until dropped.
pub(crate) struct Conn {
    // Dropped before the permit: a permit holder always finds a free slot.
    guard: OwnedMutexGuard<SlotState>,
    _permit: OwnedSemaphorePermit,
    set: Arc<Inner>,
}

impl Conn {
    /// The clock of the store this connection serves.
    pub(super) fn clock(&self) -> &crate::clock::StoreClock {
        &self.set.clock
    }

    /// Its user saw an error: check the connection before its next use; when the error
    /// shows the server gone, every connection of the set is checked.
    pub fn saw_error(&mut self, e: &sqlx::Error) {
        self.guard.suspect = true;
        if health::connection_lost(e) {
            self.set.trouble();
        }
    }

    pub(super) fn mark_suspect(&mut self) {
        self.guard.suspect = true;
    }

    /// Drops the connection now (closed: SQLite rolls back what it kept open and lets go
    /// of its locks); the slot opens a replacement before its next use.
    pub(super) fn discard(&mut self) {
        self.guard.conn = None;
        self.guard.suspect = true;
    }

    /// Trusted again: what made it suspect finished (a statement whose interruption
    /// would have left it in an unknown state completed).
    pub(super) fn trust(&mut self) {
        self.guard.suspect = false;
    }
}

/// How long to wait for a replacement connection (or a check of one) before failing.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a caller waits for a free connection while the database is unreachable
/// (never while it answers: then a caller waits its turn).
const DEGRADED_WAIT: Duration = Duration::from_secs(2);

impl Conns {
    /// Opens `size` connections with `opts`; `idle_check`: see [`Inner::idle_check`].
    pub async fn open(
        opts: &SqlConnectOptions,
        size: usize,
        idle_check: Option<Duration>,
        clock: &crate::clock::StoreClock,
    ) -> Result<Conns, sqlx::Error> {
        let mut conns = Vec::with_capacity(size);
        for _ in 0..size.max(1) {
            conns.push(opts.connect().await?);
        }
        Ok(Conns::from_connections(conns, opts, idle_check, clock))
    }

    /// Wraps an open connection (replacements are opened with `opts`).
    pub fn from_connection(
        conn: SqlConnection,
        opts: &SqlConnectOptions,
        idle_check: Option<Duration>,
        clock: &crate::clock::StoreClock,
    ) -> Conns {
        Conns::from_connections(vec![conn], opts, idle_check, clock)
    }

    fn from_connections(
        conns: Vec<SqlConnection>,
        opts: &SqlConnectOptions,
        idle_check: Option<Duration>,
        clock: &crate::clock::StoreClock,
    ) -> Conns {
        let now = Instant::now();
        let slots: Vec<Slot> = conns
            .into_iter()
            .map(|c| {
                Arc::new(Mutex::new(SlotState {
                    conn: Some(c),
                    suspect: false,
                    checked: 0,
                    last_used: now,
                }))
            })
            .collect();
        Conns(Arc::new(Inner {
            free: Arc::new(Semaphore::new(slots.len())),
            slots,
            closed: AtomicBool::new(false),
            opts: opts.clone(),
            idle_check,
            generation: AtomicU64::new(0),
            backoff: Backoff::default(),
            failures: AtomicU32::new(0),
            last_trouble: std::sync::Mutex::new(None),
            clock: clock.clone(),
        }))
    }

    /// Whether a connection of the set saw the server go away, could not reach it, or
    /// had to be replaced within the last `within` (or the set is still reconnecting).
    pub fn troubled_within(&self, within: Duration) -> bool {
        self.degraded()
            || self
                .0
                .last_trouble
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|t| t.elapsed() < within)
    }

    /// Something showed the server may be gone (a call that got no answer in time):
    /// every connection of the set is checked before its next use.
    // Only PostgreSQL's calls are bounded (the SQLite build does not ask).
    #[allow(dead_code)]
    pub fn trouble(&self) {
        self.0.trouble();
    }

    /// Whether the last attempt to reach the database failed (and none has succeeded
    /// since).
    pub fn degraded(&self) -> bool {
        self.0.failures.load(Ordering::SeqCst) > 0
    }

    /// Waits for a free connection, checked (and replaced) first when it may have died.
    /// While the database is unreachable it fails within about two seconds, never hangs.
    pub async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        let permit = self.permit().await?;
        // Holding a permit, at least one slot is unlocked.
        let mut guard = None;
        for slot in &self.0.slots {
            if let Ok(g) = Arc::clone(slot).try_lock_owned() {
                guard = Some(g);
                break;
            }
        }
        let guard = match guard {
            Some(g) => g,
            // Only reachable if a slot guard outlived its permit; wait for the first slot.
            None => Arc::clone(&self.0.slots[0]).lock_owned().await,
        };
        if self.0.closed.load(Ordering::SeqCst) {
            return Err(sqlx::Error::PoolClosed);
        }
        let mut conn = Conn {
            guard,
            _permit: permit,
            set: Arc::clone(&self.0),
        };
        self.make_ready(&mut conn).await?;
        conn.guard.last_used = Instant::now();
        Ok(conn)
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, sqlx::Error> {
        let start = Instant::now();
        loop {
            let wait = Arc::clone(&self.0.free).acquire_owned();
            match tokio::time::timeout(Duration::from_millis(250), wait).await {
                Ok(Ok(p)) => return Ok(p),
                Ok(Err(_)) => return Err(sqlx::Error::PoolClosed),
                Err(_) if self.degraded() && start.elapsed() >= DEGRADED_WAIT => {
                    return Err(health::unreachable_error(
                        "every connection is busy reconnecting",
                    ));
                }
                Err(_) => {}
            }
        }
    }

    /// Checks a held slot's connection when it may have died, and opens a replacement
    /// when it has (or has none), subject to the back-off.
    async fn make_ready(&self, conn: &mut Conn) -> Result<(), sqlx::Error> {
        let generation = self.0.generation.load(Ordering::SeqCst);
        let g = &mut conn.guard;
        let idle = self
            .0
            .idle_check
            .is_some_and(|limit| g.last_used.elapsed() >= limit);
        if g.conn.is_some() && !g.suspect && g.checked >= generation && !idle {
            return Ok(());
        }
        if g.suspect
            && super::dialect::REPLACE_SUSPECT
            && let Some(c) = g.conn.take()
        {
            // Closing ends whatever transaction SQLite kept open (rolled back).
            let _ = c.close().await;
        }
        if let Some(c) = g.conn.as_mut() {
            match tokio::time::timeout(CONNECT_TIMEOUT, c.ping()).await {
                Ok(Ok(())) => {
                    g.suspect = false;
                    g.checked = generation;
                    return Ok(());
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "a store connection died; replacing it"),
                Err(_) => tracing::debug!("a store connection did not answer; replacing it"),
            }
            // Dropped, not closed: the server is gone or not answering.
            g.conn = None;
            self.0.trouble();
        }
        if let Some(wait) = self.0.backoff.wait_left() {
            return Err(health::unreachable_error(&format!(
                "the database is unreachable; the next try is in {} ms",
                wait.as_millis()
            )));
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, self.0.opts.connect()).await {
            Ok(Ok(c)) => {
                let was = self.0.failures.swap(0, Ordering::SeqCst);
                if was > 0 {
                    tracing::info!(failures = was, "the database answers again");
                }
                self.0.backoff.reset();
                // A replacement ends the trouble: what it measures runs from here.
                *self
                    .0
                    .last_trouble
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                g.conn = Some(c);
                g.suspect = false;
                g.checked = self.0.generation.load(Ordering::SeqCst);
                Ok(())
            }
            Ok(Err(e)) => Err(self.failed(e)),
            Err(_) => Err(self.failed(health::unreachable_error(
                "the database did not answer within 2 s",
            ))),
        }
    }

    fn failed(&self, e: sqlx::Error) -> sqlx::Error {
        self.0.trouble();
        let n = self.0.failures.fetch_add(1, Ordering::SeqCst) + 1;
        self.0.backoff.failed(n);
        if n == 1 {
            tracing::warn!(error = %e, "the database is unreachable; reconnecting with back-off");
        }
        e
    }

    /// Begins a transaction on a connection of its own.
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        Tx::begin_on(self.acquire().await?).await
    }

    /// Connections of the set, and how many are taken now (issue 31's pool-use gauge).
    pub fn usage(&self) -> (usize, usize) {
        let size = self.0.slots.len();
        (size, size.saturating_sub(self.0.free.available_permits()))
    }

    // Only SQLite's checkpointer asks (the PostgreSQL build does not).
    #[allow(dead_code)]
    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::SeqCst)
    }

    /// Closes every connection (waiting for those in use); later acquires fail.
    pub async fn close(&self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.free.close();
        for slot in &self.0.slots {
            if let Some(conn) = slot.lock().await.conn.take() {
                let _ = conn.close().await;
            }
        }
    }
}

impl Deref for Conn {
    type Target = SqlConnection;

    fn deref(&self) -> &SqlConnection {
        match self.guard.conn.as_ref() {
            Some(c) => c,
            // `acquire` never hands out an empty slot, `close` needs the lock to empty
            // one, and `discard` is its holder's last act (a transaction's drop).
            None => unreachable!("a held connection slot is never empty"),
        }
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut SqlConnection {
        match self.guard.conn.as_mut() {
            Some(c) => c,
            None => unreachable!("a held connection slot is never empty"),
        }
    }
}

impl<'c> Executor<'c> for &'c Conns {
    type Database = Sql;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<SqlQueryResult, SqlRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Sql>,
    {
        // Results are collected while the connection is held (every store query is read
        // to its end anyway), then handed out.
        futures::stream::once(async move {
            let mut conn = self.acquire().await?;
            let items: Vec<_> = match conn.fetch_many(query).try_collect().await {
                Ok(items) => items,
                Err(e) => {
                    conn.saw_error(&e);
                    return Err(e);
                }
            };
            Ok::<_, sqlx::Error>(futures::stream::iter(items.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<SqlRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Sql>,
    {
        Box::pin(async move {
            let mut conn = self.acquire().await?;
            let out = conn.fetch_optional(query).await;
            if let Err(e) = &out {
                conn.saw_error(e);
            }
            out
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [<Sql as Database>::TypeInfo],
    ) -> BoxFuture<'e, Result<SqlStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        Box::pin(async move { self.acquire().await?.prepare_with(sql, parameters).await })
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Sql>, sqlx::Error>>
    where
        'c: 'e,
    {
        Box::pin(async move { self.acquire().await?.describe(sql).await })
    }
}
