//! `tether mcp`, the stdio MCP companion an agent starts (it finds the daemon's socket
//! and its session token in the environment, never in argv), and the daemon side of it:
//! the 0700 socket directory and the runtime setting that makes every launched agent get
//! the companion as MCP server `tether`.

use anyhow::{Context, Result, bail};
use tether_runtime::{MCP_SOCKET_ENV, MCP_TOKEN_ENV, McpLaunch, Runtime, RuntimeConfig};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::paths;

/// Runs the companion until the agent closes stdin or the daemon goes away.
pub async fn run() -> Result<()> {
    let Some(socket) = paths::process_env(MCP_SOCKET_ENV) else {
        bail!("{MCP_SOCKET_ENV} is not set: `tether mcp` is started by tether for its agents");
    };
    let Some(token) = paths::process_env(MCP_TOKEN_ENV) else {
        bail!("{MCP_TOKEN_ENV} is not set: `tether mcp` is started by tether for its agents");
    };
    tether_mcp::companion::relay(
        std::path::Path::new(&socket),
        &token,
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .await
    .context("tether mcp")
}

/// The runtime config with the MCP companion injected, and the bound socket. Without a
/// socket (e.g. a data directory path too long for one) agents get no MCP server. `http`:
/// the address the API listens on, whose `/mcp` agents that speak MCP over HTTP reach
/// instead of starting the companion (a wildcard address is reached on loopback).
pub fn runtime_config(
    settings: &Settings,
    node_id: &str,
    http: Option<std::net::SocketAddr>,
) -> (RuntimeConfig, Option<UnixListener>) {
    let mut config = settings.runtime_config(node_id);
    let path = tether_mcp::socket::socket_path(&settings.data_dir);
    let exe = std::env::current_exe().context("cannot locate the tether binary");
    let bound = tether_mcp::socket::bind(&path)
        .with_context(|| format!("cannot listen on {}", path.display()));
    match (exe, bound) {
        (Ok(exe), Ok(listener)) => {
            config.delegation.mcp = Some(McpLaunch {
                command: exe.display().to_string(),
                args: vec!["mcp".to_string()],
                socket: path,
                http_url: http.map(|addr| format!("http://{}/mcp", loopback(addr))),
            });
            (config, Some(listener))
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!("delegation MCP server disabled: {e:#}");
            (config, None)
        }
    }
}

/// `addr`, with a wildcard IP replaced by loopback of the same family.
fn loopback(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

/// Serves the companion socket until the returned token is cancelled.
pub fn serve_socket(listener: Option<UnixListener>, runtime: &Runtime) -> CancellationToken {
    let stop = CancellationToken::new();
    if let Some(listener) = listener {
        tokio::spawn(tether_mcp::socket::serve(
            listener,
            runtime.clone(),
            stop.clone(),
        ));
    }
    stop
}
