//! When the database goes away (issue 25): which errors mean it is unreachable (as
//! opposed to a bad query), the error a caller gets while tether waits to reconnect, and
//! the back-off between reconnection attempts.
//!
//! A database restart closes every connection; the next use of each fails with an I/O
//! error (or PostgreSQL's `57P01 admin_shutdown`). The connection set (`backend/sql_conns.rs`)
//! then checks its other connections before their next use, replaces dead ones, and
//! while the server refuses tries again only after a back-off (100 ms doubling to 2 s,
//! ±50 % jitter so nodes do not reconnect in step). Callers meanwhile fail fast with an
//! error [`crate::StoreError::is_unavailable`] recognises (`store_unavailable`, 503).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// First wait after a failed reconnection.
const FIRST_WAIT: Duration = Duration::from_millis(100);
/// Longest wait between two reconnection attempts.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// Whether `e` says the connection (or the server behind it) is gone, so the
/// connection must be replaced.
pub(crate) fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|pg| server_gone(pg.code())),
        _ => false,
    }
}

/// PostgreSQL's codes for a connection or server that is going or gone: class 08
/// (connection exception), 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot
/// connect now (starting up or shutting down), 53300 too many connections.
fn server_gone(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
}

/// Whether `e` means the store cannot serve right now but will by itself later: the
/// server is unreachable, or (SQLite) the disk is full, the file system read-only, the
/// file cannot be opened or stays locked.
pub(crate) fn unavailable(e: &sqlx::Error) -> bool {
    if connection_lost(e) {
        return true;
    }
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    // SQLite's primary result codes (the extended ones keep them in the low byte):
    // BUSY 5, LOCKED 6, READONLY 8, IOERR 10, FULL 13, CANTOPEN 14. Only for SQLite's
    // errors: PostgreSQL's SQLSTATEs are digits too (22021 is a bad byte, not a disk).
    db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
        && db
            .code()
            .and_then(|c| c.parse::<i64>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6 | 8 | 10 | 13 | 14))
}

/// The error of a caller that did not get a connection because the database is
/// unreachable (recognised by [`unavailable`]).
pub(crate) fn unreachable_error(why: &str) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("store unavailable: {why}"),
    ))
}

/// When the next reconnection may be tried.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    next_try: Mutex<Option<Instant>>,
}

impl Backoff {
    /// How long until the next try may be made (`None`: now).
    pub(crate) fn wait_left(&self) -> Option<Duration> {
        let next = *self.next_try.lock().unwrap_or_else(|p| p.into_inner());
        next.and_then(|t| t.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// The `n`th failure in a row: waits 100 ms × 2ⁿ⁻¹ (at most 5 s), ±50 % jitter.
    pub(crate) fn failed(&self, n: u32) {
        let wait = delay(n, jitter());
        *self.next_try.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + wait);
    }

    pub(crate) fn reset(&self) {
        *self.next_try.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The wait after the `n`th failure, scaled by `jitter` (0.5..1.5).
fn delay(n: u32, jitter: f64) -> Duration {
    let base = FIRST_WAIT.saturating_mul(1 << n.saturating_sub(1).min(16));
    base.min(MAX_WAIT).mul_f64(jitter)
}

/// A factor in 0.5..1.5 from fresh random bits (std's randomly keyed hasher).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    0.5 + (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_two_seconds_and_is_jittered() {
        assert_eq!(delay(1, 1.0), Duration::from_millis(100));
        assert_eq!(delay(2, 1.0), Duration::from_millis(200));
        assert_eq!(delay(4, 1.0), Duration::from_millis(800));
        assert_eq!(delay(30, 1.0), MAX_WAIT);
        assert_eq!(delay(1, 0.5), Duration::from_millis(50));
        for _ in 0..100 {
            let j = jitter();
            assert!((0.5..1.5).contains(&j), "{j}");
        }
        let b = Backoff::default();
        assert!(b.wait_left().is_none());
        b.failed(3);
        assert!(b.wait_left().is_some());
        b.reset();
        assert!(b.wait_left().is_none());
    }

    #[test]
    fn errors_that_mean_the_server_is_gone() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        assert!(connection_lost(&io) && unavailable(&io));
        assert!(unavailable(&unreachable_error("x")));
        assert!(!connection_lost(&sqlx::Error::RowNotFound));
        assert!(!unavailable(&sqlx::Error::RowNotFound));
        assert!(server_gone("57P01") && server_gone("08006") && !server_gone("23505"));
    }
}
