//! Backends: a [`Backend`] streams typed [`LlmEvent`]s for a [`Request`]. Anthropic's Messages API and
//! OpenAI-compatible chat completions are implemented over SSE; [`guarded`] adds what every backend
//! shares — retries before the first token and the first-token timeout.

pub mod anthropic;
pub mod local;
pub mod openai;
pub mod sse;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::config::{BackendKind, Config, ConfigError, RetrySettings};

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    /// The user (and the app's state block).
    User,
    /// The model.
    Assistant,
}

/// One message of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who.
    pub role: MessageRole,
    /// What.
    pub content: String,
    /// The tools the model called in this (assistant) message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The results of those calls, in this (user) message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<ToolResult>,
}

impl Message {
    /// A message of text alone.
    pub fn text(role: MessageRole, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_results: Vec::new(),
        }
    }
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for it.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: Value,
}

/// What a call gave back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call's id.
    pub id: String,
    /// The result, as text for the model.
    pub content: String,
    /// Whether the call failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: Value,
}

/// A backend request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The system prompt.
    pub system: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// The model.
    pub model: String,
    /// The most tokens to write.
    pub max_tokens: u32,
    /// A housekeeping call (a summary), not a reply: the local model server answers it beside
    /// the conversation it holds in its cache, so the next reply finds that cache whole.
    #[serde(default)]
    pub housekeeping: bool,
    /// A warm-up, not a reply: the local model server processes the prompt into its cache and
    /// writes nothing, so that the question that follows (beginning with the same system prompt
    /// and history) has its first token sooner. Sent only to a backend that
    /// [`Backend::prefills`].
    #[serde(default)]
    pub prefill: bool,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It finished its turn.
    EndTurn,
    /// It hit the token limit.
    MaxTokens,
    /// It wants tool results.
    ToolUse,
    /// Anything else the provider said.
    Other(String),
}

impl StopReason {
    fn parse(s: &str) -> StopReason {
        match s {
            "end_turn" | "stop" | "stop_sequence" => StopReason::EndTurn,
            "max_tokens" | "length" => StopReason::MaxTokens,
            "tool_use" | "tool_calls" | "function_call" => StopReason::ToolUse,
            other => StopReason::Other(other.to_string()),
        }
    }
}

/// What a backend streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LlmEvent {
    /// A piece of the reply's text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A tool call begins.
    ToolCallStart {
        /// Its position among the reply's tool calls.
        index: usize,
        /// The provider's id for it.
        id: String,
        /// The tool.
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallArgs {
        /// Which call.
        index: usize,
        /// The fragment.
        fragment: String,
    },
    /// A tool call's arguments are complete.
    ToolCallEnd {
        /// Which call.
        index: usize,
    },
    /// Why the model stopped.
    Stop {
        /// The reason.
        reason: StopReason,
    },
    /// Token counts.
    Usage {
        /// Prompt tokens, when known.
        input_tokens: Option<u64>,
        /// Written tokens, when known.
        output_tokens: Option<u64>,
    },
}

impl LlmEvent {
    /// Whether this is part of the answer (the first one ends the first-token wait).
    pub fn is_content(&self) -> bool {
        matches!(
            self,
            LlmEvent::TextDelta { .. }
                | LlmEvent::ToolCallStart { .. }
                | LlmEvent::ToolCallArgs { .. }
        )
    }
}

