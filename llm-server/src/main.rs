//! `jarvis-llm`: Jarvis's local model server. llama.cpp runs a GGUF model on the CPU in this
//! separate process (whisper.cpp, linked into Jarvis for speech, carries its own copy of ggml, and
//! the two clash in one binary), behind the OpenAI-compatible streaming API on loopback that
//! Jarvis's OpenAI backend already speaks. One reply at a time; a client that goes away cancels
//! its generation before the next token.

mod chat;
mod engine;
mod listen;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use chat::{CallReader, ToolCall, Turn};
use clap::Parser;
use engine::{Engine, Job, Out, Sampling};
use llama_cpp_2::llama_backend::LlamaBackend;
use serde::Deserialize;
use serde_json::{json, Value};

/// Runs a GGUF model behind an OpenAI-compatible API on loopback.
#[derive(Parser)]
#[command(name = "jarvis-llm", version)]
struct Args {
    /// The GGUF model file.
    #[arg(long)]
    model: PathBuf,
    /// Address to listen on (port 0: any free port; the address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Context window in tokens (at most the model's own).
    #[arg(long, default_value_t = 4096)]
    ctx: u32,
    /// CPU threads.
    #[arg(long, default_value_t = default_threads())]
    threads: i32,
    /// Print the model's description as JSON and exit.
    #[arg(long)]
    check: bool,
    /// Offer a request's tools to the model: `auto` when its chat template offers tools and it
    /// has at least a billion parameters, `on` whenever its template offers them, `off` never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    tools: String,
    /// Exit when standard input closes (Jarvis holds it open while it runs).
    #[arg(long)]
    exit_with_stdin: bool,
}

fn default_threads() -> i32 {
    std::thread::available_parallelism()
        .map(|n| n.get().min(8) as i32)
        .unwrap_or(2)
}

#[derive(Clone)]
struct App {
    jobs: std::sync::mpsc::SyncSender<Job>,
    model_name: String,
    /// Whether requests' tools are offered to the model (its template can, and `--tools` lets it).
    tools: bool,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("JARVIS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("jarvis-llm: {err:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<()> {
    let backend = LlamaBackend::init().context("cannot start llama.cpp")?;
    let model = engine::load(&backend, &args.model)?;
    let tools_wanted = match args.tools.as_str() {
        "off" => false,
        "on" => true,
        _ => model.n_params() >= 1_000_000_000,
    };
    if args.check {
        println!(
            "{}",
            serde_json::to_string(&engine::info(&model, &args.model, tools_wanted))?
        );
        return Ok(());
    }
    let model_name = args
        .model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "local".into());

    // The model and its context live on one thread for the life of the process.
    let (jobs, queue) = std::sync::mpsc::sync_channel::<Job>(16);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<bool>>();
    let (ctx_size, threads) = (args.ctx, args.threads);
    std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            let model: &'static _ = Box::leak(Box::new(model));
            let mut engine = match Engine::new(&backend, model, ctx_size, threads, tools_wanted) {
                Ok(engine) => {
                    let _ = ready_tx.send(Ok(engine.offers_tools()));
                    engine
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                    return;
                }
            };
            while let Ok(job) = queue.recv() {
                engine.run(job);
            }
        })?;
    let tools = ready_rx.recv().context("the engine thread ended")??;

    if args.exit_with_stdin {
        std::thread::spawn(|| {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            std::process::exit(0);
        });
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        let guard = Guard::new(addr.port());
        println!("jarvis-llm listening on http://{addr}/v1");
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/models", get(models))
            .layer(axum::middleware::from_fn_with_state(guard, admit))
            .with_state(App {
                jobs,
                model_name,
                tools,
            });
        listen::serve(listener, app).await?;
        Ok(())
    })
}

/// Who may ask: only this machine's own address for the Host (a web page that points a name at
/// 127.0.0.1 is refused), JSON bodies only (a page's `text/plain` POST needs no preflight), and,
/// when Jarvis gave one in `JARVIS_LLM_TOKEN` (never on the command line, which other users
/// see), the token as a bearer.
#[derive(Clone)]
struct Guard {
    hosts: Arc<[String]>,
    token: Option<Arc<str>>,
}

