//! How many store calls (database round trips) a message makes before its prompt reaches
//! the agent, counted by the store: a prompt to a bound, idle session and the first
//! message of a conversation; and how many the turn's end makes. The bounds are the figures measured when the command API
//! came (issue 27); a change that adds a round trip to the hot path fails here.

mod support;

use support::{Agent, ManualClock, config, conversation, msg, runtime, temp, turns_ended};
use tether_testkit::within;

/// Measured: the first message of a conversation (read the conversation, title it, store
/// the session and the turn, start the turn, read its attachments, the agent's external
/// id, the session's status): 8, one fewer than before the command API (the conversation
/// row was read twice); 9 since the budget check before every turn (issue 29: whom the
/// turn counts for and the budgets it counts toward, in one call).
/// 8 measured before the message's turn was stored already running (one store call for
/// the turn, its history line and its start); 7 since.
const FIRST_MESSAGE: u64 = 7;
/// Measured: a follow-up to the bound, idle session (read the conversation, look for a
/// pending question, read the bound session, store and start the turn, read its
/// attachments): 6, was 7; 7 with the budget check.
/// 6 measured before the turn was stored already running; 5 since (the conversation, the
/// pending questions, the bound session, the turn with its message and start, the
/// budgets); 3 since the conversation's read says whether a question is pending and
/// brings the bound session (a node that claims nothing reads neither again).
const FOLLOW_UP: u64 = 3;
/// Measured: from the agent's last output and answer to the turn's stored end, for a
/// turn whose agent reported no usage: 1 (the output, the end, its event, its history
/// line and its "unreported" usage row in one transaction); 2 while the usage row was a
/// write of its own before it, and 2 while the last output was.
const TURN_END: u64 = 1;

#[tokio::test]
async fn a_message_reaches_its_agent_in_a_bounded_number_of_store_calls() {
    let (_tmp, dir) = temp();
    let mut agent = Agent::scripted();
    let mut cfg = config(&dir);
    // Long enough that the last output is always still collecting when the answer
    // comes (as it is at the real window, 4 ms, for an agent that answers at once).
    cfg.coalesce.window = std::time::Duration::from_secs(5);
    let rt = runtime(&dir, cfg, &agent, ManualClock::new(tether_store::now_ms())).await;
    // The runtime's start-up work (recovery, the delegation watch) is over once a first
    // turn has run.
    let warm = conversation(&rt).await;
    within("send", rt.send_message(&warm, msg("warm up"), "test"))
        .await
        .unwrap();
    agent.start().await.ok("ext-0");
    agent.prompt().await.complete("warm");
    turns_ended(&rt, &warm, 1).await;
    let conv = conversation(&rt).await;

    let before = rt.store_calls();
    within("send", rt.send_message(&conv, msg("one"), "test"))
        .await
        .unwrap();
    let start = agent.start().await;
    start.ok("ext-1");
    let p = agent.prompt().await;
    let first = rt.store_calls() - before;
    p.complete("done one");
    turns_ended(&rt, &conv, 1).await;

    let before = rt.store_calls();
    within("send", rt.send_message(&conv, msg("two"), "test"))
        .await
        .unwrap();
    let p = agent.prompt().await;
    let follow_up = rt.store_calls() - before;
    // The turn's end, seen on a live follower (which reads nothing from the store).
    let mut live = rt
        .follow_from_now(tether_runtime::Scope::Conversation(conv.clone()))
        .await
        .unwrap();
    let before = rt.store_calls();
    // The agent's last output and its answer: the output waits for the end (the
    // coalescing window outlasts the answer here) and goes in its transaction.
    p.delta("two's output");
    p.complete("done two");
    within("the turn's end", async {
        loop {
            let batch = live.next().await.unwrap();
            if batch.events().iter().any(|e| e.payload.is_turn_terminal()) {
                break;
            }
        }
    })
    .await;
    let end = rt.store_calls() - before;
    turns_ended(&rt, &conv, 2).await;

    eprintln!(
        "store calls before the prompt: first message {first}, follow-up {follow_up}; \
         the turn's end {end}"
    );
    assert!(first <= FIRST_MESSAGE, "first message: {first} store calls");
    assert!(follow_up <= FOLLOW_UP, "follow-up: {follow_up} store calls");
    assert!(end <= TURN_END, "the turn's end: {end} store calls");
}
