//! The usage ledger (issue 29), on both backends (see `support`): rows appended as they
//! come, totals per turn, session, conversation, delegation tree, person and in all,
//! since a moment; an unpriced row counts its tokens and is counted as unpriced, never
//! as a zero cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tether_proto::*;
use tether_store::*;

#[macro_use]
mod support;
use support::Backend;

fn row(
    conv: &str,
    root: &str,
    turn: &str,
    person: &str,
    tokens: i64,
    cost: Option<i64>,
) -> NewUsage {
    NewUsage {
        report_id: uuid(),
        unreported: false,
        conversation_id: ConversationId::from(conv),
        root_conversation_id: ConversationId::from(root),
        session_id: Some(SessionId::from(format!("s-{conv}"))),
        turn_id: Some(TurnId::from(turn)),
        person_id: Some(PersonId::from(person)),
        agent: "codex".to_owned(),
        model: Some("gpt-5".to_owned()),
        account: None,
        input: tokens,
        cached_input: 2 * tokens,
        cache_write: 0,
        output: 3 * tokens,
        reasoning: 1,
        cost_nanos: cost,
        price_version: "tether-defaults-1".to_owned(),
    }
}

fn uuid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "r{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

async fn the_ledger_sums_every_scope_and_keeps_unknown_costs_apart(b: Backend) {
    let (_d, store) = support::open(b).await;
    let usage = store.usage();
    assert_eq!(
        usage
            .usage_totals(&UsageScope::Everything, None)
            .await
            .unwrap(),
        UsageTotals::default()
    );
    // A parent with two reports in one turn, its child (a Claude task) with one, and
    // someone else's conversation with an unpriced model.
    usage
        .record_usage(&row("parent", "parent", "t1", "ann", 10, Some(1_000)))
        .await
        .unwrap();
    usage
        .record_usage(&row("parent", "parent", "t1", "ann", 5, Some(500)))
        .await
        .unwrap();
    usage
        .record_usage(&row("child", "parent", "t2", "ann", 7, Some(700)))
        .await
        .unwrap();
    usage
        .record_usage(&row("other", "other", "t3", "bob", 4, None))
        .await
        .unwrap();

    let turn = usage
        .usage_totals(&UsageScope::Turn(TurnId::from("t1")), None)
        .await
        .unwrap();
    assert_eq!(
        (turn.reports, turn.input, turn.cached_input, turn.output),
        (2, 15, 30, 45)
    );
    assert_eq!(
        (turn.reasoning, turn.cost_nanos, turn.unpriced),
        (2, 1_500, 0)
    );
    let tree = usage
        .usage_totals(&UsageScope::Tree(ConversationId::from("parent")), None)
        .await
        .unwrap();
    assert_eq!(
        (tree.reports, tree.input, tree.cost_nanos),
        (3, 22, 2_200),
        "the child counts"
    );
    let conv = usage
        .usage_totals(
            &UsageScope::Conversation(ConversationId::from("parent")),
            None,
        )
        .await
        .unwrap();
    assert_eq!(conv.input, 15);
    let session = usage
        .usage_totals(&UsageScope::Session(SessionId::from("s-child")), None)
        .await
        .unwrap();
    assert_eq!(session.input, 7);
    let bob = usage
        .usage_totals(&UsageScope::Person(PersonId::from("bob")), None)
        .await
        .unwrap();
    assert_eq!(
        (bob.input, bob.cost_nanos, bob.unpriced),
        (4, 0, 1),
        "unknown, not zero"
    );
    let all = usage
        .usage_totals(&UsageScope::Everything, None)
        .await
        .unwrap();
    assert_eq!((all.reports, all.input, all.unpriced), (4, 26, 1));
    // Since a moment after everything: nothing.
    let later = now_ms() + 60_000;
    let none = usage
        .usage_totals(&UsageScope::Everything, Some(later))
        .await
        .unwrap();
    assert_eq!(none.reports, 0);
}