impl Guard {
    fn new(port: u16) -> Guard {
        let token = std::env::var("JARVIS_LLM_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        if token.is_none() {
            tracing::warn!("no JARVIS_LLM_TOKEN: any program on this machine may ask this server");
        }
        Guard {
            hosts: ["127.0.0.1", "localhost", "[::1]"]
                .iter()
                .map(|h| format!("{h}:{port}"))
                .collect(),
            token: token.map(Into::into),
        }
    }
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

async fn admit(
    State(guard): State<Guard>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let headers = request.headers();
    let text = |name: axum::http::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let refuse = |status: StatusCode, why: &str| {
        (status, Json(json!({"error": {"message": why}}))).into_response()
    };
    let host = text(axum::http::header::HOST);
    if !guard.hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
        return refuse(
            StatusCode::FORBIDDEN,
            "this server answers only this machine",
        );
    }
    if let Some(token) = &guard.token {
        let given = text(axum::http::header::AUTHORIZATION);
        let given = given.strip_prefix("Bearer ").unwrap_or_default();
        if !same(given.as_bytes(), token.as_bytes()) {
            return refuse(StatusCode::UNAUTHORIZED, "a missing or wrong token");
        }
    }
    if request.method() == axum::http::Method::POST {
        let json = text(axum::http::header::CONTENT_TYPE)
            .split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "the body must be JSON");
        }
    }
    next.run(request).await
}

async fn models(State(app): State<App>) -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": app.model_name, "object": "model", "owned_by": "local", "tools": app.tools}]}),
    )
}

#[derive(Deserialize)]
struct ChatRequest {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    seed: Option<u32>,
    #[serde(default)]
    stream: bool,
    /// OpenAI function specs.
    #[serde(default)]
    tools: Option<Vec<Value>>,
    /// Jarvis marks its housekeeping calls (summaries): they are answered beside the
    /// conversation held in the cache instead of over it.
    #[serde(default)]
    jarvis_housekeeping: bool,
    /// Jarvis's warm-up: the prompt is processed into the cache and nothing is written, so the
    /// next question that begins with the same words (the system prompt, a chat's history)
    /// takes them from the cache.
    #[serde(default)]
    jarvis_prefill: bool,
}

#[derive(Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    tool_calls: Option<Vec<WireCall>>,
}

#[derive(Deserialize)]
struct WireCall {
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    /// A JSON object, as a string (OpenAI's way) or as the object itself.
    #[serde(default)]
    arguments: Value,
}

impl ChatMessage {
    fn turn(&self) -> Turn {
        Turn {
            role: self.role.clone(),
            content: text_of(&self.content),
            tool_calls: self
                .tool_calls
                .iter()
                .flatten()
                .map(|c| ToolCall {
                    name: c.function.name.clone(),
                    arguments: match &c.function.arguments {
                        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| json!({})),
                        Value::Null => json!({}),
                        v => v.clone(),
                    },
                })
                .collect(),
        }
    }
}

/// A call as OpenAI's API returns it, with an id the results are matched back by.
fn wire_call(index: usize, call: &ToolCall) -> Value {
    json!({"index": index, "id": format!("call_{index}"), "type": "function",
           "function": {"name": call.name, "arguments": call.arguments.to_string()}})
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Sets the job's cancel flag when the response is dropped (the client went away).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"type": "invalid_request_error", "message": message}})),
    )
        .into_response()
}