/// Why a stream failed; each is named so the user sees what happened.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum LlmError {
    /// The server could not be reached.
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// Connecting took too long.
    #[error("connecting to {url} timed out after {secs} s")]
    ConnectTimeout {
        /// The URL.
        url: String,
        /// The limit.
        secs: f64,
    },
    /// No first token in time.
    #[error("no answer began within {secs} s")]
    FirstTokenTimeout {
        /// The limit.
        secs: f64,
    },
    /// The answer began and then sent no word for too long (only keep-alives, or nothing).
    #[error("the answer stalled: no new words for {secs} s")]
    Stalled {
        /// The limit.
        secs: f64,
    },
    /// The stream went quiet.
    #[error("the stream stalled: nothing arrived for {secs} s")]
    IdleTimeout {
        /// The limit.
        secs: f64,
    },
    /// The server answered with a redirect, which is never followed: the key and the
    /// conversation go only to the base URL the settings name.
    #[error("the server redirected the request to {location} (HTTP {status}); it was not followed — if that address is right, make it the base URL")]
    Redirected {
        /// The HTTP status (301, 302, 307, 308…).
        status: u16,
        /// Where it pointed.
        location: String,
    },
    /// The server answered with an error status.
    #[error("the server answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// Its message.
        message: String,
        /// Its `retry-after`, in seconds.
        retry_after: Option<f64>,
    },
    /// The provider sent an error event.
    #[error("the provider reported {kind}: {message}")]
    Api {
        /// e.g. `overloaded_error`.
        kind: String,
        /// Its message.
        message: String,
    },
    /// The stream broke.
    #[error("the stream broke: {0}")]
    Broken(String),
    /// The stream ended before the reply was complete.
    #[error("the stream ended before the reply was complete")]
    Truncated,
    /// The backend cannot answer at all (e.g. the local model is not installed); says what to do.
    #[error("{0}")]
    Unavailable(String),
    /// A data line could not be read.
    #[error("the server sent malformed data: {0}")]
    Malformed(String),
    /// The server sent more than a reply may hold: an event or a whole stream past its limit.
    #[error("the server sent {0}; the reply was ended there")]
    TooMuch(String),
    /// A successful answer that is not an event stream (e.g. a whole JSON completion, or a
    /// proxy's HTML page).
    #[error("the server answered with {content_type}, not an event stream: {excerpt}")]
    NotAStream {
        /// Its `content-type`.
        content_type: String,
        /// The start of its body (or the error message in it).
        excerpt: String,
    },
}

impl LlmError {
    /// Whether trying again (before the first token) may help: 429, 529 / overloaded, 5xx.
    pub fn retryable(&self) -> bool {
        match self {
            LlmError::Status { status, .. } => *status == 429 || *status >= 500,
            LlmError::Api { kind, .. } => matches!(
                kind.as_str(),
                "overloaded_error" | "rate_limit_error" | "api_error" | "server_error"
            ),
            _ => false,
        }
    }

    /// The server's `retry-after`, if it gave one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status {
                retry_after: Some(s),
                ..
            } => Duration::try_from_secs_f64(*s).ok(),
            _ => None,
        }
    }
}

/// A stream of backend events.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<LlmEvent, LlmError>> + Send + 'static>>;

/// An LLM provider.
pub trait Backend: Send + Sync + 'static {
    /// Its settings name.
    fn kind(&self) -> BackendKind;
    /// The model it asks.
    fn model(&self) -> &str;
    /// The most tokens a reply may have.
    fn max_tokens(&self) -> u32;
    /// How many replies it writes at once.
    fn max_concurrent(&self) -> usize;
    /// How many tokens the model can read at once (its context window).
    fn context_tokens(&self) -> usize {
        128_000
    }
    /// Streams the answer to `request`; the request is sent when the stream is first polled.
    fn stream(&self, request: Request) -> EventStream;
    /// Whether it keeps a prompt's processing from one request to the next, so that a warm-up
    /// ([`Request::prefill`]) makes the next question's first token come sooner: the local
    /// model server does.
    fn prefills(&self) -> bool {
        false
    }
}

/// A backend that could not be made (a missing key, say): every request fails with the reason, so
/// a window can still open, show the chats and say what to fix.
pub struct Unusable {
    kind: BackendKind,
    model: String,
    reason: String,
}

impl Unusable {
    /// One that answers every request with `reason`.
    pub fn new(kind: BackendKind, model: impl Into<String>, reason: impl Into<String>) -> Self {
        Unusable {
            kind,
            model: model.into(),
            reason: reason.into(),
        }
    }
}

impl Backend for Unusable {
    fn kind(&self) -> BackendKind {
        self.kind
    }
    fn model(&self) -> &str {
        &self.model
    }
    fn max_tokens(&self) -> u32 {
        0
    }
    fn max_concurrent(&self) -> usize {
        1
    }
    fn stream(&self, _request: Request) -> EventStream {
        let err = LlmError::Unavailable(self.reason.clone());
        Box::pin(futures::stream::once(async move { Err(err) }))
    }
}

/// A backend whose key the OS keyring has not given yet (a locked keyring, its unlock prompt
/// up): the app starts without waiting for it, and a request made before the keyring answers
/// fails at once saying so. Once it has answered, requests go to the backend made with the key
/// (or to an [`Unusable`] one saying why there is none).
pub struct Deferred {
    kind: BackendKind,
    model: String,
    max_tokens: u32,
    max_concurrent: usize,
    context_tokens: usize,
    var: &'static str,
    made: Arc<std::sync::OnceLock<Arc<dyn Backend>>>,
}

