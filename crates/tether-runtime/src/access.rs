//! Who may do what, checked where everything passes (issue 28): every [`Call`] before it
//! is placed (`Dispatch::call`), every read of the facade for a runtime acting as a person
//! ([`crate::Runtime::acting_as`]). The table itself is `tether_core::authz`; this
//! service finds what a call acts on (a conversation, the conversation of an approval, a
//! session, a turn, an attachment) and asks it. A conversation the person may not read
//! is answered exactly as one that does not exist.

use tether_core::authz::{Action, Denied, Target, allowed_on_any, decide};
use tether_proto::{ConversationId, PersonId, Role, SessionId, TokenScope, Visibility};
use tether_store::ConversationRow;

use crate::RuntimeError;
use std::collections::HashMap;

use crate::call::{Call, Command, Identity, Principal};
use crate::error::Result;

/// The access service: a view of the runtime (cheap, `Copy`), reached through
/// `Runtime::access()`.
#[derive(Clone, Copy)]
pub(crate) struct Access<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Access<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Access { rt }
    }
}

/// Every scope: a sign-in session, the bootstrap token.
pub(crate) fn all_scopes() -> Vec<TokenScope> {
    TokenScope::ALL.to_vec()
}

impl Access<'_> {
    /// The install's owner, as the bootstrap token (`TETHER_TOKEN`) stands for them.
    pub(crate) fn owner(&self) -> Identity {
        let owner = &self.rt.inner.owner;
        Identity {
            person: owner.id.clone(),
            name: owner.name.clone(),
            role: Role::Owner,
            scopes: all_scopes(),
        }
    }

    /// `call`, carrying the person this runtime acts for: their identity is what is
    /// checked, and a person's name is what history records. tether's own work a call
    /// leads to (`Principal::System`: a task's first turn, a report) is not the person's.
    pub(crate) fn attach(&self, call: &mut Call) {
        let Some(who) = &self.rt.who else {
            return;
        };
        if call.by == Principal::System {
            return;
        }
        if call.who.is_none() {
            call.who = Some(who.as_ref().clone());
        }
        if let Principal::Person { name } = &mut call.by {
            *name = attributed(&who.name, name);
        }
    }

    /// Whom a new conversation belongs to: the person asking, else the install's owner
    /// (tether's own adapters acting for someone they admitted).
    pub(crate) fn owner_for(&self, call_identity: Option<&Identity>) -> PersonId {
        call_identity
            .or(self.rt.who.as_deref())
            .map(|i| i.person.clone())
            .unwrap_or_else(|| self.rt.inner.owner.id.clone())
    }

    /// Checks `call` before it is placed; a call without an identity is tether's own.
    pub(crate) async fn check_call(&self, call: &Call) -> Result<()> {
        let Some(who) = call.who.as_ref() else {
            return Ok(());
        };
        let store = &self.rt.ctx().store;
        match &call.command {
            Command::CreateConversation { .. } | Command::Delegate { .. } => {
                global(who, Action::CreateConversation)
            }
            Command::UpdateConversation {
                conversation_id,
                update,
            } => {
                let row = self.on(who, Action::Write, conversation_id).await?;
                if update.visibility.is_some() && !self.is_owner(who, &row) && !who.sees_all() {
                    return Err(Denied::Forbidden.into());
                }
                Ok(())
            }
            // Decided where they run, on the row `send_here` reads under the
            // conversation's lock anyway: one read of the row, not two.
            Command::SendMessage { .. } | Command::NewSession { .. } | Command::Detach { .. } => {
                Ok(())
            }
            Command::Stop { conversation_id } => {
                self.check_on(who, Action::Write, conversation_id).await
            }
            Command::ContinueTask { task_id, .. }
            | Command::CloseTask { task_id, .. }
            | Command::CancelTask { task_id } => {
                self.check_on(who, Action::Write, &task_id.conversation_id())
                    .await
            }
            Command::AnswerApproval { .. } | Command::AnswerQuestion { .. }
                if allowed_on_any(&who.actor(), Action::Answer) =>
            {
                // Whichever conversation it is in; an unknown one is `not_found` where
                // the answer runs.
                Ok(())
            }
            Command::AnswerApproval { approval_id, .. } => {
                let approval = store.requests().get_approval(approval_id).await?;
                let not_found = || RuntimeError::NotFound {
                    what: "approval",
                    id: approval_id.to_string(),
                };
                let approval = approval.ok_or_else(not_found)?;
                self.on(who, Action::Answer, &approval.conversation_id)
                    .await
                    .map(drop)
                    .map_err(|e| hide_as(e, not_found))
            }
            Command::AnswerQuestion { question_id, .. } => {
                let question = store.requests().get_question(question_id).await?;
                let not_found = || RuntimeError::NotFound {
                    what: "question",
                    id: question_id.to_string(),
                };
                let question = question.ok_or_else(not_found)?;
                self.on(who, Action::Answer, &question.conversation_id)
                    .await
                    .map(drop)
                    .map_err(|e| hide_as(e, not_found))
            }
            // Between nodes only: no person sends these.
            Command::StartTask { .. } | Command::EvictIdle { .. } | Command::ReportTurn { .. } => {
                Err(Denied::Forbidden.into())
            }
        }
    }

    /// [`Access::on`] when only the verdict is wanted: one who may do `action` on every
    /// conversation needs no row read (an unknown id is `not_found` where the command
    /// runs, as it is here).
    pub(crate) async fn check_on(
        &self,
        who: &Identity,
        action: Action,
        id: &ConversationId,
    ) -> Result<()> {
        if allowed_on_any(&who.actor(), action) {
            return Ok(());
        }
        self.on(who, action, id).await.map(drop)
    }

    /// May `who` do `action` on conversation `id`? Its row when yes; a conversation they
    /// may not see is `not_found`, like one that does not exist.
    pub(crate) async fn on(
        &self,
        who: &Identity,
        action: Action,
        id: &ConversationId,
    ) -> Result<ConversationRow> {
        let row = self.rt.conversations().conversation_row(id).await?;
        self.decide_row(who, action, &row)?;
        Ok(row)
    }

    /// [`Access::on`] for a row read already.
    pub(crate) fn decide_row(
        &self,
        who: &Identity,
        action: Action,
        row: &ConversationRow,
    ) -> Result<()> {
        let owner = self.owner_of(row);
        let target = Target {
            owner,
            visibility: row.visibility,
        };
        decide(&who.actor(), action, Some(&target)).map_err(|d| match d {
            Denied::Hidden => RuntimeError::NotFound {
                what: "conversation",
                id: row.id.to_string(),
            },
            other => other.into(),
        })
    }

    fn owner_of<'r>(&'r self, row: &'r ConversationRow) -> &'r PersonId {
        // Unowned (a store upgraded from before people, or an external client's task):
        // the install's owner's.
        row.owner_id.as_ref().unwrap_or(&self.rt.inner.owner.id)
    }

    fn is_owner(&self, who: &Identity, row: &ConversationRow) -> bool {
        self.owner_of(row) == &who.person
    }

    // Reads, for a runtime acting as a person (none: tether's own, unchecked).

    /// Reading conversation `id`.
    pub(crate) async fn read(&self, id: &ConversationId) -> Result<()> {
        match self.rt.who.as_deref() {
            Some(who) => self.on(who, Action::Read, id).await.map(drop),
            None => Ok(()),
        }
    }

    /// Whether the person acting may read `row` (tether's own reads everything).
    pub(crate) fn may_read(&self, row: &ConversationRow) -> bool {
        match self.rt.who.as_deref() {
            Some(who) => self.decide_row(who, Action::Read, row).is_ok(),
            None => true,
        }
    }

    /// Writing in conversation `id` (attachments for a later message).
    pub(crate) async fn write(&self, id: &ConversationId) -> Result<()> {
        match self.rt.who.as_deref() {
            Some(who) => self.on(who, Action::Write, id).await.map(drop),
            None => Ok(()),
        }
    }

    /// Reading session `id`'s conversation (hidden: the session is `not_found`).
    pub(crate) async fn read_session(&self, id: &SessionId) -> Result<()> {
        if self.rt.who.is_none() {
            return Ok(());
        }
        let not_found = || RuntimeError::NotFound {
            what: "session",
            id: id.to_string(),
        };
        let store = &self.rt.ctx().store;
        let session = store.conversations().get_session(id).await?;
        let session = session.ok_or_else(not_found)?;
        self.read(&session.conversation_id)
            .await
            .map_err(|e| hide_as(e, not_found))
    }

    /// Whose conversations a list shows: `None` everyone's (tether's own, owners and
    /// admins), else the person's own and the team's. A list needs the `read` scope.
    pub(crate) fn viewer(&self) -> Result<Option<PersonId>> {
        match self.rt.who.as_deref() {
            None => Ok(None),
            Some(who) => {
                global(who, Action::ReadNode)?;
                Ok((!who.sees_all()).then(|| who.person.clone()))
            }
        }
    }

    /// The items whose conversation the acting person may read (their conversations read
    /// in one call).
    pub(crate) async fn readable<T>(
        &self,
        items: Vec<T>,
        conversation: impl Fn(&T) -> &ConversationId,
    ) -> Result<Vec<T>> {
        // Someone who sees every conversation (tether itself, an owner or admin) reads
        // none of them: a page of 100 requests cost up to 100 reads (D273).
        if self.viewer()?.is_none() {
            return Ok(items);
        }
        let mut seen = std::collections::HashSet::new();
        let ids: Vec<ConversationId> = items
            .iter()
            .map(&conversation)
            .filter(|id| seen.insert(*id))
            .cloned()
            .collect();
        let rows = self
            .rt
            .ctx()
            .store
            .conversations()
            .conversations_among(&ids)
            .await?;
        let readable: HashMap<ConversationId, bool> = rows
            .iter()
            .map(|r| (r.id.clone(), self.may_read(r)))
            .collect();
        Ok(items
            .into_iter()
            .filter(|item| readable.get(conversation(item)) == Some(&true))
            .collect())
    }

    /// Following `scope` live.
    pub(crate) async fn follow(&self, scope: &tether_store::Scope) -> Result<()> {
        match scope {
            tether_store::Scope::Conversation(id) => self.read(id).await,
            tether_store::Scope::Session(id) => self.read_session(id).await,
        }
    }

    /// A visibility for a new conversation (private unless asked).
    pub(crate) fn visibility(asked: Option<Visibility>) -> Visibility {
        asked.unwrap_or(Visibility::Private)
    }
}

