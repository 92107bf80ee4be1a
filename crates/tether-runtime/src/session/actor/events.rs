//! The session actor's event path (a child module of `actor`, so it shares the actor's
//! state): agent events become stored events, streamed ones in coalesced writes.
//!
//! Coalescing: message and thought deltas, tool calls and tool-call updates are stored
//! in one transaction of up to [`CoalesceConfig::max_events`], collected for at most
//! [`CoalesceConfig::window`] after the first of them. A permission request or question
//! flushes the batch before it is handled, so events keep the agent's order. While the
//! prompt runs, a batch never outlives one call of [`Actor::on_agent_event`]: it is
//! stored before the actor does anything else (stores an approval or question, goes
//! dormant, stops), and is published to subscribers only once committed. The price: while
//! a batch collects, the actor's other work (a command, the end of the prompt) waits at
//! most the window. The end of a prompt closes the event channel, which ends the batch at
//! once; that last batch waits for the turn's end and goes in its transaction, before
//! the terminal event (`defer_to_end`). Going dormant, and an end with approvals or
//! questions still pending, store it first; a budget's warning line written while the
//! turn ends may come before it.
//!
//! Durability: what subscribers see is committed. A crash can lose only the streamed
//! events of a running turn still waiting in a batch (at most one window's worth); the
//! turn itself is then open in the store and start-up recovery marks it interrupted.
//!
//! [`CoalesceConfig::max_events`]: crate::CoalesceConfig::max_events
//! [`CoalesceConfig::window`]: crate::CoalesceConfig::window

use tether_agents::AgentEvent;
use tether_proto::EventPayload;
use tokio::time::Instant;

use super::Actor;

impl Actor {
    /// Handles `first` and whatever the agent sends within the coalescing window.
    pub(super) async fn on_agent_event(&mut self, first: AgentEvent) {
        self.take_events(first, true).await;
    }

    /// The prompt ended: stores what the agent sent before it, without waiting for more.
    pub(super) async fn drain_events(&mut self) {
        if let Some(first) = self.events.as_mut().and_then(|rx| rx.try_recv().ok()) {
            self.take_events(first, false).await;
        }
        self.events = None;
    }

    /// Stores `first` and the events after it in coalesced batches. With `wait`, a
    /// non-empty batch waits up to the window for more; without, only events already
    /// received join it.
    async fn take_events(&mut self, first: AgentEvent, wait: bool) {
        let cfg = self.ctx.config.coalesce;
        let max = cfg.max_events.max(1);
        let mut batch = Vec::new();
        // When the batch must be stored: the window after its first event.
        let mut due = Instant::now();
        let mut next = Some(first);
        while let Some(ev) = next.take() {
            match self.simple_payload(ev) {
                Ok(p) => {
                    if batch.is_empty() {
                        due = Instant::now() + cfg.window;
                    }
                    batch.push(p);
                    if batch.len() >= max {
                        self.flush(&mut batch).await;
                    }
                }
                Err(special) => {
                    // Stored (and told) only after everything the agent sent before it.
                    self.flush(&mut batch).await;
                    self.on_special(special).await;
                }
            }
            next = self.next_event(wait && !batch.is_empty(), due).await;
        }
        if !batch.is_empty()
            && self.current.is_some()
            && self.events.as_ref().is_some_and(|rx| rx.is_closed())
        {
            // The prompt ended (its sender is gone): the turn's end follows and stores
            // the batch in its own commit, first.
            self.defer_to_end(&mut batch);
            return;
        }
        self.flush(&mut batch).await;
    }

    /// The next event already received; else, with `wait`, the next one before `due`.
    async fn next_event(&mut self, wait: bool, due: Instant) -> Option<AgentEvent> {
        let rx = self.events.as_mut()?;
        if let Ok(ev) = rx.try_recv() {
            return Some(ev);
        }
        if !wait {
            return None;
        }
        // A closed channel ends the batch too; the actor's loop then drops it.
        tokio::time::timeout_at(due, rx.recv()).await.ok().flatten()
    }

    /// Maps streamable events to payloads; hands back permission and question requests
    /// and usage reports.
    #[allow(clippy::result_large_err)] // Err hands the event back; it is not an error.
    fn simple_payload(&mut self, ev: AgentEvent) -> Result<EventPayload, AgentEvent> {
        match ev {
            AgentEvent::MessageDelta(text) => {
                if let Some(c) = self.current.as_mut() {
                    c.text.push_str(&text);
                }
                Ok(EventPayload::MessageDelta { text })
            }
            AgentEvent::ThoughtDelta(text) => Ok(EventPayload::ThoughtDelta { text }),
            AgentEvent::ToolCall {
                id,
                title,
                kind,
                status,
                detail,
            } => Ok(EventPayload::ToolCall {
                tool_call_id: id,
                title,
                kind,
                status,
                detail,
            }),
            AgentEvent::ToolCallUpdate {
                id,
                title,
                status,
                detail,
            } => Ok(EventPayload::ToolCallUpdate {
                tool_call_id: id,
                status,
                title,
                detail,
            }),
            other @ (AgentEvent::Permission(_)
            | AgentEvent::Question(_)
            | AgentEvent::Usage(_)
            | AgentEvent::Window(_)) => Err(other),
        }
    }

    /// Stores the batch in one transaction (the store publishes it at commit), after
    /// any events still waiting for an unreachable store (see `outage`).
    async fn flush(&mut self, batch: &mut Vec<EventPayload>) {
        // Held events go first even without new ones (before an approval, say).
        if batch.is_empty() && self.held.is_empty() {
            return;
        }
        self.store_batch(batch).await;
        batch.clear();
    }
}
