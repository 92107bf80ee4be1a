//! The content-addressed blob store: `<data_dir>/attachments/<2 hex>/<sha256>` (or in
//! `[cluster] attachments_dir`), each
//! content once. Written through a temporary file in the same file system and renamed,
//! so a crash never leaves a half-written blob under a real name.
//!
//! Private like the data directory (issue 24 S3): directories 0700, files 0600 (an
//! existing looser store is tightened, with a warning, when the runtime starts), and a
//! blob's bytes are checked against its name when stored over and when read (a file
//! changed or planted under a hash's name is never handed out as that content).

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Creates `dir` and its missing parents, each 0700.
async fn private_dir_all(dir: &Path) -> io::Result<()> {
    let mut b = tokio::fs::DirBuilder::new();
    b.recursive(true).mode(0o700);
    b.create(dir).await
}

/// Sets `mode` when the permission bits differ; whether it changed them.
fn set_mode(path: &Path, meta: &std::fs::Metadata, mode: u32) -> bool {
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o777 == mode {
        return false;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).is_ok()
}

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
        // A content there already is trusted only when its bytes are that content.
        if let Ok(existing) = tokio::fs::read(&dest).await
            && sha256_hex(&existing) == sha
        {
            return Ok(sha);
        }
        let tmp_dir = self.root.join("tmp");
        private_dir_all(&tmp_dir).await?;
        if let Some(parent) = dest.parent() {
            private_dir_all(parent).await?;
        }
        let tmp = tmp_dir.join(uuid::Uuid::new_v4().simple().to_string());
        let written = async {
            let mut f = tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
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

    /// The bytes of a content, checked against its hash.
    pub async fn read(&self, sha256: &str) -> io::Result<Vec<u8>> {
        let Some(p) = self.path(sha256) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such blob"));
        };
        let bytes = tokio::fs::read(&p).await?;
        if sha256_hex(&bytes) != sha256 {
            tracing::error!(path = %p.display(), "an attachment file does not hold its content (changed on disk); refused");
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the stored file does not match its content hash",
            ));
        }
        Ok(bytes)
    }

    /// Makes the store private (0700 directories, 0600 files), saying what it changed.
    pub fn tighten(&self) {
        let mut changed = 0usize;
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(meta) = std::fs::symlink_metadata(&dir) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            changed += usize::from(set_mode(&dir, &meta, 0o700));
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => stack.push(path),
                    Ok(m) if m.is_file() => changed += usize::from(set_mode(&path, &m, 0o600)),
                    _ => {}
                }
            }
        }
        if changed > 0 {
            tracing::warn!(
                dir = %self.root.display(),
                changed,
                "the attachment store was readable by others; tightened to 0700/0600"
            );
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use crate::attachments::blobs::{Blobs, sha256_hex};

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[tokio::test]
    async fn blobs_are_private_and_checked_against_their_hash() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::new(dir.path());
        let sha = blobs.put(b"hello").await.unwrap();
        let path = blobs.path(&sha).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(blobs.read(&sha).await.unwrap(), b"hello");

        // Changed on disk: never handed out as that content; storing it again repairs it.
        std::fs::write(&path, b"planted").unwrap();
        assert!(blobs.read(&sha).await.is_err());
        assert_eq!(blobs.put(b"hello").await.unwrap(), sha);
        assert_eq!(blobs.read(&sha).await.unwrap(), b"hello");
        assert_eq!(sha, sha256_hex(b"hello"));

        // A looser store (made by an older tether) is tightened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(
            path.parent().unwrap(),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        blobs.tighten();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
    }
}