/// An action not on a conversation.
fn global(who: &Identity, action: Action) -> Result<()> {
    decide(&who.actor(), action, None).map_err(RuntimeError::from)
}

/// A hidden conversation's approval, session, turn or attachment is itself `not_found`.
pub(crate) fn hide_as(e: RuntimeError, not_found: impl FnOnce() -> RuntimeError) -> RuntimeError {
    match e {
        RuntimeError::NotFound { .. } => not_found(),
        other => other,
    }
}

/// What history records for a person's act: "<name> on <channel>" (`ana on web`,
/// `ana on api`); the name alone when the adapter named no channel, and unchanged when it
/// was attributed already (a call attached twice).
fn attributed(person: &str, via: &str) -> String {
    if via.is_empty() || via == person {
        person.to_owned()
    } else if via.starts_with(&format!("{person} on ")) {
        via.to_owned()
    } else {
        format!("{person} on {via}")
    }
}

#[cfg(test)]
mod tests {
    use super::attributed;

    #[test]
    fn an_act_is_attributed_to_the_person_on_their_channel_once() {
        assert_eq!(attributed("ana", "web"), "ana on web");
        assert_eq!(attributed("ana", "ana on web"), "ana on web");
        assert_eq!(attributed("ana", "ana"), "ana");
        assert_eq!(attributed("ana", ""), "ana");
    }
}
