//! The derived conversation state (architecture.md §3): `unbound`, `bound/idle`, `bound/running`,
//! `bound/waiting_user`, `bound/waiting_approval`.

use tether_proto::{ConversationState, TurnStatus};

/// The facts the conversation state is derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateInputs {
    /// The conversation is bound to a session.
    pub bound: bool,
    /// Status of the bound session's current turn, if any.
    pub running_turn: Option<TurnStatus>,
    pub pending_approvals: usize,
    pub pending_questions: usize,
}

/// Waiting for an approval beats waiting for an answer beats running; a turn in a
/// terminal state (or none) is idle.
pub fn derive_state(inputs: &StateInputs) -> ConversationState {
    if !inputs.bound {
        return ConversationState::Unbound;
    }
    let turn = inputs.running_turn;
    if inputs.pending_approvals > 0 || turn == Some(TurnStatus::WaitingApproval) {
        return ConversationState::BoundWaitingApproval;
    }
    if inputs.pending_questions > 0 || turn == Some(TurnStatus::WaitingUser) {
        return ConversationState::BoundWaitingUser;
    }
    match turn {
        Some(TurnStatus::Queued | TurnStatus::Running) => ConversationState::BoundRunning,
        Some(
            TurnStatus::WaitingApproval
            | TurnStatus::WaitingUser
            | TurnStatus::Completed
            | TurnStatus::Failed
            | TurnStatus::Cancelled
            | TurnStatus::Interrupted,
        )
        | None => ConversationState::BoundIdle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConversationState as C;
    use TurnStatus as T;

    fn inputs(bound: bool, turn: Option<T>, approvals: usize, questions: usize) -> StateInputs {
        StateInputs {
            bound,
            running_turn: turn,
            pending_approvals: approvals,
            pending_questions: questions,
        }
    }

    #[test]
    fn derive_table() {
        let cases = [
            (inputs(false, None, 0, 0), C::Unbound),
            (inputs(false, Some(T::Running), 1, 1), C::Unbound),
            (inputs(true, None, 0, 0), C::BoundIdle),
            (inputs(true, Some(T::Completed), 0, 0), C::BoundIdle),
            (inputs(true, Some(T::Failed), 0, 0), C::BoundIdle),
            (inputs(true, Some(T::Cancelled), 0, 0), C::BoundIdle),
            (inputs(true, Some(T::Interrupted), 0, 0), C::BoundIdle),
            (inputs(true, Some(T::Queued), 0, 0), C::BoundRunning),
            (inputs(true, Some(T::Running), 0, 0), C::BoundRunning),
            (
                inputs(true, Some(T::Running), 1, 0),
                C::BoundWaitingApproval,
            ),
            (inputs(true, Some(T::Running), 0, 1), C::BoundWaitingUser),
            (
                inputs(true, Some(T::Running), 2, 1),
                C::BoundWaitingApproval,
            ),
            (
                inputs(true, Some(T::WaitingApproval), 0, 0),
                C::BoundWaitingApproval,
            ),
            (
                inputs(true, Some(T::WaitingApproval), 0, 1),
                C::BoundWaitingApproval,
            ),
            (
                inputs(true, Some(T::WaitingUser), 0, 0),
                C::BoundWaitingUser,
            ),
            (
                inputs(true, Some(T::WaitingUser), 1, 0),
                C::BoundWaitingApproval,
            ),
            (inputs(true, None, 1, 0), C::BoundWaitingApproval),
            (inputs(true, None, 0, 1), C::BoundWaitingUser),
        ];
        for (i, expected) in cases {
            assert_eq!(derive_state(&i), expected, "{i:?}");
        }
    }

    #[test]
    fn default_is_unbound() {
        assert_eq!(derive_state(&StateInputs::default()), C::Unbound);
    }
}