async fn a_report_written_twice_counts_once_and_an_unreported_turn_is_unknown(b: Backend) {
    let (_d, store) = support::open(b).await;
    let usage = store.usage();
    let r = row("c", "c", "t1", "ann", 10, Some(100));
    assert!(usage.record_usage(&r).await.unwrap().inserted);
    assert!(!usage.record_usage(&r).await.unwrap().inserted, "a retry");
    let mut silent = row("c", "c", "t2", "ann", 0, None);
    (silent.cached_input, silent.output, silent.reasoning) = (0, 0, 0);
    silent.unreported = true;
    usage.record_usage(&silent).await.unwrap();
    let t = usage
        .usage_totals(&UsageScope::Conversation(ConversationId::from("c")), None)
        .await
        .unwrap();
    assert_eq!(
        (t.reports, t.input, t.unreported, t.unpriced),
        (2, 10, 1, 0)
    );
}

fn budget(id: &str, scope: BudgetScope, cap: i64, period: tether_core::budget::Period) -> Budget {
    Budget {
        id: id.to_owned(),
        scope,
        unit: tether_core::budget::Unit::Tokens,
        cap,
        warn_percent: Some(50),
        period,
        created_by: None,
        created_at_ms: now_ms(),
    }
}

async fn budgets_count_every_row_of_their_scope_and_tell_the_crossing_one(b: Backend) {
    use tether_core::budget::Period;
    let (_d, store) = support::open(b).await;
    let usage = store.usage();
    // Each row below is 10 + 20 + 30 + 1 = 61 tokens.
    let tree = budget(
        "b-tree",
        BudgetScope::Tree(ConversationId::from("p")),
        150,
        Period::Day,
    );
    let ann = budget(
        "b-ann",
        BudgetScope::Person(PersonId::from("ann")),
        1_000,
        Period::Month,
    );
    let team = budget("b-team", BudgetScope::Team, 10_000, Period::Total);
    for b in [&tree, &ann, &team] {
        usage.create_budget(b).await.unwrap();
    }
    let first = usage
        .record_usage(&row("p", "p", "t1", "ann", 10, Some(1)))
        .await
        .unwrap();
    assert_eq!(first.budgets.len(), 3, "tree, person and team");
    assert!(first.over().is_none());
    let second = usage
        .record_usage(&row("child", "p", "t2", "ann", 10, Some(1)))
        .await
        .unwrap();
    let hit = second
        .budgets
        .iter()
        .find(|h| h.usage.budget.id == "b-tree")
        .unwrap();
    assert_eq!(hit.usage.used, 122);
    assert!(
        hit.crossing.warned && !hit.crossing.over,
        "past 50 %: warned once"
    );
    let third = usage
        .record_usage(&row("child", "p", "t2", "ann", 10, Some(1)))
        .await
        .unwrap();
    let over = third.over().unwrap();
    assert_eq!(
        (over.usage.budget.id.as_str(), over.usage.used),
        ("b-tree", 183)
    );
    assert!(!over.crossing.warned);
    // Someone else's conversation counts only toward the team.
    let other = usage
        .record_usage(&row("o", "o", "t3", "bob", 10, None))
        .await
        .unwrap();
    assert_eq!(other.budgets.len(), 1);
    let counting = usage
        .budgets_counting(
            &Counted {
                conversation_id: &ConversationId::from("child"),
                root_conversation_id: &ConversationId::from("p"),
                person_id: Some(&PersonId::from("ann")),
            },
            now_ms(),
        )
        .await
        .unwrap();
    let used: Vec<(String, i64)> = counting
        .iter()
        .map(|u| (u.budget.id.clone(), u.used))
        .collect();
    assert_eq!(
        used,
        vec![
            ("b-ann".to_owned(), 183),
            ("b-team".to_owned(), 244),
            ("b-tree".to_owned(), 183)
        ]
    );
    // Tomorrow the daily budget starts again.
    let tomorrow = now_ms() + 86_400_000;
    let all = usage.list_budgets(tomorrow).await.unwrap();
    assert_eq!(
        all.iter().find(|u| u.budget.id == "b-tree").unwrap().used,
        0
    );
    assert!(usage.delete_budget("b-tree").await.unwrap());
    assert!(!usage.delete_budget("b-tree").await.unwrap());
    assert_eq!(usage.list_budgets(now_ms()).await.unwrap().len(), 2);
    // A budget made now counts what its period already used (ann's 3 rows of 61).
    let late = budget(
        "b-late",
        BudgetScope::Person(PersonId::from("ann")),
        100,
        Period::Day,
    );
    usage.create_budget(&late).await.unwrap();
    let all = usage.list_budgets(now_ms()).await.unwrap();
    assert_eq!(
        all.iter().find(|u| u.budget.id == "b-late").unwrap().used,
        183
    );
}

