//! A turn's attachments in the agent's own form: images as its image input when it takes
//! them, everything else copied into the working directory under
//! `.tether/attachments/<conversation>/` and named in the prompt. Run by the session
//! actor's prompt task, just before the prompt is sent. The copies of a conversation go
//! when it is archived ([`remove_copies`]).

use std::io;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use tether_agents::{ImageInput, Prompt};
use tether_proto::{Attachment, AttachmentKind, ConversationId};

use super::blobs::Blobs;

/// Where files are copied, relative to the working directory: one directory per
/// conversation below it, so conversations sharing a directory keep their copies apart.
pub const ATTACHMENTS_DIR: &str = ".tether/attachments";

/// A conversation's copy directory, relative to the working directory.
pub fn copies_dir(conversation: &ConversationId) -> String {
    format!("{ATTACHMENTS_DIR}/{conversation}")
}

/// The prompt, and a status line for the person when something did not go as sent.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub prompt: Prompt,
    pub notes: Vec<String>,
}

/// Builds the prompt of a turn with attachments. A file that cannot be handed over is
/// left out with a note; the text always goes.
pub(crate) async fn prepare(
    blobs: &Blobs,
    cwd: &Path,
    conversation: &ConversationId,
    text: &str,
    attachments: &[Attachment],
    images_native: bool,
) -> Prepared {
    let mut images = Vec::new();
    let mut files = Vec::new();
    let mut notes = Vec::new();
    let mut images_as_files = Vec::new();
    for a in attachments {
        let bytes = match blobs.read(&a.sha256).await {
            Ok(b) => b,
            Err(e) => {
                notes.push(format!("{} could not be read ({e}); not sent", a.name));
                continue;
            }
        };
        if a.kind == AttachmentKind::Image && images_native {
            images.push(ImageInput {
                mime: a.mime.clone(),
                data_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
            });
            continue;
        }
        if a.kind == AttachmentKind::Image {
            images_as_files.push(a.name.clone());
        }
        match copy_into(cwd, conversation, a, &bytes).await {
            Ok(rel) => files.push(format!("- {rel} ({}, {} bytes)", a.mime, a.size)),
            Err(e) => notes.push(format!(
                "{} could not be copied for the agent ({e}); not sent",
                a.name
            )),
        }
    }
    if !images_as_files.is_empty() {
        notes.insert(
            0,
            format!(
                "this agent does not take images: {} sent as files under {}/",
                images_as_files.join(", "),
                copies_dir(conversation)
            ),
        );
    }
    let mut full = text.trim().to_owned();
    if !files.is_empty() {
        if !full.is_empty() {
            full.push_str("\n\n");
        }
        full.push_str("Attached files (paths relative to the working directory):\n");
        full.push_str(&files.join("\n"));
    }
    if full.is_empty() {
        // Anthropic refuses an empty text block; say what came.
        full = format!("(the person sent {} image(s))", images.len());
    }
    Prepared {
        prompt: Prompt { text: full, images },
        notes,
    }
}

/// One directory level, created if missing; refused when it is anything but a real
/// directory (a symlink planted there could point outside the working directory).
async fn real_dir(path: &Path) -> io::Result<()> {
    match tokio::fs::symlink_metadata(path).await {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::other(format!(
            "{} is not a plain directory",
            path.display()
        ))),
        // Private: other local users must not read the person's files (issue 24 S3).
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut b = tokio::fs::DirBuilder::new();
            b.mode(0o700);
            b.create(path).await
        }
        Err(e) => Err(e),
    }
}

/// Keeps `.tether/` out of `git status` of the repository around `cwd` (issue 24, first
/// use 7): an entry in its `.git/info/exclude`, added once. A directory that is not in
/// a repository (or a worktree whose `.git` is a file) is left as it is.
async fn exclude_from_git(cwd: &Path) {
    let Some(git) = cwd.ancestors().map(|d| d.join(".git")).find(|g| g.is_dir()) else {
        return;
    };
    let exclude = git.join("info").join("exclude");
    let current = tokio::fs::read_to_string(&exclude)
        .await
        .unwrap_or_default();
    if current.lines().any(|l| l.trim() == ".tether/") {
        return;
    }
    let mut text = current;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# tether's attachment copies for agents\n.tether/\n");
    let written = async {
        tokio::fs::create_dir_all(git.join("info")).await?;
        tokio::fs::write(&exclude, text).await
    }
    .await;
    if let Err(e) = written {
        tracing::debug!(path = %exclude.display(), error = %e, "cannot keep .tether out of git status");
    }
}

/// Copies the bytes to `<cwd>/.tether/attachments/<conversation>/<8 hex>-<name>` (the
/// hash prefix keeps two files of one name apart); the path relative to `cwd`. Written
/// to a fresh temporary file and renamed over the name, so a symlink at the name is
/// replaced, never followed.
async fn copy_into(
    cwd: &Path,
    conversation: &ConversationId,
    a: &Attachment,
    bytes: &[u8],
) -> io::Result<String> {
    let rel = copies_dir(conversation);
    let mut dir = PathBuf::from(cwd);
    for part in rel.split('/') {
        dir.push(part);
        real_dir(&dir).await?;
    }
    exclude_from_git(cwd).await;
    let file = format!("{}-{}", &a.sha256[..8.min(a.sha256.len())], a.name);
    let tmp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = async {
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .await?;
        tokio::io::AsyncWriteExt::write_all(&mut f, bytes).await?;
        f.sync_all().await?;
        tokio::fs::rename(&tmp, dir.join(&file)).await
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    written.map(|()| format!("{rel}/{file}"))
}

/// Removes a conversation's copies under `cwd` (archiving is the removal). Every level
/// must be a real directory: a symlink planted at `.tether` or `attachments` is never
/// followed, so nothing outside the working directory can be deleted through it. A
/// directory that is not there is nothing to do.
pub(crate) async fn remove_copies(cwd: &Path, conversation: &ConversationId) -> io::Result<()> {
    let mut dir = PathBuf::from(cwd);
    for part in copies_dir(conversation).split('/') {
        dir.push(part);
        match tokio::fs::symlink_metadata(&dir).await {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(io::Error::other(format!(
                    "{} is not a plain directory",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    // `remove_dir_all` removes symlinks inside, never what they point to.
    tokio::fs::remove_dir_all(&dir).await
}
