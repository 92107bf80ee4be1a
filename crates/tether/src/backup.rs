//! `tether backup <dir>` and `tether restore <dir>` (issue 31) for the embedded store.
//! A backup is a directory: `tether.db` (a consistent copy, made while the daemon may
//! run: `tether_store::backup_sqlite`), the attachment files, the data directory's
//! `token` and `node_id`, and `manifest.json`. A restore needs the daemon stopped; it
//! checks the copy, keeps what it replaces in `before-restore-<time>/` of the data
//! directory, and puts the backup in place. PostgreSQL stores use `pg_dump`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::config::Settings;

/// The files of a backup besides the store and the attachments.
const KEPT_FILES: [&str; 2] = ["token", "node_id"];
const MANIFEST: &str = "manifest.json";
const DB_FILE: &str = "tether.db";
const ATTACHMENTS: &str = "attachments";

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    tether_version: String,
    created_at_ms: i64,
    migration: i64,
    conversations: i64,
    attachment_files: u64,
}

fn sqlite_only(settings: &Settings, what: &str) -> Result<()> {
    if settings.database_url.is_some() {
        bail!(
            "the store is PostgreSQL: {what} it with PostgreSQL's tools (pg_dump / pg_restore, \
             or base backups; see the README, \"Operating tether\")"
        );
    }
    Ok(())
}

/// Where the attachment files live on this install.
fn attachments_of(settings: &Settings) -> PathBuf {
    settings
        .attachments_dir
        .clone()
        .unwrap_or_else(|| settings.data_dir.join(ATTACHMENTS))
}

/// Makes a backup in `dest` (a new or empty directory); the text to print.
pub async fn backup(settings: &Settings, dest: &Path) -> Result<String> {
    sqlite_only(settings, "back up")?;
    let started = Instant::now();
    let db = settings.data_dir.join(DB_FILE);
    if !db.is_file() {
        bail!("no store at {} (nothing to back up)", db.display());
    }
    if dest.exists() && std::fs::read_dir(dest)?.next().is_some() {
        bail!("{} is not empty: give a new directory", dest.display());
    }
    std::fs::create_dir_all(dest).with_context(|| format!("cannot create {}", dest.display()))?;
    crate::datadir::make_private(dest, 0o700)?;
    let info = tether_store::backup_sqlite(&db, &dest.join(DB_FILE))
        .await
        .context("cannot copy the store")?;
    crate::datadir::make_private(&dest.join(DB_FILE), 0o600)?;
    let files = copy_tree(&attachments_of(settings), &dest.join(ATTACHMENTS))?;
    for name in KEPT_FILES {
        let from = settings.data_dir.join(name);
        if from.is_file() {
            crate::datadir::write_private(&dest.join(name), &std::fs::read(&from)?)?;
        }
    }
    let manifest = Manifest {
        format: 1,
        tether_version: tether_store::tether_version(),
        created_at_ms: tether_store::now_ms(),
        migration: info.migration,
        conversations: info.conversations,
        attachment_files: files,
    };
    crate::datadir::write_private(&dest.join(MANIFEST), &serde_json::to_vec_pretty(&manifest)?)?;
    Ok(format!(
        "backed up {} conversations (store {} KiB, schema migration {}) and {} attachment \
         files to {} in {:.1} s\n",
        info.conversations,
        info.bytes / 1024,
        info.migration,
        files,
        dest.display(),
        started.elapsed().as_secs_f64()
    ))
}

/// Restores the backup in `src` into the data directory (the daemon must be stopped).
pub async fn restore(settings: &Settings, src: &Path) -> Result<String> {
    sqlite_only(settings, "restore")?;
    let manifest: Manifest =
        serde_json::from_slice(&std::fs::read(src.join(MANIFEST)).with_context(|| {
            format!("{} is not a tether backup (no {MANIFEST})", src.display())
        })?)
        .with_context(|| format!("cannot read {}", src.join(MANIFEST).display()))?;
    let info = tether_store::check_sqlite(&src.join(DB_FILE))
        .await
        .context("the backup's store does not pass its check")?;
    crate::datadir::prepare(&settings.data_dir)?;
    // No daemon may run on the data directory meanwhile.
    let _lock = crate::datadir::lock(&settings.data_dir)?;
    let aside = settings
        .data_dir
        .join(format!("before-restore-{}", tether_store::now_ms()));
    std::fs::create_dir_all(&aside)?;
    crate::datadir::make_private(&aside, 0o700)?;
    let attachments = attachments_of(settings);
    let mut moved = Vec::new();
    for name in [DB_FILE, "tether.db-wal", "tether.db-shm"]
        .into_iter()
        .chain(KEPT_FILES)
    {
        let from = settings.data_dir.join(name);
        if from.exists() {
            std::fs::rename(&from, aside.join(name))?;
            moved.push(name);
        }
    }
    if attachments.exists() && src.join(ATTACHMENTS).exists() {
        std::fs::rename(&attachments, aside.join(ATTACHMENTS))
            .with_context(|| format!("cannot move {} aside", attachments.display()))?;
    }
    std::fs::copy(src.join(DB_FILE), settings.data_dir.join(DB_FILE))?;
    crate::datadir::make_private(&settings.data_dir.join(DB_FILE), 0o600)?;
    for name in KEPT_FILES {
        if src.join(name).is_file() {
            crate::datadir::write_private(
                &settings.data_dir.join(name),
                &std::fs::read(src.join(name))?,
            )?;
        }
    }
    let files = copy_tree(&src.join(ATTACHMENTS), &attachments)?;
    Ok(format!(
        "restored {} conversations (schema migration {}, backed up by tether {}) and {} \
         attachment files into {}; what was there is kept in {}\n",
        info.conversations,
        manifest.migration,
        manifest.tether_version,
        files,
        settings.data_dir.display(),
        aside.display()
    ))
}

/// Copies the files under `from` to `to` (none when `from` does not exist); how many.
fn copy_tree(from: &Path, to: &Path) -> Result<u64> {
    if !from.is_dir() {
        return Ok(0);
    }
    std::fs::create_dir_all(to)?;
    crate::datadir::make_private(to, 0o700)?;
    let mut n = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            n += copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
            crate::datadir::make_private(&target, 0o600)?;
            n += 1;
        }
    }
    Ok(n)
}
