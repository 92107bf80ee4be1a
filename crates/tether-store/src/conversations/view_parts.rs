//! What the conversation views are built from, read for many conversations at once: a
//! page of the conversation list costs four queries, not four per conversation.

use tether_proto::{Approval, Question, Session, Turn};

/// The rows a page of conversation views needs: the bound sessions, the open turns and
/// the pending approvals and questions of the conversations asked for.
#[derive(Debug, Default)]
pub struct ViewParts {
    pub sessions: Vec<Session>,
    pub open_turns: Vec<Turn>,
    pub pending_approvals: Vec<Approval>,
    pub pending_questions: Vec<Question>,
}
