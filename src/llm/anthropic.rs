//! Anthropic's Messages API, streamed.

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};

use super::sse::{self, Decoder};
use super::{
    Backend, BackendError, EventStream, LlmError, LlmEvent, MessageRole, Request, StopReason,
};
use crate::config::{AnthropicSettings, BackendKind, Timeouts};

/// The Anthropic backend.
pub struct Anthropic {
    settings: AnthropicSettings,
    key: SecretString,
    client: reqwest::Client,
    connect: Duration,
    idle: Duration,
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
            client: sse::client(timeouts.connect())?,
            settings,
            key,
            connect: timeouts.connect(),
            idle: timeouts.idle(),
            concurrency,
        })
    }

    fn url(&self) -> String {
        format!(
            "{}/v1/messages",
            self.settings.base_url.trim_end_matches('/')
        )
    }
}

/// The request body for the Messages API.
pub fn body(request: &Request) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| {
            json!({
                "role": match m.role { MessageRole::User => "user", MessageRole::Assistant => "assistant" },
                "content": m.content,
            })
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

    fn stream(&self, request: Request) -> EventStream {
        let url = self.url();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(version) = HeaderValue::from_str(&self.settings.version) {
            headers.insert("anthropic-version", version);
        }
        match HeaderValue::from_str(self.key.expose_secret()) {
            Ok(mut key) => {
                key.set_sensitive(true);
                headers.insert("x-api-key", key);
            }
            Err(_) => {
                return Box::pin(futures::stream::once(async {
                    Err(LlmError::Malformed(
                        "ANTHROPIC_API_KEY holds characters that cannot go in a header".into(),
                    ))
                }))
            }
        }
        let builder = self
            .client
            .post(&url)
            .headers(headers)
            .body(body(&request).to_string());
        sse::stream(
            builder,
            url,
            self.connect,
            self.idle,
            MessagesDecoder::default(),
        )
    }
}

/// Reads the Messages API's events.
#[derive(Default)]
pub struct MessagesDecoder {
    tool_blocks: HashSet<usize>,
    tool_indexes: Vec<usize>,
    done: bool,
}

impl MessagesDecoder {
    /// Tool calls are numbered from 0 in the order they start, whatever their block index.
    fn tool_index(&self, block: usize) -> usize {
        self.tool_indexes
            .iter()
            .position(|b| *b == block)
            .unwrap_or(self.tool_indexes.len())
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
    fn event(&mut self, event: &eventsource_stream::Event) -> Result<Vec<LlmEvent>, LlmError> {
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
                    self.tool_blocks.insert(block);
                    let index = self.tool_index(block);
                    self.tool_indexes.push(block);
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
            "content_block_stop" if self.tool_blocks.contains(&block) => {
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
                return Err(LlmError::Api {
                    kind: error.kind.into_owned(),
                    message: error.message.into_owned(),
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
