//! `/worktree`, `/diff` and `/merge` (issue 32): the worktree service's answers as the
//! text a channel shows (the patch of `/diff` as a file).

use tether_proto::{ConversationId, MessageOutcome, MessageOutcomeKind, MessageRole, WorktreeView};

use super::Worktrees;
use crate::error::Result;

fn describe(v: &WorktreeView) -> String {
    match v.status.as_str() {
        "wanted" => format!(
            "Isolation is on: the next session works in a new worktree on {}.",
            v.branch
        ),
        "active" => {
            let mut t = format!(
                "🌿 Worktree on {} (from {}) in {}",
                v.branch,
                v.base.as_deref().map_or("?", |b| &b[..b.len().min(10)]),
                v.path.as_deref().unwrap_or("?")
            );
            if v.changed_files.is_empty() {
                t.push_str("\nNo changes yet.");
            } else {
                t.push_str(&format!("\n{}", v.stat.trim_end()));
            }
            t
        }
        "discarded" => format!(
            "The worktree on {} was discarded (its last state is kept as a snapshot).",
            v.branch
        ),
        _ => "Isolation is off: sessions work in the conversation's directory.".to_owned(),
    }
}

impl Worktrees<'_> {
    /// `/worktree [on|off|discard]`.
    pub(crate) async fn command(self, id: &ConversationId, action: Option<&str>) -> Result<String> {
        let view = match action {
            None => match self.view(id).await {
                Ok(v) => v,
                Err(crate::RuntimeError::NotFound { .. }) => {
                    return Ok("This conversation is not isolated (/worktree on isolates its next session).".to_owned());
                }
                Err(e) => return Err(e),
            },
            Some("on") => self.set_isolation(id, true).await?,
            Some("off") => self.set_isolation(id, false).await?,
            Some(_) => self.discard(id).await?,
        };
        Ok(describe(&view))
    }

    /// `/merge`.
    pub(crate) async fn command_merge(self, id: &ConversationId) -> Result<String> {
        let v = self.merge(id, false).await?;
        Ok(format!(
            "✅ Merged {} into the repository's checked-out branch.\n{}",
            v.branch,
            describe(&v)
        ))
    }

    /// `/diff`: the summary as the reply, the patch as a file with it.
    pub(crate) async fn command_diff(
        self,
        conv: &tether_store::ConversationRow,
    ) -> Result<MessageOutcome> {
        let view = self.view(&conv.id).await?;
        let patch = self.patch(&conv.id).await?;
        let text = if view.changed_files.is_empty() {
            format!("No changes on {} yet.", view.branch)
        } else {
            format!(
                "{} against its base:\n{}",
                view.branch,
                view.stat.trim_end()
            )
        };
        if patch.is_empty() {
            self.rt
                .ctx()
                .store
                .events()
                .add_message(&conv.id, MessageRole::Command, &text, None, None)
                .await?;
            return Ok(crate::session::router::reply(
                MessageOutcomeKind::Command,
                text,
            ));
        }
        let name = format!("{}.patch", view.branch.replace('/', "-"));
        self.rt
            .attachments()
            .share_bytes(conv, &name, patch.as_bytes(), &text)
            .await
    }
}
