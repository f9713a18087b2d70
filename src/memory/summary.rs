//! The chat summary written after every completed reply: a short model call, in the background,
//! never holding up the reply; its embedding goes into the store and the recall index. A failure
//! is logged and changes nothing the user sees.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::recall::Recall;
use crate::config::RetrySettings;
use crate::llm::{self, Backend, Guarded, LlmError, LlmEvent, Message, MessageRole, Request};
use crate::store::{ChatId, Role, Store};

/// What the summariser is told.
const INSTRUCTIONS: &str = "You write short summaries of conversations between a user and their assistant, \
for the assistant to find again later. Reply with 2 or 3 plain sentences in the conversation's language: \
what the user wanted, what was found or decided, and names, dates or facts worth remembering. \
No preamble, no Markdown.";

/// The most of a conversation the summariser reads (its end).
const TRANSCRIPT_CHARS: usize = 6_000;

/// Records as a plain transcript, one "User:" / "Assistant:" paragraph each, envelopes stripped.
fn transcript(records: &[crate::store::Record]) -> String {
    let mut out = String::new();
    for r in records {
        let who = match r.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => continue,
        };
        out.push_str(&format!(
            "{who}: {}\n\n",
            crate::prompt::strip_envelopes(&r.text)
        ));
    }
    out
}

/// The request that summarises `chat`'s records.
pub fn request(records: &[crate::store::Record], model: &str) -> Request {
    let mut transcript = transcript(records);
    if transcript.chars().count() > TRANSCRIPT_CHARS {
        let skip = transcript.chars().count() - TRANSCRIPT_CHARS;
        transcript = format!("…{}", transcript.chars().skip(skip).collect::<String>());
    }
    Request {
        system: INSTRUCTIONS.to_string(),
        messages: vec![Message::text(
            MessageRole::User,
            format!(
                "The conversation:\n\n{}\nSummarise it in 2 or 3 sentences.",
                transcript.trim_end()
            ),
        )],
        tools: Vec::new(),
        model: model.to_string(),
        max_tokens: 200,
    }
}

/// Summarises `chat`, embeds the summary and keeps both. Errors are returned for the log.
pub async fn summarise(
    backend: Arc<dyn Backend>,
    store: Store,
    recall: Arc<Recall>,
    chat: ChatId,
    guard: Guard,
) -> Result<(), String> {
    let records = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || store.records(chat))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?
    };
    let request = request(&records, backend.model());
    let text = complete(backend, request, &guard)
        .await
        .map_err(|err| format!("the summary request failed: {err}"))?;
    if text.is_empty() {
        return Err("the model wrote an empty summary".into());
    }
    tokio::task::spawn_blocking(move || {
        let vector = recall.embed(&text).map_err(|e| e.to_string())?;
        store
            .upsert_summary(chat, &text, &vector)
            .map_err(|e| e.to_string())?;
        recall.remember(chat, &vector);
        Ok(())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// What the compactor is told.
const COMPACT_INSTRUCTIONS: &str = "You condense the earlier part of a long conversation between a user and \
their assistant so the assistant can continue it without the full text. Keep every fact, decision, name, \
number and open question that may matter later; drop pleasantries. Write a compact paragraph or a short list, \
in the conversation's language, with no preamble.";

/// The request that folds `older` records (after the summary of what came before them, if any)
/// into one summary.
pub fn compact_request(
    earlier: Option<&str>,
    older: &[crate::store::Record],
    model: &str,
) -> Request {
    let mut text = String::new();
    if let Some(earlier) = earlier.filter(|e| !e.trim().is_empty()) {
        text.push_str(&format!(
            "Summary of what came before:\n{}\n\n",
            earlier.trim()
        ));
    }
    text.push_str("The conversation:\n\n");
    text.push_str(&transcript(older));
    text.push_str("Condense all of the above.");
    Request {
        system: COMPACT_INSTRUCTIONS.to_string(),
        messages: vec![Message::text(MessageRole::User, text)],
        tools: Vec::new(),
        model: model.to_string(),
        max_tokens: 600,
    }
}

/// How a housekeeping call reaches the backend: the same guarded path as a reply — its connect
/// and idle timeouts (the backend's), retries before the first token and the first-token deadline.
#[derive(Debug, Clone)]
pub struct Guard {
    /// Retries before the first token.
    pub retry: RetrySettings,
    /// How long the first token may take.
    pub first_token: Duration,
}

/// Streams a request's text to its end (no tools) on the guarded path.
pub async fn complete(
    backend: Arc<dyn Backend>,
    request: Request,
    guard: &Guard,
) -> Result<String, LlmError> {
    let stream = llm::guarded(backend, request, guard.retry.clone(), guard.first_token);
    futures::pin_mut!(stream);
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        match event? {
            Guarded::Event(LlmEvent::TextDelta { text: delta }) => text.push_str(&delta),
            Guarded::Retrying {
                attempt, reason, ..
            } => {
                tracing::debug!(attempt, %reason, "a housekeeping call is tried again")
            }
            Guarded::Event(_) => {}
        }
    }
    Ok(crate::prompt::strip_envelopes(text.trim()))
}

/// A rough token count: four characters a token.
pub fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}
