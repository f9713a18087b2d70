//! A file server over loopback for the model downloader's tests: one file at
//! `/models/{name}`, served whole, from a byte range, cut, held or without range support as
//! the test says ([`Mode`]), with what each request asked and was sent recorded.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How the server sends the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Whole, honouring a range.
    Whole,
    /// Closes the connection once the file's first N bytes are sent.
    CutAt(u64),
    /// Sends nothing more after the file's first N bytes until the mode changes (then the rest
    /// as the new mode says), never closing meanwhile.
    HoldAt(u64),
    /// Always the whole file with 200, whatever range was asked.
    IgnoringRanges,
}

/// The server; clones share it.
#[derive(Clone)]
pub struct FileServer {
    body: Bytes,
    mode: Arc<watch::Sender<Mode>>,
    /// The Range header of each request.
    ranges: Arc<Mutex<Vec<Option<String>>>>,
    /// Bytes of the file handed to the connection, per request.
    sent: Arc<Mutex<Vec<u64>>>,
    url: String,
}

impl FileServer {
    /// Serves `body` as `/models/{name}` on a free loopback port.
    pub async fn start(body: Vec<u8>, name: &str) -> std::io::Result<FileServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/models/{name}", listener.local_addr()?);
        let server = FileServer {
            body: Bytes::from(body),
            mode: Arc::new(watch::Sender::new(Mode::Whole)),
            ranges: Arc::default(),
            sent: Arc::default(),
            url,
        };
        let app = axum::Router::new()
            .route("/models/{name}", axum::routing::get(serve))
            .with_state(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(server)
    }

    /// The file's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The file served.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// How the next bytes are sent (a held connection goes on as this says).
    pub fn mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// The Range header of each request so far.
    pub fn ranges(&self) -> Vec<Option<String>> {
        self.ranges.lock().unwrap().clone()
    }

    /// Bytes handed out per request.
    pub fn sent_per_request(&self) -> Vec<u64> {
        self.sent.lock().unwrap().clone()
    }
}

async fn serve(State(server): State<FileServer>, headers: HeaderMap) -> Response {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    server.ranges.lock().unwrap().push(range.clone());
    let request = {
        let mut sent = server.sent.lock().unwrap();
        sent.push(0);
        sent.len() - 1
    };
    let mut mode = server.mode.subscribe();
    let ignoring = *mode.borrow() == Mode::IgnoringRanges;
    let len = server.body.len() as u64;
    let from = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|_| !ignoring);
    if from.is_some_and(|from| from >= len) {
        return Response::builder()
            .status(StatusCode::RANGE_NOT_SATISFIABLE)
            .header(header::CONTENT_RANGE, format!("bytes */{len}"))
            .body(Body::empty())
            .unwrap();
    }
    let start = from.unwrap_or(0);
    let mut response = Response::builder().header(header::CONTENT_LENGTH, len - start);
    if let Some(from) = from {
        response = response.status(StatusCode::PARTIAL_CONTENT).header(
            header::CONTENT_RANGE,
            format!("bytes {from}-{}/{len}", len - 1),
        );
    }
    let sent = server.sent.clone();
    let body = async_stream::stream! {
        // Offsets in the file.
        let mut at = start;
        while at < len {
            let now = *mode.borrow_and_update();
            let stop = match now {
                Mode::CutAt(n) | Mode::HoldAt(n) => n.max(start),
                _ => len,
            };
            if at >= stop {
                match now {
                    Mode::CutAt(_) => {
                        yield Err(std::io::Error::other("cut"));
                        break;
                    }
                    _ => {
                        // Held until the test says otherwise (a server gone quiet).
                        if mode.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                        continue;
                    }
                }
            }
            let end = (at + 64 * 1024).min(stop).min(len);
            sent.lock().unwrap()[request] += end - at;
            yield Ok::<Bytes, std::io::Error>(server.body.slice(at as usize..end as usize));
            at = end;
        }
    };
    response.body(Body::from_stream(body)).unwrap()
}
