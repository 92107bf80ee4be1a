//! The API token: 32 random bytes, hex, in `<data_dir>/token` (mode 0600), created on
//! first use and reused afterwards. `TETHER_TOKEN` replaces it when set.
//!
//! `tether token` prints the token the running daemon uses (its `daemon.json` says which
//! kind), not merely the one this process would use.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rand::RngCore;

use crate::config::Settings;
use crate::daemon_record::{self, Found, Identity, TokenSource};

pub const FILE_NAME: &str = "token";

/// The token the server requires.
pub fn resolve(settings: &Settings) -> Result<String> {
    match &settings.token_override {
        Some(token) => Ok(token.trim().to_owned()),
        None => load_or_create(&settings.data_dir),
    }
}

/// What `tether token` prints: the running daemon's token where that can be known.
pub async fn for_command(settings: &Settings) -> Result<String> {
    let running = match daemon_record::find(&settings.data_dir) {
        // A reused pid must not make us refuse: the daemon proves itself (no token sent).
        Found::Running(record) if record.token == TokenSource::Environment => {
            match daemon_record::identify(&record.base_url(), Some(&record.instance_id)).await {
                Identity::Verified => Some(record),
                Identity::Other | Identity::Unreachable => None,
            }
        }
        Found::Running(record) => Some(record),
        Found::None | Found::Stale(_) => None,
    };
    match (running, &settings.token_override) {
        // The daemon reads the token file whatever this shell's TETHER_TOKEN says.
        (Some(record), _) if record.token == TokenSource::File => {
            load_or_create(&settings.data_dir)
        }
        (Some(_), Some(token)) => Ok(token.clone()),
        (Some(record), None) => bail!(
            "the daemon serving this data dir (pid {}, {}) uses a token from its \
             environment (TETHER_TOKEN), not the token file: use that value",
            record.pid,
            record.base_url()
        ),
        (None, _) => resolve(settings),
    }
}

pub fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Reads `<data_dir>/token`, creating the dir and the token when missing (or empty).
pub fn load_or_create(data_dir: &Path) -> Result<String> {
    crate::datadir::prepare(data_dir)?;
    let path = token_path(data_dir);
    if let Some(token) = read(&path)? {
        return Ok(token);
    }
    let token = generate();
    // Write a private temp file, then link it into place: readers never see a partial
    // token, and of two processes starting at once exactly one token wins.
    let tmp = data_dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    file.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    drop(file);
    let linked = match fs::hard_link(&tmp, &path) {
        Ok(()) => Ok(()),
        // An empty or broken file, or another process won the race.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => match read(&path)? {
            Some(existing) => {
                let _ = fs::remove_file(&tmp);
                return Ok(existing);
            }
            None => fs::rename(&tmp, &path),
        },
        Err(e) => Err(e),
    };
    let _ = fs::remove_file(&tmp);
    linked.with_context(|| format!("cannot create {}", path.display()))?;
    tracing::info!(path = %path.display(), "created a new API token");
    Ok(token)
}

/// The stored token, or `None` when the file is missing or empty.
fn read(path: &Path) -> Result<Option<String>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let token = text.trim();
    if token.is_empty() {
        return Ok(None);
    }
    tighten_permissions(path);
    Ok(Some(token.to_owned()))
}

/// A token file readable by others is made private again (with a warning).
fn tighten_permissions(path: &Path) {
    let Ok(meta) = fs::metadata(path) else { return };
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "token file was readable by others; setting mode 0600");
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o600));
    }
}

fn generate() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_reused_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("nested/data");
        let first = load_or_create(&data).unwrap();
        assert_eq!(first.len(), 64);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        let mode = fs::metadata(token_path(&data))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(&data).unwrap(), first);
        // No temp files left behind.
        assert_eq!(fs::read_dir(&data).unwrap().count(), 1);
    }

    #[test]
    fn empty_file_is_replaced_and_open_file_is_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let path = token_path(dir.path());
        fs::write(&path, "\n").unwrap();
        let token = load_or_create(dir.path()).unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(fs::read_to_string(&path).unwrap().trim(), token);

        fs::write(&path, "abc\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load_or_create(dir.path()).unwrap(), "abc");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn tokens_differ() {
        assert_ne!(generate(), generate());
    }
}
