//! A fenced actor (issue 12): another node took its conversation over while this one was
//! paused past its lease, so its writes are refused. It ends its agent (killed and
//! reaped), stores nothing more and leaves; its commands are dropped, so their senders
//! get an error rather than a successor here (the conversation is the other node's). A
//! child module of `actor`.

use super::Actor;

impl Actor {
    pub(super) async fn end_fenced(&mut self) {
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
        match self.actors.upgrade() {
            Some(actors) => actors.leave(&mut self.rx, &self.session.id),
            None => self.rx.close(),
        }
        while let Ok(cmd) = self.rx.try_recv() {
            drop(cmd);
        }
    }
}
