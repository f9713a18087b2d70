//! The local backend: a GGUF model run by `jarvis-llm`, a small server of this workspace that
//! Jarvis starts on loopback the first time it is asked and talks to with its OpenAI backend.
//! llama.cpp lives in that separate process because whisper.cpp, which Jarvis links for speech,
//! carries its own copy of ggml and the two clash in one binary. A missing or broken model fails
//! the reply with what to do; Jarvis itself keeps running.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::Mutex;

use super::openai::OpenAi;
use super::{Backend, EventStream, LlmError, Request};
use crate::config::{BackendKind, Config, LocalSettings, LocalTools, OpenAiSettings, Timeouts};

/// The server binary's name; it is looked for beside the running executable.
pub const SERVER_BIN: &str = "jarvis-llm";

/// How long loading a model may take.
const LOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The command that installs the default model.
pub const INSTALL_HINT: &str =
    "run `scripts/models` to install the default model, or set JARVIS_MODEL to a GGUF file";

/// The local backend.
pub struct Local {
    inner: Arc<Inner>,
    model_name: String,
    max_tokens: u32,
}

struct Inner {
    settings: LocalSettings,
    model: PathBuf,
    server_bin: Option<PathBuf>,
    timeouts: Timeouts,
    running: Mutex<Option<Running>>,
}

struct Running {
    child: tokio::process::Child,
    backend: Arc<OpenAi>,
}

/// What `jarvis-llm --check` says of a model file.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelInfo {
    /// The file.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// e.g. llama, qwen2.
    pub architecture: String,
    /// `general.name`.
    pub name: String,
    /// e.g. Q4_1.
    pub quantization: String,
    /// The context length it was trained for.
    pub context_length: u32,
    /// Parameters.
    pub parameters: u64,
    /// Whether it carries a chat template.
    pub chat_template: bool,
    /// Whether its template offers tools (Hermes-style `<tool_call>`).
    #[serde(default)]
    pub tools: bool,
    /// Whether Jarvis's tools are offered to it with the `[local] tools` setting given.
    #[serde(default)]
    pub tools_offered: bool,
}

/// Where the server binary is: `JARVIS_LLM_SERVER`, else beside this executable (or one folder
/// up, where test binaries live).
pub fn find_server(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(path) = env("JARVIS_LLM_SERVER").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(SERVER_BIN), dir.parent()?.join(SERVER_BIN)]
        .into_iter()
        .find(|p| p.is_file())
}

/// The model server as a command, started without the API keys in its environment.
fn server_command(bin: &Path) -> tokio::process::Command {
    let mut cmd = std::process::Command::new(bin);
    crate::config::without_keys(&mut cmd);
    tokio::process::Command::from(cmd)
}

impl Local {
    /// The backend for `config`'s `[local]` settings; nothing starts until the first question.
    pub fn new(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Local {
        let settings = config.settings.local.clone();
        let model = config.local_model_path();
        Local {
            model_name: model_name(&model),
            max_tokens: settings.max_tokens,
            inner: Arc::new(Inner {
                settings,
                model,
                server_bin: find_server(env),
                timeouts: config.settings.timeouts.clone(),
                running: Mutex::new(None),
            }),
        }
    }

    /// The model file this backend runs.
    pub fn model_path(&self) -> &Path {
        &self.inner.model
    }
}

impl Inner {
    fn server_bin(&self) -> Result<&Path, String> {
        self.server_bin.as_deref().ok_or_else(|| {
            format!("the local model server `{SERVER_BIN}` is not installed beside jarvis; build it with `cargo build --release -p jarvis-llm`")
        })
    }

    /// The running server's OpenAI backend, starting the server first if needed — on a task of
    /// its own, so that a caller that goes away meanwhile (a warm-up giving way to a question)
    /// never kills a server half loaded: the question finds it loading, not gone.
    async fn backend(self: &Arc<Self>) -> Result<Arc<OpenAi>, String> {
        let inner = self.clone();
        tokio::spawn(async move { inner.backend_now().await })
            .await
            .map_err(|e| format!("starting the local model server stopped: {e}"))?
    }

    async fn backend_now(&self) -> Result<Arc<OpenAi>, String> {
        let mut running = self.running.lock().await;
        if let Some(r) = running.as_mut() {
            if matches!(r.child.try_wait(), Ok(None)) {
                return Ok(r.backend.clone());
            }
            tracing::warn!("the local model server had stopped; starting it again");
        }
        let started = self.start().await?;
        let backend = started.backend.clone();
        *running = Some(started);
        Ok(backend)
    }