async fn series_group_usage_by_day_week_and_month(b: Backend) {
    let (_d, store) = support::open(b).await;
    let usage = store.usage();
    usage
        .record_usage(&row("c", "c", "t1", "ann", 10, Some(5)))
        .await
        .unwrap();
    usage
        .record_usage(&row("c", "c", "t2", "ann", 10, Some(5)))
        .await
        .unwrap();
    let now = now_ms();
    for (bucket, period) in [
        (Bucket::Day, tether_core::budget::Period::Day),
        (Bucket::Week, tether_core::budget::Period::Week),
        (Bucket::Month, tether_core::budget::Period::Month),
    ] {
        let s = usage
            .usage_series(&UsageScope::Everything, bucket, 0, now + 60_000)
            .await
            .unwrap();
        assert_eq!(s.len(), 1, "{bucket:?}");
        assert_eq!(s[0].start_ms, period.start(now), "{bucket:?}");
        assert_eq!((s[0].totals.reports, s[0].totals.cost_nanos), (2, 10));
    }
}

/// A vendor's window reports replace each other per account and window; an account's use
/// is its fullest window not yet reset, and a window budget reads it (not a counter).
async fn window_reports_replace_each_other_and_a_reset_window_counts_no_more(b: Backend) {
    let (_d, store) = support::open(b).await;
    let usage = store.usage();
    let now = now_ms();
    let later = Some(now + 3_600_000);
    assert_eq!(
        usage
            .record_window("team-pro", "five_hour", 40, later)
            .await
            .unwrap(),
        (0, 40)
    );
    assert_eq!(
        usage
            .record_window("team-pro", "seven_day", 10, None)
            .await
            .unwrap(),
        (40, 40)
    );
    assert_eq!(
        usage
            .record_window("team-pro", "five_hour", 85, later)
            .await
            .unwrap(),
        (40, 85)
    );
    // Another account is apart; a window past its reset counts no more.
    usage
        .record_window("other", "five_hour", 99, Some(now - 1))
        .await
        .unwrap();
    assert_eq!(usage.account_window("team-pro", now).await.unwrap(), 85);
    assert_eq!(usage.account_window("other", now).await.unwrap(), 0);
    assert_eq!(usage.account_window("nobody", now).await.unwrap(), 0);
    assert_eq!(usage.fullest_window(now).await.unwrap(), 85);
    let mut w = budget(
        "w",
        BudgetScope::Team,
        80,
        tether_core::budget::Period::Total,
    );
    w.unit = tether_core::budget::Unit::Window;
    usage.create_budget(&w).await.unwrap();
    let t = usage
        .turn_budgets(&ConversationId::from("c"), None, "team-pro", now)
        .await
        .unwrap();
    assert_eq!(t.blocking().map(|u| u.used), Some(85));
    let t = usage
        .turn_budgets(&ConversationId::from("c"), None, "other", now)
        .await
        .unwrap();
    assert!(t.blocking().is_none(), "{t:?}");
}

fn conversation<'a>(
    id: &'a ConversationId,
    parent: Option<&'a ConversationId>,
    owner: Option<&'a PersonId>,
) -> NewConversation<'a> {
    NewConversation {
        id,
        kind: if parent.is_some() {
            ConversationKind::Delegate
        } else {
            ConversationKind::Chat
        },
        title: "t",
        agent: "fake",
        model: None,
        cwd: "/tmp",
        parent_conversation_id: parent,
        owner_id: owner,
        visibility: Visibility::Private,
    }
}

fn parking(id: &str, conv: &str) -> NewTimer {
    NewTimer {
        id: id.to_owned(),
        kind: CONTINUE_AFTER_LIMIT.to_owned(),
        conversation_id: ConversationId::from(conv),
        account: Some("acct".to_owned()),
        due_at_ms: now_ms() + 600_000,
        attempt: 1,
        payload: "{}".to_owned(),
    }
}

