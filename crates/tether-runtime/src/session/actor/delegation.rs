//! The session actor's delegation commands (a child module of `actor`, so it shares the
//! actor's state): make a session live without a turn, so a continuation that cannot
//! resume changes nothing; and release a session for good.

use std::path::PathBuf;
use std::sync::Arc;

use tether_agents::{AgentSession, StartRequest};
use tether_proto::{ErrorCode, EventPayload, SessionStatus};
use tokio::sync::oneshot;

use super::Actor;

impl Actor {
    /// Starts (or strictly resumes) the agent if no process is attached. Fails with the
    /// driver's code, or `resume_unavailable` when the agent comes back in another
    /// session; nothing is prompted either way.
    pub(super) async fn ensure_live(&mut self) -> Result<(), (ErrorCode, String)> {
        if self.current.is_some() {
            return Err((
                ErrorCode::SessionStillRunning,
                "a turn is running".to_string(),
            ));
        }
        if self.live.as_ref().is_some_and(|l| l.is_alive()) {
            return Ok(());
        }
        if self.live.is_some() {
            self.go_dormant("the agent process exited").await;
        }
        self.ctx.pool.admit(&self.session.id, self.pool_owner());
        let req = StartRequest {
            spec: self.spec.clone(),
            cwd: PathBuf::from(&self.session.cwd),
            model: self.session.model.clone(),
            resume: self.session.external_id.clone(),
            mcp_servers: self.ctx.delegation.mcp_servers(&self.session),
        };
        let agent: Arc<dyn AgentSession> = match self.ctx.start_agent(req).await {
            Ok(a) => Arc::from(a),
            Err(e) => {
                self.ctx.delegation.revoke(&self.session.id);
                return Err((e.code(), e.to_string()));
            }
        };
        let external_id = agent.external_id();
        if let Some(expected) = self
            .session
            .external_id
            .as_ref()
            .filter(|e| **e != external_id)
        {
            agent.shutdown().await;
            self.ctx.delegation.revoke(&self.session.id);
            return Err((
                ErrorCode::ResumeUnavailable,
                format!("the agent came back with session {external_id} instead of {expected}"),
            ));
        }
        let ev = EventPayload::SessionLive {
            external_id: external_id.clone(),
            resumed: self.session.external_id.is_some(),
        };
        match self
            .ctx
            .store
            .set_session_status(
                &self.session.id,
                SessionStatus::Live,
                Some(&external_id),
                Some(&ev),
            )
            .await
        {
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot record live session"),
        }
        self.session.external_id = Some(external_id);
        self.session.status = SessionStatus::Live;
        self.live = Some(agent);
        self.ctx
            .pool
            .busy(&self.session.id, self.pool_owner(), self.me.clone());
        self.ctx.pool.idle(&self.session.id);
        Ok(())
    }

    /// Releases the session: stops a running turn; the run loop ends the process and the
    /// actor once no turn runs ([`Actor::finish_close`]).
    pub(super) async fn close(&mut self, reply: oneshot::Sender<()>) {
        self.closing.push(reply);
        while self.queue.pop().is_some() {}
        if self.current.is_some() {
            self.stop().await;
        }
    }

    /// Ends the process and answers the waiting `Close` requests.
    pub(super) async fn finish_close(&mut self) {
        self.go_dormant("released").await;
        for r in self.closing.drain(..) {
            let _ = r.send(());
        }
    }
}
