//! Tests of the channel rows, on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::ConversationKind;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

async fn store(b: Backend) -> (support::Guard, Store) {
    support::open(b).await
}

fn item(lane: &str, key: &str, body: &str) -> NewOutbox {
    NewOutbox {
        channel: "telegram".into(),
        chat_key: lane.into(),
        dedupe_key: key.into(),
        op: "send".into(),
        target_key: None,
        address: "{}".into(),
        body: body.into(),
        replace: false,
        traceparent: None,
    }
}

fn coalesced(lane: &str, key: &str, body: &str) -> NewOutbox {
    NewOutbox {
        replace: true,
        traceparent: None,
        ..item(lane, key, body)
    }
}

async fn outbox_rows_are_deduplicated_and_lanes_are_ordered(b: Backend) {
    let (_d, s) = store(b).await;
    let ch = s.channels();
    assert_eq!(
        ch.enqueue_outbox(&[
            item("a", "k1", "1"),
            item("a", "k2", "2"),
            item("b", "k3", "3")
        ])
        .await
        .unwrap(),
        3
    );
    assert_eq!(
        ch.enqueue_outbox(&[item("a", "k1", "other")])
            .await
            .unwrap(),
        0
    );
    let now = now_ms() + 1;
    let due = ch.due_outbox("telegram", now, 10).await.unwrap();
    let keys: Vec<_> = due.iter().map(|r| r.dedupe_key.as_str()).collect();
    assert_eq!(keys, ["k1", "k3"], "one head per lane");
    assert_eq!(due[0].body, "1");

    // A retry pushes the head into the future: the lane waits, the other does not.
    ch.mark_outbox_retry(due[0].id, now + 60_000, "429")
        .await
        .unwrap();
    let due = ch.due_outbox("telegram", now, 10).await.unwrap();
    let keys: Vec<_> = due.iter().map(|r| r.dedupe_key.as_str()).collect();
    assert_eq!(keys, ["k3"]);
    let next = ch.next_outbox_due("telegram").await.unwrap().unwrap();
    assert!(next < now, "k3 is due now: {next}");

    let k3 = &due[0];
    ch.mark_outbox_sent(k3.id, k3.version, Some("m1"))
        .await
        .unwrap();
    let row = ch.outbox_row("telegram", "k3").await.unwrap().unwrap();
    assert_eq!(row.status, OutboxStatus::Sent);
    assert_eq!(row.remote_id.as_deref(), Some("m1"));
    let row = ch.outbox_row("telegram", "k1").await.unwrap().unwrap();
    assert_eq!(row.attempts, 1);
    assert_eq!(row.last_error.as_deref(), Some("429"));
}

async fn an_upsert_replaces_the_body_and_a_stale_send_does_not_mark_it_sent(b: Backend) {
    let (_d, s) = store(b).await;
    let ch = s.channels();
    ch.enqueue_outbox(&[coalesced("a", "p", "v1")])
        .await
        .unwrap();
    let r1 = ch.outbox_row("telegram", "p").await.unwrap().unwrap();
    ch.enqueue_outbox(&[coalesced("a", "p", "v2")])
        .await
        .unwrap();
    // The v1 send finishes after the body changed: the row stays pending with v2.
    ch.mark_outbox_sent(r1.id, r1.version, Some("m"))
        .await
        .unwrap();
    let r2 = ch.outbox_row("telegram", "p").await.unwrap().unwrap();
    assert_eq!(r2.status, OutboxStatus::Pending);
    assert_eq!(r2.body, "v2");
    ch.mark_outbox_sent(r2.id, r2.version, Some("m"))
        .await
        .unwrap();
    // Same body again: nothing to do.
    ch.enqueue_outbox(&[coalesced("a", "p", "v2")])
        .await
        .unwrap();
    let r3 = ch.outbox_row("telegram", "p").await.unwrap().unwrap();
    assert_eq!(r3.status, OutboxStatus::Sent);
    // A new body: pending again, same row.
    ch.enqueue_outbox(&[coalesced("a", "p", "v3")])
        .await
        .unwrap();
    let r4 = ch.outbox_row("telegram", "p").await.unwrap().unwrap();
    assert_eq!((r4.id, r4.status), (r1.id, OutboxStatus::Pending));
}

