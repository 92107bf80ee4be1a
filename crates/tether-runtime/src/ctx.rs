//! Shared context of the runtime: the store, the event bus, the configuration and the
//! agent drivers.

use std::sync::Arc;

use tether_agents::{
    AcpDriver, AgentDriver, AgentError, AgentSession, ClaudeDriver, CodexDriver, DriverKind,
    StartRequest,
};
use tether_proto::EventEnvelope;
use tether_store::Store;
use tokio::sync::broadcast;

use crate::RuntimeConfig;
use crate::pool::Pool;

pub(crate) struct Ctx {
    pub store: Store,
    pub bus: broadcast::Sender<EventEnvelope>,
    pub config: RuntimeConfig,
    pub pool: Pool,
    /// Delegation: MCP tokens of launched sessions, the readiness gate.
    pub delegation: crate::delegation::Registry,
    acp: AcpDriver,
    codex: CodexDriver,
    claude: ClaudeDriver,
}

impl Ctx {
    pub fn new(store: Store, config: RuntimeConfig) -> Arc<Ctx> {
        let (bus, _) = broadcast::channel(4096);
        let acp = AcpDriver {
            start_timeout: config.start_timeout,
        };
        let codex = CodexDriver {
            start_timeout: config.start_timeout,
        };
        let claude = ClaudeDriver {
            start_timeout: config.start_timeout,
        };
        let pool = Pool::new(config.pool.clone());
        let delegation = crate::delegation::Registry::new(config.delegation.clone());
        Arc::new(Ctx {
            store,
            bus,
            delegation,
            config,
            pool,
            acp,
            codex,
            claude,
        })
    }

    /// Publishes stored events to live subscribers (after they were committed).
    pub fn publish(&self, events: impl IntoIterator<Item = EventEnvelope>) {
        for ev in events {
            // No subscriber is fine: everything is in the store.
            let _ = self.bus.send(ev);
        }
    }

    /// Starts (or strictly resumes) an agent session with the driver of its kind.
    pub async fn start_agent(
        &self,
        req: StartRequest,
    ) -> Result<Box<dyn AgentSession>, AgentError> {
        match req.spec.driver {
            DriverKind::Acp => self.acp.start(req).await,
            DriverKind::Codex => self.codex.start(req).await,
            DriverKind::Claude => self.claude.start(req).await,
        }
    }
}

/// A new random id (32 hex digits).
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
