//! The `Host` check (DNS-rebinding defence). A web page on `evil.example` whose name is
//! re-pointed at 127.0.0.1 can make the browser talk to tether, but the browser still
//! sends `Host: evil.example`; refusing names tether does not know keeps such pages away
//! from the API and the page. Allowed: loopback names (`localhost`, `*.localhost`, which
//! browsers never resolve elsewhere), loopback addresses, the configured listen address,
//! and the names in `[server] allowed_hosts` (`"*"` turns the check off, for deployments
//! behind a proxy that rewrites names). A request without any host (HTTP/1.0) comes from
//! no browser and passes. The webhooks (`/hooks/*`) are exempt: they come from the
//! platforms through proxies under public names and carry their own secret or signature,
//! and no browser holds a credential for them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use tether_proto::ErrorCode;

use crate::error::ApiError;

/// Which `Host` headers the daemon answers (by default: loopback names and addresses).
#[derive(Debug, Clone, Default)]
pub struct HostPolicy {
    /// The address tether listens on (allowed unless it is 0.0.0.0 or ::).
    pub listen: Option<SocketAddr>,
    /// Extra host names or `host:port` pairs; `"*"` allows every host.
    pub allowed_hosts: Vec<String>,
}

impl HostPolicy {
    /// Whether a request naming `authority` (`host[:port]`) is answered.
    pub fn admits(&self, authority: &str) -> bool {
        let authority = authority.trim().to_ascii_lowercase();
        let host = host_of(&authority);
        if host == "localhost" || host.ends_with(".localhost") {
            return true;
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            let listen = self.listen.map(|a| a.ip()).filter(|a| !a.is_unspecified());
            if ip.is_loopback() || Some(ip) == listen {
                return true;
            }
        }
        self.allowed_hosts.iter().any(|allowed| {
            let allowed = allowed.trim().to_ascii_lowercase();
            allowed == "*" || allowed == host || allowed == authority
        })
    }
}

/// `host:port` → `host`; `[::1]:80` → `::1`.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match authority.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => authority,
    }
}

/// Refuses requests whose `Host` (or HTTP/2 `:authority`) the policy does not admit.
pub(crate) async fn check(
    State(policy): State<Arc<HostPolicy>>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if req.uri().path().starts_with("/hooks/") {
        return Ok(next.run(req).await);
    }
    let authority = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    match authority {
        Some(a) if !policy.admits(&a) => {
            warn_foreign(&a);
            Err(ApiError::new(
                ErrorCode::HostNotAllowed,
                format!(
                    "Host {a:?} is not allowed here; add it to `allowed_hosts` in the \
                     `[server]` section of the config if tether is reached by that name"
                ),
            ))
        }
        _ => Ok(next.run(req).await),
    }
}

/// A WARN for a foreign `Host`, at most once a minute (the next says how many were held
/// back): anyone who can reach the port can send them (issue 24 S10).
fn warn_foreign(host: &str) {
    static THROTTLE: std::sync::Mutex<tether_core::Throttle> =
        std::sync::Mutex::new(tether_core::Throttle::new(60_000));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let admitted = THROTTLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .admit(now);
    if let Some(held_back) = admitted {
        tracing::warn!(host, held_back, "request for a foreign Host refused");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_listen_address_and_configured_names_are_admitted() {
        let p = HostPolicy {
            listen: Some("192.168.1.5:7878".parse().unwrap()),
            allowed_hosts: vec!["tether.example.org".into(), "proxy:8443".into()],
        };
        for ok in [
            "localhost",
            "LOCALHOST:7878",
            "app.localhost:1",
            "127.0.0.1:7878",
            "127.1.2.3",
            "[::1]:7878",
            "::1",
            "192.168.1.5:7878",
            "tether.example.org",
            "Tether.Example.Org:443",
            "proxy:8443",
        ] {
            assert!(p.admits(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "localhost.evil.example",
            "192.168.1.6",
            "proxy:80",
            "[::2]:7878",
            "",
        ] {
            assert!(!p.admits(bad), "{bad}");
        }
        let any = HostPolicy {
            listen: Some("0.0.0.0:7878".parse().unwrap()),
            allowed_hosts: vec!["*".into()],
        };
        assert!(any.admits("evil.example"));
        let unspecified = HostPolicy {
            listen: Some("0.0.0.0:7878".parse().unwrap()),
            allowed_hosts: vec![],
        };
        assert!(!unspecified.admits("0.0.0.0"));
    }
}
