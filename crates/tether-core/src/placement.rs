//! The cluster's placement rules, pure (issue 27 item 2): where a conversation's command
//! runs, given what the store says of its owner and of the nodes, with `now` passed in.
//! The runtime reads the rows and the clock and applies these; tests run them in
//! microseconds.

/// A conversation's owner as the store and this node's presence checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    pub node_id: &'a str,
    /// The owning node's lease end (`None`: the node row is gone).
    pub lease_until_ms: Option<i64>,
    /// This node's presence checks found the owner's run gone.
    pub seen_gone: bool,
}

/// What the owner row decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// This node owns it (even if its own lease lapsed: fencing refuses stale writes).
    Mine,
    /// Another live node owns it: the command goes there.
    There(&'a str),
    /// The owner is gone and failover may still take it over: look again shortly.
    AwaitFailover,
    /// Nobody (alive) owns it and the failover window is over: claim it.
    Claim,
}

/// The verdict for `owner` on node `me` at `now_ms`; `failover_until_ms` ends the wait
/// for a dead owner's take-over.
pub fn verdict<'a>(
    me: &str,
    owner: Option<Owner<'a>>,
    now_ms: i64,
    failover_until_ms: i64,
) -> Verdict<'a> {
    match owner {
        Some(o) if o.node_id == me => Verdict::Mine,
        Some(o) if o.lease_until_ms.is_some_and(|until| until > now_ms) && !o.seen_gone => {
            Verdict::There(o.node_id)
        }
        Some(_) if now_ms < failover_until_ms => Verdict::AwaitFailover,
        Some(_) | None => Verdict::Claim,
    }
}

/// Whether a node owning `mine` conversations is at `max_live_per_node` = `cap` (0: no
/// cap).
pub fn at_cap(cap: usize, mine: i64) -> bool {
    cap != 0 && usize::try_from(mine).unwrap_or(usize::MAX) >= cap
}

/// At `max_live_per_node` = `cap` (0: no cap): the live node other than this one that
/// owns the fewest conversations, when it owns fewer than this node's `mine`. `None`:
/// claim here. Ties go to the smallest node id, so every node picks the same one.
pub fn elsewhere_at_cap<'a>(
    cap: usize,
    mine: i64,
    others: impl IntoIterator<Item = (&'a str, i64)>,
) -> Option<&'a str> {
    if !at_cap(cap, mine) {
        return None;
    }
    others
        .into_iter()
        .map(|(id, owned)| (owned, id))
        .min()
        .filter(|(owned, _)| *owned < mine)
        .map(|(_, id)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(node_id: &str, lease_until_ms: Option<i64>, seen_gone: bool) -> Owner<'_> {
        Owner {
            node_id,
            lease_until_ms,
            seen_gone,
        }
    }

    #[test]
    fn an_owned_conversation_runs_on_its_owner_while_its_lease_holds() {
        assert_eq!(
            verdict("a", Some(owner("a", Some(0), false)), 500, 900),
            Verdict::Mine
        );
        let b = Some(owner("b", Some(1_000), false));
        assert_eq!(verdict("a", b, 999, 0), Verdict::There("b"));
        // The lease ends at its instant.
        assert_eq!(verdict("a", b, 1_000, 0), Verdict::Claim);
    }

    #[test]
    fn a_dead_owner_is_waited_for_until_the_failover_window_ends() {
        let expired = Some(owner("b", Some(1_000), false));
        assert_eq!(verdict("a", expired, 1_500, 2_000), Verdict::AwaitFailover);
        assert_eq!(verdict("a", expired, 2_000, 2_000), Verdict::Claim);
        // Seen gone by presence: not alive, whatever its lease says.
        let gone = Some(owner("b", Some(10_000), true));
        assert_eq!(verdict("a", gone, 1_500, 2_000), Verdict::AwaitFailover);
        // Its node row removed.
        assert_eq!(
            verdict("a", Some(owner("b", None, false)), 1, 0),
            Verdict::Claim
        );
        assert_eq!(verdict("a", None, 1, 5), Verdict::Claim);
    }

    #[test]
    fn at_its_cap_a_node_sends_new_conversations_to_the_least_loaded_other() {
        let others = [("b", 3), ("c", 1), ("d", 1)];
        // No cap, or under it: here.
        assert_eq!(elsewhere_at_cap(0, 9, others), None);
        assert_eq!(elsewhere_at_cap(5, 4, others), None);
        // At it: the fewest, ties by id.
        assert_eq!(elsewhere_at_cap(4, 4, others), Some("c"));
        // Nobody has fewer: here (over the cap rather than nowhere).
        assert_eq!(elsewhere_at_cap(2, 2, [("b", 2), ("c", 5)]), None);
        assert_eq!(elsewhere_at_cap(2, 2, []), None);
    }
}
