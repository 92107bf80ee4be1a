//! The node registry (issue 12): nodes register, renew their leases, are listed with
//! them, and go when removed; on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

fn node(id: &str, now: i64) -> NodeRow {
    NodeRow {
        id: id.into(),
        name: "host".into(),
        addr: format!("127.0.0.1:{}", id.len()),
        started_at_ms: now,
        heartbeat_at_ms: now,
        lease_until_ms: now + 10_000,
        draining_at_ms: None,
        version: String::new(),
    }
}

async fn nodes_register_renew_and_go(b: Backend) {
    let (_d, store) = support::open(b).await;
    assert!(store.cluster().nodes().await.unwrap().is_empty());
    store
        .cluster()
        .register_node(&node("a", 1_000))
        .await
        .unwrap();
    store
        .cluster()
        .register_node(&node("bb", 2_000))
        .await
        .unwrap();
    let all = store.cluster().nodes().await.unwrap();
    assert_eq!(all, vec![node("a", 1_000), node("bb", 2_000)]);
    assert!(all[0].alive(10_999) && !all[0].alive(11_000));

    // A heartbeat moves the lease on; a node without a row is told to register again.
    assert!(
        store
            .cluster()
            .renew_node_lease("a", 5_000, 15_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .cluster()
            .renew_node_lease("zz", 5_000, 15_000)
            .await
            .unwrap()
    );
    let a = store.cluster().nodes().await.unwrap().remove(0);
    assert_eq!((a.heartbeat_at_ms, a.lease_until_ms), (5_000, 15_000));

    // Registering again (a restart with the same id) replaces the row.
    store
        .cluster()
        .register_node(&node("a", 20_000))
        .await
        .unwrap();
    store.cluster().remove_node("bb").await.unwrap();
    assert_eq!(
        store.cluster().nodes().await.unwrap(),
        vec![node("a", 20_000)]
    );
}

contract!(nodes_register_renew_and_go);

async fn owners_claim_fence_take_over_and_release(b: Backend) {
    let (_d, store) = support::open(b).await;
    let c = tether_proto::ConversationId::from("c-1");
    store
        .cluster()
        .register_node(&node("a", 1_000))
        .await
        .unwrap();
    store
        .cluster()
        .register_node(&node("bb", 1_000))
        .await
        .unwrap();
    assert_eq!(store.cluster().conversation_owner(&c).await.unwrap(), None);

    // The first claim wins with epoch 1; its node keeps it; another live node does not.
    assert_eq!(
        store
            .cluster()
            .claim_conversation(&c, "a", 2_000)
            .await
            .unwrap(),
        Claim::Claimed { epoch: 1 }
    );
    assert_eq!(store.cluster().held_epoch(&c), Some(1));
    assert_eq!(
        store
            .cluster()
            .claim_conversation(&c, "a", 2_500)
            .await
            .unwrap(),
        Claim::Held { epoch: 1 }
    );
    let Claim::Owned(o) = store
        .cluster()
        .claim_conversation(&c, "bb", 3_000)
        .await
        .unwrap()
    else {
        panic!("a live owner keeps its conversation");
    };
    assert_eq!((o.node_id.as_str(), o.epoch), ("a", 1));
    assert!(o.alive(3_000));
    assert_eq!(
        store.cluster().owner_counts().await.unwrap(),
        vec![("a".into(), 1)]
    );
    assert!(
        store
            .cluster()
            .orphaned_conversations(3_000)
            .await
            .unwrap()
            .is_empty()
    );

    // Once a's lease ended, its conversation is orphaned and the claim raises the epoch.
    assert_eq!(
        store
            .cluster()
            .orphaned_conversations(11_000)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store
            .cluster()
            .claim_conversation(&c, "bb", 11_000)
            .await
            .unwrap(),
        Claim::Claimed { epoch: 2 }
    );
    assert_eq!(
        store
            .cluster()
            .owned_conversations("bb")
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .cluster()
            .owned_conversations("a")
            .await
            .unwrap()
            .is_empty()
    );

    // Take-over is compare-and-set on the epoch: of two survivors only one wins.
    assert_eq!(
        store
            .cluster()
            .take_over_conversation(&c, "a", 2, 12_000)
            .await
            .unwrap(),
        Some(3)
    );
    assert_eq!(
        store
            .cluster()
            .take_over_conversation(&c, "bb", 2, 12_000)
            .await
            .unwrap(),
        None
    );

    // A release by a stale epoch does nothing; the owner's own release leaves no owner,
    // and the next claim still raises the epoch (a stale epoch never comes back).
    assert!(
        !store
            .cluster()
            .release_conversation(&c, "a", 2)
            .await
            .unwrap()
    );
    assert!(
        store
            .cluster()
            .release_conversation(&c, "a", 3)
            .await
            .unwrap()
    );
    assert_eq!(store.cluster().conversation_owner(&c).await.unwrap(), None);
    assert_eq!(store.cluster().held_epoch(&c), None);
    assert_eq!(
        store
            .cluster()
            .claim_conversation(&c, "bb", 13_000)
            .await
            .unwrap(),
        Claim::Claimed { epoch: 4 }
    );
}

contract!(owners_claim_fence_take_over_and_release);
