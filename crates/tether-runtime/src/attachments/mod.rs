//! Attachments (issue 13): files sent with a message. Stored once per content in the data
//! dir (`blobs`), recorded as rows of their conversation (the store), checked by the
//! rules (`rules`: limits, names, the type sniffed from the bytes), and handed to the
//! agent in its own form when the turn runs (`prompt`).

pub(crate) mod blobs;
pub mod file_out;
pub(crate) mod prompt;
pub mod rules;
pub(crate) mod turn_files;

use tether_proto::{Attachment, AttachmentId, ConversationId, HistoryMessage, MessageRole, TurnId};

use crate::RuntimeError;
use crate::error::Result;
use crate::ids::new_id;
use blobs::Blobs;
use rules::{AttachmentError, check_claims, check_name, sanitize_name, sniff};

/// One file to store.
#[derive(Debug, Clone, Copy)]
pub struct NewAttachment<'a> {
    pub name: AttachmentName<'a>,
    /// The content type the sender declared, if any (checked against the bytes).
    pub declared: Option<&'a str>,
    pub bytes: &'a [u8],
}

/// Where a file's name came from: typed by a client (checked, refused when unusable) or
/// given by a platform (made usable).
#[derive(Debug, Clone, Copy)]
pub enum AttachmentName<'a> {
    Given(&'a str),
    Platform(&'a str),
}

/// The attachment service: files sent with messages and files a turn wrote. A view of the
/// runtime (cheap, `Copy`), reached through `Runtime::attachments()`.
#[derive(Clone, Copy)]
pub(crate) struct Attachments<'a> {
    pub(crate) rt: &'a crate::Runtime,
}

impl<'a> Attachments<'a> {
    pub(crate) fn new(rt: &'a crate::Runtime) -> Self {
        Attachments { rt }
    }
}

