//! The server's connections, bounded: at most [`OPEN_LIMIT`] open at once; one that sends no
//! complete request head within [`HEAD_TIMEOUT`] is closed; and when a new connection comes at the
//! limit, the oldest connection not answering a request is closed for it (one that is answering
//! is never cut). So another program on this machine that opens a thousand connections and sends
//! nothing cannot starve Jarvis of its own model: its requests are still answered at once.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use futures::StreamExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tower_service::Service as _;

/// The most connections open at once.
pub const OPEN_LIMIT: usize = 32;

/// How long a connection may take to send a request's head (its first, or the next on a kept
/// connection) before it is closed.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// One open connection: how many of its requests are being answered, whether it has sent one,
/// and what closes it.
struct Open {
    answering: Arc<AtomicUsize>,
    served: Arc<AtomicBool>,
    close: oneshot::Sender<()>,
}

#[derive(Default)]
struct Connections {
    next: u64,
    /// By age: the oldest first.
    open: BTreeMap<u64, Open>,
}

/// Counts a request as being answered until its response body is done (or dropped).
struct Answering(Arc<AtomicUsize>);

impl Answering {
    fn new(count: &Arc<AtomicUsize>) -> Answering {
        count.fetch_add(1, Ordering::SeqCst);
        Answering(count.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves `app` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, app: Router) -> std::io::Result<()> {
    let connections = Arc::new(Mutex::new(Connections::default()));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors, for one: try again in a moment rather than spin.
                tracing::warn!(%err, "a connection could not be accepted");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let answering = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicBool::new(false));
        let (close, closed) = oneshot::channel();
        let id = {
            let mut all = connections.lock().unwrap_or_else(|p| p.into_inner());
            if all.open.len() >= OPEN_LIMIT {
                // The oldest that never sent a request goes first, then the oldest kept open
                // after its answers (a client's pool, Jarvis's own among them).
                let idle = |served: bool| {
                    all.open
                        .iter()
                        .find(|(_, c)| {
                            c.answering.load(Ordering::SeqCst) == 0
                                && c.served.load(Ordering::SeqCst) == served
                        })
                        .map(|(id, _)| *id)
                };
                let idle = idle(false).or_else(|| idle(true));
                match idle.and_then(|id| all.open.remove(&id)) {
                    Some(oldest) => {
                        tracing::debug!("the oldest idle connection is closed for a new one");
                        let _ = oldest.close.send(());
                    }
                    None => {
                        // Every one is being answered: the newcomer is turned away.
                        tracing::warn!(
                            "{OPEN_LIMIT} connections are being answered; one more is refused"
                        );
                        continue;
                    }
                }
            }
            let id = all.next;
            all.next += 1;
            all.open.insert(
                id,
                Open {
                    answering: answering.clone(),
                    served: served.clone(),
                    close,
                },
            );
            id
        };
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                served.store(true, Ordering::SeqCst);
                let busy = Answering::new(&answering);
                let mut app = app.clone();
                async move {
                    let response = match app.call(request.map(Body::new)).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    };
                    // Answering until the body is sent whole: a streamed reply is never cut for a
                    // newcomer.
                    Ok::<_, Infallible>(response.map(|body| {
                        Body::from_stream(body.into_data_stream().map(move |chunk| {
                            let _busy = &busy;
                            chunk
                        }))
                    }))
                }
            });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connections = connections.clone();
        tokio::spawn(async move {
            tokio::select! {
                result = connection => {
                    if let Err(err) = result {
                        tracing::debug!(%err, "a connection ended");
                    }
                }
                _ = closed => {}
            }
            connections
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .open
                .remove(&id);
        });
        // The new connection reads what it was sent before more are accepted, so a client that
        // sent its request at once (Jarvis does) is being answered, not idle, when a flood comes.
        tokio::task::yield_now().await;
    }
}
