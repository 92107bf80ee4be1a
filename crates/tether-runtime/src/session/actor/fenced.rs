//! A fenced actor (issue 12): another node took its conversation over while this one was
//! paused past its lease, so its writes are refused. It ends its agent (killed and
//! reaped), stores nothing more and leaves. Commands not yet run (`left` and what is in
//! its mailbox) go to a successor, which claims the conversation again (or answers that
//! another node owns it) and resumes the session strictly. A child module of `actor`.

use tether_proto::SessionStatus;

use super::Actor;
use crate::session::actors::Actors;
use crate::session::command::ActorCmd;

impl Actor {
    pub(super) async fn end_fenced(&mut self, mut left: Vec<ActorCmd>) {
        tracing::warn!(session = %self.session.id, conversation = %self.session.conversation_id,
            "another node owns this conversation now: ending its agent here without writing");
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
        self.ctx.pool.gone(&self.session.id);
        self.ctx.delegation.revoke(&self.session.id);
        if let Some(live) = self.live.take() {
            live.shutdown().await;
        }
        // Nothing of ours to release: the row is the other node's.
        if let Some(claim) = self.claim.take() {
            claim.keep();
        }
        // The survivor's recovery made it dormant in the store.
        self.session.status = SessionStatus::Dormant;
        match self.actors.upgrade() {
            Some(actors) => actors.leave(&mut self.rx, &self.session.id),
            None => self.rx.close(),
        }
        while let Some(cmd) = self.rx.recv().await {
            left.push(cmd);
        }
        Actors::hand_over(
            &self.actors,
            &self.ctx,
            self.session.clone(),
            self.owner.clone(),
            left,
        );
    }
}
