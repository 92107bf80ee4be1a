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
    }
}

async fn nodes_register_renew_and_go(b: Backend) {
    let (_d, store) = support::open(b).await;
    assert!(store.nodes().await.unwrap().is_empty());
    store.register_node(&node("a", 1_000)).await.unwrap();
    store.register_node(&node("bb", 2_000)).await.unwrap();
    let all = store.nodes().await.unwrap();
    assert_eq!(all, vec![node("a", 1_000), node("bb", 2_000)]);
    assert!(all[0].alive(10_999) && !all[0].alive(11_000));

    // A heartbeat moves the lease on; a node without a row is told to register again.
    assert!(store.renew_node_lease("a", 5_000, 15_000).await.unwrap());
    assert!(!store.renew_node_lease("zz", 5_000, 15_000).await.unwrap());
    let a = store.nodes().await.unwrap().remove(0);
    assert_eq!((a.heartbeat_at_ms, a.lease_until_ms), (5_000, 15_000));

    // Registering again (a restart with the same id) replaces the row.
    store.register_node(&node("a", 20_000)).await.unwrap();
    store.remove_node("bb").await.unwrap();
    assert_eq!(store.nodes().await.unwrap(), vec![node("a", 20_000)]);
}

contract!(nodes_register_renew_and_go);
