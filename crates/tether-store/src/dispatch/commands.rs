//! The store's forwarded-command methods (issue 12; `sql/commands.rs`), each run by the
//! backend the store opened (see `dispatch`).

use super::{Backend, forward};
use crate::*;

forward! {
    /// Stores command `c` for its node (and wakes the node on PostgreSQL).
    pub async fn submit_command(&self, c: &NewCommand) -> Result<()>;

    /// Node `node_id`'s commands not taken yet, oldest first (at most `limit`).
    pub async fn pending_commands(&self, node_id: &str, limit: u32) -> Result<Vec<CommandRow>>;

    /// Takes node `node_id`'s pending commands at `now_ms` in one statement, oldest first
    /// (at most `limit`): each is taken once (a command abandoned meanwhile is not).
    pub async fn take_pending_commands(
        &self,
        node_id: &str,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<CommandRow>>;

    /// Takes pending command `id` for node `node_id` at `now_ms`: `false` when it is not
    /// pending for that node any more (taken, abandoned, gone).
    pub async fn take_command(&self, id: &str, node_id: &str, now_ms: i64) -> Result<bool>;

    /// Stores the reply of taken command `id` (and wakes its sender on PostgreSQL):
    /// `false` when it was not taken.
    pub async fn reply_command(&self, id: &str, reply: &str, now_ms: i64) -> Result<bool>;

    /// Gives pending command `id` up (its node died before taking it): `false` when it
    /// was taken meanwhile (or is gone).
    pub async fn abandon_command(&self, id: &str) -> Result<bool>;

    /// Command `id`, if stored.
    pub async fn get_command(&self, id: &str) -> Result<Option<CommandRow>>;

    /// Removes command `id` (its sender has the reply, or gave it up).
    pub async fn remove_command(&self, id: &str) -> Result<()>;

    /// Removes commands stored before `before_ms` (their senders are gone): how many.
    pub async fn prune_commands(&self, before_ms: i64) -> Result<u64>;
}