impl Deferred {
    /// One that answers as `shape` says (made with a stand-in key, never asked) and sends
    /// requests to what `made` holds once it is set.
    pub fn new(
        shape: &dyn Backend,
        var: &'static str,
        made: Arc<std::sync::OnceLock<Arc<dyn Backend>>>,
    ) -> Deferred {
        Deferred {
            kind: shape.kind(),
            model: shape.model().to_string(),
            max_tokens: shape.max_tokens(),
            max_concurrent: shape.max_concurrent(),
            context_tokens: shape.context_tokens(),
            var,
            made,
        }
    }
}

impl Backend for Deferred {
    fn kind(&self) -> BackendKind {
        self.kind
    }
    fn model(&self) -> &str {
        match self.made.get() {
            Some(backend) => backend.model(),
            None => &self.model,
        }
    }
    fn max_tokens(&self) -> u32 {
        self.made.get().map_or(self.max_tokens, |b| b.max_tokens())
    }
    fn max_concurrent(&self) -> usize {
        self.max_concurrent
    }
    fn context_tokens(&self) -> usize {
        self.made
            .get()
            .map_or(self.context_tokens, |b| b.context_tokens())
    }
    fn stream(&self, request: Request) -> EventStream {
        match self.made.get() {
            Some(backend) => backend.stream(request),
            None => {
                let err = LlmError::Unavailable(format!(
                    "the OS keyring has not given {} yet (is it locked?): unlock it, then ask again",
                    self.var
                ));
                Box::pin(futures::stream::once(async move { Err(err) }))
            }
        }
    }
}

