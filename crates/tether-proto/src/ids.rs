//! Newtype ids, so a session id cannot be passed where a conversation id is meant.
//!
//! On the wire each is a bare JSON string (`#[serde(transparent)]`), and both schema
//! derivations (utoipa for the OpenAPI document, schemars for the MCP tools'
//! `inputSchema`) describe it as a plain string, inlined: the wire format and both
//! documents are what they were with `String`. Fields of these types in `ToSchema`
//! structs carry `#[schema(value_type = String)]` so utoipa inlines a string instead of
//! adding a `$ref` component.

use std::borrow::{Borrow, Cow};
use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                Self(id.clone())
            }
        }

        impl From<&$name> for $name {
            fn from(id: &$name) -> Self {
                id.clone()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                <String as utoipa::PartialSchema>::schema()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> Cow<'static, str> {
                <String as schemars::JsonSchema>::schema_name()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <String as schemars::JsonSchema>::json_schema(generator)
            }
        }
    };
}

string_id!(
    /// A conversation: the durable thread people and agents talk in.
    ConversationId
);
string_id!(
    /// A runtime session of a conversation (one agent process lifetime, resumable).
    SessionId
);
string_id!(
    /// One turn: a prompt and the agent's answer to it.
    TurnId
);
string_id!(
    /// A permission request of a turn, awaiting a person's decision.
    ApprovalId
);
string_id!(
    /// A question a turn asked a person.
    QuestionId
);
string_id!(
    /// A delegated task (`task_id` of the delegation tools).
    TaskId
);
string_id!(
    /// A stored attachment (an uploaded or received file), owned by one conversation.
    AttachmentId
);
string_id!(
    /// A node of a cluster (stable across restarts of its data directory).
    NodeId
);
string_id!(
    /// A command forwarded from one node to another through the store.
    CommandId
);
string_id!(
    /// A person of the team (issue 28): the owner of conversations and tokens.
    PersonId
);

impl TaskId {
    /// The child's `delegate` conversation: a task's id is that conversation's id.
    pub fn conversation_id(&self) -> ConversationId {
        ConversationId(self.0.clone())
    }

    /// The task whose child conversation is `id` (see [`TaskId::conversation_id`]).
    pub fn of_conversation(id: &ConversationId) -> TaskId {
        TaskId(id.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bare_json_strings_both_ways() {
        let id = ConversationId::from("c-1");
        assert_eq!(serde_json::to_value(&id).unwrap(), serde_json::json!("c-1"));
        let back: ConversationId = serde_json::from_str("\"c-1\"").unwrap();
        assert_eq!(back, id);
        assert_eq!(back, "c-1");
        assert_eq!(back.to_string(), "c-1");
        assert!(serde_json::from_str::<TaskId>("42").is_err());
        let opt: Option<TurnId> = serde_json::from_str("null").unwrap();
        assert_eq!(opt, None);
    }

    #[test]
    fn ids_are_plain_strings_in_both_schemas() {
        let ours = serde_json::to_value(<SessionId as utoipa::PartialSchema>::schema()).unwrap();
        let string = serde_json::to_value(<String as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(ours, string);
        let ours = serde_json::to_value(schemars::schema_for!(ApprovalId)).unwrap();
        let string = serde_json::to_value(schemars::schema_for!(String)).unwrap();
        assert_eq!(ours, string);
    }
}
