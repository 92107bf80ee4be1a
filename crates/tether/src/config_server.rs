//! `[server]` of the config file: the HTTP server's time-outs and the host names it
//! answers besides loopback and the listen address (DNS-rebinding defence; see
//! `tether_server::HostPolicy`).
//!
//! ```toml
//! [server]
//! allowed_hosts = ["tether.example.org"]  # names a proxy forwards; "*" turns the check off
//! header_read_timeout_secs = 10           # headers must arrive within this (and idle keep-alive)
//! body_read_timeout_secs = 15             # a request body may pause this long between chunks
//! unauthenticated_deadline_secs = 30      # a whole webhook request, body included
//! write_timeout_secs = 30                 # a write to a client that makes no progress
//! max_connections = 1024                  # at most (and below the open-file limit)
//! reserved_connections = 64               # of those, kept for authenticated clients
//! upload_deadline_secs = 300              # a whole attachment upload, body included
//! max_uploads = 4                         # uploads read at once (each held in memory)
//! token_failures_per_minute = 20          # refused tokens from one address before it waits (0: off)
//! drain_grace_secs = 30                   # on SIGTERM / `tether drain`: running turns may finish this long
//! ```

use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use tether_server::Limits;

/// `[server]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    pub allowed_hosts: Option<Vec<String>>,
    pub header_read_timeout_secs: Option<u64>,
    pub body_read_timeout_secs: Option<u64>,
    pub unauthenticated_deadline_secs: Option<u64>,
    pub write_timeout_secs: Option<u64>,
    pub max_connections: Option<usize>,
    pub reserved_connections: Option<usize>,
    pub upload_deadline_secs: Option<u64>,
    pub max_uploads: Option<usize>,
    pub token_failures_per_minute: Option<u32>,
    pub drain_grace_secs: Option<u64>,
}

/// `[server]` resolved.
#[derive(Debug, Clone, Default)]
pub struct ServerSettings {
    pub limits: Limits,
    pub allowed_hosts: Vec<String>,
    /// How long a draining node lets running turns finish (issue 31; 0: stop at once).
    pub drain_grace: Duration,
}

/// `drain_grace_secs`'s default: most turns of an agent end within it.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(30);

pub fn resolve(file: Option<ServerFile>) -> Result<ServerSettings> {
    let file = file.unwrap_or_default();
    let defaults = Limits::default();
    let secs = |name: &str, value: Option<u64>, default: Duration| -> Result<Duration> {
        match value {
            None => Ok(default),
            Some(0) => bail!("[server] {name} must be greater than 0"),
            Some(s) => Ok(Duration::from_secs(s)),
        }
    };
    let allowed_hosts = file.allowed_hosts.unwrap_or_default();
    if let Some(bad) = allowed_hosts
        .iter()
        .find(|h| h.trim().is_empty() || h.contains('/'))
    {
        bail!(
            "[server] allowed_hosts: {bad:?} is not a host name (write it without a scheme or path)"
        );
    }
    let max_connections = file.max_connections.unwrap_or(defaults.max_connections);
    let reserved_connections = file
        .reserved_connections
        .unwrap_or(defaults.reserved_connections);
    if max_connections < 2 || reserved_connections >= max_connections {
        bail!(
            "[server] max_connections must be at least 2 and more than reserved_connections \
             (got {max_connections} and {reserved_connections})"
        );
    }
    Ok(ServerSettings {
        limits: Limits {
            header_read_timeout: secs(
                "header_read_timeout_secs",
                file.header_read_timeout_secs,
                defaults.header_read_timeout,
            )?,
            body_read_timeout: secs(
                "body_read_timeout_secs",
                file.body_read_timeout_secs,
                defaults.body_read_timeout,
            )?,
            unauthenticated_deadline: secs(
                "unauthenticated_deadline_secs",
                file.unauthenticated_deadline_secs,
                defaults.unauthenticated_deadline,
            )?,
            write_timeout: secs(
                "write_timeout_secs",
                file.write_timeout_secs,
                defaults.write_timeout,
            )?,
            max_connections,
            reserved_connections,
            upload_deadline: secs(
                "upload_deadline_secs",
                file.upload_deadline_secs,
                defaults.upload_deadline,
            )?,
            max_uploads: match file.max_uploads {
                Some(0) => bail!("[server] max_uploads must be greater than 0"),
                n => n.unwrap_or(defaults.max_uploads),
            },
            token_failures_per_minute: file
                .token_failures_per_minute
                .unwrap_or(defaults.token_failures_per_minute),
            ..defaults
        },
        allowed_hosts,
        drain_grace: file
            .drain_grace_secs
            .map_or(DEFAULT_DRAIN_GRACE, Duration::from_secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let s = resolve(None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.limits.header_read_timeout, Duration::from_secs(10));
        assert!(s.allowed_hosts.is_empty());
        let zero = ServerFile {
            body_read_timeout_secs: Some(0),
            ..Default::default()
        };
        assert!(resolve(Some(zero)).is_err());
        let url = ServerFile {
            allowed_hosts: Some(vec!["https://x.example".into()]),
            ..Default::default()
        };
        assert!(resolve(Some(url)).is_err());
    }
}
