//! What the runtime is given instead of building it itself, so that it can be run
//! in-process with a scripted agent and a clock a test sets: the agent drivers and the
//! wall clock. [`Seams::default`] is what the daemon uses (the real drivers, the system
//! clock).
//!
//! Timers that only measure a span (turn timeout, stop grace, coalescing window, pool
//! idle TTL) use tokio time; what is compared with a stored wall-clock time (approval and
//! question deadlines) uses the [`Clock`], including the wait for it.

use std::sync::Arc;
use std::time::Duration;

use tether_agents::{
    AcpDriver, AgentDriver, ClaudeDriver, CodexDriver, DriverKind, GroupRecords, Hosts,
};
pub use tether_core::clock::{Clock, Wait};

/// The system clock; waits are tokio sleeps for the span left.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        tether_store::now_ms()
    }

    fn sleep_until(&self, at_ms: i64) -> Wait {
        Box::pin(async move {
            // Tokio's timer and the wall clock may disagree by a little: wait again until
            // the wall clock agrees, so a caller checking `now_ms` afterwards never sees
            // the deadline still ahead.
            loop {
                let left = at_ms.saturating_sub(SystemClock.now_ms());
                let Ok(left @ 1..) = u64::try_from(left) else {
                    return;
                };
                tokio::time::sleep(Duration::from_millis(left)).await;
            }
        })
    }
}

/// The agent drivers, one per protocol.
#[derive(Clone)]
pub struct Drivers {
    pub acp: Arc<dyn AgentDriver>,
    pub codex: Arc<dyn AgentDriver>,
    pub claude: Arc<dyn AgentDriver>,
}

impl Drivers {
    /// The real drivers: they spawn the configured agent CLIs; Codex and ACP sessions
    /// share processes in `hosts` when given.
    pub fn real(
        start_timeout: Duration,
        records: Option<GroupRecords>,
        hosts: Option<Hosts>,
    ) -> Drivers {
        Drivers {
            acp: Arc::new(AcpDriver {
                start_timeout,
                records: records.clone(),
                hosts: hosts.clone(),
            }),
            codex: Arc::new(CodexDriver {
                start_timeout,
                records: records.clone(),
                hosts,
            }),
            claude: Arc::new(ClaudeDriver {
                start_timeout,
                records,
            }),
        }
    }

    /// One driver for every protocol.
    pub fn same(driver: Arc<dyn AgentDriver>) -> Drivers {
        Drivers {
            acp: driver.clone(),
            codex: driver.clone(),
            claude: driver,
        }
    }

    pub(crate) fn get(&self, kind: DriverKind) -> &dyn AgentDriver {
        match kind {
            DriverKind::Acp => self.acp.as_ref(),
            DriverKind::Codex => self.codex.as_ref(),
            DriverKind::Claude => self.claude.as_ref(),
        }
    }
}

/// What [`crate::Runtime::start_with`] is given.
#[derive(Clone)]
pub struct Seams {
    /// `None`: the real drivers ([`Drivers::real`]), recording process groups in the
    /// data directory.
    pub drivers: Option<Drivers>,
    pub clock: Arc<dyn Clock>,
}

impl Default for Seams {
    fn default() -> Self {
        Seams {
            drivers: None,
            clock: Arc::new(SystemClock),
        }
    }
}