async fn chats_map_to_conversations_and_the_cursor_only_moves_forward(b: Backend) {
    let (_d, s) = store(b).await;
    let ch = s.channels();
    let c1 = tether_proto::ConversationId::from("c1");
    s.conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &c1,
            kind: ConversationKind::Chat,
            title: "t",
            agent: "fake",
            model: None,
            cwd: "/tmp",
            parent_conversation_id: None,
            owner_id: None,
            visibility: tether_proto::Visibility::Private,
        })
        .await
        .unwrap();
    let c = ch
        .insert_channel_chat("telegram", "42", &c1, "{\"chat_id\":\"42\"}", 7)
        .await
        .unwrap();
    assert_eq!(c.event_cursor, 7);
    let again = ch
        .insert_channel_chat("telegram", "42", &c1, "{}", 0)
        .await
        .unwrap();
    assert_eq!(again, c);
    ch.advance_channel_chat("telegram", "42", 10, &[item("42", "x", "1")])
        .await
        .unwrap();
    ch.advance_channel_chat("telegram", "42", 9, &[])
        .await
        .unwrap();
    let c = ch.channel_chat("telegram", "42").await.unwrap().unwrap();
    assert_eq!(c.event_cursor, 10);
    assert_eq!(ch.channel_chats("telegram").await.unwrap().len(), 1);
    assert!(ch.channel_chats("feishu").await.unwrap().is_empty());
}

