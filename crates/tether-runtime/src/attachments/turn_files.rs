//! Files out (issue 13): the files an agent created or changed in a turn, read from its
//! edit tool calls (Codex `fileChange` paths, Claude `Write`/`Edit` inputs, ACP
//! locations and diffs), and reading one of them, confined to the session's working
//! directory: no `..`, no absolute path outside it, no symlink out of it.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use tether_proto::{TurnFile, TurnFiles, TurnId};

use crate::error::Result;
use crate::{AttachmentError, Runtime, RuntimeError};

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

/// `path` (relative to `cwd`, or absolute) as a path inside the canonical `cwd`, or why
/// not. Refuses `..` outright, and anything whose real path (symlinks resolved) leaves
/// the working directory.
pub(crate) fn confined(cwd: &Path, path: &str) -> std::result::Result<PathBuf, String> {
    let p = Path::new(path);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err("the path contains `..`".to_owned());
    }
    let root = std::fs::canonicalize(cwd).map_err(|e| format!("working directory: {e}"))?;
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    };
    let real = std::fs::canonicalize(&joined).map_err(|e| format!("{path}: {e}"))?;
    if !real.starts_with(&root) {
        return Err(format!("{path} is outside the working directory"));
    }
    Ok(real)
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

impl Runtime {
    /// The files the agent created or changed in a turn, as they are now.
    pub async fn turn_files(&self, turn_id: &TurnId) -> Result<TurnFiles> {
        let (turn, cwd) = self.turn_and_cwd(turn_id).await?;
        let details = self
            .ctx()
            .store
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
        let files = paths
            .into_iter()
            .map(|path| {
                let meta = confined(&cwd, &path)
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
    pub async fn working_file(&self, turn_id: &TurnId, path: &str) -> Result<(String, Vec<u8>)> {
        let (_, cwd) = self.turn_and_cwd(turn_id).await?;
        self.read_confined(&cwd, path).await
    }

    /// The bytes of `path` inside `cwd` (confined, within the per-file limit).
    pub(crate) async fn read_confined(&self, cwd: &Path, path: &str) -> Result<(String, Vec<u8>)> {
        let real = confined(cwd, path).map_err(|reason| RuntimeError::NotFound {
            what: "file in the working directory",
            id: reason,
        })?;
        let meta = tokio::fs::metadata(&real)
            .await
            .map_err(AttachmentError::Io)?;
        if !meta.is_file() {
            return Err(RuntimeError::NotFound {
                what: "file in the working directory",
                id: format!("{path} is not a file"),
            });
        }
        let limit = self.attachment_limits().max_file_bytes;
        if meta.len() > limit {
            return Err(AttachmentError::FileTooLarge {
                name: path.to_owned(),
                size: meta.len(),
                limit,
            }
            .into());
        }
        let bytes = tokio::fs::read(&real).await.map_err(AttachmentError::Io)?;
        let name = real
            .file_name()
            .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
        Ok((name, bytes))
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
            Some(s) => self.get_session(s).await?.cwd,
            None => conv.cwd.clone(),
        };
        let (name, bytes) = self.read_confined(Path::new(&cwd), path).await?;
        let new = [crate::NewAttachment {
            name: crate::AttachmentName::Platform(&name),
            declared: None,
            bytes: &bytes,
        }];
        let stored = self.add_attachments(&conv.id, &new).await?;
        let text = format!("📎 {path} ({} bytes)", bytes.len());
        // The reply carries the file in the history too (the page links it).
        let ids: Vec<&tether_proto::AttachmentId> = stored.iter().map(|a| &a.id).collect();
        self.ctx()
            .store
            .add_message_with_attachments(&conv.id, tether_proto::MessageRole::Command, &text, &ids)
            .await?;
        let mut out =
            crate::session::router::reply(tether_proto::MessageOutcomeKind::Command, text);
        out.attachments = stored;
        Ok(out)
    }

    async fn turn_and_cwd(&self, turn_id: &TurnId) -> Result<(tether_proto::Turn, PathBuf)> {
        let turn =
            self.ctx()
                .store
                .get_turn(turn_id)
                .await?
                .ok_or_else(|| RuntimeError::NotFound {
                    what: "turn",
                    id: turn_id.to_string(),
                })?;
        let session = self.get_session(&turn.session_id).await?;
        Ok((turn, PathBuf::from(session.cwd)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::attachments::turn_files::{confined, edited_paths};

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

    #[test]
    fn paths_stay_inside_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.txt"), "x").unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        assert!(confined(dir.path(), "in.txt").is_ok());
        assert!(confined(dir.path(), "../in.txt").is_err());
        assert!(confined(dir.path(), "link").is_err());
        let abs = outside.path().join("secret");
        assert!(confined(dir.path(), &abs.display().to_string()).is_err());
    }
}
