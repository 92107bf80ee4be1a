//! File-out (`/file <path>` on every channel, `GET /api/v1/turns/{id}/files/content`):
//! reading a file from a conversation's working directory, confined the way agent starts
//! are (issue 24 S1), and more:
//!
//! - the working directory is checked again at every read (under a workspace root, not in
//!   tether's data directory, and still the directory that was chosen: one swapped for a
//!   symlink since is refused);
//! - the file's real path (symlinks resolved) lies inside that directory, and never in a
//!   private place: tether's data directory, its attachment store, its config file, the
//!   agents' credentials and the usual key stores of the home directory
//!   ([`home_secrets`]), the attachment copies of `<cwd>/.tether`;
//! - only a regular file with one link (a hard link planted in the directory names a file
//!   that may live anywhere on the file system);
//! - the file that is read is the one that was checked: opened without following a final
//!   symlink, its real path read back from the open descriptor, and at most the size
//!   limit read from it (a file that grows after the check is refused, not read whole).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a file may not be handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileOutError {
    /// The path is malformed (`..`, empty, a NUL byte).
    #[error("{path}: {reason}")]
    BadPath { path: String, reason: &'static str },
    /// The path names nothing.
    #[error("{path}: no such file in the working directory {cwd}")]
    Missing { path: String, cwd: String },
    /// The path or the working directory breaks a confinement rule.
    #[error("{path} cannot be sent: {reason}")]
    Refused { path: String, reason: String },
    /// Larger than the per-file limit (`size` is what was seen).
    #[error("{path} is too large to send ({}; the limit is {})", crate::attachments::rules::size_text(*size), crate::attachments::rules::size_text(*limit))]
    TooLarge { path: String, size: u64, limit: u64 },
    /// Reading failed.
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
}

impl FileOutError {
    /// The stable wire code.
    pub fn code(&self) -> tether_proto::ErrorCode {
        use tether_proto::ErrorCode;
        match self {
            FileOutError::BadPath { .. } => ErrorCode::BadRequest,
            FileOutError::Missing { .. } => ErrorCode::NotFound,
            FileOutError::Refused { .. } | FileOutError::Io { .. } => ErrorCode::FileRefused,
            FileOutError::TooLarge { .. } => ErrorCode::AttachmentTooLarge,
        }
    }
}

/// Places under the home directory that hold credentials: the agents' logins and the
/// usual key and token stores. File-out never reads inside them, whatever the working
/// directory.
pub fn home_secrets(home: &Path) -> Vec<PathBuf> {
    [
        ".ssh",
        ".gnupg",
        ".aws",
        ".azure",
        ".kube",
        ".docker",
        ".netrc",
        ".git-credentials",
        ".npmrc",
        ".pypirc",
        ".pgpass",
        ".codex",
        ".claude",
        ".claude.json",
        ".gemini",
        ".config/gcloud",
        ".config/gh",
        ".config/tether",
        ".local/share/tether",
        ".password-store",
    ]
    .iter()
    .map(|p| home.join(p))
    .collect()
}

/// What file-out must keep away from, besides the working directory's own rules.
#[derive(Debug, Clone)]
pub(crate) struct Confinement {
    roots: Vec<PathBuf>,
    data_dir: PathBuf,
    private: Vec<PathBuf>,
}