/// The one read before each turn: a grandchild's turn counts for its tree's root and
/// its own owner, every budget of those scopes (and the team's, not another tree's) comes
/// with its use, the account's limit rides along, and the turn supersedes the
/// conversation's parked continuation unless it is that continuation.
async fn a_turn_reads_its_root_owner_budgets_limit_and_parking_at_once(b: Backend) {
    use tether_core::budget::Period;
    let (_d, store) = support::open(b).await;
    let (root, child, leaf, other) = (
        ConversationId::from("root"),
        ConversationId::from("child"),
        ConversationId::from("leaf"),
        ConversationId::from("other"),
    );
    let ann = PersonId::new("p-ann");
    store
        .people()
        .add_person(&NewPerson {
            id: ann.clone(),
            name: "Ann".to_owned(),
            email: None,
            role: Role::Member,
        })
        .await
        .unwrap();
    let convs = store.conversations();
    convs
        .create_conversation(&conversation(&root, None, None))
        .await
        .unwrap();
    convs
        .create_conversation(&conversation(&child, Some(&root), None))
        .await
        .unwrap();
    convs
        .create_conversation(&conversation(&leaf, Some(&child), Some(&ann)))
        .await
        .unwrap();
    convs
        .create_conversation(&conversation(&other, None, None))
        .await
        .unwrap();
    let usage = store.usage();
    let now = now_ms();
    // Nothing counts yet: no budget, no limit.
    let t = usage.turn_budgets(&leaf, None, "acct", now).await.unwrap();
    assert_eq!((t.root.as_str(), t.person.as_ref()), ("root", Some(&ann)));
    assert!(
        t.budgets.is_empty() && t.account_limited_until.is_none(),
        "{t:?}"
    );
    for (id, scope) in [
        ("b1-tree", BudgetScope::Tree(root.clone())),
        ("b2-person", BudgetScope::Person(ann.clone())),
        ("b3-conv", BudgetScope::Conversation(leaf.clone())),
        ("b4-team", BudgetScope::Team),
        ("b5-other-tree", BudgetScope::Tree(other.clone())),
        ("b6-other-conv", BudgetScope::Conversation(child.clone())),
    ] {
        usage
            .create_budget(&budget(id, scope, 100, Period::Total))
            .await
            .unwrap();
    }
    usage
        .record_usage(&row("leaf", "root", "t0", "p-ann", 10, None))
        .await
        .unwrap();
    store
        .timers()
        .limit_account("acct", now + 5_000, "fake")
        .await
        .unwrap();
    let t = usage.turn_budgets(&leaf, None, "acct", now).await.unwrap();
    let got: Vec<(&str, i64)> = t
        .budgets
        .iter()
        .map(|u| (u.budget.id.as_str(), u.used))
        .collect();
    // 10 + 20 + 30 + 1 tokens counted toward each budget of the leaf's scopes.
    assert_eq!(
        got,
        [
            ("b1-tree", 61),
            ("b2-person", 61),
            ("b3-conv", 61),
            ("b4-team", 61)
        ]
    );
    assert_eq!(t.account_limited_until, Some(now + 5_000));
    // An unknown conversation is its own root, with nobody's budgets but the team's.
    let t = usage
        .turn_budgets(&ConversationId::from("gone"), None, "x", now)
        .await
        .unwrap();
    assert_eq!((t.root.as_str(), t.person.as_ref()), ("gone", None));
    assert_eq!(
        t.budgets
            .iter()
            .map(|u| u.budget.id.as_str())
            .collect::<Vec<_>>(),
        ["b4-team"]
    );

    // Parking: the continuation itself runs and cancels nothing...
    let timers = store.timers();
    timers.add_timer(&parking("cont-1", "leaf")).await.unwrap();
    let t = usage
        .turn_budgets(&leaf, Some("cont-1"), "acct", now)
        .await
        .unwrap();
    // It wrote nothing; the turn, once started, supersedes what it found.
    usage
        .supersede_parking(&leaf, "cont-1", now, &t.parked)
        .await
        .unwrap();
    let states = |ts: Vec<Timer>| ts.into_iter().map(|t| (t.id, t.state)).collect::<Vec<_>>();
    assert_eq!(
        states(
            timers
                .conversation_timers(&leaf, CONTINUE_AFTER_LIMIT)
                .await
                .unwrap()
        ),
        [("cont-1".to_owned(), "waiting".to_owned())]
    );
    // ...a turn without an id (no person's message) neither...
    usage.turn_budgets(&leaf, None, "acct", now).await.unwrap();
    assert_eq!(
        timers
            .conversation_timers(&leaf, CONTINUE_AFTER_LIMIT)
            .await
            .unwrap()
            .len(),
        1
    );
    // ...a person's new turn cancels the waiting one.
    let t = usage
        .turn_budgets(&leaf, Some("turn-2"), "acct", now)
        .await
        .unwrap();
    // The read wrote nothing (it runs beside the turn's start); the turn, once
    // started, supersedes what it found.
    assert!(t.parked.waiting && t.parked.any());
    assert_eq!(
        timers
            .conversation_timers(&leaf, CONTINUE_AFTER_LIMIT)
            .await
            .unwrap()
            .len(),
        1
    );
    usage
        .supersede_parking(&leaf, "turn-2", now, &t.parked)
        .await
        .unwrap();
    assert!(
        timers
            .conversation_timers(&leaf, CONTINUE_AFTER_LIMIT)
            .await
            .unwrap()
            .is_empty()
    );
    // A fired continuation is forgotten by the next turn of the person's own, not by the
    // continuation's turn.
    let mut due = parking("cont-2", "leaf");
    due.due_at_ms = now - 1;
    timers.add_timer(&due).await.unwrap();
    assert_eq!(
        timers
            .claim_due_timers("n", now, 10_000, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(timers.fire_timer("cont-2").await.unwrap());
    let t = usage
        .turn_budgets(&leaf, Some("cont-2"), "acct", now)
        .await
        .unwrap();
    // It wrote nothing; the turn, once started, supersedes what it found.
    usage
        .supersede_parking(&leaf, "cont-2", now, &t.parked)
        .await
        .unwrap();
    assert_eq!(
        states(
            timers
                .conversation_timers(&leaf, CONTINUE_AFTER_LIMIT)
                .await
                .unwrap()
        ),
        [("cont-2".to_owned(), "fired".to_owned())]
    );
    let t = usage
        .turn_budgets(&leaf, Some("turn-3"), "acct", now)
        .await
        .unwrap();
    // It wrote nothing; the turn, once started, supersedes what it found.
    usage
        .supersede_parking(&leaf, "turn-3", now, &t.parked)
        .await
        .unwrap();
    assert!(
        timers
            .conversation_timers(&leaf, CONTINUE_AFTER_LIMIT)
            .await
            .unwrap()
            .is_empty()
    );
}

contract!(
    a_turn_reads_its_root_owner_budgets_limit_and_parking_at_once,
    window_reports_replace_each_other_and_a_reset_window_counts_no_more,
    the_ledger_sums_every_scope_and_keeps_unknown_costs_apart,
    a_report_written_twice_counts_once_and_an_unreported_turn_is_unknown,
    budgets_count_every_row_of_their_scope_and_tell_the_crossing_one,
    series_group_usage_by_day_week_and_month,
);

/// Concurrent reports (on PostgreSQL: separate connections, as from separate nodes) each
/// read a sum that includes every report before them: no update is lost and exactly
/// one report is the one that crosses the cap.
async fn concurrent_reports_cross_a_cap_exactly_once(b: Backend) {
    use tether_core::budget::Period;
    let (_d, store) = support::open(b).await;
    let cap = 61 * 10;
    let team = budget("b-team", BudgetScope::Team, cap, Period::Total);
    store.usage().create_budget(&team).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let r = row(&format!("c{i}"), &format!("c{i}"), "t", "ann", 10, Some(1));
            store.usage().record_usage(&r).await.unwrap()
        }));
    }
    let mut sums = Vec::new();
    for t in tasks {
        let rec = tokio::time::timeout(std::time::Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
        sums.push(rec.budgets[0].usage.used);
    }
    sums.sort_unstable();
    let expected: Vec<i64> = (1..=20).map(|n| n * 61).collect();
    assert_eq!(sums, expected, "every report saw all before it");
    let crossing = sums.iter().filter(|u| **u - 61 < cap && **u >= cap).count();
    assert_eq!(crossing, 1);
}

contract!(multi_thread; concurrent_reports_cross_a_cap_exactly_once);
