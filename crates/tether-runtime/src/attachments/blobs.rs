//! The content-addressed blob store: `<data_dir>/attachments/<2 hex>/<sha256>` (or in
//! `[cluster] attachments_dir`), each
//! content once. Written through a temporary file in the same file system and renamed,
//! so a crash never leaves a half-written blob under a real name.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

#[derive(Debug, Clone)]
pub(crate) struct Blobs {
    root: PathBuf,
}

/// Hex SHA-256 of the bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl Blobs {
    pub fn new(data_dir: &Path) -> Blobs {
        Blobs {
            root: data_dir.join("attachments"),
        }
    }

    /// The blobs of a runtime: in `[cluster] attachments_dir` (a directory the nodes of a
    /// cluster share) when set, else in the data directory.
    pub fn of(config: &crate::RuntimeConfig) -> Blobs {
        match &config.cluster.attachments_dir {
            Some(dir) => Blobs { root: dir.clone() },
            None => Blobs::new(&config.data_dir),
        }
    }

    /// The directory the blobs live in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a content lives; `None` for anything that is not a lowercase SHA-256 (a
    /// stored hash is never a path).
    pub fn path(&self, sha256: &str) -> Option<PathBuf> {
        is_sha256_hex(sha256).then(|| self.root.join(&sha256[..2]).join(sha256))
    }

    /// Stores the bytes (nothing to do when the content is there already); their hash.
    pub async fn put(&self, bytes: &[u8]) -> io::Result<String> {
        let sha = sha256_hex(bytes);
        let Some(dest) = self.path(&sha) else {
            return Err(io::Error::other("unexpected hash"));
        };
        if tokio::fs::try_exists(&dest).await? {
            return Ok(sha);
        }
        let tmp_dir = self.root.join("tmp");
        tokio::fs::create_dir_all(&tmp_dir).await?;
        if let Some(parent) = dest.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        let tmp = tmp_dir.join(uuid::Uuid::new_v4().simple().to_string());
        let written = async {
            let mut f = tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .await?;
            tokio::io::AsyncWriteExt::write_all(&mut f, bytes).await?;
            f.sync_all().await?;
            tokio::fs::rename(&tmp, &dest).await
        }
        .await;
        if written.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        written.map(|()| sha)
    }

    pub async fn read(&self, sha256: &str) -> io::Result<Vec<u8>> {
        match self.path(sha256) {
            Some(p) => tokio::fs::read(p).await,
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such blob")),
        }
    }

    /// Deletes a content no attachment names any more.
    pub async fn remove(&self, sha256: &str) -> io::Result<()> {
        match self.path(sha256) {
            Some(p) => match tokio::fs::remove_file(p).await {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }
}
