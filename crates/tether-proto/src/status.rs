//! Status enums shared by the API, the store and the domain logic.
//!
//! Each has a stable snake_case spelling (`as_str` / `parse`) used on the wire and in the
//! database.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $variant),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stable snake_case spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }

            /// Parses the stable spelling.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum!(
    /// Derived state of a conversation (architecture.md §3).
    ConversationState {
        Unbound => "unbound",
        BoundIdle => "bound/idle",
        BoundRunning => "bound/running",
        BoundWaitingUser => "bound/waiting_user",
        BoundWaitingApproval => "bound/waiting_approval",
    }
);

wire_enum!(
    /// What kind of conversation this is.
    ConversationKind {
        /// A person's chat (web, API, Telegram, Feishu).
        Chat => "chat",
        /// A sub-task delegated by a parent agent.
        Delegate => "delegate",
    }
);

wire_enum!(
    /// Whether a runtime session has a process attached.
    SessionStatus {
        /// A process is being started or the session is being resumed.
        Starting => "starting",
        /// A process is attached.
        Live => "live",
        /// No process; resumable from its external id.
        Dormant => "dormant",
        /// Released for good; never resumed again.
        Closed => "closed",
    }
);

wire_enum!(
    /// Lifecycle of a turn. Terminal states are immutable.
    TurnStatus {
        Queued => "queued",
        Running => "running",
        WaitingApproval => "waiting_approval",
        WaitingUser => "waiting_user",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
        Interrupted => "interrupted",
    }
);

impl TurnStatus {
    /// Completed, failed, cancelled or interrupted.
    pub fn is_terminal(self) -> bool {
        match self {
            TurnStatus::Queued
            | TurnStatus::Running
            | TurnStatus::WaitingApproval
            | TurnStatus::WaitingUser => false,
            TurnStatus::Completed
            | TurnStatus::Failed
            | TurnStatus::Cancelled
            | TurnStatus::Interrupted => true,
        }
    }
}

wire_enum!(
    /// Lifecycle of an approval.
    ApprovalStatus {
        Pending => "pending",
        Allowed => "allowed",
        AllowedAlways => "allowed_always",
        Denied => "denied",
        Expired => "expired",
        Cancelled => "cancelled",
    }
);

wire_enum!(
    /// A person's answer to an approval.
    Decision {
        Allow => "allow",
        AllowAlways => "allow_always",
        Deny => "deny",
    }
);

wire_enum!(
    /// Lifecycle of a question.
    QuestionStatus {
        Pending => "pending",
        Answered => "answered",
        Expired => "expired",
        Cancelled => "cancelled",
    }
);

wire_enum!(
    /// Why a new runtime session was started.
    NewSessionReason {
        /// The conversation had no bound session.
        Unbound => "unbound",
        /// The person asked (`/new`, New Session).
        Explicit => "explicit",
        /// The chosen agent or model differs from the bound session's.
        Drift => "drift",
    }
);

wire_enum!(
    /// Who wrote a history entry.
    MessageRole {
        /// The person (or parent agent).
        User => "user",
        /// The agent's final reply of a turn.
        Agent => "agent",
        /// A local status message from tether (new session and why, restart notices).
        Status => "status",
        /// tether's reply to a command.
        Command => "command",
    }
);

wire_enum!(
    /// A person's role (issue 28): what they may do is `tether_core::authz`'s table.
    Role {
        /// Everything, including making admins and owners.
        Owner => "owner",
        /// Manages people (members and viewers), tokens, pairing and the audit log; sees
        /// every conversation.
        Admin => "admin",
        /// Starts conversations, writes in their own and the team's, answers their
        /// approvals.
        Member => "member",
        /// Reads the team's conversations; writes nothing.
        Viewer => "viewer",
    }
);

wire_enum!(
    /// What a personal API token may be used for (a sign-in session may do all four).
    TokenScope {
        /// Reading conversations, events, attachments, lists.
        Read => "read",
        /// Starting and steering conversations: messages, settings, stop, archive.
        Write => "write",
        /// Deciding approvals and answering questions.
        Approve => "approve",
        /// Administration: people, roles, tokens, pairing, links, the audit log.
        Admin => "admin",
    }
);

wire_enum!(
    /// Who sees a conversation besides its owner.
    Visibility {
        /// The owner and the admins.
        Private => "private",
        /// Everyone on the team reads it; members write in it.
        Team => "team",
    }
);
