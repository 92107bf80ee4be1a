//! The durable timer facility (issue 29), on both backends: a due timer is claimed by one
//! node only (also when several claim at once), a lapsed claim is claimed again, a fired
//! or cancelled timer never fires again; account limits keep the later moment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

fn timer(id: &str, conv: &str, due: i64) -> NewTimer {
    NewTimer {
        id: id.to_owned(),
        kind: CONTINUE_AFTER_LIMIT.to_owned(),
        conversation_id: ConversationId::from(conv),
        account: Some("acct".to_owned()),
        due_at_ms: due,
        attempt: 1,
        payload: "{}".to_owned(),
    }
}

async fn timers_fire_once_and_cancel(b: Backend) {
    let (_d, store) = support::open(b).await;
    let t = store.timers();
    let now = now_ms();
    t.add_timer(&timer("t1", "c1", now - 10)).await.unwrap();
    t.add_timer(&timer("t2", "c1", now + 60_000)).await.unwrap();
    t.add_timer(&timer("t3", "c2", now - 5)).await.unwrap();
    assert_eq!(t.account_timers("acct").await.unwrap(), 3);
    let got = t.claim_due_timers("a", now, 10_000, 10).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t3"], "only the due ones, oldest first");
    // Claimed: nobody else gets them while the claim holds.
    assert!(
        t.claim_due_timers("b", now, 10_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(t.fire_timer("t1").await.unwrap());
    assert!(!t.fire_timer("t1").await.unwrap(), "fired once");
    // Node a died holding t3: its claim lapses and b takes it.
    let later = now + 20_000;
    let again = t.claim_due_timers("b", later, 10_000, 10).await.unwrap();
    assert_eq!(
        again.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["t3"]
    );
    assert!(t.fire_timer("t3").await.unwrap());
    // Cancelling c1 stops t2 and forgets t1's firing.
    let c1 = ConversationId::from("c1");
    assert_eq!(t.cancel_timers(&c1, CONTINUE_AFTER_LIMIT).await.unwrap(), 1);
    assert!(
        t.conversation_timers(&c1, CONTINUE_AFTER_LIMIT)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        t.claim_due_timers("b", now + 120_000, 10_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Account limits: the later moment wins; past it the account is free.
    t.limit_account("acct", now + 1_000, "codex").await.unwrap();
    t.limit_account("acct", now + 500, "codex").await.unwrap();
    assert_eq!(
        t.account_limited("acct", now).await.unwrap(),
        Some(now + 1_000)
    );
    assert_eq!(t.account_limited("acct", now + 2_000).await.unwrap(), None);
    assert_eq!(t.account_limited("other", now).await.unwrap(), None);
}

/// Ten claimers at once (on PostgreSQL: separate connections, as separate nodes): each
/// of twenty due timers is claimed exactly once.
async fn concurrent_claims_take_each_timer_once(b: Backend) {
    let (_d, store) = support::open(b).await;
    let now = now_ms();
    for i in 0..20 {
        store
            .timers()
            .add_timer(&timer(&format!("t{i:02}"), "c", now - 1))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for n in 0..10 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .timers()
                .claim_due_timers(&format!("node{n}"), now, 60_000, 5)
                .await
                .unwrap()
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        let got = tokio::time::timeout(std::time::Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
        ids.extend(got.into_iter().map(|t| t.id));
    }
    ids.sort();
    let expected: Vec<String> = (0..20).map(|i| format!("t{i:02}")).collect();
    assert_eq!(ids, expected, "each once");
}

/// A schedule and its one waiting run (issue 30): saving it replaces the run and marks
/// the fired one in one transaction; a run added twice (two nodes computing the same
/// next run) is one; deleting it cancels its run.
async fn a_schedule_keeps_one_waiting_run(b: Backend) {
    let (_d, store) = support::open(b).await;
    let (s, t) = (store.schedules(), store.timers());
    let now = now_ms();
    let run = |id: &str, due: i64| NewTimer {
        kind: SCHEDULE_RUN.to_owned(),
        account: None,
        ..timer(id, "c1", due)
    };
    let mut row = ScheduleRow {
        id: "sch_1".into(),
        conversation_id: ConversationId::from("c1"),
        owner_id: None,
        owner_name: "ann".into(),
        kind: "every".into(),
        expr: "60".into(),
        tz: "UTC".into(),
        prompt: "tick".into(),
        fresh_session: false,
        missed: "run_once".into(),
        state: "active".into(),
        failures: 0,
        next_run_ms: Some(now - 1),
        last_run_ms: None,
        last_turn_id: None,
        note: None,
        timer_id: Some("sch_1-a".into()),
        start_ms: now,
        created_at_ms: now,
        updated_at_ms: now,
    };
    s.add_schedule(&row, Some(&run("sch_1-a", now - 1)))
        .await
        .unwrap();
    let due = t.claim_due_timers("n1", now, 10_000, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    // The run fired; the next one added. A second node finishing the same run (its
    // claim had lapsed) finds the run superseded and only marks it.
    row.last_turn_id = Some("sch_1-a".into());
    row.next_run_ms = Some(now + 60_000);
    let next = run("sch_1-b", now + 60_000);
    assert!(
        s.save_schedule(&row, Some(&next), Some("sch_1-a"))
            .await
            .unwrap()
    );
    assert!(
        !s.save_schedule(&row, Some(&next), Some("sch_1-a"))
            .await
            .unwrap()
    );
    // A pause made while a run fired stands: the late save of that run changes nothing.
    let mut paused = row.clone();
    paused.state = "paused".into();
    s.save_schedule(&paused, None, None).await.unwrap();
    assert!(
        !s.save_schedule(&row, Some(&run("sch_1-c", now + 120_000)), Some("sch_1-b"))
            .await
            .unwrap()
    );
    assert_eq!(s.schedule("sch_1").await.unwrap().unwrap().state, "paused");
    row.state = "active".into();
    s.save_schedule(&row, Some(&next), None).await.unwrap();
    let waiting = t
        .conversation_timers(&ConversationId::from("c1"), SCHEDULE_RUN)
        .await
        .unwrap();
    let states: Vec<(&str, &str)> = waiting
        .iter()
        .map(|t| (t.id.as_str(), t.state.as_str()))
        .collect();
    assert!(states.contains(&("sch_1-b", "waiting")), "{states:?}");
    assert!(!states.contains(&("sch_1-a", "waiting")), "{states:?}");
    let got = s.schedule("sch_1").await.unwrap().unwrap();
    assert_eq!(got.timer_id.as_deref(), Some("sch_1-b"));
    assert_eq!(got.last_turn_id.as_deref(), Some("sch_1-a"));
    // Paused: no run waits.
    row.state = "paused".into();
    s.save_schedule(&row, None, None).await.unwrap();
    assert!(
        t.claim_due_timers("n1", now + 120_000, 10_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.schedules_of(Some(&ConversationId::from("c1")))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(s.delete_schedule("sch_1").await.unwrap());
    assert!(!s.delete_schedule("sch_1").await.unwrap());
    assert!(s.schedules_of(None).await.unwrap().is_empty());
}

/// A slot's timer that every node adds is stored once, by the first; the others are
/// told so (no error), and it is kept as the first one added it.
async fn a_timer_added_by_every_node_is_stored_once(b: Backend) {
    let (_d, store) = support::open(b).await;
    let t = store.timers();
    let now = now_ms();
    assert!(
        t.add_timer_once(&timer("slot-1", "c1", now - 10))
            .await
            .unwrap()
    );
    let mut other = timer("slot-1", "c1", now + 60_000);
    other.attempt = 2;
    assert!(!t.add_timer_once(&other).await.unwrap());
    let got = t.claim_due_timers("a", now, 10_000, 10).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].id.as_str(), got[0].attempt), ("slot-1", 1));
    // Fired, its id still counts: the slot is not scheduled twice.
    assert!(t.fire_timer("slot-1").await.unwrap());
    assert!(!t.add_timer_once(&timer("slot-1", "c1", now)).await.unwrap());
    assert!(
        t.claim_due_timers("a", now + 1, 10_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The next moment a timer falls due, which the timer loop sleeps until: the earliest
/// waiting timer, or a claim's end (after which another node may take its timer).
async fn the_next_timer_due_is_the_earliest_waiting_or_claim_end(b: Backend) {
    let (_d, store) = support::open(b).await;
    let t = store.timers();
    let now = now_ms();
    assert_eq!(t.next_timer_due().await.unwrap(), None);
    t.add_timer(&timer("late", "c1", now + 5_000))
        .await
        .unwrap();
    t.add_timer(&timer("soon", "c2", now + 1_000))
        .await
        .unwrap();
    assert_eq!(t.next_timer_due().await.unwrap(), Some(now + 1_000));
    let got = t.claim_due_timers("a", now + 4_000, 500, 10).await.unwrap();
    assert_eq!(got.len(), 1);
    // Claimed until now + 4 500: due again for another node right after.
    assert_eq!(t.next_timer_due().await.unwrap(), Some(now + 4_501));
    assert!(t.fire_timer("soon").await.unwrap());
    assert_eq!(t.next_timer_due().await.unwrap(), Some(now + 5_000));
    t.cancel_timers(&ConversationId::from("c1"), CONTINUE_AFTER_LIMIT)
        .await
        .unwrap();
    assert_eq!(t.next_timer_due().await.unwrap(), None);
}

contract!(
    timers_fire_once_and_cancel,
    a_timer_added_by_every_node_is_stored_once,
    the_next_timer_due_is_the_earliest_waiting_or_claim_end,
    a_schedule_keeps_one_waiting_run,
);
contract!(multi_thread; concurrent_claims_take_each_timer_once);
