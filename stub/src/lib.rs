//! A scripted stub LLM server for tests, benchmarks and manual runs.
//!
//! It speaks both streaming wire formats Jarvis uses — Anthropic's Messages API
//! (`POST /v1/messages`) and OpenAI-compatible chat completions
//! (`POST /v1/chat/completions`) — over real HTTP on loopback. Each request takes
//! the next [`Script`] from a queue (or the default script when the queue is empty),
//! so a test says exactly what the "model" does: the text to stream, delta size and
//! pacing, tool calls, an HTTP error with `retry-after`, an `error` event mid-stream,
//! a dropped connection, a stall, a malformed data line.

pub mod files;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use bytes::Bytes;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// Which wire format a request arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wire {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI-compatible chat completions.
    Openai,
}

/// A tool call the scripted model makes after its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id as the provider would give it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON text; streamed in fragments of `delta_chars`.
    pub arguments: String,
}

/// How a scripted stream ends once its text (and tool calls) are written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// A normal end: stop reason, usage, end-of-stream marker.
    #[default]
    Complete,
    /// An `error` event (Anthropic style; OpenAI-compatible servers send `{"error":…}`).
    ErrorEvent {
        /// e.g. `overloaded_error`.
        error_type: String,
        /// e.g. `Overloaded`.
        message: String,
    },
    /// The connection is dropped with the body unfinished.
    Drop,
    /// The server stops writing and keeps the connection open.
    Stall,
    /// A data line whose JSON is broken.
    MalformedJson,
    /// A text delta holding a byte that cannot be UTF-8; then the server stalls.
    InvalidUtf8,
    /// One `data:` line that never ends, written 64 KiB at a time until the client leaves.
    GiantEvent,
    /// Text deltas forever, until the client leaves.
    Endless,
}

/// One scripted response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Script {
    /// Stream a reply.
    Stream {
        /// The text to stream.
        text: String,
        /// Characters per delta (at least 1).
        #[serde(default = "default_delta_chars")]
        delta_chars: usize,
        /// Pause before each delta, in milliseconds.
        #[serde(default)]
        pace_ms: u64,
        /// Tool calls made after the text.
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
        /// Apply `ending` after this many text deltas instead of after all of them.
        #[serde(default)]
        end_after: Option<usize>,
        /// How the stream ends.
        #[serde(default)]
        ending: Ending,
        /// Wait at a gate the test opens (see [`Script::held_after`]).
        #[serde(default)]
        hold: Option<Hold>,
    },
    /// Stream back "You said: " and the last user message (the binary's default).
    Echo {
        /// Characters per delta.
        #[serde(default = "default_delta_chars")]
        delta_chars: usize,
        /// Pause before each delta, in milliseconds.
        #[serde(default)]
        pace_ms: u64,
    },
    /// Answer with an HTTP error status and no stream.
    Status {
        /// The status code, e.g. 429, 529, 500.
        status: u16,
        /// Seconds for the `retry-after` header.
        #[serde(default)]
        retry_after: Option<u64>,
    },
    /// Answer with an HTTP error status whose `retry-after` is an HTTP date, stamped when the
    /// stub answers: `after_secs` from then (whole seconds, as the format has them).
    RetryAtDate {
        /// The status code, e.g. 429.
        status: u16,
        /// Seconds from the answer to the date.
        after_secs: u64,
    },
    /// Answer with any status, headers and body, as a server the project did not write might.
    Raw {
        /// The status code.
        status: u16,
        /// Headers, by name and value.
        #[serde(default)]
        headers: Vec<(String, String)>,
        /// The body.
        #[serde(default)]
        body: String,
    },
    /// Stream deltas whose text is their own index back to back, each flushed as its own
    /// write, noting when each was handed to the connection (for the relay benchmark).
    Numbered {
        /// How many deltas.
        count: usize,
        /// Pause before each delta, in milliseconds (the kill soak's reply is paced).
        #[serde(default)]
        pace_ms: u64,
    },
}

