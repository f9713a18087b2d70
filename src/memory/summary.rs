//! The chat summary written after every completed reply: a short model call, in the background,
//! never holding up the reply; its embedding goes into the store and the recall index. A failure
//! is logged and changes nothing the user sees.

use std::sync::Arc;

use futures::StreamExt;

use super::recall::Recall;
use crate::llm::{self, Backend, Guarded, LlmError, LlmEvent, Message, MessageRole, Request};
use crate::store::{ChatId, Role, Store};

/// What the summariser is told.
const INSTRUCTIONS: &str = "You keep a short running summary of a conversation between a user and their \
assistant, for the assistant to find again later. You are given the summary so far (if any) and what was \
said since. Reply with the updated summary: 2 to 4 plain sentences in the conversation's language covering \
the whole conversation — what the user wanted, what was found or decided, and names, dates or facts worth \
remembering, the earliest ones included. No preamble, no Markdown.";

/// The most of a conversation one summary call reads; a longer stretch is summarised in several
/// calls, each rolling on from the one before.
const TRANSCRIPT_CHARS: usize = 6_000;

/// One record as a transcript paragraph ("User: …"), envelopes stripped; `None` for tool records.
fn paragraph(r: &crate::store::Record) -> Option<String> {
    let who = match r.role {
        Role::User => "User",
        Role::Assistant => "Assistant",
        Role::Tool => return None,
    };
    Some(format!(
        "{who}: {}\n\n",
        crate::envelope::strip_envelopes(&r.text).trim()
    ))
}

/// Records as a plain transcript, one "User:" / "Assistant:" paragraph each.
fn transcript(records: &[crate::store::Record]) -> String {
    records.iter().filter_map(paragraph).collect()
}

/// Cuts a text longer than `chars` in its middle, keeping its start and its end.
fn shortened(text: String, chars: usize) -> String {
    let count = text.chars().count();
    if count <= chars {
        return text;
    }
    let half = chars / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    format!("{head} … {tail}")
}

/// The first stretch of `records` to summarise in one call: as many records as fit in
/// [`TRANSCRIPT_CHARS`] (at least one), as a transcript, and how many it took.
pub fn next_stretch(records: &[crate::store::Record]) -> (String, usize) {
    let mut text = String::new();
    let mut taken = 0;
    for r in records {
        let said = paragraph(r).unwrap_or_default();
        let length = text.chars().count() + said.chars().count();
        if taken > 0 && length > TRANSCRIPT_CHARS {
            break;
        }
        text.push_str(&said);
        taken += 1;
    }
    (shortened(text, TRANSCRIPT_CHARS), taken)
}

/// The request that rolls a chat's summary on: the summary so far (empty: none) and the
/// transcript of what was said since.
pub fn request(previous: &str, since: &str, model: &str) -> Request {
    let mut text = String::new();
    if !previous.trim().is_empty() {
        text.push_str(&format!("The summary so far:\n{}\n\n", previous.trim()));
    }
    text.push_str(&format!(
        "{}\n\n{}\n\nWrite the updated summary of the whole conversation in 2 to 4 sentences.",
        if previous.trim().is_empty() {
            "The conversation:"
        } else {
            "What was said since:"
        },
        since.trim_end()
    ));
    Request {
        system: INSTRUCTIONS.to_string(),
        messages: vec![Message::text(MessageRole::User, text)],
        tools: Vec::new(),
        model: model.to_string(),
        max_tokens: 200,
        housekeeping: true,
        prefill: false,
    }
}

