//! Failover (issue 12, design point 3): conversations whose owner died are taken over by
//! a survivor (compare and set on the epoch: of two survivors one wins), recovered in one
//! transaction under the new epoch — exactly start-up recovery, scoped to that
//! conversation: running turns `interrupted`, pending approvals and questions `expired`,
//! sessions dormant, one status line — and released, so the next message is claimed by
//! whichever node receives it. The sweep holds the conversation's ownership gate from
//! the take-over to the release (across retries while the recovery waits on a lock): a
//! claim on this node meanwhile waits, then claims the released row anew.
//!
//! Start-up recovery is scoped the same way on PostgreSQL: the conversations this node
//! owned before it restarted (same node id) and the orphaned ones, never those of another
//! live node. SQLite recovers the whole store, as a lone daemon always did.

use std::sync::Weak;
use std::time::Duration;

use tether_store::{OwnerRow, RecoveryReport, Store};

use crate::seams::Clock;

use crate::ctx::Ctx;
use crate::ownership::Gated;

/// What a recovery tells a conversation after this node restarted.
fn notice(rc: &tether_store::RecoveredConversation) -> String {
    tether_core::restart_notice(
        rc.interrupted_turns,
        rc.expired_approvals,
        rc.expired_questions,
    )
}

/// What it tells a conversation taken over from another node.
fn failover_notice(rc: &tether_store::RecoveredConversation) -> String {
    tether_core::failover_notice(
        rc.interrupted_turns,
        rc.expired_approvals,
        rc.expired_questions,
    )
}

/// Start-up recovery: store-wide on SQLite; on PostgreSQL this node's own conversations
/// and the orphaned ones.
pub(crate) async fn recover_at_start(
    store: &Store,
    node_id: &str,
    clock: &dyn Clock,
) -> tether_store::Result<RecoveryReport> {
    if store.topology() != tether_store::Topology::Cluster {
        return store.recovery().recover(notice).await;
    }
    let mut report = RecoveryReport::default();
    let mut rows = store.cluster().owned_conversations(node_id).await?;
    rows.extend(
        store
            .cluster()
            .orphaned_conversations(clock.now_ms())
            .await?
            .into_iter()
            .filter(|r| r.node_id != node_id),
    );
    for row in rows {
        if let Some(one) = take_over(store, node_id, &row, clock).await? {
            merge(&mut report, one);
        }
    }
    Ok(report)
}

/// Takes conversation `row` over from its epoch, recovers it and releases it: `None` when
/// another node claimed it first.
async fn take_over(
    store: &Store,
    node_id: &str,
    row: &OwnerRow,
    clock: &dyn Clock,
) -> tether_store::Result<Option<RecoveryReport>> {
    let id = &row.conversation_id;
    let Some(epoch) = store
        .cluster()
        .take_over_conversation(id, node_id, row.epoch, clock.now_ms())
        .await?
    else {
        return Ok(None);
    };
    // Kept (ours) if the recovery fails: the sweep tries it again (see `retry`).
    let words: fn(&tether_store::RecoveredConversation) -> String = if row.node_id == node_id {
        notice
    } else {
        failover_notice
    };
    let report = store.recovery().recover_conversation(id, words).await?;
    store
        .cluster()
        .release_conversation(id, node_id, epoch)
        .await?;
    crate::metrics::took_over();
    tracing::info!(conversation = %id, from = %row.node_id, epoch,
        turns = report.conversations.iter().map(|c| c.interrupted_turns).sum::<usize>(),
        "took over a conversation whose owner is gone");
    Ok(Some(report))
}

fn merge(into: &mut RecoveryReport, one: RecoveryReport) {
    into.conversations.extend(one.conversations);
    into.sessions_made_dormant += one.sessions_made_dormant;
    into.events.extend(one.events);
}

/// How much later than this node another node may get its connections back after a
/// database outage (the store's longest back-off with its jitter, and a heartbeat).
const RECONNECT_SLACK: Duration = Duration::from_secs(4);

/// Most time between two sweeps (a node seen gone by its presence is taken over within
/// a few of them).
const SWEEP_MAX: Duration = Duration::from_millis(500);

/// Every `lease_ttl / 3` (at most [`SWEEP_MAX`]) on PostgreSQL: takes over the
/// conversations of dead nodes — those whose lease ended, and those seen gone by their
/// presence lock (`super::presence`).
pub(crate) fn start_sweep(ctx: Weak<Ctx>, node_id: tether_proto::NodeId, lease_ttl: Duration) {
    tokio::spawn(async move {
        let every = (lease_ttl / 3).clamp(Duration::from_millis(100), SWEEP_MAX);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Taken over, not yet recovered (a lock of a paused node held the recovery),
        // each with its gate held until it is: nothing runs on it here meanwhile.
        let mut retry: Vec<(OwnerRow, Gated)> = Vec::new();
        let mut trouble = tether_core::FailureRun::default();
        let mut looks: u32 = 0;
        loop {
            tick.tick().await;
            let Some(ctx) = ctx.upgrade() else { return };
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(CLAIM_LOOK_EVERY)
                && let Err(e) = check_held(&ctx, &node_id).await
            {
                tracing::debug!(error = %e, "cannot look at this node's claims");
            }
            match sweep(&ctx, &node_id, &mut retry).await {
                Ok(()) => {
                    if trouble.recover() > 0 {
                        tracing::info!("the failover sweep works again");
                    }
                }
                Err(e) if trouble.fail() => {
                    tracing::warn!(error = %e, "the failover sweep failed; retrying quietly");
                }
                Err(e) => tracing::debug!(error = %e, "the failover sweep failed again"),
            }
        }
    });
}

