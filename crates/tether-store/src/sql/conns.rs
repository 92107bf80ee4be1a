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
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use sqlx::{
    ConnectOptions, Connection, Database, Describe, Either, Execute, Executor, TransactionManager,
};
use tokio::sync::{Mutex, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

type Slot = Arc<Mutex<Option<SqlConnection>>>;
type Tm = <Sql as Database>::TransactionManager;

use super::{Sql, SqlConnectOptions, SqlConnection, SqlQueryResult, SqlRow, SqlStatement};

/// A fixed set of connections to one database. Cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct Conns(Arc<Inner>);

struct Inner {
    slots: Vec<Slot>,
    free: Arc<Semaphore>,
    closed: AtomicBool,
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
    guard: OwnedMutexGuard<Option<SqlConnection>>,
    _permit: OwnedSemaphorePermit,
}

impl Conns {
    /// Opens `size` connections with `opts`.
    pub async fn open(opts: &SqlConnectOptions, size: usize) -> Result<Conns, sqlx::Error> {
        let mut slots = Vec::with_capacity(size);
        for _ in 0..size.max(1) {
            slots.push(Arc::new(Mutex::new(Some(opts.connect().await?))));
        }
        Ok(Conns::from_slots(slots))
    }

    /// Wraps an open connection.
    pub fn from_connection(conn: SqlConnection) -> Conns {
        Conns::from_slots(vec![Arc::new(Mutex::new(Some(conn)))])
    }

    fn from_slots(slots: Vec<Slot>) -> Conns {
        Conns(Arc::new(Inner {
            free: Arc::new(Semaphore::new(slots.len())),
            slots,
            closed: AtomicBool::new(false),
        }))
    }

    /// Waits for a free connection.
    pub async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        let permit = Arc::clone(&self.0.free)
            .acquire_owned()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        // Holding a permit, at least one slot is unlocked.
        for slot in &self.0.slots {
            if let Ok(guard) = Arc::clone(slot).try_lock_owned() {
                if guard.is_none() {
                    return Err(sqlx::Error::PoolClosed);
                }
                return Ok(Conn {
                    guard,
                    _permit: permit,
                });
            }
        }
        // Only reachable if a slot guard outlived its permit; wait for the first slot.
        let guard = Arc::clone(&self.0.slots[0]).lock_owned().await;
        if guard.is_none() {
            return Err(sqlx::Error::PoolClosed);
        }
        Ok(Conn {
            guard,
            _permit: permit,
        })
    }

    /// Begins a transaction on a connection of its own.
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        Tx::begin_on(self.acquire().await?).await
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
            if let Some(conn) = slot.lock().await.take() {
                let _ = conn.close().await;
            }
        }
    }
}

impl Deref for Conn {
    type Target = SqlConnection;

    fn deref(&self) -> &SqlConnection {
        match self.guard.as_ref() {
            Some(c) => c,
            // `acquire` never hands out an empty slot, and `close` needs the lock to
            // empty one.
            None => unreachable!("a held connection slot is never empty"),
        }
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut SqlConnection {
        match self.guard.as_mut() {
            Some(c) => c,
            None => unreachable!("a held connection slot is never empty"),
        }
    }
}

/// A transaction on a held connection; dropped without [`Tx::commit`] it rolls back
/// (queued on the connection before anything else runs on it, as sqlx does).
pub(crate) struct Tx {
    conn: Conn,
    open: bool,
    /// Events appended in it (they must be published at commit, see `feed`).
    appended: usize,
    /// The conversations it writes on behalf of (their fencing epochs are checked before
    /// it commits, see `fence`).
    on_behalf: Vec<tether_proto::ConversationId>,
    /// A group commit's first try: if refused, its batches are tried again one by one,
    /// so a refusal is counted then, not now.
    trial: bool,
}

impl Tx {
    /// Begins a transaction on a connection already held.
    pub async fn begin_on(mut conn: Conn) -> Result<Tx, sqlx::Error> {
        Tm::begin(&mut conn, None).await?;
        Ok(Tx {
            conn,
            open: true,
            appended: 0,
            on_behalf: Vec::new(),
            trial: false,
        })
    }

    /// A held connection used like a transaction of one statement: without `BEGIN`,
    /// each statement commits on its own (two round trips fewer); [`Tx::commit_then`]
    /// only runs its closure while the connection is still held.
    pub fn autocommit_on(conn: Conn) -> Tx {
        Tx {
            conn,
            open: false,
            appended: 0,
            on_behalf: Vec::new(),
            trial: false,
        }
    }

    /// Commits a transaction that appended no event and wrote on behalf of no
    /// conversation.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        debug_assert_eq!(
            self.appended, 0,
            "a transaction that appends events commits with Store::commit_events"
        );
        debug_assert!(
            self.on_behalf.is_empty(),
            "a transaction that writes for a conversation commits through its fence"
        );
        self.commit_then(|| ()).await
    }

    /// Commits a transaction that appended no event, its fence checked already (see
    /// `Db::commit_fenced`).
    pub async fn commit_unchecked(self) -> Result<(), sqlx::Error> {
        debug_assert_eq!(
            self.appended, 0,
            "a transaction that appends events commits with Store::commit_events"
        );
        self.commit_then(|| ()).await
    }

    /// Commits, then runs `after` before the connection is given back: with one writer
    /// connection, whatever `after` does happens in commit order.
    pub async fn commit_then<R>(mut self, after: impl FnOnce() -> R) -> Result<R, sqlx::Error> {
        if self.open {
            Tm::commit(&mut self.conn).await?;
            self.open = false;
        }
        Ok(after())
    }

    /// Counts an event appended in this transaction.
    pub fn note_appended(&mut self, n: usize) {
        self.appended += n;
    }

    pub fn appended(&self) -> usize {
        self.appended
    }

    /// Records that this transaction writes on behalf of conversation `id` (an event, a
    /// history line, a turn or a session of it).
    pub fn note_on_behalf(&mut self, id: &tether_proto::ConversationId) {
        if !self.on_behalf.contains(id) {
            self.on_behalf.push(id.clone());
        }
    }

    /// The conversations it writes on behalf of.
    pub fn on_behalf(&self) -> &[tether_proto::ConversationId] {
        &self.on_behalf
    }

    /// Marks a group commit's first try (see `trial`).
    pub fn mark_trial(&mut self) {
        self.trial = true;
    }

    pub fn is_trial(&self) -> bool {
        self.trial
    }

    /// Whether statements commit on their own (no `BEGIN`): nothing can be refused
    /// after the fact then.
    pub fn is_autocommit(&self) -> bool {
        !self.open
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.open {
            Tm::start_rollback(&mut self.conn);
        }
    }
}

impl Deref for Tx {
    type Target = SqlConnection;

    fn deref(&self) -> &SqlConnection {
        &self.conn
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut SqlConnection {
        &mut self.conn
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
            let items: Vec<_> = conn.fetch_many(query).try_collect().await?;
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
        Box::pin(async move { self.acquire().await?.fetch_optional(query).await })
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
