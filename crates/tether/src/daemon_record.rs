//! `<data_dir>/daemon.json`: the running daemon says where it is. `serve` writes it
//! (0600) once it listens and removes it on a clean exit; `doctor` and `token` read it to
//! find the daemon whatever `--listen` or `TETHER_TOKEN` it was given.
//!
//! The record carries a random instance id that the daemon also reports on its public
//! health route. `doctor` sends the API token only to an address whose health answer
//! carries the same id, so a stale record or another program on the port never gets it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::datadir;

pub const FILE_NAME: &str = "daemon.json";
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the daemon's API token comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// `<data_dir>/token`, as `tether token` prints it.
    File,
    /// `TETHER_TOKEN` in the daemon's environment.
    Environment,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub pid: u32,
    /// The address the daemon is bound to.
    pub listen: SocketAddr,
    pub instance_id: String,
    pub token: TokenSource,
    pub version: String,
}

impl DaemonRecord {
    pub fn new(listen: SocketAddr, token: TokenSource) -> DaemonRecord {
        let mut bytes = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        DaemonRecord {
            pid: std::process::id(),
            listen,
            instance_id: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            token,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// Where a client reaches the daemon: a wildcard bind is reached over loopback.
    pub fn connect_addr(&self) -> SocketAddr {
        let ip = match self.listen.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        SocketAddr::new(ip, self.listen.port())
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.connect_addr())
    }
}

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Writes the record; the returned guard removes it when dropped (a clean exit).
pub fn publish(data_dir: &Path, record: &DaemonRecord) -> Result<Published> {
    let file = path(data_dir);
    let json = serde_json::to_vec_pretty(record).context("cannot encode the daemon record")?;
    datadir::write_private(&file, &json)?;
    Ok(Published { path: file })
}

/// Removes `daemon.json` on drop.
#[derive(Debug)]
pub struct Published {
    path: PathBuf,
}

impl Drop for Published {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What the data dir says about a daemon.
#[derive(Debug)]
pub enum Found {
    /// No record: no daemon has this data dir (or it was never started).
    None,
    /// A record whose process is gone (killed without clean-up).
    Stale(DaemonRecord),
    /// A record whose process is alive.
    Running(DaemonRecord),
}

/// Reads the record and checks its pid; an unreadable or garbled file counts as none.
pub fn find(data_dir: &Path) -> Found {
    let Ok(text) = std::fs::read(path(data_dir)) else {
        return Found::None;
    };
    let Ok(record) = serde_json::from_slice::<DaemonRecord>(&text) else {
        return Found::None;
    };
    if datadir::process_alive(record.pid) {
        Found::Running(record)
    } else {
        Found::Stale(record)
    }
}

/// What answered on a daemon's address.
#[derive(Debug)]
pub enum Identity {
    /// Health answered with the record's instance id: our daemon.
    Verified,
    /// Something answered health, with another (or no) instance id.
    Other,
    /// Nothing usable answered.
    Unreachable,
}

/// Asks `base_url`'s public health route who it is, without any credential.
pub async fn identify(base_url: &str, instance_id: Option<&str>) -> Identity {
    let Ok(client) = reqwest::Client::builder().timeout(HEALTH_TIMEOUT).build() else {
        return Identity::Unreachable;
    };
    let answer = match client.get(format!("{base_url}/api/v1/health")).send().await {
        Ok(resp) if resp.status().is_success() => resp.json::<tether_proto::Health>().await,
        _ => return Identity::Unreachable,
    };
    match answer {
        Ok(health) if instance_id.is_some() && health.instance_id.as_deref() == instance_id => {
            Identity::Verified
        }
        Ok(_) | Err(_) => Identity::Other,
    }
}
