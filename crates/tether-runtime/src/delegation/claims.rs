//! A continuation id held by one request (issue 26 item 2): first in memory (this node's
//! requests for the id wait for each other, so a retry on the same node gets the first
//! answer), then in the store, claimed in the transaction that reads the ledger, so a
//! request for the id on another node meanwhile is refused with
//! `continuation_conflict` before it does anything: a continue or close is never left
//! half applied. The ledger entry replaces the claim when the request is recorded; a
//! request that fails gives it back.

use tether_proto::ErrorCode;
use tether_store::{ContinuationClaim, LedgerEntry, Store};

use crate::delegation::Delegations;
use crate::delegation::err;
use crate::delegation::registry::LedgerGuard;
use crate::error::Result;
use crate::ids::new_id;

/// Holds a continuation id until dropped.
pub(crate) struct HeldContinuation {
    _local: LedgerGuard,
    /// The store's claim, given back on drop (a no-op once the ledger entry replaced it).
    claim: Option<StoreClaim>,
}

struct StoreClaim {
    store: Store,
    scope: String,
    continuation_id: String,
    name: String,
}

impl Drop for HeldContinuation {
    fn drop(&mut self) {
        let Some(c) = self.claim.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            if let Err(e) = c
                .store
                .delegation()
                .release_continuation(&c.scope, &c.continuation_id, &c.name)
                .await
            {
                // It frees itself once this node restarts or its lease ends.
                tracing::warn!(
                    continuation_id = c.continuation_id,
                    error = %e,
                    "cannot give back a continuation id"
                );
            }
        });
    }
}

impl Delegations<'_> {
    /// Holds `continuation_id` of `scope` for one request: the recorded entry when the
    /// id was used already (to answer again or refuse), else nothing; 409
    /// `continuation_conflict` when a request on another node holds it right now.
    pub(crate) async fn hold_continuation(
        &self,
        scope: &str,
        continuation_id: &str,
    ) -> Result<(HeldContinuation, Option<LedgerEntry>)> {
        let local = self
            .rt
            .ctx()
            .delegation
            .lock_ledger(scope, continuation_id)
            .await;
        let store = &self.rt.ctx().store;
        let name: String = new_id();
        let node = &self.rt.ctx().config.cluster.node_id;
        match store
            .delegation()
            .claim_continuation(scope, continuation_id, node, &name)
            .await?
        {
            ContinuationClaim::Recorded(entry) => Ok((
                HeldContinuation {
                    _local: local,
                    claim: None,
                },
                Some(entry),
            )),
            ContinuationClaim::Claimed => Ok((
                HeldContinuation {
                    _local: local,
                    claim: Some(StoreClaim {
                        store: store.clone(),
                        scope: scope.to_owned(),
                        continuation_id: continuation_id.to_owned(),
                        name,
                    }),
                },
                None,
            )),
            ContinuationClaim::Held { node_id } => Err(err(
                ErrorCode::ContinuationConflict,
                format!(
                    "continuation_id {continuation_id:?} is in use by another request right \
                     now (on node {node_id}); nothing was done: ask for the task's status, \
                     then retry with a new continuation_id if it is still needed"
                ),
            )),
        }
    }
}