/// A path canonicalised if it exists (a private place that does not exist yet holds
/// nothing, but its spelled path is kept so a later one is still covered).
fn canonical_or_given(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

impl Confinement {
    /// The rules for the workspace `roots`, tether's `data_dir`, the attachment store at
    /// `blob_root` and the other `private` places.
    pub(crate) fn new(
        roots: &[PathBuf],
        data_dir: &Path,
        blob_root: &Path,
        private: &[PathBuf],
    ) -> Confinement {
        let mut all: Vec<PathBuf> =
            vec![canonical_or_given(data_dir), canonical_or_given(blob_root)];
        all.extend(private.iter().map(|p| canonical_or_given(p)));
        Confinement {
            roots: roots.iter().filter_map(|r| r.canonicalize().ok()).collect(),
            data_dir: canonical_or_given(data_dir),
            private: all,
        }
    }

    /// The working directory, checked again: canonical, under a root, outside the data
    /// directory, and not swapped for a link since it was chosen (the stored `cwd` is the
    /// canonical path it had then).
    pub(crate) fn working_dir(&self, cwd: &Path) -> Result<PathBuf, String> {
        let real = cwd
            .canonicalize()
            .map_err(|e| format!("the working directory {} is gone: {e}", cwd.display()))?;
        if real != cwd {
            return Err(format!(
                "the working directory {} now leads to {}: it was replaced by a link since it \
                 was chosen",
                cwd.display(),
                real.display()
            ));
        }
        if !real.is_dir() {
            return Err(format!(
                "the working directory {} is not a directory",
                cwd.display()
            ));
        }
        if !self.roots.iter().any(|r| real.starts_with(r)) {
            return Err(format!(
                "the working directory {} is outside the workspace roots",
                cwd.display()
            ));
        }
        if real.starts_with(&self.data_dir) {
            return Err(format!(
                "the working directory {} lies in tether's data directory",
                cwd.display()
            ));
        }
        Ok(real)
    }

    /// `path` (relative to `cwd`, or absolute inside it) as the real path of a file that
    /// may be handed out, or why not. Checks the name and the place; [`read`] checks the
    /// file itself again when it opens it.
    pub(crate) fn resolve(&self, cwd: &Path, path: &str) -> Result<PathBuf, FileOutError> {
        let bad = |reason| FileOutError::BadPath {
            path: path.to_owned(),
            reason,
        };
        if path.trim().is_empty() {
            return Err(bad("the path is empty"));
        }
        if path.contains('\0') {
            return Err(bad("the path contains a NUL byte"));
        }
        let p = Path::new(path);
        if p.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(bad("the path contains `..`"));
        }
        let refused = |reason: String| FileOutError::Refused {
            path: path.to_owned(),
            reason,
        };
        let root = self.working_dir(cwd).map_err(refused)?;
        let joined = if p.is_absolute() {
            p.to_path_buf()
        } else {
            root.join(p)
        };
        let real = match joined.canonicalize() {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(FileOutError::Missing {
                    path: path.to_owned(),
                    cwd: root.display().to_string(),
                });
            }
            Err(e) => {
                return Err(FileOutError::Io {
                    path: path.to_owned(),
                    reason: e.to_string(),
                });
            }
        };
        self.place(&root, &real).map_err(refused)?;
        Ok(real)
    }

    /// Whether a real path may be handed out from the canonical working directory `root`.
    fn place(&self, root: &Path, real: &Path) -> Result<(), String> {
        if !real.starts_with(root) {
            return Err(format!(
                "it is outside the working directory {}",
                root.display()
            ));
        }
        if let Some(p) = self.private.iter().find(|p| real.starts_with(p)) {
            return Err(format!(
                "it lies in {}, which tether never hands out",
                p.display()
            ));
        }
        // Attachment copies made for agents (other conversations' files among them), in
        // this directory or any below it.
        let inside = real.strip_prefix(root).unwrap_or(real);
        if inside.components().any(|c| c.as_os_str() == ".tether") {
            return Err(
                "it lies in a .tether directory, where tether keeps attachment copies".to_owned(),
            );
        }
        Ok(())
    }

    /// The bytes of the file at `real` (from [`Self::resolve`]), opened without following
    /// a link, checked again on the open descriptor, read to at most `limit` bytes.
    pub(crate) fn read(
        &self,
        cwd: &Path,
        path: &str,
        real: &Path,
        limit: u64,
    ) -> Result<Vec<u8>, FileOutError> {
        let io = |e: std::io::Error| FileOutError::Io {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let refused = |reason: String| FileOutError::Refused {
            path: path.to_owned(),
            reason,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(real)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => refused("it is a symbolic link".to_owned()),
                _ => io(e),
            })?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(refused("it is not a regular file".to_owned()));
        }
        if meta.nlink() > 1 {
            return Err(refused(format!(
                "it has {} hard links (a hard link can name a file outside the working \
                 directory)",
                meta.nlink()
            )));
        }
        // What was opened is what was checked: a directory swapped on the way would
        // show here.
        // Fails closed: a file that cannot be checked is not handed out.
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", file_fd(&file)))
            .map_err(|e| refused(format!("its opened path cannot be checked: {e}")))?;
        if opened != real {
            let root = self.working_dir(cwd).map_err(refused)?;
            self.place(&root, &opened).map_err(refused)?;
        }
        if meta.len() > limit {
            return Err(FileOutError::TooLarge {
                path: path.to_owned(),
                size: meta.len(),
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() as u64 > limit {
            return Err(FileOutError::TooLarge {
                path: path.to_owned(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok(bytes)
    }
}

fn file_fd(file: &std::fs::File) -> i32 {
    std::os::fd::AsRawFd::as_raw_fd(file)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::attachments::file_out::{Confinement, FileOutError, home_secrets};

    struct Layout {
        _dir: tempfile::TempDir,
        home: PathBuf,
        work: PathBuf,
        conf: Confinement,
    }

    /// The default layout: the workspace root is the home directory, the working
    /// directory is the home directory, the data directory lies inside it.
    fn layout() -> Layout {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let data = home.join(".local/share/tether");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("token"), "secret-token").unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "key").unwrap();
        std::fs::create_dir_all(home.join("proj")).unwrap();
        std::fs::write(home.join("proj/ok.txt"), "fine").unwrap();
        let conf = Confinement {
            roots: vec![home.clone()],
            data_dir: data.clone(),
            private: {
                let mut p = vec![data, home.join("blobs"), home.join("tether.toml")];
                p.extend(home_secrets(&home));
                p
            },
        };
        Layout {
            work: home.join("proj"),
            home,
            _dir: dir,
            conf,
        }
    }

    fn read(l: &Layout, cwd: &Path, path: &str) -> Result<Vec<u8>, FileOutError> {
        let real = l.conf.resolve(cwd, path)?;
        l.conf.read(cwd, path, &real, 1024)
    }

    #[test]
    fn a_plain_file_in_the_working_directory_is_read() {
        let l = layout();
        assert_eq!(read(&l, &l.work, "ok.txt").unwrap(), b"fine");
        let abs = l.work.join("ok.txt").display().to_string();
        assert_eq!(read(&l, &l.work, &abs).unwrap(), b"fine");
    }

    #[test]
    fn the_data_directory_and_key_stores_are_never_read_even_from_home() {
        let l = layout();
        for p in [".local/share/tether/token", ".ssh/id_ed25519"] {
            let e = read(&l, &l.home, p).unwrap_err();
            assert!(matches!(e, FileOutError::Refused { .. }), "{p}: {e}");
        }
        std::fs::write(l.home.join("tether.toml"), "bot_token = 'x'").unwrap();
        assert!(matches!(
            read(&l, &l.home, "tether.toml"),
            Err(FileOutError::Refused { .. })
        ));
    }

    #[test]
    fn a_swapped_working_directory_is_refused() {
        let l = layout();
        std::fs::rename(&l.work, l.home.join("proj.old")).unwrap();
        std::os::unix::fs::symlink("/", &l.work).unwrap();
        let e = read(&l, &l.work, "etc/passwd").unwrap_err();
        assert!(matches!(e, FileOutError::Refused { .. }), "{e}");
        assert!(e.to_string().contains("replaced by a link"), "{e}");
    }

    #[test]
    fn links_out_and_odd_files_are_refused() {
        let l = layout();
        std::fs::write(l.home.join("outside.txt"), "outside").unwrap();
        std::fs::hard_link(l.home.join("outside.txt"), l.work.join("hard")).unwrap();
        std::os::unix::fs::symlink(l.home.join("outside.txt"), l.work.join("soft")).unwrap();
        std::os::unix::fs::symlink(l.work.join("ok.txt"), l.work.join("inner")).unwrap();
        std::fs::create_dir_all(l.work.join(".tether/attachments")).unwrap();
        std::fs::write(l.work.join(".tether/attachments/x.txt"), "theirs").unwrap();
        std::fs::create_dir_all(l.work.join("sub/.tether")).unwrap();
        std::fs::write(l.work.join("sub/.tether/y.txt"), "nested").unwrap();
        for p in [
            "hard",
            "soft",
            ".tether/attachments/x.txt",
            "sub/.tether/y.txt",
            ".",
        ] {
            let e = read(&l, &l.work, p).unwrap_err();
            assert!(matches!(e, FileOutError::Refused { .. }), "{p}: {e}");
        }
        // A link that stays inside is followed to its target.
        assert_eq!(read(&l, &l.work, "inner").unwrap(), b"fine");
        assert!(matches!(
            read(&l, &l.work, "../outside.txt"),
            Err(FileOutError::BadPath { .. })
        ));
        assert!(matches!(
            read(&l, &l.work, "nope.txt"),
            Err(FileOutError::Missing { .. })
        ));
    }

    #[test]
    fn a_file_larger_than_the_limit_is_refused_however_it_grew() {
        let l = layout();
        std::fs::write(l.work.join("big"), vec![b'x'; 2000]).unwrap();
        assert!(matches!(
            read(&l, &l.work, "big"),
            Err(FileOutError::TooLarge { size: 2000, .. })
        ));
    }
}
