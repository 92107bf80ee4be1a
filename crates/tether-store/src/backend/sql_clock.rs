//! Where the SQL reads the time: the store's clock (`crate::clock`), through the
//! backend's `Db` or an open transaction, so a clock the runtime sets reaches every
//! write (compiled once per backend).

use super::Db;
use super::conns::Tx;

impl Db {
    /// The store clock's time (ms since the Unix epoch).
    pub(super) fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }
}

impl Tx {
    /// The store clock's time, for the statements of this transaction.
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock().now_ms()
    }
}
