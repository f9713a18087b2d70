//! OpenAI-compatible chat completions, streamed (OpenAI, Ollama, llama.cpp server, LM Studio, vLLM).

use reqwest::header::{HeaderMap, AUTHORIZATION};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::BTreeSet;

use super::sse::{self, secret_header, Decoder, Transport};
use super::{
    Backend, BackendError, EventStream, LlmError, LlmEvent, MessageRole, Request, StopReason,
};
use crate::config::{BackendKind, OpenAiSettings, Timeouts};

/// The OpenAI-compatible backend.
pub struct OpenAi {
    kind: BackendKind,
    settings: OpenAiSettings,
    headers: HeaderMap,
    transport: Transport,
    concurrency: usize,
}

impl OpenAi {
    /// Makes the backend; `key`, when given, is sent only as a bearer token.
    pub fn new(
        kind: BackendKind,
        settings: OpenAiSettings,
        key: Option<SecretString>,
        timeouts: &Timeouts,
        concurrency: usize,
    ) -> Result<Self, BackendError> {
        Ok(OpenAi {
            kind,
            transport: Transport::new(timeouts)?,
            settings,
            headers: headers(key.as_ref())?,
            concurrency,
        })
    }
}

/// The headers every request carries: the key as a bearer token, when there is one.
pub fn headers(key: Option<&SecretString>) -> Result<HeaderMap, BackendError> {
    let mut headers = HeaderMap::new();
    if let Some(key) = key {
        headers.insert(
            AUTHORIZATION,
            secret_header(key, "Bearer ", BackendKind::Openai.key_var_of())?,
        );
    }
    Ok(headers)
}

/// Where chat-completion requests go for a base URL.
pub fn url(base_url: &str) -> String {
    format!("{}/chat/completions", base_url.trim_end_matches('/'))
}

/// The request body for chat completions, with the settings' sampling where they give one.
pub fn body(request: &Request, settings: &OpenAiSettings) -> Value {
    let mut messages = vec![json!({"role": "system", "content": request.system})];
    for m in &request.messages {
        // Results go back as one "tool" message per call, before any text of the same turn.
        for r in &m.tool_results {
            messages.push(json!({"role": "tool", "tool_call_id": r.id, "content": r.content}));
        }
        let role = match m.role {
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
        };
        if m.tool_calls.is_empty() {
            if !m.content.is_empty() || m.tool_results.is_empty() {
                messages.push(json!({"role": role, "content": m.content}));
            }
        } else {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.to_string()}}))
                .collect();
            let content = if m.content.is_empty() {
                Value::Null
            } else {
                json!(m.content)
            };
            messages.push(json!({"role": role, "content": content, "tool_calls": calls}));
        }
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(t) = settings.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(p) = settings.top_p {
        body["top_p"] = json!(p);
    }
    if let Some(seed) = settings.seed {
        body["seed"] = json!(seed);
    }
    if request.housekeeping && settings.jarvis_server {
        body["jarvis_housekeeping"] = json!(true);
    }
    if request.prefill && settings.jarvis_server {
        body["jarvis_prefill"] = json!(true);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }})
            })
            .collect();
    }
    body
}

impl Backend for OpenAi {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn model(&self) -> &str {
        &self.settings.model
    }

    fn max_tokens(&self) -> u32 {
        self.settings.max_tokens
    }

    fn max_concurrent(&self) -> usize {
        self.concurrency
    }

    fn stream(&self, request: Request) -> EventStream {
        self.transport.post(
            url(&self.settings.base_url),
            self.headers.clone(),
            &body(&request, &self.settings),
            ChunkDecoder::default(),
        )
    }
}

/// Reads chat-completion chunks.
#[derive(Default)]
pub struct ChunkDecoder {
    open_calls: BTreeSet<usize>,
    done: bool,
}

impl ChunkDecoder {
    fn close_calls(&mut self, out: &mut Vec<LlmEvent>) {
        out.extend(
            std::mem::take(&mut self.open_calls)
                .into_iter()
                .map(|index| LlmEvent::ToolCallEnd { index }),
        );
    }
}

/// One chat-completion chunk; borrowed where it can be, so a delta costs one allocation.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: usize,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl Decoder for ChunkDecoder {
    fn event(&mut self, event: &sse::Event) -> Result<Vec<LlmEvent>, LlmError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        if data == "[DONE]" {
            self.close_calls(&mut out);
            self.done = true;
            return Ok(out);
        }
        let chunk: Chunk<'_> = sse::parse(data)?;
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            let kind = error
                .get("type")
                .or_else(|| error.get("code"))
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                })
                .unwrap_or_else(|| "error".to_string());
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| error.to_string());
            // (A server's words, capped as an error body's are.)
            return Err(LlmError::Api {
                kind: sse::capped(&kind),
                message: sse::capped(&message),
            });
        }
        if let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    out.push(LlmEvent::TextDelta {
                        text: text.into_owned(),
                    });
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    let index = call.index;
                    let (name, arguments) = match call.function {
                        Some(f) => (f.name, f.arguments),
                        None => (None, None),
                    };
                    if self.open_calls.insert(index) {
                        out.push(LlmEvent::ToolCallStart {
                            index,
                            id: call.id.unwrap_or_default().into_owned(),
                            name: name.unwrap_or_default().into_owned(),
                        });
                    }
                    if let Some(fragment) = arguments.filter(|a| !a.is_empty()) {
                        out.push(LlmEvent::ToolCallArgs {
                            index,
                            fragment: fragment.into_owned(),
                        });
                    }
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.close_calls(&mut out);
                out.push(LlmEvent::Stop {
                    reason: StopReason::parse(&reason),
                });
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(LlmEvent::Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            });
        }
        Ok(out)
    }

    fn finished(&self) -> bool {
        self.done
    }
}
