//! The hard ceiling on agent processes (issue 24 S6): every agent process a driver
//! spawns (a session's own, a shared one, a warm spare) takes a slot here first and gives
//! it back once it has ended and been reaped. At the ceiling a spawn fails with
//! [`AgentError::ProcessCeiling`]; the runtime then makes room (ends an empty shared
//! process, evicts an idle session) and tries again as slots come back ([`ProcessCeiling::freed`]).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::AgentError;

/// The slots of one runtime's agent processes (cheap to clone).
#[derive(Debug, Clone)]
pub struct ProcessCeiling {
    limit: usize,
    slots: Arc<Semaphore>,
    freed: watch::Sender<u64>,
}

/// One process's slot; given back when dropped.
#[derive(Debug)]
pub struct ProcessSlot {
    _permit: OwnedSemaphorePermit,
    freed: watch::Sender<u64>,
}

impl Drop for ProcessSlot {
    fn drop(&mut self) {
        self.freed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl ProcessCeiling {
    /// At most `limit` agent processes at once (at least 1).
    pub fn new(limit: usize) -> ProcessCeiling {
        let limit = limit.max(1);
        ProcessCeiling {
            limit,
            slots: Arc::new(Semaphore::new(limit)),
            freed: watch::Sender::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Agent processes running (or not yet reaped) now.
    pub fn running(&self) -> usize {
        self.limit - self.slots.available_permits()
    }

    /// A slot for a new process of `agent`, or [`AgentError::ProcessCeiling`].
    pub fn take(&self) -> Result<ProcessSlot, AgentError> {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => Ok(ProcessSlot {
                _permit: permit,
                freed: self.freed.clone(),
            }),
            Err(_) => Err(AgentError::ProcessCeiling { limit: self.limit }),
        }
    }

    /// Changes each time a slot comes back.
    pub fn freed(&self) -> watch::Receiver<u64> {
        self.freed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn slots_are_taken_up_to_the_limit_and_come_back_when_dropped() {
        let c = ProcessCeiling::new(2);
        let freed = c.freed();
        let a = c.take().unwrap();
        let _b = c.take().unwrap();
        assert_eq!(c.running(), 2);
        assert!(matches!(
            c.take(),
            Err(AgentError::ProcessCeiling { limit: 2 })
        ));
        drop(a);
        assert!(freed.has_changed().unwrap());
        assert_eq!(c.running(), 1);
        assert!(c.take().is_ok());
    }
}
