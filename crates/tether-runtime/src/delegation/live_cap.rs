//! `max_live_per_owner` across a cluster (issue 26 item 4): a parent's live children on
//! other nodes count too. Before a child is made live here, what this node's pool will not
//! make room for (it evicts only its own idle children) is made room for where the others
//! live: an idle one is evicted by its owner (a routed `EvictIdle`), so a parent never
//! holds more than its cap of agent processes over the cluster while some are idle.

use tether_proto::{ConversationId, SessionId};

use crate::call::{Command, Principal};
use crate::delegation::Delegations;
use crate::error::Result;

impl Delegations<'_> {
    /// Makes room for `child` of `parent` among the parent's live children on the other
    /// nodes (see the module header). Failing to evict is logged, never fatal: the cap is
    /// a soft one, as on one node (busy children are never evicted).
    pub(crate) async fn make_room_for_child(
        &self,
        parent: &ConversationId,
        child: &SessionId,
    ) -> Result<()> {
        let cap = self.rt.ctx().pool.max_live_per_owner();
        if cap == 0 || !self.rt.ctx().ownership.clustered() {
            return Ok(());
        }
        let store = &self.rt.ctx().store;
        let here = &self.rt.ctx().config.cluster.node_id;
        let mut remote = 0;
        let mut remote_idle = Vec::new();
        for row in store.delegation().children_of(parent).await? {
            if row.released_at_ms.is_some() || row.session_id == *child {
                continue;
            }
            let conv = row.task_id.conversation_id();
            let Some(owner) = store.cluster().conversation_owner(&conv).await? else {
                continue;
            };
            if owner.node_id.is_empty() || owner.node_id == *here {
                continue;
            }
            remote += 1;
            if store.conversations().open_turns(&conv).await?.is_empty() {
                remote_idle.push(conv);
            }
        }
        let local = self.rt.ctx().pool.live_children(parent, child);
        // The local pool evicts its own idle children over the cap by itself.
        let local_room = (local + 1).saturating_sub(cap);
        let over = (remote + local + 1)
            .saturating_sub(cap)
            .saturating_sub(local_room);
        for conv in remote_idle.into_iter().take(over) {
            let command = Command::EvictIdle {
                conversation_id: conv.clone(),
            };
            if let Err(e) = self.rt.call_as::<bool>(command, Principal::System).await {
                tracing::warn!(conversation = %conv, error = %e, "cannot evict an idle child elsewhere");
            }
        }
        Ok(())
    }

    /// Evicts the live session of `conv` on this node when it is idle; `true` when it was.
    pub(crate) async fn evict_idle_here(&self, conv: &ConversationId) -> Result<bool> {
        let Some(row) = self
            .rt
            .ctx()
            .store
            .conversations()
            .get_conversation(conv)
            .await?
        else {
            return Ok(false);
        };
        let Some(session) = row.bound_session_id else {
            return Ok(false);
        };
        Ok(self.rt.ctx().pool.evict_if_idle(
            &session,
            "its parent's live children are at max_live_per_owner",
        ))
    }
}
