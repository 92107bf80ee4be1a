//! The local socket the stdio companion (`tether mcp`) talks to. It lives in a 0700
//! directory under the data directory. A connection starts with one handshake line each
//! way — `{"token": "<session token>"}` then `{"ok": true}` or `{"ok": false, "error"}` —
//! and then carries MCP (newline-delimited JSON-RPC) served for that session.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rmcp::ServiceExt;
use serde::{Deserialize, Serialize};
use tether_runtime::Runtime;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::server::{CallerSource, DelegationServer};

/// Longest accepted handshake line.
const MAX_HANDSHAKE: usize = 4096;

#[derive(Debug, Serialize, Deserialize)]
pub struct Hello {
    pub token: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct HelloReply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `<data_dir>/run/mcp.sock`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("run").join("mcp.sock")
}

/// Creates the socket's directory with mode 0700 (tightening an existing one), removes a
/// stale socket, and binds.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    UnixListener::bind(path)
}

/// Serves companion connections until `stop` is cancelled.
pub async fn serve(listener: UnixListener, runtime: Runtime, stop: CancellationToken) {
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            () = stop.cancelled() => return,
        };
        match conn {
            Ok((stream, _)) => {
                let rt = runtime.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, rt, stop).await {
                        tracing::debug!(error = %e, "MCP companion connection ended");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "MCP socket accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(
    stream: UnixStream,
    runtime: Runtime,
    stop: CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        (&mut read).take(MAX_HANDSHAKE as u64).read_line(&mut line),
    )
    .await??;
    let token = match serde_json::from_str::<Hello>(line.trim()) {
        Ok(h) if n > 0 && runtime.mcp_admits(&h.token) => Some(h.token),
        _ => None,
    };
    let reply = HelloReply {
        ok: token.is_some(),
        error: token
            .is_none()
            .then(|| "unknown or expired MCP token".to_string()),
    };
    let mut out = serde_json::to_vec(&reply)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    let Some(token) = token else {
        return Ok(());
    };
    let server = DelegationServer::new(runtime, CallerSource::Token(token));
    let running = server
        .serve_with_ct((read, write), stop.child_token())
        .await?;
    running.waiting().await?;
    Ok(())
}
