//! Anthropic's Messages API, streamed.

use reqwest::header::{HeaderMap, HeaderValue};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::HashMap;

use super::sse::{self, secret_header, Decoder, Transport};
use super::{
    Backend, BackendError, EventStream, LlmError, LlmEvent, MessageRole, Request, StopReason,
};
use crate::config::{AnthropicSettings, BackendKind, Timeouts};

/// The Anthropic backend.
pub struct Anthropic {
    settings: AnthropicSettings,
    headers: HeaderMap,
    transport: Transport,
    concurrency: usize,
}

impl Anthropic {
    /// Makes the backend; `key` is sent only in the `x-api-key` header.
    pub fn new(
        settings: AnthropicSettings,
        key: SecretString,
        timeouts: &Timeouts,
        concurrency: usize,
    ) -> Result<Self, BackendError> {
        Ok(Anthropic {
            transport: Transport::new(timeouts)?,
            headers: headers(&settings, &key)?,
            settings,
            concurrency,
        })
    }
}

/// The headers every request carries: the key (only here) and the API version.
pub fn headers(
    settings: &AnthropicSettings,
    key: &SecretString,
) -> Result<HeaderMap, BackendError> {
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-api-key",
        secret_header(key, "", BackendKind::Anthropic.key_var_of())?,
    );
    let version = HeaderValue::from_str(&settings.version)
        .map_err(|_| BackendError::BadVersion(settings.version.clone()))?;
    headers.insert("anthropic-version", version);
    Ok(headers)
}

/// Where Messages API requests go for a base URL.
pub fn url(base_url: &str) -> String {
    format!("{}/v1/messages", base_url.trim_end_matches('/'))
}

/// The request body for the Messages API.
pub fn body(request: &Request) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                MessageRole::User => "user",
                MessageRole::Assistant => "assistant",
            };
            if m.tool_calls.is_empty() && m.tool_results.is_empty() {
                return json!({"role": role, "content": m.content});
            }
            // Content blocks: results first (they answer the previous turn), then text, then calls.
            let mut blocks: Vec<Value> = m
                .tool_results
                .iter()
                .map(|r| json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content, "is_error": r.is_error}))
                .collect();
            if !m.content.is_empty() {
                blocks.push(json!({"type": "text", "text": m.content}));
            }
            blocks.extend(m.tool_calls.iter().map(
                |c| json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}),
            ));
            json!({"role": role, "content": blocks})
        })
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "system": request.system,
        "messages": messages,
        "stream": true,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
    }
    body
}

impl Backend for Anthropic {
    fn kind(&self) -> BackendKind {
        BackendKind::Anthropic
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

    fn context_tokens(&self) -> usize {
        200_000
    }

    fn stream(&self, request: Request) -> EventStream {
        self.transport.post(
            url(&self.settings.base_url),
            self.headers.clone(),
            &body(&request),
            MessagesDecoder::default(),
        )
    }
}

/// Reads the Messages API's events.
#[derive(Default)]
pub struct MessagesDecoder {
    /// Each tool block's call index: calls are numbered from 0 in the order they start,
    /// whatever their block index (found in O(1) however many a server sends).
    tool_blocks: HashMap<usize, usize>,
    done: bool,
}

impl MessagesDecoder {
    fn tool_index(&self, block: usize) -> usize {
        self.tool_blocks
            .get(&block)
            .copied()
            .unwrap_or(self.tool_blocks.len())
    }
}

/// One Messages API event; borrowed where it can be, so a delta costs one allocation.
#[derive(Deserialize)]
struct StreamEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: usize,
    #[serde(default, borrow)]
    delta: Option<EventDelta<'a>>,
    #[serde(default, borrow)]
    content_block: Option<ContentBlock<'a>>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default, borrow)]
    error: Option<ErrorBody<'a>>,
}

#[derive(Deserialize)]
struct EventDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ContentBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    message: Cow<'a, str>,
}

impl Decoder for MessagesDecoder {
    fn event(&mut self, event: &sse::Event) -> Result<Vec<LlmEvent>, LlmError> {
        if event.data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let data: StreamEvent<'_> = sse::parse(&event.data)?;
        let block = data.index;
        Ok(match data.kind.as_ref() {
            "message_start" => vec![LlmEvent::Usage {
                input_tokens: data
                    .message
                    .and_then(|m| m.usage)
                    .and_then(|u| u.input_tokens),
                output_tokens: None,
            }],
            "content_block_start" => match data.content_block {
                Some(b) if b.kind == "tool_use" => {
                    let index = self.tool_index(block);
                    self.tool_blocks.insert(block, index);
                    vec![LlmEvent::ToolCallStart {
                        index,
                        id: b.id.unwrap_or_default().into_owned(),
                        name: b.name.unwrap_or_default().into_owned(),
                    }]
                }
                _ => Vec::new(),
            },
            "content_block_delta" => match data.delta {
                Some(EventDelta {
                    kind: Some(kind),
                    text,
                    partial_json,
                    ..
                }) => match kind.as_ref() {
                    "text_delta" => text
                        .filter(|t| !t.is_empty())
                        .map(|t| LlmEvent::TextDelta {
                            text: t.into_owned(),
                        })
                        .into_iter()
                        .collect(),
                    "input_json_delta" => vec![LlmEvent::ToolCallArgs {
                        index: self.tool_index(block),
                        fragment: partial_json.unwrap_or_default().into_owned(),
                    }],
                    // Thinking and signature deltas are not shown.
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            },
            "content_block_stop" if self.tool_blocks.contains_key(&block) => {
                vec![LlmEvent::ToolCallEnd {
                    index: self.tool_index(block),
                }]
            }
            "message_delta" => {
                let mut out = Vec::new();
                if let Some(reason) = data.delta.and_then(|d| d.stop_reason) {
                    out.push(LlmEvent::Stop {
                        reason: StopReason::parse(&reason),
                    });
                }
                if let Some(tokens) = data.usage.and_then(|u| u.output_tokens) {
                    out.push(LlmEvent::Usage {
                        input_tokens: None,
                        output_tokens: Some(tokens),
                    });
                }
                out
            }
            "message_stop" => {
                self.done = true;
                Vec::new()
            }
            "error" => {
                let error = data.error.unwrap_or(ErrorBody {
                    kind: "error".into(),
                    message: "".into(),
                });
                // (A server's words, capped as an error body's are.)
                return Err(LlmError::Api {
                    kind: sse::capped(&error.kind),
                    message: sse::capped(&error.message),
                });
            }
            // ping, content_block_stop of text, and event types added later.
            _ => Vec::new(),
        })
    }

    fn finished(&self) -> bool {
        self.done
    }
}
