//! The stdio companion (`tether mcp`): an agent starts it as a stdio MCP server; it
//! connects to the daemon's local socket, presents the session token it got in its
//! environment, and then relays bytes both ways.

use std::path::Path;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::socket::{Hello, HelloReply};

/// Why the companion stopped early.
#[derive(Debug)]
pub enum CompanionError {
    Connect(std::io::Error),
    Refused(String),
    Io(std::io::Error),
}

impl std::fmt::Display for CompanionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompanionError::Connect(e) => write!(f, "cannot reach the tether daemon: {e}"),
            CompanionError::Refused(m) => write!(f, "the tether daemon refused the token: {m}"),
            CompanionError::Io(e) => write!(f, "relay failed: {e}"),
        }
    }
}

impl std::error::Error for CompanionError {}

/// Connects, authenticates with `token`, then relays `input` → daemon and daemon →
/// `output` until the daemon side closes (or `input` ends and the daemon is done).
pub async fn relay(
    socket: &Path,
    token: &str,
    mut input: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
) -> Result<(), CompanionError> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(CompanionError::Connect)?;
    let (read, mut write) = stream.into_split();
    let hello = Hello {
        token: token.to_string(),
    };
    let mut line = serde_json::to_vec(&hello).map_err(|e| CompanionError::Io(e.into()))?;
    line.push(b'\n');
    write.write_all(&line).await.map_err(CompanionError::Io)?;
    let mut read = BufReader::new(read);
    let mut reply = String::new();
    read.read_line(&mut reply)
        .await
        .map_err(CompanionError::Io)?;
    let reply: HelloReply = serde_json::from_str(reply.trim())
        .map_err(|e| CompanionError::Refused(format!("unreadable handshake reply: {e}")))?;
    if !reply.ok {
        return Err(CompanionError::Refused(reply.error.unwrap_or_default()));
    }
    let upstream = async {
        let r = tokio::io::copy(&mut input, &mut write).await;
        let _ = write.shutdown().await;
        r
    };
    let downstream = async {
        let r = tokio::io::copy_buf(&mut read, &mut output).await;
        let _ = output.flush().await;
        r
    };
    tokio::pin!(upstream, downstream);
    tokio::select! {
        r = &mut downstream => r.map(|_| ()).map_err(CompanionError::Io),
        r = &mut upstream => {
            r.map_err(CompanionError::Io)?;
            // Input ended: let the daemon finish what it is sending.
            downstream.await.map(|_| ()).map_err(CompanionError::Io)
        }
    }
}
