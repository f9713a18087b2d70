//! `jarvis-llm`: Jarvis's local model server. llama.cpp runs a GGUF model on the CPU in this
//! separate process (whisper.cpp, linked into Jarvis for speech, carries its own copy of ggml, and
//! the two clash in one binary), behind the OpenAI-compatible streaming API on loopback that
//! Jarvis's OpenAI backend already speaks. One reply at a time; a client that goes away cancels
//! its generation before the next token.

mod engine;

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
use clap::Parser;
use engine::{Engine, Job, Out, Sampling, Turn};
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
    if args.check {
        println!(
            "{}",
            serde_json::to_string(&engine::info(&model, &args.model))?
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
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let (ctx_size, threads) = (args.ctx, args.threads);
    std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            let model: &'static _ = Box::leak(Box::new(model));
            let mut engine = match Engine::new(&backend, model, ctx_size, threads) {
                Ok(engine) => {
                    let _ = ready_tx.send(Ok(()));
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
    ready_rx.recv().context("the engine thread ended")??;

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
        println!("jarvis-llm listening on http://{addr}/v1");
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/models", get(models))
            .with_state(App { jobs, model_name });
        axum::serve(listener, app).await?;
        Ok(())
    })
}

async fn models(State(app): State<App>) -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": app.model_name, "object": "model", "owned_by": "local"}]}),
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
}

#[derive(Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Value,
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
    let turns = request
        .messages
        .iter()
        .map(|m| Turn {
            role: m.role.clone(),
            content: text_of(&m.content),
        })
        .collect();
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
        sampling,
        out,
        cancel: cancel.clone(),
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
                    completion_tokens,
                    ..
                } => {
                    drop(guard);
                    return Json(json!({
                        "id": "chatcmpl-local", "object": "chat.completion", "model": model,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                  "total_tokens": prompt_tokens + completion_tokens},
                    }))
                    .into_response();
                }
                Out::Error(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e),
            }
        }
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine stopped");
    }

    let chunk = move |delta: Value, finish: Option<&str>| -> Bytes {
        Bytes::from(format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-local", "object": "chat.completion.chunk", "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        ))
    };
    let stream = async_stream(answers, guard, chunk);
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn async_stream(
    answers: tokio::sync::mpsc::Receiver<Out>,
    guard: CancelOnDrop,
    chunk: impl Fn(Value, Option<&str>) -> Bytes + Send + 'static,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send {
    let first = chunk(json!({"role": "assistant", "content": ""}), None);
    let state = (answers, guard, chunk, Some(first), false);
    futures::stream::unfold(
        state,
        |(mut answers, guard, chunk, first, done)| async move {
            if let Some(first) = first {
                return Some((Ok(first), (answers, guard, chunk, None, done)));
            }
            if done {
                return None;
            }
            let bytes = match answers.recv().await {
                Some(Out::Text(text)) => chunk(json!({"content": text}), None),
                Some(Out::Done {
                    finish,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                }) => {
                    let mut end = chunk(
                        json!({}),
                        Some(if finish == "cancelled" {
                            "stop"
                        } else {
                            finish
                        }),
                    )
                    .to_vec();
                    end.extend_from_slice(
                    format!(
                        "data: {}\n\ndata: [DONE]\n\n",
                        json!({"id": "chatcmpl-local", "object": "chat.completion.chunk", "choices": [],
                               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                         "total_tokens": prompt_tokens + completion_tokens,
                                         "prompt_tokens_details": {"cached_tokens": cached_tokens}}})
                    )
                    .as_bytes(),
                );
                    return Some((Ok(Bytes::from(end)), (answers, guard, chunk, None, true)));
                }
                Some(Out::Error(e)) => {
                    let bytes = Bytes::from(format!(
                        "data: {}\n\n",
                        json!({"error": {"type": "server_error", "message": e}})
                    ));
                    return Some((Ok(bytes), (answers, guard, chunk, None, true)));
                }
                None => return None,
            };
            Some((Ok(bytes), (answers, guard, chunk, None, false)))
        },
    )
}

fn rand_seed() -> u32 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(42)
}
