//! A TCP relay that can turn into a black hole, for tests: it forwards every connection
//! to an upstream address until [`BlackHole::swallow`] is set; then it keeps every
//! connection open and passes nothing either way (no data, no FIN, no RST), and new
//! connections are accepted but never answered — what a client sees when the network
//! to its server is cut or the server's host froze, unlike a restart, which closes the
//! sockets. [`BlackHole::release`] forwards again (what was held back on the old
//! connections is dropped, as a cut link would lose it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A relay to one upstream address (dropped: stops accepting).
pub struct BlackHole {
    port: u16,
    swallowing: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    /// Relays `127.0.0.1:<new port>` to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<BlackHole> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let swallowing = Arc::new(AtomicBool::new(false));
        let upstream = upstream.to_owned();
        let flag = swallowing.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream.clone(), flag.clone()));
            }
        });
        Ok(BlackHole {
            port,
            swallowing,
            task,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on nothing passes, on any connection.
    pub fn swallow(&self) {
        self.swallowing.store(true, Ordering::SeqCst);
    }

    /// Traffic passes again (new connections work; old ones stay silent).
    pub fn release(&self) {
        self.swallowing.store(false, Ordering::SeqCst);
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, upstream: String, swallowing: Arc<AtomicBool>) {
    if swallowing.load(Ordering::SeqCst) {
        // Accepted by the kernel, never answered.
        hold(client).await;
        return;
    }
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = pump(&mut cr, &mut sw, swallowing.clone());
    let down = pump(&mut sr, &mut cw, swallowing.clone());
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    // A connection that went silent stays open and silent for good.
    if swallowing.load(Ordering::SeqCst) {
        let _keep = (cr, cw, sr, sw);
        std::future::pending::<()>().await;
    }
}

/// Copies until either side closes, or, once swallowing, stops passing bytes on.
async fn pump<R, W>(from: &mut R, to: &mut W, swallowing: Arc<AtomicBool>)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if swallowing.load(Ordering::SeqCst) {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn hold(client: TcpStream) {
    let _keep = client;
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}
