//! A real PostgreSQL for tests: one database per test (`CREATE DATABASE`), so tests run
//! in parallel, on the server named by `TETHER_TEST_DATABASE_URL` (`scripts/test` starts
//! one for the whole run with the `tether-test-pg` binary) or, when that is not set, on a
//! private cluster this process starts (Debian's `initdb` + `pg_ctl` in a temporary
//! directory on a free loopback port; `apt-get install -y postgresql` when missing; as
//! root run as the `postgres` user, since PostgreSQL refuses to run as root). The private
//! cluster stops when the last database of it is dropped, so nothing is left running.
//!
//! [`Backend::from_env`] reads `TETHER_TEST_STORE` (`postgres` or `sqlite`, the default),
//! which `Daemon` uses to run the end-to-end suite on either backend.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};

use anyhow::{Context, Result, bail};
use sqlx::Connection;

/// The variable naming an admin URL of a running server (`postgres://user@host:port/db`).
pub const URL_VAR: &str = "TETHER_TEST_DATABASE_URL";
/// The variable choosing the store backend of daemons started by tests.
pub const STORE_VAR: &str = "TETHER_TEST_STORE";

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// `TETHER_TEST_STORE=postgres` → PostgreSQL; anything else (or unset) → SQLite.
    pub fn from_env() -> Backend {
        match std::env::var(STORE_VAR).as_deref() {
            Ok("postgres") | Ok("postgresql") | Ok("pg") => Backend::Postgres,
            _ => Backend::Sqlite,
        }
    }
}

/// A private PostgreSQL cluster in a temporary directory; stopped when dropped.
#[derive(Debug)]
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// Removed after the server stopped (`None`: the directory belongs to the caller).
    _tmp: Option<tempfile::TempDir>,
    /// Whether dropping stops it (a server started for a whole test run outlives us).
    stop_on_drop: bool,
    /// The server's options (`pg_ctl -o`), to start it again on the same port.
    options: String,
    as_postgres: bool,
}

/// How [`PgServer::stop`] shuts the server down (`pg_ctl -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Ends every session and shuts down cleanly (a routine restart).
    Fast,
    /// Kills every process without a checkpoint (a crash; recovery at the next start).
    Immediate,
}

impl PgServer {
    /// Starts a cluster in a fresh temporary directory.
    pub fn start() -> Result<PgServer> {
        PgServer::start_tmp(false)
    }

    /// Like [`PgServer::start`], but every commit is durable against a crash of the
    /// server itself (`synchronous_commit` on), for tests that stop it with
    /// [`StopMode::Immediate`] and count what was stored.
    pub fn start_durable() -> Result<PgServer> {
        PgServer::start_tmp(true)
    }

    /// Like [`PgServer::start`], but listening on every address and trusting clients
    /// from `10.0.0.0/8` too: for nodes in network namespaces of their own (`netns`).
    pub fn start_reachable() -> Result<PgServer> {
        PgServer::start_tmp_with(false, true)
    }

    fn start_tmp(durable: bool) -> Result<PgServer> {
        PgServer::start_tmp_with(durable, false)
    }

    fn start_tmp_with(durable: bool, reachable: bool) -> Result<PgServer> {
        let tmp = tempfile::Builder::new()
            .prefix("tether-pg-")
            .tempdir()
            .context("tempdir")?;
        let mut server = PgServer::start_in_full(tmp.path(), durable, reachable)?;
        server._tmp = Some(tmp);
        server.stop_on_drop = true;
        Ok(server)
    }

    /// Starts a cluster in `dir` (created, must be empty) that keeps running after this
    /// value is dropped; [`PgServer::stop_in`] stops it.
    pub fn start_in(dir: &Path) -> Result<PgServer> {
        PgServer::start_in_with(dir, false)
    }

    fn start_in_with(dir: &Path, durable: bool) -> Result<PgServer> {
        PgServer::start_in_full(dir, durable, false)
    }

