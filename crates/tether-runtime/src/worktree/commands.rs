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
            None => {
                let v = self.view(id).await?;
                if v.status == "none" {
                    return Ok("This conversation is not isolated (/worktree on isolates its next session).".to_owned());
                }
                v
            }
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

impl Worktrees<'_> {
    /// The conversation was archived (`true`) or brought back: its worktree's directory
    /// is removed after `[worktrees] archive_grace` (a durable timer), or kept again.
    pub(crate) async fn archived(self, id: &ConversationId, archived: bool) -> Result<()> {
        let store = &self.rt.ctx().store;
        let active = store
            .worktrees()
            .get_worktree(id)
            .await?
            .is_some_and(|r| r.status == super::ACTIVE);
        store
            .timers()
            .cancel_timers(id, tether_store::WORKTREE_REMOVAL)
            .await?;
        if archived && active {
            let now = self.rt.ctx().clock.now_ms();
            let grace = i64::try_from(self.rt.ctx().config.worktrees.archive_grace.as_millis())
                .unwrap_or(i64::MAX / 2);
            store
                .timers()
                .add_timer(&tether_store::NewTimer {
                    id: format!("wt-{}-{now}", id),
                    kind: tether_store::WORKTREE_REMOVAL.to_owned(),
                    conversation_id: id.clone(),
                    account: None,
                    due_at_ms: now.saturating_add(grace),
                    attempt: 1,
                    payload: "{}".to_owned(),
                })
                .await?;
        }
        Ok(())
    }
}

/// Fires a worktree removal (the timer loop): an archived conversation's worktree
/// directory goes, after a last snapshot; the branch and the snapshot ref stay, and a
/// conversation brought back gets its directory back from the snapshot.
pub(crate) async fn fire_removal(rt: &crate::Runtime, t: &tether_store::Timer) {
    let ctx = rt.ctx();
    let id = &t.conversation_id;
    let still = ctx
        .store
        .conversations()
        .get_conversation(id)
        .await
        .ok()
        .flatten()
        .is_some_and(|c| c.archived);
    let row = ctx.store.worktrees().get_worktree(id).await.ok().flatten();
    // Never under a running agent: an archived conversation's process ends when the pool
    // evicts it; the removal waits for that.
    if still && row.as_ref().is_some_and(|r| r.status == super::ACTIVE) && busy(ctx, id).await {
        // Idle here: its process ends now, and the removal follows shortly; else (a turn
        // runs, or another node holds it) the removal waits a minute.
        let bound = ctx
            .store
            .conversations()
            .get_conversation(id)
            .await
            .ok()
            .flatten()
            .and_then(|c| c.bound_session_id);
        let evicted =
            bound.is_some_and(|s| ctx.pool.evict_if_idle(&s, "its conversation was archived"));
        let node = ctx.config.cluster.node_id.to_string();
        let wait = if evicted { 1_000 } else { 60_000 };
        let later = ctx.clock.now_ms().saturating_add(wait);
        if let Err(e) = ctx.store.timers().retry_timer(&t.id, &node, later).await {
            tracing::warn!(timer = t.id, error = %e, "cannot put a worktree removal off");
        }
        return;
    }
    if let (true, Some(row)) = (still, row)
        && row.status == super::ACTIVE
    {
        match super::snapshot(ctx, id, "tether: before removing an archived worktree").await {
            Ok(_) => {
                let repo = std::path::PathBuf::from(&row.repo);
                if let Err(e) =
                    super::git::remove_worktree(&repo, std::path::Path::new(&row.path)).await
                {
                    tracing::warn!(conversation = %id, error = %e, "cannot remove an archived worktree");
                } else {
                    tracing::info!(conversation = %id, path = %row.path, "removed an archived conversation's worktree (its snapshot stays)");
                    crate::metrics::worktree_removed("archived");
                }
            }
            // Nothing is removed without its snapshot.
            Err(e) => {
                tracing::warn!(conversation = %id, error = %e, "cannot snapshot an archived worktree; kept")
            }
        }
    }
    if let Err(e) = ctx.store.timers().fire_timer(&t.id).await {
        tracing::warn!(timer = t.id, error = %e, "cannot mark a worktree removal done");
    }
}

/// Whether conversation `id` has an agent process or an open turn (what the clean-up
/// reads too).
async fn busy(ctx: &crate::ctx::Ctx, id: &ConversationId) -> bool {
    ctx.store
        .worktrees()
        .worktrees_for_sweep()
        .await
        .map_or(true, |all| {
            all.iter().any(|w| &w.row.conversation_id == id && w.busy)
        })
}