impl Attachments<'_> {
    /// The configured size limits.
    pub(crate) fn attachment_limits(&self) -> rules::AttachmentLimits {
        self.rt.ctx().config.attachments
    }

    pub(crate) fn blobs(&self) -> Blobs {
        Blobs::of(&self.rt.ctx().config)
    }

    /// Stores files for a later message of the conversation: checks every one (size,
    /// name, that neither the name nor the declared type lies about the bytes, the sum
    /// within the per-message limit) before storing any, then keeps the bytes once per
    /// content and records the rows.
    pub(crate) async fn add_attachments(
        &self,
        conversation_id: &ConversationId,
        files: &[NewAttachment<'_>],
    ) -> Result<Vec<Attachment>> {
        self.rt.access().write(conversation_id).await?;
        let conv = self
            .rt
            .conversations()
            .conversation_row(conversation_id)
            .await?;
        if conv.archived {
            return Err(RuntimeError::Archived(conversation_id.clone()));
        }
        let limits = self.attachment_limits();
        if files.len() > limits.max_files {
            return Err(AttachmentError::TooMany {
                count: files.len(),
                limit: limits.max_files,
            }
            .into());
        }
        let total: u64 = files.iter().map(|f| f.bytes.len() as u64).sum();
        if total > limits.max_message_bytes {
            return Err(AttachmentError::MessageTooLarge {
                size: total,
                limit: limits.max_message_bytes,
            }
            .into());
        }
        let mut checked = Vec::new();
        for f in files {
            checked.push(self.check_attachment(f)?);
        }
        let mut rows = Vec::with_capacity(files.len());
        for (f, mut row) in files.iter().zip(checked) {
            row.conversation_id = conv.id.clone();
            row.sha256 = self
                .blobs()
                .put(f.bytes)
                .await
                .map_err(AttachmentError::Io)?;
            rows.push(row);
        }
        // One transaction for the whole upload (issue 24 S8).
        Ok(self
            .rt
            .ctx()
            .store
            .attachments()
            .insert_attachments(&rows)
            .await?)
    }

    /// The row a file would get (without its conversation and hash), or why it is refused.
    fn check_attachment(&self, f: &NewAttachment<'_>) -> Result<Attachment> {
        let (name, declared, bytes) = (f.name, f.declared, f.bytes);
        let name = match name {
            AttachmentName::Given(n) => check_name(n)?.to_owned(),
            AttachmentName::Platform(n) => sanitize_name(n, "file"),
        };
        let limits = self.attachment_limits();
        let size = bytes.len() as u64;
        if size > limits.max_file_bytes {
            return Err(AttachmentError::FileTooLarge {
                name,
                size,
                limit: limits.max_file_bytes,
            }
            .into());
        }
        let sniffed = sniff(bytes);
        check_claims(&name, declared, &sniffed)?;
        Ok(Attachment {
            id: new_id::<AttachmentId>(),
            conversation_id: Default::default(),
            name,
            mime: sniffed.mime,
            kind: sniffed.kind,
            size,
            sha256: String::new(),
            turn_id: None,
            created_at_ms: 0,
        })
    }

    /// An attachment's row and bytes.
    pub(crate) async fn attachment(&self, id: &AttachmentId) -> Result<(Attachment, Vec<u8>)> {
        let not_found = || RuntimeError::NotFound {
            what: "attachment",
            id: id.to_string(),
        };
        let a = self
            .rt
            .ctx()
            .store
            .attachments()
            .get_attachment(id)
            .await?
            .ok_or_else(not_found)?;
        let readable = self.rt.access().read(&a.conversation_id).await;
        readable.map_err(|e| crate::access::hide_as(e, not_found))?;
        let bytes = self
            .blobs()
            .read(&a.sha256)
            .await
            .map_err(|_| not_found())?;
        Ok((a, bytes))
    }

    /// The attachments a message names, checked before its turn exists: each one of
    /// this conversation and not sent yet, together within the per-message limit.
    pub(crate) async fn message_attachments(
        &self,
        conversation_id: &str,
        ids: &[AttachmentId],
    ) -> Result<Vec<Attachment>> {
        let max = self.attachment_limits().max_files;
        if ids.len() > max {
            return Err(AttachmentError::TooMany {
                count: ids.len(),
                limit: max,
            }
            .into());
        }
        let mut out: Vec<Attachment> = Vec::new();
        for id in ids {
            if out.iter().any(|a| &a.id == id) {
                continue;
            }
            let a = match self.rt.ctx().store.attachments().get_attachment(id).await? {
                Some(a) if a.conversation_id == conversation_id => a,
                _ => return Err(AttachmentError::NotFound(id.to_string()).into()),
            };
            // Sent with a turn that ran or is queued to. A claim whose turn was never
            // stored (tether stopped between the two) or never ran (refused) leaves it
            // free: the message sent again gets the file (`claim_attachments`).
            if let Some(turn) = &a.turn_id
                && self.rt.ctx().store.attachments().sent_with(turn).await?
            {
                return Err(AttachmentError::AlreadySent(id.to_string()).into());
            }
            out.push(a);
        }
        let size: u64 = out.iter().map(|a| a.size).sum();
        let limit = self.attachment_limits().max_message_bytes;
        if size > limit {
            return Err(AttachmentError::MessageTooLarge { size, limit }.into());
        }
        Ok(out)
    }

    /// A history page with the attachments its messages carried: the person's (given
    /// to their turn) and `/file` replies' (the file they sent).
    pub(crate) async fn with_attachments(
        &self,
        mut messages: Vec<HistoryMessage>,
    ) -> Result<Vec<HistoryMessage>> {
        let turns: Vec<TurnId> = messages
            .iter()
            .filter(|m| m.role == MessageRole::User)
            .filter_map(|m| m.turn_id.clone())
            .collect();
        // `/file` replies carry the file they sent.
        let replies: Vec<i64> = messages
            .iter()
            .filter(|m| m.role == MessageRole::Command)
            .map(|m| m.id)
            .collect();
        let sent = self
            .rt
            .ctx()
            .store
            .attachments()
            .attachments_of_messages(&replies)
            .await?;
        for m in messages
            .iter_mut()
            .filter(|m| m.role == MessageRole::Command)
        {
            m.attachments = sent
                .iter()
                .filter(|(id, _)| *id == m.id)
                .map(|(_, a)| a.clone())
                .collect();
        }
        let all = self
            .rt
            .ctx()
            .store
            .attachments()
            .attachments_of_turns(&turns)
            .await?;
        if all.is_empty() {
            return Ok(messages);
        }
        for m in messages.iter_mut().filter(|m| m.role == MessageRole::User) {
            if let Some(t) = &m.turn_id {
                m.attachments = all
                    .iter()
                    .filter(|a| a.turn_id.as_ref() == Some(t))
                    .cloned()
                    .collect();
            }
        }
        Ok(messages)
    }

    /// Removes a conversation's attachments: rows, the blobs no other row names, and the
    /// copies made for its agents in every working directory its sessions used.
    pub(crate) async fn remove_attachments(&self, conversation_id: &ConversationId) -> Result<()> {
        let mut cwds: Vec<String> = vec![
            self.rt
                .conversations()
                .conversation_row(conversation_id)
                .await?
                .cwd,
        ];
        for s in self
            .rt
            .ctx()
            .store
            .conversations()
            .list_sessions(conversation_id)
            .await?
        {
            if !cwds.contains(&s.cwd) {
                cwds.push(s.cwd);
            }
        }
        for cwd in cwds {
            let removed = prompt::remove_copies(std::path::Path::new(&cwd), conversation_id).await;
            if let Err(e) = removed {
                tracing::warn!(conversation = %conversation_id, cwd, error = %e, "cannot delete attachment copies");
            }
        }
        let unused = self
            .rt
            .ctx()
            .store
            .attachments()
            .delete_conversation_attachments(conversation_id)
            .await?;
        let blobs = self.blobs();
        for sha in unused {
            // Another upload of the same content may have come in meanwhile.
            if self
                .rt
                .ctx()
                .store
                .attachments()
                .attachment_blob_used(&sha)
                .await?
            {
                continue;
            }
            if let Err(e) = blobs.remove(&sha).await {
                tracing::warn!(sha, error = %e, "cannot delete an attachment blob");
            }
        }
        Ok(())
    }
}