    fn start_in_full(dir: &Path, durable: bool, reachable: bool) -> Result<PgServer> {
        let bin = bin_dir()?;
        std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let as_postgres = is_root();
        if as_postgres {
            chown_to_postgres(dir)?;
        }
        let data = dir.join("data");
        run(
            as_postgres,
            Command::new(bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-U", "tether", "--auth=trust", "--no-locale", "-E", "UTF8"])
                .arg("--no-sync"),
        )
        .context("initdb")?;
        if reachable {
            use std::io::Write;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("pg_hba.conf"))
                .context("open pg_hba.conf")?;
            writeln!(hba, "host all all 10.0.0.0/8 trust").context("write pg_hba.conf")?;
        }
        let port = free_port()?;
        // Tests need durability only against tether's crashes, not the server's (a
        // durable server keeps every commit across its own crash; none survives the
        // machine's).
        let options = format!(
            "-c listen_addresses={} -p {port} -k {} -c max_connections=500 \
             -c fsync=off -c synchronous_commit={} -c full_page_writes=off",
            if reachable { "0.0.0.0" } else { "127.0.0.1" },
            dir.display(),
            if durable { "on" } else { "off" }
        );
        let server = PgServer {
            dir: dir.to_path_buf(),
            bin,
            port,
            _tmp: None,
            stop_on_drop: false,
            options,
            as_postgres,
        };
        // For `start_again_in` (another process: a browser test's `tether-test-pg start-again`).
        std::fs::write(dir.join("options"), &server.options).context("write the options")?;
        server.start_again()?;
        Ok(server)
    }

    /// Starts the cluster in `dir` (made by [`PgServer::start_in`], stopped since) again
    /// on its port.
    pub fn start_again_in(dir: &Path) -> Result<()> {
        let options = std::fs::read_to_string(dir.join("options")).context("read the options")?;
        let server = PgServer {
            dir: dir.to_path_buf(),
            bin: bin_dir()?,
            port: 0,
            _tmp: None,
            stop_on_drop: false,
            options,
            as_postgres: is_root(),
        };
        server.start_again()
    }

    /// Starts the (stopped) server again, on the same port with the same options.
    pub fn start_again(&self) -> Result<()> {
        run(
            self.as_postgres,
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-t", "60", "-o", &self.options, "start"]),
        )
        .with_context(|| {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            format!("pg_ctl start; server log:\n{log}")
        })
    }

    /// Stops the server (a database restart or crash, when [`PgServer::start_again`]
    /// follows).
    pub fn stop(&self, mode: StopMode) -> Result<()> {
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        run(
            self.as_postgres,
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", mode, "-w", "stop"]),
        )
    }

    /// Stops the cluster started in `dir` by [`PgServer::start_in`].
    pub fn stop_in(dir: &Path) -> Result<()> {
        let bin = bin_dir()?;
        run(
            is_root(),
            Command::new(bin.join("pg_ctl"))
                .arg("-D")
                .arg(dir.join("data"))
                .args(["-m", "immediate", "-w", "stop"]),
        )
    }

    /// The admin URL (the `postgres` database, user `tether`, no password).
    pub fn url(&self) -> String {
        format!("postgres://tether@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if !self.stop_on_drop {
            return;
        }
        let stopped = run(
            is_root(),
            Command::new(self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-m", "immediate", "-w", "stop"]),
        );
        if let Err(e) = stopped {
            eprintln!(
                "cannot stop the test PostgreSQL in {}: {e:#}",
                self.dir.display()
            );
        }
    }
}

/// One database of its own for a test; dropped (with its connections) when this is.
#[derive(Debug)]
pub struct TestDatabase {
    /// The database's URL, for `Store::connect` or `TETHER_DATABASE_URL`.
    pub url: String,
    admin: String,
    name: String,
    /// The private cluster it lives on, if this process started one.
    _server: Option<Arc<PgServer>>,
}

/// The private cluster shared by this process's tests while any of them holds a database.
static PRIVATE: Mutex<Weak<PgServer>> = Mutex::new(Weak::new());

impl TestDatabase {
    /// Creates a fresh, empty database (see the module header for which server).
    pub async fn create() -> Result<TestDatabase> {
        let (admin, server) = match std::env::var(URL_VAR) {
            Ok(url) if !url.trim().is_empty() => (url.trim().to_string(), None),
            _ => {
                let server = tokio::task::spawn_blocking(private_server)
                    .await
                    .context("start PostgreSQL")??;
                (server.url(), Some(server))
            }
        };
        Self::create_with(admin, server).await
    }

