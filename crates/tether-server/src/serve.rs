//! The accept loop: hyper's HTTP/1.1 connections with a header read time-out, so a
//! client that connects and stays silent, sends half its headers, or holds an idle
//! keep-alive connection is closed instead of being kept forever; graceful shutdown that
//! ends the SSE streams and waits, bounded, for requests in flight.
//!
//! axum's own `serve` sets no timer, so hyper's header time-out never applies there. It
//! also sniffs each connection for the HTTP/2 preface first, a wait with no time-out at
//! all; tether speaks plain HTTP/1.1 only (no browser speaks HTTP/2 without TLS).
//!
//! Unauthenticated clients cannot hold the server (issue 24 S2): every write has a
//! time-out (`tokio-io-timeout`), connections are counted and capped, and past the cap
//! minus a reserve the unauthenticated routes that read a body first (the webhooks)
//! answer 503 at once, so authenticated clients keep room.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt as _;

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
    let load = Load {
        open: Arc::new(AtomicUsize::new(0)),
        busy_at: limits
            .max_connections
            .saturating_sub(limits.reserved_connections)
            .max(1),
    };
    let router = router
        .layer(axum::Extension(sse::Closing(closing_rx)))
        .layer(axum::Extension(load.clone()));
    let mut refusing = false;
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if load.open.load(Ordering::SeqCst) >= limits.max_connections {
            // Full: closed at once (the file descriptor comes back), said once per run.
            if !std::mem::replace(&mut refusing, true) {
                tracing::warn!(
                    max = limits.max_connections,
                    "too many connections; closing new ones until some end"
                );
            }
            drop(stream);
            continue;
        }
        if std::mem::take(&mut refusing) {
            tracing::info!("accepting connections again");
        }
        let counted = Counted::new(&load.open);
        let mut timed = tokio_io_timeout::TimeoutStream::new(stream);
        timed.set_write_timeout(Some(limits.write_timeout));
        let io = TokioIo::new(Box::pin(timed));
        // Handlers and the token guard see where the request came from.
        let peer = axum::extract::ConnectInfo(peer);
        let service = TowerToHyperService::new(router.clone().map_request(
            move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(peer);
                req
            },
        ));
        let conn = graceful.watch(builder.serve_connection(io, service));
        tokio::spawn(async move {
            let _counted = counted;
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

/// How many connections are open, and from how many on unauthenticated requests are
/// refused.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    open: Arc<AtomicUsize>,
    busy_at: usize,
}

/// One open connection, counted until dropped.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(open: &Arc<AtomicUsize>) -> Counted {
        open.fetch_add(1, Ordering::SeqCst);
        Counted(Arc::clone(open))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Past the cap minus the reserve, an unauthenticated route answers 503 (and closes the
/// connection) before reading anything.
pub(crate) async fn refuse_when_busy(
    load: Option<axum::Extension<Load>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Some(axum::Extension(load)) = load
        && load.open.load(Ordering::SeqCst) > load.busy_at
    {
        let mut resp = crate::error::ApiError::new(
            tether_proto::ErrorCode::ServerBusy,
            "too many connections; try again shortly",
        )
        .into_response();
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return resp;
    }
    next.run(req).await
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
