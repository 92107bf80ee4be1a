//! Attachments: files people send with a message (uploaded over the API, received from a
//! channel) and files an agent changed in a turn.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{AttachmentId, ConversationId, TurnId};

/// What an attachment is to an agent: an image goes as the agent's own image input, any
/// other file is copied into the working directory and named in the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    Image,
    File,
}

/// A stored attachment. Its bytes live once per content (`sha256`) however often they
/// are sent; the type is sniffed from the bytes, not taken from the name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Attachment {
    #[schema(value_type = String)]
    pub id: AttachmentId,
    #[schema(value_type = String)]
    pub conversation_id: ConversationId,
    /// The file name, checked (no path, no control characters).
    pub name: String,
    /// The media type sniffed from the bytes (`application/octet-stream` when unknown,
    /// `text/plain` for UTF-8 text).
    pub mime: String,
    pub kind: AttachmentKind,
    pub size: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
    /// The turn whose message carried it (`null` until it is sent).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub turn_id: Option<TurnId>,
    pub created_at_ms: i64,
}

/// The answer to an upload: the stored attachments, in the order of the parts.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Uploaded {
    pub attachments: Vec<Attachment>,
}

/// A file an agent created or changed in a turn (from its file-change and edit tool
/// events), as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TurnFile {
    /// Relative to the session's working directory (absolute when the agent wrote
    /// outside it; such a file is listed but cannot be downloaded).
    pub path: String,
    /// The file exists now, inside the working directory (it may have been deleted or
    /// moved since).
    pub exists: bool,
    #[serde(default)]
    pub size: Option<u64>,
}

/// `GET /api/v1/turns/{id}/files`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TurnFiles {
    #[schema(value_type = String)]
    pub turn_id: TurnId,
    /// The working directory the paths are relative to.
    pub cwd: String,
    pub files: Vec<TurnFile>,
}

/// `POST /api/v1/links`: the addresses to sign (each `/api/v1/attachments/{id}` or
/// `/api/v1/turns/{id}/files/content?path=…`, as the page would request them).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkRequest {
    pub paths: Vec<String>,
}

/// One signed link: `url` opens the object at `path` without the token until
/// `expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SignedLink {
    pub path: String,
    pub url: String,
    pub expires_at_ms: i64,
}

/// The answer to `POST /api/v1/links`, in the order asked.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SignedLinks {
    pub links: Vec<SignedLink>,
}