/// Rolls `chat`'s summary on over the records since the last one — in several calls when much
/// was said (a chat never summarised, or summarised long ago) — and keeps each step with its
/// embedding, so a call cut short loses nothing already done. Errors are returned for the log.
pub async fn summarise(
    backend: Arc<dyn Backend>,
    store: Store,
    recall: Arc<Recall>,
    chat: ChatId,
    guard: Guard,
) -> Result<(), String> {
    loop {
        let (previous, upto, records) = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                let (previous, upto) = store.summary_start(chat)?;
                let records = store.records_after(chat, upto)?;
                Ok::<_, crate::store::StoreError>((previous, upto, records))
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?
        };
        let (since, taken) = next_stretch(&records);
        let Some(last) = records.get(taken.max(1) - 1) else {
            return Ok(());
        };
        let covered = last.seq;
        let rest = records.len() - taken;
        tracing::debug!(%chat, upto, covered, rest, "rolling a summary on");
        let text = if since.trim().is_empty() {
            // Only tool records since: the summary stands, now covering them too.
            previous.clone()
        } else {
            complete(
                backend.clone(),
                request(&previous, &since, backend.model()),
                &guard,
                SUMMARY_LIMIT,
            )
            .await
            .map_err(|err| format!("the summary request failed: {err}"))?
        };
        if text.is_empty() {
            return Err("the model wrote an empty summary".into());
        }
        let (store, recall) = (store.clone(), recall.clone());
        tokio::task::spawn_blocking(move || {
            let vector = recall.embed(&text).map_err(|e| e.to_string())?;
            if store
                .upsert_summary(chat, &text, &vector, covered)
                .map_err(|e| e.to_string())?
            {
                recall.remember(chat, &vector);
            }
            Ok::<_, String>(())
        })
        .await
        .map_err(|e| e.to_string())??;
        if rest == 0 {
            return Ok(());
        }
    }
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
        housekeeping: false,
        prefill: false,
    }
}

/// How a housekeeping call reaches the backend: the same guarded path as a reply — its connect
/// and idle timeouts (the backend's), retries before the first token, the first-token deadline
/// and the stall limit.
pub use crate::llm::Guard;

/// Streams a request's text to its end (no tools) on the guarded path.
pub async fn complete(
    backend: Arc<dyn Backend>,
    request: Request,
    guard: &Guard,
    limit: usize,
) -> Result<String, LlmError> {
    let stream = llm::guarded(backend, request, guard.clone());
    futures::pin_mut!(stream);
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        match event? {
            Guarded::Event(LlmEvent::TextDelta { text: delta }) => {
                text.push_str(&delta);
                // Bounded by Jarvis, not by the server's token limit: what is past the cut is
                // not read (the request ends when the stream is dropped).
                if text.len() > limit.saturating_mul(4) {
                    break;
                }
            }
            Guarded::Retrying {
                attempt, reason, ..
            } => {
                tracing::debug!(attempt, %reason, "a housekeeping call is tried again")
            }
            Guarded::Event(_) => {}
        }
    }
    Ok(cut_at_sentence(
        &crate::envelope::strip_envelopes(text.trim()),
        limit,
    ))
}

/// The longest summary of a chat kept (it is recalled into other chats' system prompts).
pub const SUMMARY_LIMIT: usize = 800;

/// The longest summary of a compacted chat's older part kept.
pub const COMPACTION_LIMIT: usize = 6_000;

/// `text` within `limit` characters: whole, or cut after its last sentence that fits (else at a
/// word, marked "…").
pub fn cut_at_sentence(text: &str, limit: usize) -> String {
    let Some((end, _)) = text.char_indices().nth(limit) else {
        return text.to_string();
    };
    let head = &text[..end];
    let sentence = head
        .char_indices()
        .filter(|&(i, c)| match c {
            // (Chinese and Japanese put no space after a sentence.)
            '。' | '！' | '？' => true,
            '.' | '!' | '?' => head[i + c.len_utf8()..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace),
            _ => false,
        })
        .map(|(i, c)| i + c.len_utf8())
        .next_back()
        .filter(|&at| at * 3 >= head.len());
    match sentence {
        Some(at) => head[..at].to_string(),
        None => {
            let at = head.rfind(char::is_whitespace).unwrap_or(head.len());
            format!("{}…", head[..at].trim_end())
        }
    }
}

/// A rough token count: four characters a token.
pub fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_summary_is_cut_after_its_last_whole_sentence_within_the_limit() {
        let text = "The user asked about Paris. It is the capital. ".repeat(40);
        let cut = cut_at_sentence(&text, 100);
        assert_eq!(
            cut,
            "The user asked about Paris. It is the capital. The user asked about Paris. It is the capital."
        );
        assert_eq!(cut_at_sentence("Short.", 100), "Short.");
        let words = "word ".repeat(100);
        let cut = cut_at_sentence(&words, 52);
        assert!(cut.ends_with("word…") && cut.chars().count() <= 53, "{cut}");
        assert_eq!(cut_at_sentence("好。很好。", 3), "好。");
    }
}
