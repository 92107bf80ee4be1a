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
        .add_usage(&row("parent", "parent", "t1", "ann", 10, Some(1_000)))
        .await
        .unwrap();
    usage
        .add_usage(&row("parent", "parent", "t1", "ann", 5, Some(500)))
        .await
        .unwrap();
    usage
        .add_usage(&row("child", "parent", "t2", "ann", 7, Some(700)))
        .await
        .unwrap();
    usage
        .add_usage(&row("other", "other", "t3", "bob", 4, None))
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

contract!(the_ledger_sums_every_scope_and_keeps_unknown_costs_apart,);
