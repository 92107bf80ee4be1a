//! The audit log on the wire (issue 28): `GET /api/v1/audit`, for admins. An entry says
//! who did what security-relevant thing to what, and when; entries are only appended.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::PersonId;

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    /// A person signed in on the page (a sign-in session began).
    SignIn,
    /// A credential was refused (a wrong or revoked token, a failed sign-in).
    SignInFailed,
    /// A person signed out (their sign-in session ended).
    SignOut,
    TokenCreated,
    TokenRevoked,
    PersonAdded,
    /// A person's role changed, or they were disabled or enabled.
    PersonChanged,
    /// A channel account was linked to a person.
    AccountLinked,
    AccountUnlinked,
    /// An agent's approval was decided.
    ApprovalDecided,
    /// An agent's question was answered.
    QuestionAnswered,
    ConversationArchived,
    /// A conversation's visibility (private, team) changed.
    VisibilityChanged,
    /// A stranger's pairing request was approved.
    PairingApproved,
    /// An action this build does not know (written by a newer node).
    #[serde(other)]
    Other,
}

impl AuditAction {
    /// Every action this build writes.
    pub const ALL: &'static [AuditAction] = &[
        AuditAction::SignIn,
        AuditAction::SignInFailed,
        AuditAction::SignOut,
        AuditAction::TokenCreated,
        AuditAction::TokenRevoked,
        AuditAction::PersonAdded,
        AuditAction::PersonChanged,
        AuditAction::AccountLinked,
        AuditAction::AccountUnlinked,
        AuditAction::ApprovalDecided,
        AuditAction::QuestionAnswered,
        AuditAction::ConversationArchived,
        AuditAction::VisibilityChanged,
        AuditAction::PairingApproved,
    ];

    /// Its name on the wire and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::SignIn => "sign_in",
            AuditAction::SignInFailed => "sign_in_failed",
            AuditAction::SignOut => "sign_out",
            AuditAction::TokenCreated => "token_created",
            AuditAction::TokenRevoked => "token_revoked",
            AuditAction::PersonAdded => "person_added",
            AuditAction::PersonChanged => "person_changed",
            AuditAction::AccountLinked => "account_linked",
            AuditAction::AccountUnlinked => "account_unlinked",
            AuditAction::ApprovalDecided => "approval_decided",
            AuditAction::QuestionAnswered => "question_answered",
            AuditAction::ConversationArchived => "conversation_archived",
            AuditAction::VisibilityChanged => "visibility_changed",
            AuditAction::PairingApproved => "pairing_approved",
            AuditAction::Other => "other",
        }
    }

    /// The action named `name` ([`AuditAction::Other`] for a name this build does not
    /// know).
    pub fn parse(name: &str) -> AuditAction {
        AuditAction::ALL
            .iter()
            .copied()
            .find(|a| a.as_str() == name)
            .unwrap_or(AuditAction::Other)
    }
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// Increasing; the cursor of the next (older) page is the last entry's id.
    pub id: i64,
    pub at_ms: i64,
    pub action: AuditAction,
    /// The person who acted (absent: nobody known, such as a refused credential).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub person_id: Option<PersonId>,
    /// Who and where, as history names them (`ana on web`, `telegram:42`, `tether`).
    pub by: String,
    /// What it was done to: a token, person, approval, question or conversation id, a
    /// pairing code, a channel account.
    #[serde(default)]
    pub target: Option<String>,
    /// What changed, in words (`role member → admin`, `allow`), never a secret.
    #[serde(default)]
    pub detail: Option<String>,
}

/// A page of the audit log, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next (older) page; absent on the last page.
    #[serde(default)]
    pub next_before: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_round_trips_and_an_unknown_one_is_other() {
        for a in AuditAction::ALL {
            assert_eq!(AuditAction::parse(a.as_str()), *a);
            let wire = serde_json::to_string(a).unwrap();
            assert_eq!(wire, format!("\"{}\"", a.as_str()));
        }
        assert_eq!(AuditAction::parse("launched_rockets"), AuditAction::Other);
        let e: AuditAction = serde_json::from_str("\"launched_rockets\"").unwrap();
        assert_eq!(e, AuditAction::Other);
    }
}
