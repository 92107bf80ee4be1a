//! The domain's rules as SQL: which stored statuses a conditional update may change is
//! taken from `tether-core`'s state machines (turn transitions, start-up recovery), so
//! the store runs the core's decisions rather than a copy of them.

use tether_core::{recovery, turn};
use tether_proto::{ApprovalStatus, QuestionStatus, SessionStatus, TurnStatus};

/// `('a', 'b')` for an SQL `IN`; `('')` (matches nothing) when empty.
fn sql_list<S: Copy>(
    all: &[S],
    keep: impl Fn(S) -> bool,
    name: impl Fn(S) -> &'static str,
) -> String {
    let names: Vec<String> = all
        .iter()
        .copied()
        .filter(|s| keep(*s))
        .map(|s| format!("'{}'", name(s)))
        .collect();
    if names.is_empty() {
        "('')".to_string()
    } else {
        format!("({})", names.join(", "))
    }
}

/// Turn statuses from which the turn machine allows a step to `to`.
pub(crate) fn turns_that_can_become(to: TurnStatus) -> String {
    sql_list(
        TurnStatus::ALL,
        |from| turn::can_transition(from, to),
        TurnStatus::as_str,
    )
}

/// Turn statuses that recovery makes `interrupted`.
pub(crate) fn turns_recovery_interrupts() -> String {
    sql_list(
        TurnStatus::ALL,
        |s| recovery::recover_turn(s) == Some(TurnStatus::Interrupted),
        TurnStatus::as_str,
    )
}

/// Approval statuses that recovery makes `expired`.
pub(crate) fn approvals_recovery_expires() -> String {
    sql_list(
        ApprovalStatus::ALL,
        |s| recovery::recover_approval(s) == Some(ApprovalStatus::Expired),
        ApprovalStatus::as_str,
    )
}

/// Question statuses that recovery makes `expired`.
pub(crate) fn questions_recovery_expires() -> String {
    sql_list(
        QuestionStatus::ALL,
        |s| recovery::recover_question(s) == Some(QuestionStatus::Expired),
        QuestionStatus::as_str,
    )
}

/// Session statuses that recovery makes `dormant`.
pub(crate) fn sessions_recovery_makes_dormant() -> String {
    sql_list(
        SessionStatus::ALL,
        |s| recovery::recover_session(s) == Some(SessionStatus::Dormant),
        SessionStatus::as_str,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_follow_the_core() {
        assert_eq!(
            turns_that_can_become(TurnStatus::Completed),
            "('running', 'waiting_approval', 'waiting_user')"
        );
        assert_eq!(
            turns_that_can_become(TurnStatus::Cancelled),
            "('queued', 'running', 'waiting_approval', 'waiting_user')"
        );
        assert_eq!(turns_that_can_become(TurnStatus::Queued), "('')");
        assert_eq!(
            turns_recovery_interrupts(),
            "('queued', 'running', 'waiting_approval', 'waiting_user')"
        );
        assert_eq!(approvals_recovery_expires(), "('pending')");
        assert_eq!(questions_recovery_expires(), "('pending')");
        assert_eq!(sessions_recovery_makes_dormant(), "('starting', 'live')");
    }
}