/// Why a backend could not be made.
#[derive(Debug, Error)]
pub enum BackendError {
    /// A remote backend's key is missing.
    #[error("{var} is not set; set it (or store it in the OS keyring) or choose another backend with JARVIS_BACKEND")]
    MissingKey {
        /// The variable.
        var: &'static str,
    },
    /// A plain-HTTP base URL off this machine, not allowed in the settings.
    #[error("{url} is plain HTTP to another machine: the key and the conversation would cross the network unencrypted; use https://, or set allow_insecure = true in [{section}]")]
    Insecure {
        /// The base URL.
        url: String,
        /// The settings section (`anthropic`, `openai`).
        section: &'static str,
    },
    /// A key that cannot be sent in an HTTP header.
    #[error("{var} holds characters that cannot be sent in an HTTP header; check it for stray quotes or line breaks")]
    BadKey {
        /// The variable.
        var: &'static str,
    },
    /// An `anthropic.version` setting that cannot be a header.
    #[error("anthropic.version = {0:?} is not a valid version; use one such as 2023-06-01")]
    BadVersion(String),
    /// Settings were wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

/// Refuses a plain `http://` base URL whose host is not this machine.
fn refuse_insecure(base_url: &str, section: &'static str) -> Result<(), BackendError> {
    let Ok(url) = reqwest::Url::parse(base_url.trim()) else {
        return Ok(()); // (The request names a malformed URL when it is made.)
    };
    let host = url.host_str().unwrap_or_default();
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if url.scheme() == "http" && !loopback {
        return Err(BackendError::Insecure {
            url: base_url.trim().to_string(),
            section,
        });
    }
    Ok(())
}

/// Builds the backend the configuration selects, refusing a remote one whose key is missing.
pub fn from_config(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Backend>, BackendError> {
    let s = &config.settings;
    let concurrency = s.replies.max_concurrent.max(1);
    match s.backend {
        BackendKind::Anthropic if !s.anthropic.allow_insecure => {
            refuse_insecure(&s.anthropic.base_url, "anthropic")?
        }
        BackendKind::Openai if !s.openai.allow_insecure => {
            refuse_insecure(&s.openai.base_url, "openai")?
        }
        _ => {}
    }
    match s.backend {
        BackendKind::Anthropic => {
            let (key, _) = crate::config::find_key(BackendKind::Anthropic.key_var_of(), env)
                .ok_or(BackendError::MissingKey {
                    var: BackendKind::Anthropic.key_var_of(),
                })?;
            Ok(Arc::new(anthropic::Anthropic::new(
                s.anthropic.clone(),
                key,
                &s.timeouts,
                concurrency,
            )?))
        }
        BackendKind::Openai => {
            // A keyless server never receives the user's OpenAI key, and the keyring is not
            // asked for one (a locked keyring would hold the start for nothing).
            let key = if s.openai.requires_key {
                let var = BackendKind::Openai.key_var_of();
                let (key, _) =
                    crate::config::find_key(var, env).ok_or(BackendError::MissingKey { var })?;
                Some(key)
            } else {
                None
            };
            Ok(Arc::new(openai::OpenAi::new(
                BackendKind::Openai,
                s.openai.clone(),
                key,
                &s.timeouts,
                concurrency,
            )?))
        }
        BackendKind::Local => Ok(Arc::new(local::Local::new(config, env))),
    }
}

/// Something the guarded stream says besides the backend's events.
#[derive(Debug, Clone, PartialEq)]
pub enum Guarded {
    /// A backend event.
    Event(LlmEvent),
    /// The request failed before the first token and will be tried again.
    Retrying {
        /// Which retry (1 for the first).
        attempt: u32,
        /// How long until it.
        wait: Duration,
        /// Why.
        reason: String,
    },
}

/// The limits of the guarded path (a reply's and housekeeping's alike).
#[derive(Debug, Clone)]
pub struct Guard {
    /// Retries before the first token.
    pub retry: RetrySettings,
    /// How long the first token may take.
    pub first_token: Duration,
    /// How long the answer, once begun, may go without content (keep-alives do not count).
    pub stall: Duration,
}

/// Streams `request` from `backend`, retrying 429 / 529 / overloaded / 5xx before the first token
/// (honouring `retry-after`, a bounded number of times) and failing with
/// [`LlmError::FirstTokenTimeout`] if no answer begins in time, and with [`LlmError::Stalled`] if
/// once begun no content comes for `guard.stall` (a server sending only keep-alives holds
/// nothing forever). After the first token an error ends the stream.
pub fn guarded(
    backend: Arc<dyn Backend>,
    request: Request,
    guard: Guard,
) -> impl Stream<Item = Result<Guarded, LlmError>> + Send + 'static {
    async_stream::stream! {
        let Guard { retry, first_token, stall } = guard;
        let mut attempt: u32 = 0;
        'attempts: loop {
            let mut events = backend.stream(request.clone());
            // Until the first token, then from each piece of content.
            let mut deadline = tokio::time::Instant::now() + first_token;
            let mut began = false;
            loop {
                let next = match tokio::time::timeout_at(deadline, events.next()).await {
                    Ok(next) => next,
                    Err(_) if began => {
                        yield Err(LlmError::Stalled { secs: stall.as_secs_f64() });
                        return;
                    }
                    Err(_) => {
                        yield Err(LlmError::FirstTokenTimeout { secs: first_token.as_secs_f64() });
                        return;
                    }
                };
                match next {
                    None => return,
                    Some(Ok(event)) => {
                        if event.is_content() {
                            began = true;
                            deadline = tokio::time::Instant::now() + stall;
                        }
                        yield Ok(Guarded::Event(event));
                    }
                    Some(Err(err)) => {
                        if !began && err.retryable() && attempt < retry.max_retries {
                            let backoff = Duration::from_millis(
                                retry.initial_backoff_ms.saturating_mul(1 << attempt.min(16)),
                            );
                            let wait = err.retry_after().unwrap_or(backoff);
                            if wait <= Duration::from_secs(retry.max_wait_secs) {
                                attempt += 1;
                                tracing::debug!(attempt, ?wait, %err, "retrying before the first token");
                                yield Ok(Guarded::Retrying { attempt, wait, reason: err.to_string() });
                                tokio::time::sleep(wait).await;
                                continue 'attempts;
                            }
                        }
                        yield Err(err);
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_error(backend: &dyn Backend) -> String {
        let mut stream = backend.stream(Request {
            system: String::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            model: backend.model().to_string(),
            max_tokens: 16,
            housekeeping: false,
            prefill: false,
        });
        let first = futures::executor::block_on(stream.next());
        match first {
            Some(Err(err)) => err.to_string(),
            other => panic!("an error first, not {other:?}"),
        }
    }

    #[test]
    fn a_deferred_backend_says_to_unlock_the_keyring_until_the_key_comes_then_is_that_backend() {
        let shape = Unusable::new(BackendKind::Anthropic, "claude-x", "stand-in");
        let made = Arc::new(std::sync::OnceLock::new());
        let deferred = Deferred::new(&shape, "ANTHROPIC_API_KEY", made.clone());
        assert_eq!(deferred.model(), "claude-x");
        let waiting = first_error(&deferred);
        assert!(
            waiting.contains("has not given ANTHROPIC_API_KEY yet") && waiting.contains("unlock"),
            "{waiting}"
        );
        let real: Arc<dyn Backend> = Arc::new(Unusable::new(
            BackendKind::Anthropic,
            "claude-y",
            "the real one",
        ));
        made.set(real).ok().unwrap();
        assert_eq!(deferred.model(), "claude-y");
        assert!(first_error(&deferred).contains("the real one"));
    }
}
