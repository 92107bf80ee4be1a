//! Files out (issue 13): the files an agent created or changed in a turn, read from its
//! edit tool calls (Codex `fileChange` paths, Claude `Write`/`Edit` inputs, ACP
//! locations and diffs), and reading one of them, confined to the session's working
//! directory by [`super::file_out`].

use std::path::{Path, PathBuf};

use serde_json::Value;
use tether_proto::{TurnFile, TurnFiles, TurnId};

use super::file_out::Confinement;
use crate::RuntimeError;
use crate::attachments::Attachments;
use crate::error::Result;

/// The paths an edit tool call's `detail` names, in the order given.
pub(crate) fn edited_paths(detail: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |p: Option<&str>| {
        if let Some(p) = p.filter(|p| !p.is_empty())
            && !out.iter().any(|o| o == p)
        {
            out.push(p.to_owned());
        }
    };
    // Codex fileChange (`paths`, from `changes[].path`).
    for p in detail["paths"].as_array().into_iter().flatten() {
        add(p.as_str());
    }
    // Claude Write / Edit / MultiEdit / NotebookEdit.
    add(detail["input"]["file_path"].as_str());
    add(detail["input"]["notebook_path"].as_str());
    // ACP: locations, and diff content blocks.
    for l in detail["locations"].as_array().into_iter().flatten() {
        add(l["path"].as_str());
    }
    for c in detail["content"].as_array().into_iter().flatten() {
        if c["type"] == "diff" {
            add(c["path"].as_str());
        }
    }
    out
}

/// A listed path, relative to `cwd` when it lies inside it.
fn relative(cwd: &Path, path: &str) -> String {
    let root = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let p = Path::new(path);
    for base in [root.as_path(), cwd] {
        if let Ok(rel) = p.strip_prefix(base) {
            return rel.display().to_string();
        }
    }
    path.to_owned()
}

