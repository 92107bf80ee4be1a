//! The data directory holds conversation history and the API token, so it is private:
//! the directory is 0700 and every file tether keeps in it is 0600, however it was made
//! (an older version, `tether pair` before the first `serve`, a restored backup). And one
//! daemon at a time owns it: `serve` holds an exclusive `flock` on `tether.lock` for as
//! long as it runs, taken before the store is opened.

use std::fs;
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rustix::fs::{FlockOperation, flock};

/// The database file inside the data dir (opened by `tether_store::Store::open`).
const DB_FILE: &str = "tether.db";
/// SQLite's companions of the database in WAL mode.
const DB_COMPANIONS: [&str; 2] = ["tether.db-wal", "tether.db-shm"];
pub const LOCK_FILE: &str = "tether.lock";

/// Creates the data dir (and missing parents) as 0700, or makes an existing one 0700.
pub fn prepare(data_dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    make_private(data_dir, 0o700)
}

/// Sets `mode` on `path` when it allows more than that (with a warning); a missing path
/// is fine.
pub fn make_private(path: &Path, mode: u32) -> Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
    };
    let current = meta.permissions().mode() & 0o777;
    if current & !mode == 0 {
        return Ok(());
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot make {} private (mode {mode:o})", path.display()))?;
    tracing::warn!(
        path = %path.display(),
        "was mode {current:o}, readable by other users; set to {mode:o}"
    );
    Ok(())
}

/// Makes the database private before SQLite opens it: a missing database is created
/// empty as 0600 (SQLite gives its WAL and shared-memory files the database's mode), and
/// existing files are tightened.
pub fn secure_store_files(data_dir: &Path) -> Result<()> {
    let db = data_dir.join(DB_FILE);
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&db)
    {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", db.display())),
    }
    for name in std::iter::once(DB_FILE).chain(DB_COMPANIONS) {
        make_private(&data_dir.join(name), 0o600)?;
    }
    Ok(())
}

/// Opens the store the way every command should: private dir and files first.
pub async fn open_store(data_dir: &Path) -> Result<tether_store::Store> {
    prepare(data_dir)?;
    secure_store_files(data_dir)?;
    let store = tether_store::Store::open(data_dir)
        .await
        .with_context(|| format!("cannot open the store in {}", data_dir.display()))?;
    // Companions created from an older, looser database before it was tightened.
    for name in DB_COMPANIONS {
        make_private(&data_dir.join(name), 0o600)?;
    }
    Ok(store)
}

/// Opens the store the settings name: the PostgreSQL database of `database_url`, else
/// the SQLite file in the data dir. The data dir is prepared either way (it holds the
/// token, the lock and the attachments).
pub async fn open_configured_store(
    settings: &crate::config::Settings,
) -> Result<tether_store::Store> {
    match &settings.database_url {
        Some(url) => {
            prepare(&settings.data_dir)?;
            let store = tether_store::Store::connect(url).await.with_context(|| {
                format!(
                    "cannot open the store at {}",
                    crate::config_store::redacted(url)
                )
            })?;
            store.set_query_timeout(settings.query_timeout);
            Ok(store)
        }
        None => open_store(&settings.data_dir).await,
    }
}

/// The exclusive hold on a data dir; released when dropped (or when the process dies:
/// the kernel drops `flock` locks with the last descriptor, so a crash leaves none).
#[derive(Debug)]
pub struct DataDirLock {
    _file: fs::File,
}

/// Takes the data dir for this process, or fails naming the daemon that has it.
pub fn lock(data_dir: &Path) -> Result<DataDirLock> {
    let path = data_dir.join(LOCK_FILE);
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    make_private(&path, 0o600)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let holder = holder_pid(&mut file)
                .map_or_else(|| "pid unknown".to_owned(), |pid| format!("pid {pid}"));
            bail!(
                "another tether daemon ({holder}) is already serving data dir {}; stop it \
                 first, or give this one another data dir (TETHER_HOME)",
                data_dir.display()
            );
        }
        Err(e) => {
            return Err(std::io::Error::from(e))
                .with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    // Ours now: record who holds it, for the error above in the next one.
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .and_then(|()| file.flush())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(DataDirLock { _file: file })
}

/// The pid the holder wrote into the lock file (it may not have written it yet).
fn holder_pid(file: &mut fs::File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Whether a process with this pid exists (it may belong to another user).
pub fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// This node's id in a cluster (issue 12): made once per data directory and kept in
/// `<data_dir>/node_id`, so a restarted node knows the conversations it owned.
pub fn node_id(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("node_id");
    match fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    let mut bytes = [0u8; 8];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut bytes);
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_private(&path, id.as_bytes())?;
    Ok(id)
}

/// A private file written in one step: a 0600 temp file renamed into place.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(contents).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write {}", path.display()))
}
