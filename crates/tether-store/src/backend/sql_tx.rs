//! A transaction on one of the store's held connections (see `sql_conns.rs`; compiled
//! once per backend): what it appended and on whose behalf it writes, so its commit can
//! publish the events and check the fencing epochs.

use std::ops::{Deref, DerefMut};

use sqlx::{Database, TransactionManager};

use super::{Sql, SqlConnection};
use super::conns::Conn;

type Tm = <Sql as Database>::TransactionManager;

/// A transaction on a held connection; dropped without [`Tx::commit`] it rolls back
/// (PostgreSQL: queued on the connection before anything else runs on it, as sqlx does;
/// SQLite: the connection is closed and replaced before its next use).
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
    /// Committed (or, without `BEGIN`, finished): dropped otherwise, its user met an
    /// error, so the connection is checked before its next use.
    done: bool,
}

impl Tx {
    /// The clock of the store whose connection this is.
    pub(super) fn clock(&self) -> &crate::clock::StoreClock {
        self.conn.clock()
    }

    /// Begins a transaction on a connection already held.
    pub async fn begin_on(mut conn: Conn) -> Result<Tx, sqlx::Error> {
        let begun = match super::BEGIN {
            // The backend's own `BEGIN` (SQLite: `IMMEDIATE`) as a plain statement: through
            // sqlx's transaction manager a custom one costs a second round trip to its
            // SQLite thread (it checks that the statement began a transaction). Until it
            // has answered the connection is suspect: interrupted there, it may be inside
            // a transaction nobody will end, and is replaced before its next use.
            Some(begin) => {
                conn.mark_suspect();
                let r = sqlx::query(begin).execute(&mut *conn).await.map(drop);
                if r.is_ok() {
                    conn.trust();
                }
                r
            }
            None => Tm::begin(&mut conn, None).await,
        };
        if let Err(e) = begun {
            conn.saw_error(&e);
            return Err(e);
        }
        Ok(Tx {
            conn,
            open: true,
            appended: 0,
            on_behalf: Vec::new(),
            trial: false,
            done: false,
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
            done: false,
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
            let committed = match super::BEGIN {
                Some(_) => sqlx::query("COMMIT").execute(&mut *self.conn).await.map(drop),
                None => Tm::commit(&mut self.conn).await,
            };
            if let Err(e) = committed {
                self.conn.saw_error(&e);
                return Err(e);
            }
            self.open = false;
        }
        self.done = true;
        Ok(after())
    }

    /// Rolls back on purpose (what it read decided nothing is to be written); the
    /// connection stays trusted.
    pub async fn rollback(mut self) -> Result<(), sqlx::Error> {
        self.roll_back_now().await
    }

    /// [`Self::rollback`] in place, for a caller that refuses the transaction and
    /// returns (its locks let go now, not at the connection's next use).
    pub async fn roll_back_now(&mut self) -> Result<(), sqlx::Error> {
        if self.open {
            let rolled_back = match super::BEGIN {
                Some(_) => sqlx::query("ROLLBACK").execute(&mut *self.conn).await.map(drop),
                None => Tm::rollback(&mut self.conn).await,
            };
            if let Err(e) = rolled_back {
                self.conn.saw_error(&e);
                return Err(e);
            }
            self.open = false;
        }
        self.done = true;
        Ok(())
    }

    /// A statement failed on this connection outside a transaction (one that commits on
    /// its own, so nothing is left open): the connection is checked, or on SQLite
    /// replaced, before its next use, as after any error.
    pub fn statement_failed(&mut self, e: &sqlx::Error) {
        self.conn.saw_error(e);
    }

    /// A statement that runs a transaction of its own (SQLite: `BEGIN` … `COMMIT` in one
    /// query, see `dialect::ADD_TURN_WITH_MESSAGE`) failed on this connection, which is
    /// outside a transaction of ours: midway, it may have left its own open, so the
    /// connection goes at once (SQLite; PostgreSQL's one statement is atomic by itself,
    /// the connection is checked as after any error).
    pub fn own_transaction_failed(&mut self, e: &sqlx::Error) {
        debug_assert!(!self.open, "only outside a transaction of ours");
        self.conn.saw_error(e);
        if super::dialect::REPLACE_SUSPECT {
            self.conn.discard();
        }
    }

    /// A held connection used without `BEGIN` ([`Tx::autocommit_on`]) whose statement
    /// completed and stored nothing to publish (it changed no row, or its own check
    /// refused it): let go as trusted, not checked (SQLite: replaced) before its next use.
    pub fn statement_done(mut self) {
        debug_assert!(!self.open, "only without BEGIN");
        debug_assert_eq!(self.appended, 0, "appended events are published at commit");
        self.done = true;
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
            match super::BEGIN {
                None => Tm::start_rollback(&mut self.conn),
                // Begun by the backend's own statement, it is not sqlx's to roll back:
                // the connection is closed now (rolled back, its write lock let go) and
                // replaced before its next use, as a suspect SQLite connection is anyway.
                Some(_) => self.conn.discard(),
            }
        }
        if !self.done {
            self.conn.mark_suspect();
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