    async fn start(&self) -> Result<Running, String> {
        if !self.model.is_file() {
            return Err(format!(
                "the local model is not installed: {} is missing; {INSTALL_HINT}",
                self.model.display()
            ));
        }
        let bin = self.server_bin()?;
        let mut cmd = server_command(bin);
        // The server answers only whoever holds this (in its environment, which no other user
        // of the machine can read; never on its command line, which they can).
        let token = uuid::Uuid::new_v4().simple().to_string();
        cmd.env("JARVIS_LLM_TOKEN", &token);
        cmd.arg("--model")
            .arg(&self.model)
            .arg("--ctx")
            .arg(self.settings.context.max(256).to_string())
            .arg("--tools")
            .arg(self.settings.tools.as_str())
            .arg("--exit-with-stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if self.settings.threads > 0 {
            cmd.arg("--threads").arg(self.settings.threads.to_string());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("no stdout from the model server")?;
        let mut stderr = child
            .stderr
            .take()
            .ok_or("no stderr from the model server")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(LOAD_TIMEOUT, lines.next_line()).await;
        let url = match first {
            Ok(Ok(Some(line))) => line
                .split_once("listening on ")
                .map(|(_, url)| url.trim().to_string()),
            Ok(_) => None,
            Err(_) => {
                return Err(format!(
                    "the local model did not load within {} s",
                    LOAD_TIMEOUT.as_secs()
                ))
            }
        };
        let Some(url) = url else {
            // It exited: its last words say why (not GGUF, truncated, unsupported).
            let mut said = String::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), stderr.read_to_string(&mut said))
                .await;
            let reason = last_words(&said)
                .unwrap_or_else(|| "the model server stopped while loading".into());
            return Err(format!("{reason}; {INSTALL_HINT}"));
        };
        // Keep reading its output so it never blocks on a full pipe.
        tokio::spawn(async move {
            let mut err_lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = err_lines.next_line().await {
                tracing::debug!(target: "jarvis_llm", "{line}");
            }
        });
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let openai = wire_settings(&self.settings, &self.model, url);
        let token = Some(secrecy::SecretString::from(token));
        let backend = OpenAi::new(BackendKind::Local, openai, token, &self.timeouts, 1)
            .map_err(|e| e.to_string())?;
        tracing::info!(model = %self.model.display(), "local model server started");
        Ok(Running {
            child,
            backend: Arc::new(backend),
        })
    }
}

impl Backend for Local {
    fn kind(&self) -> BackendKind {
        BackendKind::Local
    }

    fn model(&self) -> &str {
        &self.model_name
    }

    fn max_tokens(&self) -> u32 {
        self.max_tokens
    }

    fn max_concurrent(&self) -> usize {
        1
    }

    fn context_tokens(&self) -> usize {
        self.inner.settings.context.max(256) as usize
    }

    fn prefills(&self) -> bool {
        true
    }

    fn stream(&self, request: Request) -> EventStream {
        let inner = self.inner.clone();
        Box::pin(async_stream::stream! {
            let backend = match inner.backend().await {
                Ok(b) => b,
                Err(reason) => {
                    yield Err(LlmError::Unavailable(reason));
                    return;
                }
            };
            let mut events = backend.stream(request);
            while let Some(event) = events.next().await {
                yield event;
            }
        })
    }
}

/// The name a local model goes by in requests: its file's stem.
pub fn model_name(model: &Path) -> String {
    model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The OpenAI-compatible settings the local model server is spoken to with.
pub fn wire_settings(settings: &LocalSettings, model: &Path, base_url: String) -> OpenAiSettings {
    OpenAiSettings {
        base_url,
        model: model_name(model),
        max_tokens: settings.max_tokens,
        requires_key: false,
        temperature: Some(settings.temperature),
        top_p: Some(settings.top_p),
        seed: settings.seed,
        allow_insecure: false,
        jarvis_server: true,
    }
}

/// The server's own account of why it stopped: its last `jarvis-llm: …` line on stderr.
fn last_words(stderr: &str) -> Option<String> {
    let prefix = format!("{SERVER_BIN}: ");
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

/// Describes a model file with `jarvis-llm --check`, for `jarvis doctor`; `tools` is the
/// `[local] tools` setting.
pub async fn describe(
    model: &Path,
    tools: LocalTools,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ModelInfo, String> {
    if !model.is_file() {
        return Err(format!("{} is missing; {INSTALL_HINT}", model.display()));
    }
    let bin = find_server(env).ok_or_else(|| {
        format!("`{SERVER_BIN}` is not installed beside jarvis; build it with `cargo build --release -p jarvis-llm`")
    })?;
    let out = server_command(&bin)
        .arg("--model")
        .arg(model)
        .arg("--check")
        .arg("--tools")
        .arg(tools.as_str())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let reason = last_words(&said).unwrap_or_else(|| "it could not be read".into());
        return Err(reason);
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("unexpected answer from {SERVER_BIN}: {e}"))
}