fn default_delta_chars() -> usize {
    4
}

impl Script {
    /// Stream `text` in deltas of four characters with no pause.
    pub fn text(text: impl Into<String>) -> Self {
        Script::Stream {
            text: text.into(),
            delta_chars: 4,
            pace_ms: 0,
            tool_calls: Vec::new(),
            end_after: None,
            ending: Ending::Complete,
            hold: None,
        }
    }

    /// Sets the characters per delta.
    pub fn deltas_of(mut self, chars: usize) -> Self {
        if let Script::Stream { delta_chars, .. } | Script::Echo { delta_chars, .. } = &mut self {
            *delta_chars = chars.max(1);
        }
        self
    }

    /// Sets the pause before each delta.
    pub fn paced(mut self, pause: Duration) -> Self {
        if let Script::Stream { pace_ms, .. }
        | Script::Echo { pace_ms, .. }
        | Script::Numbered { pace_ms, .. } = &mut self
        {
            *pace_ms = pause.as_millis() as u64;
        }
        self
    }

    /// Adds a tool call after the text.
    pub fn tool_call(mut self, id: &str, name: &str, arguments: &str) -> Self {
        if let Script::Stream { tool_calls, .. } = &mut self {
            tool_calls.push(ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: arguments.into(),
            });
        }
        self
    }

    /// Ends the stream with `ending` after `deltas` text deltas.
    pub fn ending_after(mut self, deltas: usize, how: Ending) -> Self {
        if let Script::Stream {
            end_after, ending, ..
        } = &mut self
        {
            *end_after = Some(deltas);
            *ending = how;
        }
        self
    }

    /// Ends the stream with `ending` once all text is written.
    pub fn ending(mut self, how: Ending) -> Self {
        if let Script::Stream { ending, .. } = &mut self {
            *ending = how;
        }
        self
    }

    /// Stops after `deltas` text deltas (at least 1: a reply that has begun) until the test
    /// opens `gate`, sending keep-alives (an Anthropic `ping`, an SSE comment) meanwhile as real
    /// servers do, so the reply runs for as long as the test needs it to and no longer.
    pub fn held_after(mut self, deltas: usize, gate: &Gate) -> Self {
        if let Script::Stream { hold, .. } = &mut self {
            *hold = Some(Hold {
                after: deltas,
                gate: gate.name.clone(),
            });
        }
        self
    }

    /// Any status, headers and body.
    pub fn raw(status: u16, headers: &[(&str, &str)], body: impl Into<String>) -> Self {
        Script::Raw {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.into(),
        }
    }

    /// An HTTP error status, optionally with `retry-after` seconds.
    pub fn status(status: u16, retry_after: Option<u64>) -> Self {
        Script::Status {
            status,
            retry_after,
        }
    }
}

/// A request the stub received, kept for assertions.
#[derive(Debug, Clone)]
pub struct Received {
    /// The wire format (from the path).
    pub wire: Wire,
    /// The request headers.
    pub headers: HeaderMap,
    /// The JSON body.
    pub body: Value,
}

/// Where a scripted stream waits for a [`Gate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    /// After how many text deltas.
    pub after: usize,
    /// The gate's name (a stream whose gate this stub does not know does not wait).
    pub gate: String,
}

#[derive(Default)]
struct GateState {
    /// A stream got to the gate.
    reached: bool,
    /// The test let it through.
    open: bool,
}

/// A point a test holds a scripted stream at and lets it through, so "the reply is still
/// running" is a fact the test controls rather than a pace a loaded machine can outrun.
#[derive(Clone)]
pub struct Gate {
    name: String,
    state: Arc<tokio::sync::watch::Sender<GateState>>,
}

impl Gate {
    /// Waits until a stream is held at the gate (the deltas before it are written).
    pub async fn reached(&self) {
        let mut rx = self.state.subscribe();
        // The sender lives in this gate, so the wait ends only when a stream gets here.
        let _ = rx.wait_for(|g| g.reached).await;
    }