impl Attachments<'_> {
    /// The files the agent created or changed in a turn, as they are now.
    pub(crate) async fn turn_files(&self, turn_id: &TurnId) -> Result<TurnFiles> {
        let (turn, cwd) = self.turn_and_cwd(turn_id).await?;
        let details = self
            .rt
            .ctx()
            .store
            .attachments()
            .turn_edit_details(&turn.conversation_id, turn_id)
            .await?;
        let mut paths: Vec<String> = Vec::new();
        for d in &details {
            for p in edited_paths(d) {
                let rel = relative(&cwd, &p);
                if !paths.contains(&rel) {
                    paths.push(rel);
                }
            }
        }
        let confinement = self.file_confinement();
        let files = paths
            .into_iter()
            .map(|path| {
                let meta = confinement
                    .resolve(&cwd, &path)
                    .ok()
                    .and_then(|real| std::fs::metadata(real).ok())
                    .filter(std::fs::Metadata::is_file);
                TurnFile {
                    exists: meta.is_some(),
                    size: meta.map(|m| m.len()),
                    path,
                }
            })
            .collect();
        Ok(TurnFiles {
            turn_id: turn.id,
            cwd: cwd.display().to_string(),
            files,
        })
    }

    /// The bytes of a file in a turn's working directory (confined to it, within the
    /// per-file attachment limit) and its name.
    pub(crate) async fn working_file(
        &self,
        turn_id: &TurnId,
        path: &str,
    ) -> Result<(String, Vec<u8>)> {
        let (_, cwd) = self.turn_and_cwd(turn_id).await?;
        self.read_confined(&cwd, path).await
    }

    /// What file-out keeps away from.
    fn file_confinement(&self) -> Confinement {
        let config = &self.rt.ctx().config;
        Confinement::new(
            &config.workspace_roots,
            &config.data_dir,
            self.blobs().root(),
            &config.private_paths,
        )
    }

    /// The bytes of `path` inside `cwd` (confined, within the per-file limit) and the
    /// file's name. Every check runs again at every read.
    pub(crate) async fn read_confined(&self, cwd: &Path, path: &str) -> Result<(String, Vec<u8>)> {
        let confinement = self.file_confinement();
        let limit = self.attachment_limits().max_file_bytes;
        let (cwd, path) = (cwd.to_path_buf(), path.to_owned());
        let read = tokio::task::spawn_blocking(move || {
            let real = confinement.resolve(&cwd, &path)?;
            let bytes = confinement.read(&cwd, &path, &real, limit)?;
            let name = real
                .file_name()
                .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
            Ok::<_, super::file_out::FileOutError>((name, bytes))
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("file-out task: {e}")))?;
        Ok(read?)
    }

    /// `/file <path>`: the file from the conversation's working directory (its bound
    /// session's, else the conversation's), confined and within the per-file limit,
    /// stored as an attachment of the conversation and handed out with the reply.
    pub(crate) async fn share_file(
        &self,
        conv: &tether_store::ConversationRow,
        path: &str,
    ) -> Result<tether_proto::MessageOutcome> {
        let cwd = match &conv.bound_session_id {
            Some(s) => self.rt.conversations().get_session(s).await?.cwd,
            None => conv.cwd.clone(),
        };
        let (name, bytes) = self.read_confined(Path::new(&cwd), path).await?;
        let text = format!("📎 {path} ({} bytes)", bytes.len());
        self.share_bytes(conv, &name, &bytes, &text).await
    }

    /// Sends `bytes` as the file `name` in the conversation, with `text` (the reply and
    /// its history line carry it).
    pub(crate) async fn share_bytes(
        &self,
        conv: &tether_store::ConversationRow,
        name: &str,
        bytes: &[u8],
        text: &str,
    ) -> Result<tether_proto::MessageOutcome> {
        let new = [crate::NewAttachment {
            name: crate::AttachmentName::Platform(name),
            declared: None,
            bytes,
        }];
        let stored = self.add_attachments(&conv.id, &new).await?;
        let text = text.to_owned();
        // The reply carries the file in the history too (the page links it).
        let ids: Vec<&tether_proto::AttachmentId> = stored.iter().map(|a| &a.id).collect();
        self.rt
            .ctx()
            .store
            .attachments()
            .add_message_with_attachments(&conv.id, tether_proto::MessageRole::Command, &text, &ids)
            .await?;
        let mut out =
            crate::session::router::reply(tether_proto::MessageOutcomeKind::Command, text);
        out.attachments = stored;
        Ok(out)
    }

    async fn turn_and_cwd(&self, turn_id: &TurnId) -> Result<(tether_proto::Turn, PathBuf)> {
        let turn = self
            .rt
            .ctx()
            .store
            .conversations()
            .get_turn(turn_id)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "turn",
                id: turn_id.to_string(),
            })?;
        let hidden = || RuntimeError::NotFound {
            what: "turn",
            id: turn_id.to_string(),
        };
        let access = self.rt.access();
        let readable = access.read(&turn.conversation_id).await;
        readable.map_err(|e| crate::access::hide_as(e, hidden))?;
        let session = self
            .rt
            .conversations()
            .get_session(&turn.session_id)
            .await?;
        Ok((turn, PathBuf::from(session.cwd)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::attachments::turn_files::edited_paths;

    #[test]
    fn paths_come_from_every_dialects_edit_detail() {
        assert_eq!(edited_paths(&json!({"paths": ["/w/a.txt"]})), ["/w/a.txt"]);
        assert_eq!(
            edited_paths(&json!({"tool": "Write", "input": {"file_path": "b.txt"}})),
            ["b.txt"]
        );
        let acp = json!({"locations": [{"path": "c.txt"}],
            "content": [{"type": "diff", "path": "c.txt"}, {"type": "diff", "path": "d.txt"}]});
        assert_eq!(edited_paths(&acp), ["c.txt", "d.txt"]);
    }
}