async fn completions(State(app): State<App>, body: Bytes) -> Response {
    let request: ChatRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("bad request: {e}")),
    };
    if request.messages.is_empty() {
        return error(StatusCode::BAD_REQUEST, "messages is empty");
    }
    let turns = request.messages.iter().map(ChatMessage::turn).collect();
    // Calls are read out of the answer only when the model was offered tools.
    let tools = match request.tools {
        Some(tools) if app.tools => tools,
        _ => Vec::new(),
    };
    let reader = (!tools.is_empty()).then(|| CallReader::new(&tools));
    let sampling = Sampling {
        temperature: request.temperature.unwrap_or(0.7),
        top_p: request.top_p.unwrap_or(0.9),
        seed: request.seed.unwrap_or_else(rand_seed),
        max_tokens: request
            .max_tokens
            .or(request.max_completion_tokens)
            .unwrap_or(512)
            .max(1),
    };
    let (out, mut answers) = tokio::sync::mpsc::channel(64);
    let cancel = Arc::new(AtomicBool::new(false));
    let job = Job {
        turns,
        tools,
        sampling,
        out,
        cancel: cancel.clone(),
        housekeeping: request.jarvis_housekeeping,
        prefill: request.jarvis_prefill,
    };
    if app.jobs.try_send(job).is_err() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests are waiting",
        );
    }
    let guard = CancelOnDrop(cancel);
    let model = app.model_name.clone();

    if !request.stream {
        let mut text = String::new();
        while let Some(out) = answers.recv().await {
            match out {
                Out::Text(t) => text.push_str(&t),
                Out::Done {
                    finish,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                } => {
                    drop(guard);
                    let (text, calls) = match reader {
                        Some(mut reader) => {
                            let mut shown = reader.push(&text);
                            let (rest, calls) = reader.finish();
                            shown.push_str(&rest);
                            (shown, calls)
                        }
                        None => (text, Vec::new()),
                    };
                    let mut message = json!({"role": "assistant", "content": text});
                    let mut finish = finish;
                    if !calls.is_empty() {
                        message["tool_calls"] = calls
                            .iter()
                            .enumerate()
                            .map(|(i, c)| wire_call(i, c))
                            .collect();
                        finish = "tool_calls";
                    }
                    return Json(json!({
                        "id": "chatcmpl-local", "object": "chat.completion", "model": model,
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                  "total_tokens": prompt_tokens + completion_tokens,
                                  "prompt_tokens_details": {"cached_tokens": cached_tokens}},
                    }))
                    .into_response();
                }
                Out::Error(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e),
            }
        }
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine stopped");
    }

    let stream = Chunks {
        answers,
        _guard: guard,
        reader,
        model,
    }
    .stream();
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A streamed answer as OpenAI's chunks.
struct Chunks {
    answers: tokio::sync::mpsc::Receiver<Out>,
    /// Cancels the generation when the stream is dropped.
    _guard: CancelOnDrop,
    /// Reads tool calls out of the text, when tools were offered.
    reader: Option<CallReader>,
    model: String,
}

impl Chunks {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-local", "object": "chat.completion.chunk", "model": self.model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    }

    /// What to send for one piece from the engine (maybe nothing yet), and whether the answer is
    /// over.
    fn next_bytes(&mut self, out: Option<Out>) -> (String, bool) {
        match out {
            Some(Out::Text(text)) => {
                let text = match self.reader.as_mut() {
                    Some(reader) => reader.push(&text),
                    None => text,
                };
                if text.is_empty() {
                    (String::new(), false)
                } else {
                    (self.chunk(json!({"content": text}), None), false)
                }
            }
            Some(Out::Done {
                finish,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
            }) => {
                let mut finish = if finish == "cancelled" {
                    "stop"
                } else {
                    finish
                };
                let mut end = String::new();
                if let Some(reader) = self.reader.take() {
                    let (rest, calls) = reader.finish();
                    if !rest.is_empty() {
                        end.push_str(&self.chunk(json!({"content": rest}), None));
                    }
                    if !calls.is_empty() {
                        let calls: Vec<Value> = calls
                            .iter()
                            .enumerate()
                            .map(|(i, c)| wire_call(i, c))
                            .collect();
                        end.push_str(&self.chunk(json!({"tool_calls": calls}), None));
                        finish = "tool_calls";
                    }
                }
                end.push_str(&self.chunk(json!({}), Some(finish)));
                end.push_str(&format!(
                    "data: {}\n\ndata: [DONE]\n\n",
                    json!({"id": "chatcmpl-local", "object": "chat.completion.chunk", "choices": [],
                           "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                     "total_tokens": prompt_tokens + completion_tokens,
                                     "prompt_tokens_details": {"cached_tokens": cached_tokens}}})
                ));
                (end, true)
            }
            Some(Out::Error(e)) => (
                format!(
                    "data: {}\n\n",
                    json!({"error": {"type": "server_error", "message": e}})
                ),
                true,
            ),
            None => (String::new(), true),
        }
    }

    fn stream(self) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send {
        let first = self.chunk(json!({"role": "assistant", "content": ""}), None);
        futures::stream::unfold(
            (self, Some(first), false),
            |(mut chunks, first, done)| async move {
                if let Some(first) = first {
                    return Some((Ok(Bytes::from(first)), (chunks, None, false)));
                }
                if done {
                    return None;
                }
                loop {
                    let out = chunks.answers.recv().await;
                    let (bytes, done) = chunks.next_bytes(out);
                    if !bytes.is_empty() {
                        return Some((Ok(Bytes::from(bytes)), (chunks, None, done)));
                    }
                    if done {
                        return None;
                    }
                }
            },
        )
    }
}

fn rand_seed() -> u32 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(42)
}