    /// Whether a stream got to the gate.
    pub fn is_reached(&self) -> bool {
        self.state.borrow().reached
    }

    /// Lets the held stream (or the one still coming) through.
    pub fn release(&self) {
        self.state.send_modify(|g| g.open = true);
    }
}

#[derive(Default)]
struct Shared {
    gates: Mutex<std::collections::HashMap<String, Gate>>,
    queue: Mutex<VecDeque<Script>>,
    default: Mutex<Option<Script>>,
    received: Mutex<Vec<Received>>,
    write_times: Mutex<Vec<Instant>>,
    /// What `GET /v1/models` lists (as Ollama and LM Studio answer it); `stub` when unset.
    models: Mutex<Option<Vec<String>>>,
}

/// A running stub server; it stops when dropped.
pub struct Stub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stub {
    /// Starts a stub on an ephemeral loopback port whose default script echoes.
    pub async fn start() -> std::io::Result<Stub> {
        Self::start_on("127.0.0.1:0".parse().expect("literal address")).await
    }

    /// Starts a stub on `addr`.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Stub> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/messages", post(anthropic))
            .route("/v1/chat/completions", post(openai))
            .route("/v1/models", get(models))
            .with_state(shared.clone());
        // Like a real streaming server, write each frame at once rather than waiting on Nagle.
        let listener = listener.tap_io(|tcp| {
            if let Err(err) = tcp.set_nodelay(true) {
                tracing::warn!(%err, "cannot set TCP_NODELAY");
            }
        });
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(%err, "stub server stopped");
            }
        });
        Ok(Stub { addr, shared, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL for `ANTHROPIC_BASE_URL` (requests go to `/v1/messages`).
    pub fn anthropic_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL for `OPENAI_BASE_URL` (requests go to `/chat/completions`).
    pub fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues a script for the next request.
    pub fn push(&self, script: Script) -> &Self {
        lock(&self.shared.queue).push_back(script);
        self
    }

    /// Sets the script used when the queue is empty (echo when unset).
    pub fn set_default(&self, script: Script) {
        *lock(&self.shared.default) = Some(script);
    }

    /// A new gate for [`Script::held_after`].
    pub fn gate(&self) -> Gate {
        let mut gates = lock(&self.shared.gates);
        let gate = Gate {
            name: format!("gate-{}", gates.len() + 1),
            state: Arc::new(tokio::sync::watch::Sender::new(GateState::default())),
        };
        gates.insert(gate.name.clone(), gate.clone());
        gate
    }

    /// Sets the models `GET /v1/models` lists.
    pub fn set_models(&self, names: &[&str]) {
        *lock(&self.shared.models) = Some(names.iter().map(|n| n.to_string()).collect());
    }

    /// The requests received so far.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared.received).clone()
    }

    /// When each numbered delta was handed to the connection, in order.
    pub fn write_times(&self) -> Vec<Instant> {
        lock(&self.shared.write_times).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn anthropic(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    respond(Wire::Anthropic, shared, headers, body)
}

async fn openai(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    respond(Wire::Openai, shared, headers, body)
}

/// The OpenAI-compatible model list, as Ollama's and LM Studio's `/v1/models` answer it.
async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let names = lock(&shared.models)
        .clone()
        .unwrap_or_else(|| vec!["stub".into()]);
    let data: Vec<Value> = names
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "owned_by": "jarvis-stub"}))
        .collect();
    axum::Json(serde_json::json!({"object": "list", "data": data})).into_response()
}

