//! Making the session live: the one path a turn's start and a delegation's `EnsureLive`
//! both take (make room in the pool, start or strictly resume the agent, check it came
//! back in the session asked for, record it live), and ending it (a child module of
//! `actor`).

use std::path::PathBuf;
use std::sync::Arc;

use tether_agents::{AgentError, AgentSession, StartRequest};
use tether_proto::{ErrorCode, EventPayload, SessionStatus};

use super::Actor;
use crate::session::pool::LiveProcess;

impl Actor {
    /// Before a start: a process that died while idle is recorded as gone, and the live
    /// pool makes room. Returns what to start.
    pub(super) async fn prepare_start(&mut self) -> StartRequest {
        if self.live.is_some() {
            // The process died while idle.
            self.go_dormant("the agent process exited").await;
        }
        self.ctx.pool.admit(&self.session.id, self.pool_owner());
        StartRequest {
            spec: self.spec.clone(),
            cwd: PathBuf::from(&self.session.cwd),
            model: self.session.model.clone(),
            resume: self.session.external_id.clone(),
            mcp_servers: self.ctx.delegation.mcp_servers(&self.session),
            ceiling: self.ctx.pool.ceiling().cloned(),
        }
    }

    /// A started agent becomes the session's live process (recorded, and busy in the
    /// pool). Fails with the driver's code, or `resume_unavailable` when the agent came
    /// back in another session; the MCP token of a failed start is revoked.
    pub(super) async fn attach(
        &mut self,
        started: Result<Box<dyn AgentSession>, AgentError>,
    ) -> Result<(), (ErrorCode, String)> {
        let resume_asked = self.session.external_id.is_some();
        let agent: Arc<dyn AgentSession> = match started {
            Ok(a) => Arc::from(a),
            Err(e) => {
                self.ctx.delegation.revoke(&self.session.id);
                if resume_asked {
                    crate::metrics::resumed(&self.session.agent, false);
                }
                return Err((e.code(), e.to_string()));
            }
        };
        let external_id = agent.external_id();
        let resumed = self.session.external_id.is_some();
        if let Some(expected) = self
            .session
            .external_id
            .as_ref()
            .filter(|e| **e != external_id)
        {
            agent.shutdown().await;
            self.ctx.delegation.revoke(&self.session.id);
            crate::metrics::resumed(&self.session.agent, false);
            return Err((
                ErrorCode::ResumeUnavailable,
                format!(
                    "cannot resume session {expected}: the agent came back with session {external_id}"
                ),
            ));
        }
        // One agent session id, one session (issue 26 item 5): a new session the agent
        // answered with an id another session holds is refused, never recorded.
        if !resumed {
            let holder = self
                .ctx
                .store
                .conversations()
                .session_with_external_id(&self.session.agent, &external_id)
                .await;
            if let Ok(Some(other)) = holder.as_ref()
                && *other != self.session.id
            {
                agent.shutdown().await;
                self.ctx.delegation.revoke(&self.session.id);
                return Err((
                    ErrorCode::ProtocolError,
                    format!(
                        "the agent answered with session id {external_id}, which session \
                         {other} already holds; refused (one agent session id, one session)"
                    ),
                ));
            }
        }
        if resumed {
            crate::metrics::resumed(&self.session.agent, true);
        }
        let ev = EventPayload::SessionLive {
            external_id: external_id.clone(),
            resumed,
        };
        let asked = std::time::Instant::now();
        let recorded = self
            .ctx
            .store
            .conversations()
            .set_session_status(
                &self.session.id,
                SessionStatus::Live,
                Some(&external_id),
                Some(&ev),
            )
            .await;
        tracing::debug!(
            took_us = asked.elapsed().as_micros() as u64,
            resumed,
            "session live recorded"
        );
        if let Err(e) = recorded {
            tracing::error!(error = %e, "cannot record live session");
        }
        self.session.external_id = Some(external_id);
        self.session.status = SessionStatus::Live;
        self.live = Some(agent);
        self.pool_busy();
        Ok(())
    }

    /// The live session runs a turn (or is being made live): the pool counts it busy, in
    /// its process.
    pub(super) fn pool_busy(&self) {
        let process = self.live.as_ref().map(|l| LiveProcess {
            agent: self.spec.name.clone(),
            process: l.process(),
        });
        self.ctx.pool.busy(
            &self.session.id,
            self.pool_owner(),
            self.me.clone(),
            process,
        );
    }

    /// A turn's start ended: prompt the agent, or end the turn if it was stopped
    /// meanwhile or the start failed.
    pub(super) async fn on_started(&mut self, started: Result<Box<dyn AgentSession>, AgentError>) {
        match self.attach(started).await {
            Ok(()) if self.current.as_ref().is_some_and(|c| c.cancel_requested) => {
                self.end_stopped().await
            }
            Ok(()) => self.spawn_prompt(),
            Err((code, message)) => self.fail(code, message).await,
        }
    }

    /// Delegation: starts (or strictly resumes) the agent if no process is attached,
    /// without a turn, so a continuation that cannot resume changes nothing.
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
        let req = self.prepare_start().await;
        let started = self.ctx.start_agent(req).await;
        self.attach(started).await?;
        self.ctx.pool.idle(&self.session.id);
        Ok(())
    }

    pub(super) async fn go_dormant(&mut self, reason: &str) {
        // A turn's last output waiting for its end goes before the session's status.
        self.store_held_once().await;
        self.ctx.pool.gone(&self.session.id);
        // The process ends: so does its MCP token. A thread the agent keeps loaded on a
        // shared process keeps its token until that process ends, so its resume there
        // needs no new MCP servers (issue 33 item 4).
        match self.live.as_ref().and_then(|l| l.parked()) {
            Some(home) => self.ctx.delegation.park(&self.session.id, home),
            None => self.ctx.delegation.revoke(&self.session.id),
        }
        if let Some(live) = self.live.take() {
            live.shutdown().await;
        }
        if self.session.status == SessionStatus::Dormant {
            return;
        }
        self.session.status = SessionStatus::Dormant;
        let ev = EventPayload::SessionDormant {
            reason: reason.to_string(),
        };
        match self
            .ctx
            .store
            .conversations()
            .set_session_status(&self.session.id, SessionStatus::Dormant, None, Some(&ev))
            .await
        {
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot record dormant session"),
        }
    }

    /// Daemon shutdown: end the agent process now. A running turn, its pending approvals
    /// and questions and the queued turns stay open in the store, so the next start-up
    /// recovery marks them interrupted/expired and tells the conversation once — the same
    /// path as after a crash.
    pub(super) async fn shutdown(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(c) = self.canceller.take() {
            c.abort();
        }
        self.events = None;
        self.deadline = None;
        self.approvals.clear();
        self.questions.clear();
        self.current = None;
        self.go_dormant("tether shut down").await;
        // Kept: the open turns wait for recovery (this node's after a restart, or a
        // survivor's once its lease ends), which needs the owner row.
        if let Some(claim) = self.claim.take() {
            claim.keep();
        }
    }
}
