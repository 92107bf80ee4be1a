//! The accept loop: hyper's HTTP/1.1 connections with a header read time-out, so a
//! client that connects and stays silent, sends half its headers, or holds an idle
//! keep-alive connection is closed instead of being kept forever; graceful shutdown that
//! ends the SSE streams and waits, bounded, for requests in flight.
//!
//! axum's own `serve` sets no timer, so hyper's header time-out never applies there. It
//! also sniffs each connection for the HTTP/2 preface first, a wait with no time-out at
//! all; tether speaks plain HTTP/1.1 only (no browser speaks HTTP/2 without TLS).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use crate::{Limits, sse};

/// How long open connections (SSE streams, slow requests) may take to finish after the
/// shutdown signal before `serve` returns anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting, ends
/// the SSE streams and waits (bounded) for in-flight requests. `limits` gives the header
/// read time-out (the body time-out is a layer of the router, see [`crate::router_with`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let router = router.layer(axum::Extension(sse::Closing(closing_rx)));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                // Time-outs, resets and garbage from clients: not the daemon's problem.
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down the HTTP server");
    let _ = closing_tx.send(true);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing anyway");
    }
    Ok(())
}

/// A failed `accept`: per-connection errors are ignored; anything else (such as running
/// out of file descriptors) is logged and waited out, as hyper's own server did.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!("accept failed: {e}");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
