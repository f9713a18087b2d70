//! What both SSE backends share: sending the request, naming HTTP failures, the between-events
//! timeout, and turning the byte stream into events with the bounded [`parser`].

pub mod parser;

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use serde_json::Value;

use super::{EventStream, LlmError, LlmEvent};
pub use parser::Event;
use parser::{ParseError, Parser};

/// Reads one provider's SSE events into [`LlmEvent`]s.
pub trait Decoder: Send + 'static {
    /// The events one SSE event stands for, or the error it reports.
    fn event(&mut self, event: &Event) -> Result<Vec<LlmEvent>, LlmError>;
    /// Whether the end-of-stream marker was seen.
    fn finished(&self) -> bool;
}

/// The largest one event may be, in bytes: far above any provider's (a text delta is a few
/// hundred bytes), far below what would strain memory.
pub const EVENT_LIMIT: usize = 1 << 20;

/// The most bytes one response may send (128 MiB: a reply of 200,000 characters in Anthropic's
/// verbose events is about 8 MiB).
pub const STREAM_LIMIT: u64 = 128 << 20;

/// Parses a byte stream into SSE events. A byte that cannot be UTF-8, an event past
/// [`EVENT_LIMIT`] or a stream past [`STREAM_LIMIT`] ends it at once with a named failure; the
/// events before it still come.
pub fn events<S>(bytes: S) -> impl Stream<Item = Result<Event, LlmError>> + Send
where
    S: Stream<Item = Result<Bytes, LlmError>> + Send,
{
    async_stream::stream! {
        futures::pin_mut!(bytes);
        let mut parser = Parser::new(EVENT_LIMIT);
        let mut parsed = Vec::new();
        let mut total = 0u64;
        while let Some(chunk) = bytes.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(err) => {
                    yield Err(err);
                    return;
                }
            };
            total += chunk.len() as u64;
            if total > STREAM_LIMIT {
                yield Err(LlmError::TooMuch(format!(
                    "more than {} MiB for one reply",
                    STREAM_LIMIT >> 20
                )));
                return;
            }
            let fed = parser.feed(&chunk, &mut parsed);
            for event in parsed.drain(..) {
                yield Ok(event);
            }
            match fed {
                Ok(()) => {}
                Err(err @ ParseError::Utf8 { .. }) => {
                    yield Err(LlmError::Malformed(err.to_string()));
                    return;
                }
                Err(ParseError::TooLarge { limit }) => {
                    yield Err(LlmError::TooMuch(format!(
                        "an event larger than {} KiB",
                        limit >> 10
                    )));
                    return;
                }
            }
        }
    }
}

/// Decodes SSE events with `decoder` until its end marker; a stream that ends before it is
/// [`LlmError::Truncated`]. The first error ends the stream.
pub fn decode<S, D>(
    events: S,
    mut decoder: D,
) -> impl Stream<Item = Result<LlmEvent, LlmError>> + Send
where
    S: Stream<Item = Result<Event, LlmError>> + Send,
    D: Decoder,
{
    async_stream::stream! {
        futures::pin_mut!(events);
        while let Some(item) = events.next().await {
            match item.and_then(|event| decoder.event(&event)) {
                Ok(out) => {
                    for e in out {
                        yield Ok(e);
                    }
                    if decoder.finished() {
                        return;
                    }
                }
                Err(err) => {
                    yield Err(err);
                    return;
                }
            }
        }
        yield Err(LlmError::Truncated);
    }
}

/// Parses a data line's JSON into `T`, naming the failure.
pub fn parse<'a, T: serde::Deserialize<'a>>(data: &'a str) -> Result<T, LlmError> {
    serde_json::from_str(data).map_err(|e| {
        let shown: String = data.chars().take(80).collect();
        LlmError::Malformed(format!("{e} in data line `{shown}`"))
    })
}

/// The deepest cause of an error, e.g. "Connection refused (os error 111)".
fn root_cause(err: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Sends `request` and returns the streaming response, or a named failure (connect, timeout,
/// error status with its message and `retry-after`).
async fn send(
    request: reqwest::RequestBuilder,
    url: &str,
    connect_timeout: Duration,
) -> Result<reqwest::Response, LlmError> {
    let response = request.send().await.map_err(|err| {
        if err.is_connect() && err.is_timeout() {
            LlmError::ConnectTimeout {
                url: url.to_string(),
                secs: connect_timeout.as_secs_f64(),
            }
        } else if err.is_connect() {
            LlmError::Connect {
                url: url.to_string(),
                reason: root_cause(&err),
            }
        } else {
            LlmError::Broken(root_cause(&err))
        }
    })?;
    let status = response.status();
    if status.is_success() {
        return event_stream(response).await;
    }
    if status.is_redirection() {
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| capped(l.trim()))
            .unwrap_or_else(|| "an address it did not give".into());
        return Err(LlmError::Redirected {
            status: status.as_u16(),
            location,
        });
    }
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after_secs(v, std::time::SystemTime::now()));
    let body = error_body(response).await;
    let message = error_message(&body).unwrap_or_else(|| {
        if body.trim().is_empty() {
            status.canonical_reason().unwrap_or("error").to_string()
        } else {
            body.clone()
        }
    });
    Err(LlmError::Status {
        status: status.as_u16(),
        message: capped(message.trim()),
        retry_after,
    })
}

