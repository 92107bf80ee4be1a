//! Every call comes through [`Runtime::routed`]: it runs here when this node is (or
//! becomes) the conversation's owner, else on the owner, whose reply it returns. A
//! forwarded call is the same [`Call`], run on the owner through [`Runtime::call`] with
//! the number of nodes it passed in a task-local, so the owner claims without a cap and a
//! call never travels in circles.

use tether_proto::{ConversationId, ErrorCode};

use super::forward::Sent;
use super::place::Place;
use super::service::Placement;
use super::wire::{Envelope, Known, WireReply, rebuild};
use crate::RuntimeError;
use crate::call::{Call, Command, Reply};
use crate::error::Result;

tokio::task_local! {
    /// Set while a call forwarded from another node runs: how many nodes it passed.
    static FORWARDED: u8;
}

/// Most nodes a call passes (a conversation claimed elsewhere while it travelled).
const MAX_HOPS: u8 = 3;
/// Most times a call is routed again after its node died before taking it.
const MAX_REROUTES: u32 = 3;

/// Whether the call running now was forwarded here by another node.
pub(crate) fn forwarded() -> bool {
    FORWARDED.try_with(|_| ()).is_ok()
}

impl Placement<'_> {
    /// Runs `call` here when conversation `conv`'s commands run on this node, else sends
    /// it to the node where they do and returns its reply. `conv` `None` (a new
    /// conversation, an unknown approval): here.
    pub(crate) async fn routed(&self, conv: Option<&ConversationId>, call: Call) -> Result<Reply> {
        let (true, Some(conv)) = (self.cluster().enabled(), conv) else {
            if self.rt.ops().draining()
                && call.command.starts_work()
                && !self.live_here(conv).await?
            {
                return Err(RuntimeError::Draining);
            }
            return self.rt.dispatch().run_here(call).await;
        };
        let hops = FORWARDED.try_with(|h| *h).ok();
        let mut reroutes = 0;
        loop {
            // One round trip per message on its owner: the claim that a command starting
            // work makes anyway checks the ownership a read of the owners row would.
            let trust = reroutes == 0 && call.command.starts_work();
            let node = match self.place(conv, hops.is_some(), trust).await? {
                // A draining node starts no work for a conversation with nothing live
                // here, even while its owners row still names this node (an idle
                // session's claim is let go a moment after its eviction): as on one
                // node, and as for a conversation it would claim anew (`place`).
                Place::Here { claimed }
                    if self.rt.ops().draining()
                        && call.command.starts_work()
                        && !self.live_here(Some(conv)).await? =>
                {
                    if claimed {
                        self.release_if_idle(conv).await;
                    }
                    match self.least_loaded_other().await? {
                        Some(node) => node,
                        None => return Err(RuntimeError::Draining),
                    }
                }
                Place::Here { claimed } => {
                    let out = self.rt.dispatch().run_here(call.clone()).await;
                    if claimed {
                        self.release_if_idle(conv).await;
                    }
                    // Another node claimed it between the look and the claim here: a
                    // command that starts work claims before it writes anything, so it
                    // did not run; place it again, which sends it there.
                    if let Err(RuntimeError::OwnedElsewhere { node_id, .. }) = &out
                        && call.command.starts_work()
                        && reroutes < MAX_REROUTES
                    {
                        tracing::debug!(conversation = %conv, owner = %node_id, "placement raced a claim: forwarding");
                        reroutes += 1;
                        continue;
                    }
                    return out;
                }
                Place::There(node) => node,
            };
            let hop = hops.unwrap_or(0) + 1;
            if hop > MAX_HOPS {
                return Err(RuntimeError::Internal(format!(
                    "conversation {conv}'s command was passed between nodes {MAX_HOPS} times"
                )));
            }
            // The owner's work joins this trace (issue 31): a span of the hop, whose
            // context travels in the command row.
            let hop_span = tracing::info_span!("tether.forward", otel.name = "forward", to = %node);
            let mut env = Envelope {
                hops: hop,
                call: call.clone(),
            };
            env.call.trace.traceparent = hop_span
                .in_scope(crate::trace::current_traceparent)
                .or(env.call.trace.traceparent);
            let sent_at = std::time::Instant::now();
            let sent = {
                use tracing::Instrument as _;
                self.send_to(&node, Some(conv), &env)
                    .instrument(hop_span)
                    .await
            };
            let outcome = match &sent {
                Ok(Sent::Replied(WireReply::Ok(_))) => "replied",
                Ok(Sent::Replied(WireReply::Err { .. })) => "error",
                Ok(Sent::Reroute) => "rerouted",
                Err(_) => "lost",
            };
            crate::metrics::forwarded(outcome, sent_at.elapsed());
            match sent? {
                Sent::Replied(WireReply::Ok(reply)) => return Ok(reply),
                Sent::Replied(WireReply::Err { code, message }) => {
                    return Err(self.rebuilt(code, message, &env.call.command).await);
                }
                Sent::Reroute if reroutes < MAX_REROUTES => reroutes += 1,
                Sent::Reroute => {
                    return Err(RuntimeError::Internal(format!(
                        "conversation {conv}'s owners kept dying before taking its command"
                    )));
                }
            }
        }
    }

    /// The owner's error as this node's (see `wire::rebuild`).
    async fn rebuilt(&self, code: ErrorCode, message: String, cmd: &Command) -> RuntimeError {
        use tether_core::approval::ResolveError;
        let store = &self.rt.ctx().store;
        let resolved = match (code, cmd) {
            (ErrorCode::ApprovalAlreadyResolved, Command::AnswerApproval { approval_id, .. }) => {
                match store.requests().get_approval(approval_id).await {
                    Ok(Some(a)) => Some(ResolveError::AlreadyResolved { status: a.status }),
                    Ok(None) | Err(_) => None,
                }
            }
            (ErrorCode::QuestionAlreadyResolved, Command::AnswerQuestion { question_id, .. }) => {
                match store.requests().get_question(question_id).await {
                    Ok(Some(q)) => Some(ResolveError::QuestionAlreadyResolved { status: q.status }),
                    Ok(None) | Err(_) => None,
                }
            }
            _ => None,
        };
        let conversation_id = cmd.named_conversation();
        rebuild(
            code,
            message,
            Known {
                conversation_id: conversation_id.as_ref(),
                resolved,
            },
        )
    }

    /// Whether conversation `conv` has a live session here (`None`: a new one has not).
    async fn live_here(&self, conv: Option<&ConversationId>) -> Result<bool> {
        let Some(conv) = conv else {
            return Ok(false);
        };
        let row = self
            .rt
            .ctx()
            .store
            .conversations()
            .get_conversation(conv)
            .await?;
        // Its agent live here (admitted to the pool): an evicted session's actor may
        // still be on its way out, and a draining node must not start work for it.
        Ok(row
            .and_then(|r| r.bound_session_id)
            .is_some_and(|s| self.rt.ctx().pool.is_live(&s)))
    }

    /// A conversation this command claimed and left without an actor (a `/status`, an
    /// answer nobody waited for) is given up again, under its routing lock so a message
    /// routed meanwhile keeps it.
    async fn release_if_idle(&self, conv: &ConversationId) {
        let _guard = self.rt.router().lock_conversation(conv).await;
        let store = &self.rt.ctx().store;
        let busy = async {
            // A session actor or a routing message holds it (see `ownership`).
            if self.rt.ctx().ownership.in_use(conv) {
                return Ok::<bool, tether_store::StoreError>(true);
            }
            let row = store.conversations().get_conversation(conv).await?;
            let bound = row.and_then(|r| r.bound_session_id);
            if bound.is_some_and(|s| self.rt.router().existing_actor(&s).is_some()) {
                return Ok::<bool, tether_store::StoreError>(true);
            }
            Ok(!store.conversations().open_turns(conv).await?.is_empty())
        };
        match busy.await {
            Ok(true) => {}
            Ok(false) => {
                if let Some(epoch) = store.cluster().held_epoch(conv)
                    && let Err(e) = store
                        .cluster()
                        .release_conversation(conv, self.cluster().node_id(), epoch)
                        .await
                {
                    tracing::warn!(conversation = %conv, error = %e, "cannot release a conversation");
                }
            }
            Err(e) => {
                tracing::warn!(conversation = %conv, error = %e, "cannot read a conversation")
            }
        }
    }

    /// Runs a call another node forwarded here, as that node's caller would have.
    pub(crate) async fn execute(&self, env: Envelope) -> Result<Reply> {
        FORWARDED.scope(env.hops, self.rt.call(env.call)).await
    }
}
