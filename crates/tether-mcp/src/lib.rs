//! tether-mcp: tether's delegation MCP server (rmcp). The five tools of architecture.md §7
//! (`delegate_to_agent`, `get_delegation_status`, `cancel_delegation`,
//! `continue_with_session`, `close_session`) over two transports: a local socket for the
//! stdio companion `tether mcp` (one connection = one agent session, authenticated by
//! the per-session token the agent got in its environment), and streamable HTTP (a
//! tower service the web server mounts at `/mcp`; bearer token).
//!
//! Only the MCP protocol lives here: every decision is made by
//! [`tether_runtime::Runtime`]. Must not depend on a web framework.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod companion;
mod server;
pub mod socket;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tether_runtime::Runtime;
use tokio_util::sync::CancellationToken;

pub use server::{CallerSource, DelegationServer};

/// The streamable HTTP MCP service type.
pub type HttpService = StreamableHttpService<DelegationServer, LocalSessionManager>;

/// The streamable HTTP MCP service (mount it at `/mcp` behind a bearer check and the
/// server's `Host` check). Requests with `api_token` act as an external client; with a
/// session token, as that session.
pub fn http_service(runtime: Runtime, api_token: String, stop: CancellationToken) -> HttpService {
    // Stateless: every request stands alone, so clients survive a daemon restart. rmcp's
    // own Host check knows loopback names only; the server checks every route, `/mcp`
    // included, against one policy that also admits `[server] allowed_hosts` (a proxy's
    // name), so a second, narrower check here would refuse what the policy admits.
    let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    config.cancellation_token = stop;
    config.legacy_session_mode = false;
    config.json_response = true;
    config.sse_keep_alive = Some(Duration::from_secs(15));
    let source = CallerSource::Bearer { api_token };
    StreamableHttpService::new(
        move || Ok(DelegationServer::new(runtime.clone(), source.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Equal contents, in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Whether `headers` carry a token the `/mcp` route admits: the API token, a live
/// session's MCP token or one reserved for a spare agent process.
pub fn admits(runtime: &Runtime, api_token: &str, headers: &http::HeaderMap) -> bool {
    match bearer(headers) {
        Some(t)
            if !api_token.is_empty() && constant_time_eq(t.as_bytes(), api_token.as_bytes()) =>
        {
            true
        }
        Some(t) => runtime.mcp_admits(t),
        None => false,
    }
}
