//! The time the store writes (`created_at`, `at`, leases, …): read through a
//! [`Clock`], the system clock unless the runtime gives its own
//! ([`Store::set_clock`](crate::Store::set_clock)). The SQL reads it as `Db::now_ms` or
//! `Tx::now_ms` (see `backend/sql_clock.rs`), never from the system directly.

use std::sync::{Arc, RwLock};

use tether_core::clock::{Clock, Wait};

/// The system's wall clock: [`crate::now_ms`], and `tokio`'s timer for waits.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::now_ms()
    }

    fn sleep_until(&self, at_ms: i64) -> Wait {
        let wait = u64::try_from(at_ms.saturating_sub(crate::now_ms())).unwrap_or(0);
        Box::pin(tokio::time::sleep(std::time::Duration::from_millis(wait)))
    }
}

/// The clock of one store, shared by its clones and its connection sets; replaceable
/// while the store is open.
#[derive(Clone)]
pub(crate) struct StoreClock(Arc<RwLock<Arc<dyn Clock>>>);

impl Default for StoreClock {
    fn default() -> StoreClock {
        StoreClock(Arc::new(RwLock::new(Arc::new(SystemClock))))
    }
}

impl StoreClock {
    pub(crate) fn now_ms(&self) -> i64 {
        self.0.read().unwrap_or_else(|p| p.into_inner()).now_ms()
    }

    pub(crate) fn set(&self, clock: Arc<dyn Clock>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = clock;
    }
}