fn respond(wire: Wire, shared: Arc<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(err) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("request body is not JSON: {err}"),
            )
                .into_response()
        }
    };
    let script = lock(&shared.queue)
        .pop_front()
        .or_else(|| lock(&shared.default).clone())
        .unwrap_or(Script::Echo {
            delta_chars: 4,
            pace_ms: 0,
        });
    let last_user = last_user_text(&body);
    lock(&shared.received).push(Received {
        wire,
        headers,
        body,
    });
    match script {
        Script::Status {
            status,
            retry_after,
        } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut resp = (code, error_body(wire, status)).into_response();
            if let Some(secs) = retry_after {
                resp.headers_mut()
                    .insert("retry-after", HeaderValue::from(secs));
            }
            resp
        }
        Script::RetryAtDate { status, after_secs } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let at = std::time::SystemTime::now() + Duration::from_secs(after_secs);
            let mut resp = (code, error_body(wire, status)).into_response();
            if let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(at)) {
                resp.headers_mut().insert("retry-after", date);
            }
            resp
        }
        Script::Raw {
            status,
            headers,
            body,
        } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut resp = (code, body).into_response();
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    axum::http::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(&value),
                ) {
                    resp.headers_mut().insert(name, value);
                }
            }
            resp
        }
        Script::Echo {
            delta_chars,
            pace_ms,
        } => sse(frames(
            wire,
            Script::Stream {
                text: format!("You said: {last_user}"),
                delta_chars,
                pace_ms,
                tool_calls: Vec::new(),
                end_after: None,
                ending: Ending::Complete,
                hold: None,
            },
            shared,
        )),
        script => sse(frames(wire, script, shared)),
    }
}

fn error_body(wire: Wire, status: u16) -> String {
    let (kind, message) = match status {
        429 => ("rate_limit_error", "Rate limited"),
        529 => ("overloaded_error", "Overloaded"),
        401 => ("authentication_error", "invalid x-api-key"),
        _ => ("api_error", "Internal server error"),
    };
    match wire {
        Wire::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
        Wire::Openai => json!({"error": {"type": kind, "message": message, "code": status}}),
    }
    .to_string()
}

fn last_user_text(body: &Value) -> String {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return String::new();
    };
    let Some(last) = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return String::new();
    };
    let text = match last.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    // Echo the question, not the app's state block in front of it.
    match text.rsplit_once("[End of current state]") {
        Some((_, question)) => question.trim().to_string(),
        None => text,
    }
}

