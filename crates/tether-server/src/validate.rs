//! Length limits on the free-text fields of request bodies that tether stores: a title
//! of 900 KB would otherwise sit in every conversation list. Checked at the HTTP edge, as
//! part of reading the body ([`crate::extract::ApiJson`]); the error names the field.

use tether_proto::{
    AnswerApproval, AnswerQuestion, CloseRequest, ContinueRequest, CreateConversation, SendMessage,
    UpdateConversation,
};

use crate::error::ApiError;

/// Conversation titles, in characters (the list shows one line of it).
pub(crate) const MAX_TITLE_CHARS: usize = 200;
/// Model names, in characters. (Agent names and working directories need no limit
/// here: only configured agents and existing directories under the roots are accepted.)
pub(crate) const MAX_NAME_CHARS: usize = 200;
/// Idempotency keys, in characters.
pub(crate) const MAX_KEY_CHARS: usize = 200;
/// Messages and answers, in bytes: the same bound as a delegated task.
pub(crate) const MAX_TEXT_BYTES: usize = 256 * 1024;

/// A request body that checks its own field limits.
pub(crate) trait Checked {
    fn check(&self) -> Result<(), ApiError>;
}

fn chars(field: &str, value: Option<&str>, max: usize) -> Result<(), ApiError> {
    match value {
        Some(v) if v.chars().count() > max => Err(ApiError::bad_request(format!(
            "`{field}` is too long: at most {max} characters"
        ))),
        _ => Ok(()),
    }
}

fn bytes(field: &str, value: Option<&str>, max: usize) -> Result<(), ApiError> {
    match value {
        Some(v) if v.len() > max => Err(ApiError::bad_request(format!(
            "`{field}` is too long: at most {max} bytes"
        ))),
        _ => Ok(()),
    }
}

impl Checked for CreateConversation {
    fn check(&self) -> Result<(), ApiError> {
        chars("title", self.title.as_deref(), MAX_TITLE_CHARS)?;
        chars("model", self.model.as_deref(), MAX_NAME_CHARS)
    }
}

/// Every form of it is whole (the enum's own parse refuses the rest).
impl Checked for tether_proto::WorktreeAction {
    fn check(&self) -> Result<(), ApiError> {
        Ok(())
    }
}

impl Checked for UpdateConversation {
    fn check(&self) -> Result<(), ApiError> {
        chars("title", self.title.as_deref(), MAX_TITLE_CHARS)
    }
}

impl Checked for tether_proto::NewApiToken {
    fn check(&self) -> Result<(), ApiError> {
        chars("name", Some(&self.name), MAX_NAME_CHARS)
    }
}

impl Checked for tether_proto::NewSchedule {
    fn check(&self) -> Result<(), ApiError> {
        chars("every", self.every.as_deref(), 64)?;
        chars("cron", self.cron.as_deref(), 128)?;
        chars("at", self.at.as_deref(), 32)?;
        chars("time_zone", self.time_zone.as_deref(), 64)?;
        chars("missed", self.missed.as_deref(), 16)?;
        bytes("prompt", Some(&self.prompt), MAX_TEXT_BYTES)
    }
}

impl Checked for tether_proto::UpdateSchedule {
    fn check(&self) -> Result<(), ApiError> {
        chars("every", self.every.as_deref(), 64)?;
        chars("cron", self.cron.as_deref(), 128)?;
        chars("at", self.at.as_deref(), 32)?;
        chars("time_zone", self.time_zone.as_deref(), 64)?;
        chars("missed", self.missed.as_deref(), 16)?;
        bytes("prompt", self.prompt.as_deref(), MAX_TEXT_BYTES)
    }
}

impl Checked for tether_proto::NewBudget {
    fn check(&self) -> Result<(), ApiError> {
        chars("scope", Some(&self.scope), 32)?;
        chars("scope_id", self.scope_id.as_deref(), MAX_NAME_CHARS)
    }
}

impl Checked for tether_proto::NewPersonRequest {
    fn check(&self) -> Result<(), ApiError> {
        chars("name", Some(&self.name), MAX_NAME_CHARS)?;
        chars("email", self.email.as_deref(), 254)
    }
}

impl Checked for tether_proto::RedeemLinkCode {
    fn check(&self) -> Result<(), ApiError> {
        chars("code", Some(&self.code), 32)
    }
}

impl Checked for tether_proto::LinkAccount {
    fn check(&self) -> Result<(), ApiError> {
        chars("channel", Some(&self.channel), MAX_NAME_CHARS)?;
        chars("user_id", Some(&self.user_id), 200)?;
        chars("user_name", self.user_name.as_deref(), MAX_NAME_CHARS)
    }
}

impl Checked for tether_proto::UpdatePerson {
    fn check(&self) -> Result<(), ApiError> {
        Ok(())
    }
}

impl Checked for SendMessage {
    fn check(&self) -> Result<(), ApiError> {
        bytes("text", Some(&self.text), MAX_TEXT_BYTES)?;
        chars("model", self.model.as_deref(), MAX_NAME_CHARS)
    }
}

impl Checked for tether_proto::LinkRequest {
    fn check(&self) -> Result<(), ApiError> {
        let max = crate::links::MAX_PER_REQUEST;
        if self.paths.len() > max {
            return Err(ApiError::bad_request(format!(
                "at most {max} links per request, not {}",
                self.paths.len()
            )));
        }
        for p in &self.paths {
            bytes("paths[]", Some(p), 8 * 1024)?;
        }
        Ok(())
    }
}

impl Checked for AnswerApproval {
    fn check(&self) -> Result<(), ApiError> {
        Ok(())
    }
}

impl Checked for AnswerQuestion {
    fn check(&self) -> Result<(), ApiError> {
        bytes("answer", Some(&self.answer), MAX_TEXT_BYTES)
    }
}

impl Checked for ContinueRequest {
    // `message` is checked by the delegation rules (`invalid_task`), like a parent's.
    fn check(&self) -> Result<(), ApiError> {
        chars(
            "continuation_id",
            Some(&self.continuation_id),
            MAX_KEY_CHARS,
        )
    }
}

impl Checked for CloseRequest {
    fn check(&self) -> Result<(), ApiError> {
        chars(
            "continuation_id",
            Some(&self.continuation_id),
            MAX_KEY_CHARS,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field() {
        let ok = CreateConversation {
            title: Some("é".repeat(MAX_TITLE_CHARS)),
            ..Default::default()
        };
        assert!(ok.check().is_ok());
        let long = CreateConversation {
            title: Some("x".repeat(MAX_TITLE_CHARS + 1)),
            ..Default::default()
        };
        let err = long.check().unwrap_err();
        assert_eq!(err.code, tether_proto::ErrorCode::BadRequest);
        assert!(err.message.contains("`title`"), "{}", err.message);
    }
}