    /// Creates a fresh, empty database on the server at `admin` (a test that stops and
    /// starts its own server, see [`PgServer::start_durable`]).
    pub async fn create_on(admin: &str) -> Result<TestDatabase> {
        Self::create_with(admin.to_owned(), None).await
    }

    async fn create_with(admin: String, server: Option<Arc<PgServer>>) -> Result<TestDatabase> {
        let name = format!("tether_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .with_context(|| format!("connect to {admin}"))?;
        // Template0 with the C collation: text sorts bytewise, as it does in SQLite.
        sqlx::query(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
        ))
        .execute(&mut conn)
        .await
        .with_context(|| format!("create database {name}"))?;
        let _ = conn.close().await;
        Ok(TestDatabase {
            url: with_database(&admin, &name)?,
            admin,
            name,
            _server: server,
        })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop is not async, and may run inside a runtime: drop the database from a
        // thread of its own (a leftover database is harmless, so failures are ignored).
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
                let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                sqlx::query(&sql).execute(&mut conn).await.ok()?;
                conn.close().await.ok()
            })
        });
        let _ = dropped.join();
    }
}

fn private_server() -> Result<Arc<PgServer>> {
    let mut shared = PRIVATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(server) = shared.upgrade() {
        return Ok(server);
    }
    let server = Arc::new(PgServer::start()?);
    *shared = Arc::downgrade(&server);
    Ok(server)
}

/// `admin` with its database (the path) replaced by `name`.
fn with_database(admin: &str, name: &str) -> Result<String> {
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (admin, None),
    };
    let Some((_, rest)) = base.split_once("://") else {
        bail!("{URL_VAR} is not a URL: {admin}");
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let scheme_len = base.len() - rest.len();
    let mut url = format!("{}{authority}/{name}", &base[..scheme_len]);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    Ok(url)
}

/// The newest `/usr/lib/postgresql/<version>/bin`, installing Debian's `postgresql`
/// first when there is none.
fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = newest_bin_dir() {
        return Ok(dir);
    }
    if !is_root() {
        bail!("PostgreSQL is not installed: apt-get install -y postgresql (or set {URL_VAR})");
    }
    let status = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends", "postgresql"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("apt-get install postgresql")?;
    if !status.success() {
        bail!("apt-get install -y postgresql failed ({status})");
    }
    newest_bin_dir().context("postgresql installed, but no /usr/lib/postgresql/*/bin/initdb")
}

fn newest_bin_dir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    // The effective uid, without a libc dependency: `id -u` is in coreutils.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn chown_to_postgres(dir: &Path) -> Result<()> {
    let status = Command::new("chown")
        .arg("postgres:postgres")
        .arg(dir)
        .status()
        .context("chown")?;
    if !status.success() {
        bail!("chown postgres {} failed ({status})", dir.display());
    }
    Ok(())
}

/// Runs `cmd` (as the `postgres` user when `as_postgres`), failing with its output.
fn run(as_postgres: bool, cmd: &mut Command) -> Result<()> {
    let mut full = if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(cmd.get_program());
        c.args(cmd.get_args());
        c
    } else {
        std::mem::replace(cmd, Command::new("true"))
    };
    // Run from a directory the postgres user may enter.
    full.current_dir("/");
    let out = full
        .output()
        .with_context(|| format!("run {:?}", full.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}{}",
            full,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_replaces_the_path() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "x").ok(),
            Some("postgres://u@h:5/x".into())
        );
        assert_eq!(
            with_database("postgres://u@h:5", "x").ok(),
            Some("postgres://u@h:5/x".into())
        );
        assert_eq!(
            with_database("postgres://u@h/p?sslmode=disable", "x").ok(),
            Some("postgres://u@h/x?sslmode=disable".into())
        );
    }
}
