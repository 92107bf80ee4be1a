//! Persisted session history: `<state-dir>/<session_id>.json` holds the JSON array of the
//! session's user messages so far, so a fresh process can load or resume the session.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating state dir {}", dir.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// File of a session; `None` for ids that could escape the directory.
    fn path(&self, id: &str) -> Option<PathBuf> {
        let ok = !id.is_empty()
            && id.len() <= 128
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        ok.then(|| self.dir.join(format!("{id}.json")))
    }

    pub fn exists(&self, id: &str) -> bool {
        self.path(id).is_some_and(|p| p.is_file())
    }

    /// The session's user messages, or `None` if the session is unknown.
    pub fn load(&self, id: &str) -> Result<Option<Vec<String>>> {
        let Some(path) = self.path(id) else {
            return Ok(None);
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                let messages = serde_json::from_slice(&bytes)
                    .with_context(|| format!("parsing {}", path.display()))?;
                Ok(Some(messages))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// A Codex thread's usage so far: its running total and its last step (input,
    /// output), kept beside its history as codex keeps it in its rollout.
    pub fn usage(&self, id: &str) -> Option<(u64, u64, u64)> {
        let path = self.path(id)?.with_extension("usage");
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Adds a step to a Codex thread's usage; its new running total.
    pub fn add_usage(&self, id: &str, input: u64, output: u64) -> Result<u64> {
        let total = self.usage(id).map_or(0, |(t, _, _)| t) + input + output;
        let path = self
            .path(id)
            .with_context(|| format!("invalid session id {id:?}"))?
            .with_extension("usage");
        std::fs::write(&path, serde_json::to_vec(&(total, input, output))?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(total)
    }

    /// Write the whole history (atomically: temp file + rename).
    pub fn save(&self, id: &str, messages: &[String]) -> Result<()> {
        let path = self
            .path(id)
            .with_context(|| format!("invalid session id {id:?}"))?;
        let tmp = self.dir.join(format!(".{id}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec(messages)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_unknown_ids() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("fake-agent-store-{}", uuid::Uuid::new_v4()));
        let store = Store::new(&dir)?;
        assert_eq!(store.load("nope")?, None);
        assert_eq!(store.load("../etc/passwd")?, None);
        assert!(store.save("../x", &[]).is_err());
        store.save("s1", &["a".to_owned(), "b".to_owned()])?;
        assert_eq!(
            store.load("s1")?,
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