/// The `error.message` of a JSON body, as both providers (and most compatible servers) send it.
fn error_message(body: &str) -> Option<String> {
    serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

/// A successful response whose `content-type` says it is an event stream (or says nothing); any
/// other is [`LlmError::NotAStream`], with the start of what it was.
async fn event_stream(response: reqwest::Response) -> Result<reqwest::Response, LlmError> {
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence.is_empty() || essence == "text/event-stream" {
        return Ok(response);
    }
    let body = error_body(response).await;
    let excerpt = error_message(&body).unwrap_or(body);
    let excerpt = excerpt.trim();
    Err(LlmError::NotAStream {
        content_type: capped(&essence),
        excerpt: if excerpt.is_empty() {
            "an empty body".into()
        } else {
            capped(excerpt)
        },
    })
}

/// An error body is read up to this many bytes (a server may send an endless one).
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A server's error message is kept (and shown, and stored as a reply's reason) up to this many
/// characters.
pub const MESSAGE_LIMIT: usize = 300;

/// The first [`ERROR_BODY_LIMIT`] bytes of an error response's body, as text.
async fn error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(ERROR_BODY_LIMIT);
    String::from_utf8_lossy(&body).into_owned()
}

/// `text` cut to [`MESSAGE_LIMIT`] characters, with "…" where it was cut.
pub(crate) fn capped(text: &str) -> String {
    capped_at(text, MESSAGE_LIMIT)
}

/// `text` cut to `limit` characters, with "…" where it was cut.
pub(crate) fn capped_at(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// A `retry-after` value as seconds from `now`: delay-seconds ("120") or an HTTP date ("Wed, 21
/// Oct 2015 07:28:00 GMT"; one already past is no wait).
fn retry_after_secs(value: &str, now: std::time::SystemTime) -> Option<f64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then_some(secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).map_or(0.0, |d| d.as_secs_f64()))
}

/// A response body as bytes, failing with [`LlmError::IdleTimeout`] when nothing arrives for `idle`.
fn body_with_idle_timeout(
    response: reqwest::Response,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, LlmError>> + Send {
    async_stream::stream! {
        let body = response.bytes_stream();
        futures::pin_mut!(body);
        // One timer, pushed back as bytes arrive, rather than a new one per chunk.
        let quiet = tokio::time::sleep(idle);
        futures::pin_mut!(quiet);
        loop {
            let next = tokio::select! {
                biased;
                next = body.next() => next,
                _ = &mut quiet => {
                    yield Err(LlmError::IdleTimeout { secs: idle.as_secs_f64() });
                    return;
                }
            };
            match next {
                None => return,
                Some(Ok(bytes)) => {
                    quiet.as_mut().reset(tokio::time::Instant::now() + idle);
                    yield Ok(bytes);
                }
                Some(Err(err)) => {
                    yield Err(LlmError::Broken(root_cause(&err)));
                    return;
                }
            }
        }
    }
}

/// What both SSE backends share to send a request and read its stream.
pub struct Transport {
    client: reqwest::Client,
    connect: Duration,
    idle: Duration,
}

impl Transport {
    /// A client with the connect timeout; `idle` applies between pieces of each stream.
    pub fn new(timeouts: &crate::config::Timeouts) -> Result<Transport, super::BackendError> {
        let client = reqwest::Client::builder()
            .connect_timeout(timeouts.connect())
            // A redirect would carry the key and the conversation elsewhere: never followed.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| super::BackendError::Client(e.to_string()))?;
        Ok(Transport {
            client,
            connect: timeouts.connect(),
            idle: timeouts.idle(),
        })
    }

    /// POSTs `body` to `url` when the stream is first polled and decodes the answer with `decoder`.
    pub fn post<D: Decoder>(
        &self,
        url: String,
        headers: HeaderMap,
        body: &Value,
        decoder: D,
    ) -> EventStream {
        let request = self
            .client
            .post(&url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .headers(headers)
            .body(body.to_string());
        let (connect, idle) = (self.connect, self.idle);
        Box::pin(async_stream::stream! {
            let response = match send(request, &url, connect).await {
                Ok(r) => r,
                Err(err) => {
                    yield Err(err);
                    return;
                }
            };
            let decoded = decode(events(body_with_idle_timeout(response, idle)), decoder);
            futures::pin_mut!(decoded);
            while let Some(item) = decoded.next().await {
                yield item;
            }
        })
    }
}

/// A header holding the key named `var`, marked sensitive so no log or debug output shows it.
pub fn secret_header(
    key: &secrecy::SecretString,
    prefix: &str,
    var: &'static str,
) -> Result<HeaderValue, super::BackendError> {
    use secrecy::ExposeSecret;
    let mut value = HeaderValue::from_str(&format!("{prefix}{}", key.expose_secret()))
        .map_err(|_| super::BackendError::BadKey { var })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_as_an_http_date() {
        let now = httpdate::parse_http_date("Wed, 02 Dec 2026 06:00:00 GMT").unwrap();
        assert_eq!(retry_after_secs("7", now), Some(7.0));
        assert_eq!(retry_after_secs(" 1.5 ", now), Some(1.5));
        assert_eq!(
            retry_after_secs("Wed, 02 Dec 2026 06:00:30 GMT", now),
            Some(30.0)
        );
        assert_eq!(
            retry_after_secs("Wed, 02 Dec 2026 05:59:00 GMT", now),
            Some(0.0),
            "a date past is no wait"
        );
        assert_eq!(retry_after_secs("-3", now), None);
        assert_eq!(retry_after_secs("soon", now), None);
    }

    #[test]
    fn a_long_message_is_cut_at_the_limit_on_a_character() {
        let long = "é".repeat(MESSAGE_LIMIT + 50);
        let cut = capped(&long);
        assert_eq!(cut.chars().count(), MESSAGE_LIMIT + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(capped("short"), "short");
    }
}