fn sse(stream: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Splits text into pieces of `n` characters (never inside a character).
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

fn frame(event: Option<&str>, data: &str) -> Bytes {
    match event {
        Some(name) => Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
        None => Bytes::from(format!("data: {data}\n\n")),
    }
}

fn anthropic_frame(data: Value) -> Bytes {
    let name = data
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    frame(Some(&name), &data.to_string())
}

fn openai_chunk(delta: Value, finish: Option<&str>) -> Bytes {
    frame(
        None,
        &json!({
            "id": "chatcmpl-stub",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "stub",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string(),
    )
}

fn text_delta(wire: Wire, text: &str) -> Bytes {
    match wire {
        Wire::Anthropic => anthropic_frame(json!({
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text},
        })),
        Wire::Openai => openai_chunk(json!({"content": text}), None),
    }
}

fn frames(
    wire: Wire,
    script: Script,
    shared: Arc<Shared>,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel::<Frame>(64);
    let gate = match &script {
        Script::Stream {
            hold: Some(hold), ..
        } => lock(&shared.gates)
            .get(&hold.gate)
            .map(|gate| (hold.after, gate.clone())),
        _ => None,
    };
    tokio::spawn(async move {
        // A send error means the client went away; there is nothing left to do.
        let _ = write_script(wire, script, gate, &tx).await;
    });
    futures::stream::unfold((rx, shared), |(mut rx, shared)| async move {
        let frame = rx.recv().await?;
        // A numbered delta is timed when the connection takes it, not when it is queued.
        if frame.timed {
            lock(&shared.write_times).push(Instant::now());
        }
        Some((frame.bytes, (rx, shared)))
    })
}

/// Bytes for the connection; `timed` marks a numbered delta.
struct Frame {
    bytes: Result<Bytes, std::io::Error>,
    timed: bool,
}

type Tx = tokio::sync::mpsc::Sender<Frame>;

async fn send(tx: &Tx, bytes: Bytes) -> Result<(), ()> {
    let frame = Frame {
        bytes: Ok(bytes),
        timed: false,
    };
    tx.send(frame).await.map_err(|_| ())
}

/// Waits at `gate` until the test opens it, keeping the connection alive meanwhile.
async fn hold_at(wire: Wire, gate: &Gate, tx: &Tx) -> Result<(), ()> {
    gate.state.send_modify(|g| g.reached = true);
    let mut rx = gate.state.subscribe();
    let open = async move {
        // (The guard it returns is not kept across an await.)
        let _ = rx.wait_for(|g| g.open).await.map(|_| ());
    };
    tokio::pin!(open);
    loop {
        tokio::select! {
            _ = &mut open => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                let alive = match wire {
                    Wire::Anthropic => anthropic_frame(json!({"type": "ping"})),
                    Wire::Openai => Bytes::from_static(b": keep-alive\n\n"),
                };
                send(tx, alive).await?;
            }
        }
    }
}

async fn write_script(
    wire: Wire,
    script: Script,
    gate: Option<(usize, Gate)>,
    tx: &Tx,
) -> Result<(), ()> {
    let (text_pieces, pace, tool_calls, end_after, ending, delta_chars, numbered) = match script {
        Script::Stream {
            text,
            delta_chars,
            pace_ms,
            tool_calls,
            end_after,
            ending,
            hold: _,
        } => (
            pieces(&text, delta_chars),
            Duration::from_millis(pace_ms),
            tool_calls,
            end_after,
            ending,
            delta_chars,
            false,
        ),
        Script::Numbered { count, pace_ms } => (
            (0..count).map(|i| i.to_string()).collect(),
            Duration::from_millis(pace_ms),
            Vec::new(),
            None,
            Ending::Complete,
            1,
            true,
        ),
        Script::Echo { .. }
        | Script::Status { .. }
        | Script::RetryAtDate { .. }
        | Script::Raw { .. } => return Ok(()),
    };

    // Opening frames.
    match wire {
        Wire::Anthropic => {
            send(tx, anthropic_frame(json!({
                "type": "message_start",
                "message": {"id": "msg_stub", "type": "message", "role": "assistant", "content": [],
                            "model": "stub", "stop_reason": null, "stop_sequence": null,
                            "usage": {"input_tokens": 12, "output_tokens": 1}},
            })))
            .await?;
            send(
                tx,
                anthropic_frame(json!({
                    "type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""},
                })),
            )
            .await?;
            send(tx, anthropic_frame(json!({"type": "ping"}))).await?;
        }
        Wire::Openai => {
            send(
                tx,
                openai_chunk(json!({"role": "assistant", "content": ""}), None),
            )
            .await?;
        }
    }

    let mut written = 0usize;
    for piece in &text_pieces {
        if let Some((_, gate)) = gate.as_ref().filter(|(after, _)| *after == written) {
            hold_at(wire, gate, tx).await?;
        }
        if end_after == Some(written) {
            return finish_early(wire, &ending, tx).await;
        }
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
        let frame = Frame {
            bytes: Ok(text_delta(wire, piece)),
            timed: numbered,
        };
        tx.send(frame).await.map_err(|_| ())?;
        if numbered {
            // Let the connection flush it as its own write, as a server does with each token.
            tokio::task::yield_now().await;
        }
        written += 1;
    }
    if let Some((_, gate)) = gate.as_ref().filter(|(after, _)| *after >= written) {
        hold_at(wire, gate, tx).await?;
    }
    if end_after.is_some() || !matches!(ending, Ending::Complete) {
        return finish_early(wire, &ending, tx).await;
    }

    // Tool calls, their arguments in fragments.
    match wire {
        Wire::Anthropic => {
            send(
                tx,
                anthropic_frame(json!({"type": "content_block_stop", "index": 0})),
            )
            .await?;
            for (i, call) in tool_calls.iter().enumerate() {
                let index = i + 1;
                send(tx, anthropic_frame(json!({
                    "type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
                })))
                .await?;
                for part in pieces(&call.arguments, delta_chars) {
                    send(
                        tx,
                        anthropic_frame(json!({
                            "type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": part},
                        })),
                    )
                    .await?;
                }
                send(
                    tx,
                    anthropic_frame(json!({"type": "content_block_stop", "index": index})),
                )
                .await?;
            }
            let stop = if tool_calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            };
            send(
                tx,
                anthropic_frame(json!({
                    "type": "message_delta",
                    "delta": {"type": "message_delta", "stop_reason": stop, "stop_sequence": null},
                    "usage": {"output_tokens": written},
                })),
            )
            .await?;
            send(tx, anthropic_frame(json!({"type": "message_stop"}))).await?;
        }
        Wire::Openai => {
            for (i, call) in tool_calls.iter().enumerate() {
                send(
                    tx,
                    openai_chunk(
                        json!({"tool_calls": [{
                            "index": i, "id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }]}),
                        None,
                    ),
                )
                .await?;
                for part in pieces(&call.arguments, delta_chars) {
                    send(
                        tx,
                        openai_chunk(
                            json!({"tool_calls": [{
                                "index": i, "function": {"arguments": part},
                            }]}),
                            None,
                        ),
                    )
                    .await?;
                }
            }
            let stop = if tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            send(tx, openai_chunk(json!({}), Some(stop))).await?;
            send(tx, frame(None, &json!({
                "id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0,
                "model": "stub", "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": written, "total_tokens": 12 + written},
            }).to_string()))
            .await?;
            send(tx, frame(None, "[DONE]")).await?;
        }
    }
    Ok(())
}

async fn finish_early(wire: Wire, ending: &Ending, tx: &Tx) -> Result<(), ()> {
    match ending {
        Ending::Complete => Ok(()),
        Ending::ErrorEvent {
            error_type,
            message,
        } => {
            let bytes = match wire {
                Wire::Anthropic => anthropic_frame(json!({
                    "type": "error", "error": {"type": error_type, "message": message},
                })),
                Wire::Openai => frame(
                    None,
                    &json!({"error": {"type": error_type, "message": message}}).to_string(),
                ),
            };
            send(tx, bytes).await
        }
        Ending::Drop => {
            // Let what was written reach the client first, as on a real connection that breaks.
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(Frame {
                bytes: Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "stub dropped the connection",
                )),
                timed: false,
            })
            .await
            .map_err(|_| ())
        }
        Ending::Stall => {
            // Keep the connection open without writing until the client gives up.
            tx.closed().await;
            Ok(())
        }
        Ending::MalformedJson => {
            let bytes = match wire {
                Wire::Anthropic => frame(
                    Some("content_block_delta"),
                    "{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {",
                ),
                Wire::Openai => frame(None, "{\"choices\": [{\"delta\": {\"content\": \"oops"),
            };
            send(tx, bytes).await?;
            // A real server would go on; the client must fail on the bad line anyway.
            send(tx, text_delta(wire, " and more")).await
        }
        Ending::InvalidUtf8 => {
            // "café" with the first byte of its "é" made one no UTF-8 text can hold.
            let bad: Vec<u8> = text_delta(wire, "café")
                .iter()
                .map(|&b| if b == 0xC3 { 0xFF } else { b })
                .collect();
            send(tx, Bytes::from(bad)).await?;
            tx.closed().await;
            Ok(())
        }
        Ending::GiantEvent => {
            send(tx, Bytes::from_static(b"data: ")).await?;
            let block = Bytes::from(vec![b'x'; 64 * 1024]);
            loop {
                send(tx, block.clone()).await?;
            }
        }
        Ending::Endless => loop {
            send(tx, text_delta(wire, "and on ")).await?;
        },
    }
}
