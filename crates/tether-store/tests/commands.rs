//! Forwarded commands (issue 12): a command stored for a node is taken once, answered,
//! read by its sender and removed; a sender gives up only a command nobody took; on
//! PostgreSQL a stored command and a stored reply wake the listeners; on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

fn cmd(id: &str, to: &str, at: i64) -> NewCommand {
    NewCommand {
        id: id.into(),
        to_node: to.into(),
        from_node: "sender".into(),
        conversation_id: Some("c-1".into()),
        body: format!("{{\"n\":\"{id}\"}}"),
        created_at_ms: at,
    }
}

async fn commands_are_taken_once_answered_and_abandoned_only_when_pending(b: Backend) {
    let (_d, store) = support::open(b).await;
    store
        .cluster()
        .submit_command(&cmd("k1", "a", 1_000))
        .await
        .unwrap();
    store
        .cluster()
        .submit_command(&cmd("k2", "a", 2_000))
        .await
        .unwrap();
    store
        .cluster()
        .submit_command(&cmd("k3", "b", 1_500))
        .await
        .unwrap();
    let pending: Vec<String> = store
        .cluster()
        .pending_commands("a", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id.into_string())
        .collect();
    assert_eq!(pending, ["k1", "k2"]);
    let k1 = store.cluster().get_command("k1").await.unwrap().unwrap();
    assert_eq!(k1.status, CommandStatus::Pending);
    assert_eq!(k1.conversation_id.as_ref().map(|c| c.as_str()), Some("c-1"));
    assert_eq!(k1.body, "{\"n\":\"k1\"}");

    // Taken once, only by its node; a reply needs it taken.
    assert!(
        !store
            .cluster()
            .reply_command("k1", "early", 3_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .cluster()
            .take_command("k1", "b", 3_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .cluster()
            .take_command("k1", "a", 3_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .cluster()
            .take_command("k1", "a", 3_001)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .cluster()
            .pending_commands("a", 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Taken: its sender cannot give it up any more.
    assert!(!store.cluster().abandon_command("k1").await.unwrap());
    assert!(
        store
            .cluster()
            .reply_command("k1", "{\"ok\":1}", 4_000)
            .await
            .unwrap()
    );
    let k1 = store.cluster().get_command("k1").await.unwrap().unwrap();
    assert_eq!(k1.status, CommandStatus::Answered);
    assert_eq!(k1.reply.as_deref(), Some("{\"ok\":1}"));
    assert_eq!(
        (k1.taken_at_ms, k1.answered_at_ms),
        (Some(3_000), Some(4_000))
    );
    store.cluster().remove_command("k1").await.unwrap();
    assert_eq!(store.cluster().get_command("k1").await.unwrap(), None);

    // Pending: its sender gives it up, and then nobody takes it.
    assert!(store.cluster().abandon_command("k2").await.unwrap());
    assert!(
        !store
            .cluster()
            .take_command("k2", "a", 5_000)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .cluster()
            .get_command("k2")
            .await
            .unwrap()
            .unwrap()
            .status,
        CommandStatus::Abandoned
    );

    // Taken in one go: only the pending ones of that node, oldest first, once.
    store
        .cluster()
        .submit_command(&cmd("k5", "a", 6_000))
        .await
        .unwrap();
    store
        .cluster()
        .submit_command(&cmd("k4", "a", 5_500))
        .await
        .unwrap();
    let taken: Vec<String> = store
        .cluster()
        .take_pending_commands("a", 7_000, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id.into_string())
        .collect();
    assert_eq!(taken, ["k4", "k5"]);
    assert!(
        store
            .cluster()
            .take_pending_commands("a", 7_001, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .cluster()
            .get_command("k4")
            .await
            .unwrap()
            .unwrap()
            .status,
        CommandStatus::Taken
    );
    store.cluster().remove_command("k4").await.unwrap();
    store.cluster().remove_command("k5").await.unwrap();

    // Old rows of senders that went away are pruned.
    assert_eq!(store.cluster().prune_commands(2_001).await.unwrap(), 2);
    assert!(store.cluster().get_command("k3").await.unwrap().is_none());
}

contract!(commands_are_taken_once_answered_and_abandoned_only_when_pending);

async fn next(w: &mut Wakeups) -> Wakeup {
    tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("a wake-up in time")
        .unwrap()
}

async fn a_stored_command_and_its_reply_wake_the_listeners(b: Backend) {
    let (_d, store) = support::open(b).await;
    let Some(mut wakeups) = store.cluster().command_wakeups().await.unwrap() else {
        assert_eq!(b, Backend::Sqlite, "only SQLite has no wake-ups");
        return;
    };
    store
        .cluster()
        .submit_command(&cmd("k1", "node-a", 1_000))
        .await
        .unwrap();
    assert_eq!(next(&mut wakeups).await, Wakeup::Command("node-a".into()));
    assert!(
        store
            .cluster()
            .take_command("k1", "node-a", 2_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .cluster()
            .reply_command("k1", "{}", 3_000)
            .await
            .unwrap()
    );
    assert_eq!(next(&mut wakeups).await, Wakeup::Reply("k1".into()));
}

contract!(a_stored_command_and_its_reply_wake_the_listeners);
