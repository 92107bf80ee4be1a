//! Presence (issue 12): each node holds a session-level advisory lock keyed by its id on
//! a connection of its own for as long as it runs. The server ends that session, and so
//! frees the lock, as soon as the node's process dies (its socket closes with it), so a
//! SIGKILLed node is seen gone in well under a second instead of at the end of its lease.
//! A node that is paused, or cut off without its socket closing, still holds the lock:
//! then the lease decides, as before. The lock is PostgreSQL's own; nothing home-made.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::Result;

/// The first key of tether's presence locks (the second is the node's).
const NAMESPACE: i32 = 0x7e7e_0001;

/// The lock key of node `id`: FNV-1a of its id, folded to 32 bits. Two ids sharing a key
/// only make a dead node look present (the lease still ends it).
fn key_of(id: &str) -> i32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // Fold, then reinterpret the 32 bits as PostgreSQL's int4.
    i32::from_ne_bytes((((h >> 32) ^ h) as u32).to_ne_bytes())
}

/// A node's presence connection and whether it holds the node's lock yet.
pub struct Presence {
    conn: PgConnection,
    key: i32,
    held: bool,
}

impl Presence {
    /// Connects and tries to take node `id`'s lock (a restarted node's previous session
    /// may still hold it for a moment: [`Presence::renew`] tries again).
    pub(crate) async fn hold(opts: &PgConnectOptions, id: &str) -> Result<Presence> {
        let conn = PgConnection::connect_with(opts).await?;
        let mut p = Presence {
            conn,
            key: key_of(id),
            held: false,
        };
        p.renew().await?;
        Ok(p)
    }

    /// Whether the lock is held (others see this node present).
    pub fn held(&self) -> bool {
        self.held
    }

    /// Takes the lock if it is not held yet, and checks the connection: an error means
    /// the session is gone (and the lock with it): hold a new one.
    pub async fn renew(&mut self) -> Result<bool> {
        if self.held {
            sqlx::query("SELECT 1").execute(&mut self.conn).await?;
        } else {
            let (got,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1, $2)")
                .bind(NAMESPACE)
                .bind(self.key)
                .fetch_one(&mut self.conn)
                .await?;
            self.held = got;
        }
        Ok(self.held)
    }
}

/// Whether some session holds node `id`'s lock (a transaction-level try, released at
/// once when it succeeds: nobody held it, the node is gone).
pub(crate) async fn present<'e, E>(executor: E, id: &str) -> Result<bool>
where
    E: sqlx::Executor<'e, Database = sqlx::Postgres>,
{
    let (free,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_xact_lock($1, $2)")
        .bind(NAMESPACE)
        .bind(key_of(id))
        .fetch_one(executor)
        .await?;
    Ok(!free)
}

#[cfg(test)]
mod tests {
    use super::key_of;

    #[test]
    fn keys_are_stable_and_spread() {
        assert_eq!(key_of("a"), key_of("a"));
        assert_ne!(key_of("node-1"), key_of("node-2"));
    }
}
