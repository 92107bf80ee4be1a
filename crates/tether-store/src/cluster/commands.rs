//! Commands forwarded to a conversation's owner node (issue 12; see `sql_commands.rs`),
//! and the wake-ups that tell a node one is waiting for it or answered (PostgreSQL's
//! `LISTEN/NOTIFY`, see `pg_listen`). A wake-up is only a hint: a node that missed one
//! still finds the row by polling.

/// Where a command is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandStatus {
    /// Stored for its node, not taken yet.
    Pending,
    /// Its node took it and runs it.
    Taken,
    /// Its node stored the reply.
    Answered,
    /// Its sender gave it up before anyone took it (the node died).
    Abandoned,
}

impl CommandStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandStatus::Pending => "pending",
            CommandStatus::Taken => "taken",
            CommandStatus::Answered => "answered",
            CommandStatus::Abandoned => "abandoned",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<CommandStatus> {
        match s {
            "pending" => Some(CommandStatus::Pending),
            "taken" => Some(CommandStatus::Taken),
            "answered" => Some(CommandStatus::Answered),
            "abandoned" => Some(CommandStatus::Abandoned),
            _ => None,
        }
    }
}

/// A command for node `to_node`, as its sender stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCommand {
    pub id: tether_proto::CommandId,
    pub to_node: tether_proto::NodeId,
    pub from_node: tether_proto::NodeId,
    /// The conversation it is about (for the operator's eyes; routing reads `body`).
    pub conversation_id: Option<tether_proto::ConversationId>,
    /// The command itself (the runtime's JSON).
    pub body: String,
    pub created_at_ms: i64,
}

/// A stored command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRow {
    pub id: tether_proto::CommandId,
    pub to_node: tether_proto::NodeId,
    pub from_node: tether_proto::NodeId,
    pub conversation_id: Option<tether_proto::ConversationId>,
    pub body: String,
    pub status: CommandStatus,
    /// The reply (the runtime's JSON), once answered.
    pub reply: Option<String>,
    pub created_at_ms: i64,
    pub taken_at_ms: Option<i64>,
    pub answered_at_ms: Option<i64>,
}

/// The `NOTIFY` channel on which a node is told a command waits for it (payload: the
/// node's id).
pub const COMMANDS_CHANNEL: &str = "tether_commands";
/// The `NOTIFY` channel on which a sender is told its command was answered (payload: the
/// command's id).
pub const REPLIES_CHANNEL: &str = "tether_replies";

/// One wake-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// A command waits for node `.0`.
    Command(String),
    /// Command `.0` was answered.
    Reply(String),
    /// The listening connection was lost and is back: notices may have been missed.
    Reconnected,
}