/// Every this many sweeps (about two seconds) a node compares its claims with the
/// owners rows.
const CLAIM_LOOK_EVERY: u32 = 4;

/// Finds the claims of this node that another node took over while this one could not
/// see it (cut off the network, or paused, past its lease) and tells the sessions here:
/// an idle one would otherwise keep its agent running beside the new owner's until its
/// next write was refused. A turn running here finds out at its next write anyway.
async fn check_held(ctx: &Ctx, node_id: &str) -> tether_store::Result<()> {
    let cluster = ctx.store.cluster();
    let held = cluster.held_conversations();
    if held.is_empty() {
        return Ok(());
    }
    let owned: std::collections::HashSet<(String, i64)> = cluster
        .owned_conversations(node_id)
        .await?
        .into_iter()
        .map(|r| (r.conversation_id.to_string(), r.epoch))
        .collect();
    let mut lost = 0;
    for (id, epoch) in held {
        if owned.contains(&(id.to_string(), epoch)) {
            continue;
        }
        // Released meanwhile (no node) or claimed again here: not lost to anyone.
        if let Some(row) = cluster.conversation_owner(&id).await?
            && row.node_id != node_id
            && !row.node_id.is_empty()
            && row.epoch > epoch
        {
            tracing::warn!(conversation = %id, owner = %row.node_id, epoch = row.epoch,
                "another node took this node's conversation over; ending its sessions here");
            cluster.mark_lost(&id, epoch);
            lost += 1;
        }
    }
    if lost > 0 {
        ctx.pool.check_claims();
    }
    Ok(())
}

async fn sweep(
    ctx: &Ctx,
    node_id: &str,
    retry: &mut Vec<(OwnerRow, Gated)>,
) -> tether_store::Result<()> {
    let store = &ctx.store;
    // Taken over earlier: recover under the epoch this node holds (unless it lost it).
    for (row, gate) in std::mem::take(retry) {
        let id = &row.conversation_id;
        let Some(epoch) = store
            .cluster()
            .held_epoch(id)
            .filter(|_| !store.cluster().is_fenced(id))
        else {
            // Lost meanwhile (or never taken): nothing of this node's to recover.
            gate.done();
            continue;
        };
        match store
            .recovery()
            .recover_conversation(id, failover_notice)
            .await
        {
            Ok(_) => {
                // Not `?`: the rows after this one would be forgotten, never recovered.
                if let Err(e) = store
                    .cluster()
                    .release_conversation(id, node_id, epoch)
                    .await
                {
                    tracing::warn!(conversation = %id, error = %e,
                        "recovered, but cannot release the conversation; it stays this node's");
                }
                gate.done();
            }
            Err(e) => {
                tracing::debug!(conversation = %id, error = %e, "recovery after a take-over waits");
                retry.push((row, gate));
            }
        }
    }
    // After a database outage every node's heartbeat and presence lock lapsed with it:
    // nobody is taken over until a whole lease (plus the longest reconnection back-off,
    // as the others may reconnect later than this node) has passed with the database
    // answering, so live nodes renew first and only a node that really is gone loses
    // its work.
    if store.troubled_within(ctx.config.cluster.lease_ttl + RECONNECT_SLACK) {
        return Ok(());
    }
    // Our own rows are never orphans to us: a node whose lease lapsed (paused) and came
    // back renews it; if a survivor took them over meanwhile, fencing stops our writes.
    let mut orphans = store
        .cluster()
        .orphaned_conversations(ctx.clock.now_ms())
        .await?;
    for gone in ctx.ownership.look_at_nodes().await? {
        orphans.extend(store.cluster().owned_conversations(&gone).await?);
    }
    // Each conversation once: the two reads may both list it, and one whose gate the
    // retry list holds is never waited for here (the sweep would wait for itself).
    let mut seen: std::collections::HashSet<_> = retry
        .iter()
        .map(|(r, _)| r.conversation_id.clone())
        .collect();
    for row in orphans.into_iter().filter(|r| r.node_id != node_id) {
        if !seen.insert(row.conversation_id.clone()) {
            continue;
        }
        // Claims here wait from the take-over to the release (see `Ownership::gate`).
        let gate = ctx.ownership.gate(&row.conversation_id).await;
        match take_over(store, node_id, &row, ctx.clock.as_ref()).await {
            Ok(_) => gate.done(),
            Err(e) => {
                tracing::debug!(conversation = %row.conversation_id, error = %e,
                    "recovery after a take-over failed; retrying");
                retry.push((row, gate));
            }
        }
    }
    Ok(())
}
