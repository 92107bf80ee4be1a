//! Unit tests of `status.rs`: a task's outcome from its turn.

use super::*;

fn turn(status: TurnStatus, stop: Option<&str>, text: Option<&str>) -> Turn {
    Turn {
        id: "t".into(),
        session_id: "s".into(),
        conversation_id: "c".into(),
        input: "i".into(),
        status,
        result_text: text.map(str::to_string),
        stop_reason: stop.map(str::to_string),
        error_code: None,
        error_message: None,
        created_at_ms: 10,
        started_at_ms: Some(100),
        ended_at_ms: Some(350),
        usage: None,
    }
}

#[test]
fn outcomes_map_to_delegation_codes() {
    let ok = outcome_of(
        &turn(TurnStatus::Completed, Some("end_turn"), Some("hi")),
        0,
    );
    assert_eq!(ok.status, TaskStatus::Completed);
    assert_eq!(ok.text.as_deref(), Some("hi"));
    assert_eq!(ok.duration_ms, Some(250));
    let cases = [
        (Some("end_turn"), None, ErrorCode::ChildEmpty),
        (Some("refusal"), Some("no"), ErrorCode::ChildRefusal),
        (Some("max_tokens"), Some("x"), ErrorCode::ChildMaxTokens),
        (
            Some("max_turn_requests"),
            Some("x"),
            ErrorCode::ChildMaxTurnRequests,
        ),
        (Some("weird"), Some("x"), ErrorCode::ChildUnknown),
    ];
    for (stop, text, code) in cases {
        let o = outcome_of(&turn(TurnStatus::Completed, stop, text), 0);
        assert_eq!((o.status, o.error_code), (TaskStatus::Failed, Some(code)));
    }
    let c = outcome_of(&turn(TurnStatus::Cancelled, None, None), 0);
    assert_eq!(
        (c.status, c.error_code),
        (TaskStatus::Canceled, Some(ErrorCode::Canceled))
    );
    let mut f = turn(TurnStatus::Failed, None, None);
    f.error_code = Some(ErrorCode::AgentCrashed);
    assert_eq!(outcome_of(&f, 0).error_code, Some(ErrorCode::SubagentError));
    f.error_code = Some(ErrorCode::SpawnFailed);
    assert_eq!(outcome_of(&f, 0).error_code, Some(ErrorCode::SpawnFailed));
    let i = outcome_of(&turn(TurnStatus::Interrupted, None, None), 0);
    assert_eq!(i.error_code, Some(ErrorCode::SubagentError));
    let mut r = turn(TurnStatus::Running, None, None);
    r.ended_at_ms = None;
    let o = outcome_of(&r, 1100);
    assert_eq!((o.status, o.duration_ms), (TaskStatus::Running, Some(1000)));
}