async fn approving_a_pairing_allows_the_user_once_and_queues_the_notice(b: Backend) {
    let (_d, s) = store(b).await;
    let ch = s.channels();
    let p = Pairing {
        code: "ABCD2345".into(),
        channel: "telegram".into(),
        user_id: "7".into(),
        user_name: "ann".into(),
        chat_key: "7".into(),
        address: "{}".into(),
        status: "pending".into(),
        created_at_ms: now_ms(),
        approved_at_ms: None,
        approved_by: None,
    };
    assert!(ch.insert_pairing(&p).await.unwrap());
    assert!(!ch.insert_pairing(&p).await.unwrap(), "codes are unique");
    assert_eq!(
        ch.pending_pairing("telegram", "7")
            .await
            .unwrap()
            .unwrap()
            .code,
        p.code
    );
    assert!(!ch.channel_user_allowed("telegram", "7").await.unwrap());
    let approved = ch
        .approve_pairing("ABCD2345", "cli", |p| {
            item(&p.chat_key, "pair:ABCD2345", "ok")
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(approved.status, "approved");
    assert_eq!(approved.approved_by.as_deref(), Some("cli"));
    assert!(ch.channel_user_allowed("telegram", "7").await.unwrap());
    assert!(!ch.channel_user_allowed("feishu", "7").await.unwrap());
    assert!(
        ch.outbox_row("telegram", "pair:ABCD2345")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        ch.approve_pairing("ABCD2345", "cli", |p| item(&p.chat_key, "again", "x"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(ch.outbox_row("telegram", "again").await.unwrap().is_none());
    assert_eq!(ch.list_pairings(Some("pending")).await.unwrap().len(), 0);
    assert_eq!(ch.list_pairings(None).await.unwrap().len(), 1);

    assert_eq!(ch.channel_state("telegram", "offset").await.unwrap(), None);
    ch.set_channel_state("telegram", "offset", "5")
        .await
        .unwrap();
    ch.set_channel_state("telegram", "offset", "6")
        .await
        .unwrap();
    assert_eq!(
        ch.channel_state("telegram", "offset")
            .await
            .unwrap()
            .as_deref(),
        Some("6")
    );
}

async fn pending_pairings_are_capped_and_expired_ones_pruned(b: Backend) {
    let (_d, s) = store(b).await;
    let ch = s.channels();
    let now = now_ms();
    let pairing = |code: &str, user: &str, at: i64| Pairing {
        code: code.into(),
        channel: "telegram".into(),
        user_id: user.into(),
        user_name: user.into(),
        chat_key: user.into(),
        address: "{}".into(),
        status: "pending".into(),
        created_at_ms: at,
        approved_at_ms: None,
        approved_by: None,
    };
    let fresh_since = now - 1000;
    // An old one does not count towards the cap.
    assert!(
        ch.insert_pairing(&pairing("OLD00000", "0", now - 5000))
            .await
            .unwrap()
    );
    for i in 0..3 {
        let p = pairing(&format!("CODE000{i}"), &i.to_string(), now);
        assert!(ch.insert_pairing_capped(&p, fresh_since, 3).await.unwrap());
    }
    let over = pairing("CODE0009", "9", now);
    assert!(
        !ch.insert_pairing_capped(&over, fresh_since, 3)
            .await
            .unwrap()
    );
    assert_eq!(
        ch.count_pending_pairings("telegram", fresh_since)
            .await
            .unwrap(),
        3
    );
    assert_eq!(ch.prune_pairings("telegram", fresh_since).await.unwrap(), 1);
    assert!(ch.get_pairing("OLD00000").await.unwrap().is_none());
    assert_eq!(ch.list_pairings(None).await.unwrap().len(), 3);
}

async fn handled_inbound_rows_go_and_old_dedupe_keys_are_pruned(b: Backend) {
    let (_d, s) = store(b).await;
    let ch = s.channels();
    assert!(ch.accept_inbound("telegram", "1", "{}").await.unwrap());
    ch.mark_inbound_handled("telegram", "1").await.unwrap();
    assert!(ch.unhandled_inbound("telegram").await.unwrap().is_empty());
    // Still a duplicate while its key is kept...
    assert!(!ch.accept_inbound("telegram", "1", "{}").await.unwrap());
    assert_eq!(
        ch.prune_inbound("telegram", now_ms() - 60_000)
            .await
            .unwrap(),
        0
    );
    assert_eq!(ch.prune_inbound("telegram", now_ms() + 1).await.unwrap(), 1);
    // ...and new again once it is forgotten.
    assert!(ch.accept_inbound("telegram", "1", "{}").await.unwrap());
}

async fn accepted_updates_are_kept_until_handled_and_deduplicated(b: Backend) {
    let (_d, store) = store(b).await;
    let ch = store.channels();
    let run = async {
        assert!(ch.accept_inbound("telegram", "1", "{\"a\":1}").await?);
        assert!(ch.accept_inbound("telegram", "2", "{\"a\":2}").await?);
        assert!(!ch.accept_inbound("telegram", "1", "{\"a\":1}").await?);
        let keys = |v: Vec<PendingInbound>| v.into_iter().map(|p| p.key).collect::<Vec<_>>();
        assert_eq!(keys(ch.unhandled_inbound("telegram").await?), ["1", "2"]);
        assert!(ch.unhandled_inbound("feishu").await?.is_empty());
        ch.mark_inbound_handled("telegram", "1").await?;
        let left = ch.unhandled_inbound("telegram").await?;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].payload, "{\"a\":2}");
        store.close().await;
        Ok::<_, StoreError>(())
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), run)
        .await
        .unwrap_or_else(|_| panic!("timed out"))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Issue 24 S8: an upload's rows go in one transaction, all or none.
async fn attachments_of_one_upload_are_stored_all_or_none(b: Backend) {
    let (_d, s) = store(b).await;
    let c1 = tether_proto::ConversationId::from("c1");
    s.conversations()
        .create_conversation(&tether_store::NewConversation {
            id: &c1,
            kind: ConversationKind::Chat,
            title: "t",
            agent: "fake",
            model: None,
            cwd: "/tmp",
            parent_conversation_id: None,
            owner_id: None,
            visibility: tether_proto::Visibility::Private,
        })
        .await
        .unwrap();
    let row = |id: &str| tether_proto::Attachment {
        id: tether_proto::AttachmentId::from(id),
        conversation_id: c1.clone(),
        name: format!("{id}.txt"),
        mime: "text/plain".into(),
        kind: tether_proto::AttachmentKind::File,
        size: 1,
        sha256: "00".repeat(32),
        turn_id: None,
        created_at_ms: 0,
    };
    let stored = s
        .attachments()
        .insert_attachments(&[row("a1"), row("a2")])
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert!(stored.iter().all(|a| a.created_at_ms > 0));
    // The second row's id is taken: the first one is not stored either.
    assert!(
        s.attachments()
            .insert_attachments(&[row("a3"), row("a1")])
            .await
            .is_err()
    );
    assert!(
        s.attachments()
            .get_attachment(&"a3".into())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        s.attachments()
            .get_attachment(&"a2".into())
            .await
            .unwrap()
            .is_some()
    );
}

contract!(
    attachments_of_one_upload_are_stored_all_or_none,
    outbox_rows_are_deduplicated_and_lanes_are_ordered,
    an_upsert_replaces_the_body_and_a_stale_send_does_not_mark_it_sent,
    chats_map_to_conversations_and_the_cursor_only_moves_forward,
    approving_a_pairing_allows_the_user_once_and_queues_the_notice,
    pending_pairings_are_capped_and_expired_ones_pruned,
    handled_inbound_rows_go_and_old_dedupe_keys_are_pruned,
    accepted_updates_are_kept_until_handled_and_deduplicated,
);
