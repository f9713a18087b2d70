//! One reply's task: wait for the backend if it is busy, stream the answer, store progress as it is
//! made, and end in exactly one state. Only its cancellation token (Stop) cuts it short.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::events::{Event, ReplyLog, WAITING_MESSAGE};
use super::{blocking, Command, ServiceOptions};
use crate::llm::{self, Backend, Guarded, LlmEvent, StopReason};
use crate::store::{ChatId, RecordId, ReplyId, ReplyState, Store, LEASE};

pub(crate) struct ReplyJob {
    pub chat: ChatId,
    pub reply: ReplyId,
    pub question: RecordId,
    pub store: Store,
    pub backend: Arc<dyn Backend>,
    pub permits: Arc<Semaphore>,
    pub permit: Option<OwnedSemaphorePermit>,
    pub cancel: CancellationToken,
    pub log: Arc<ReplyLog>,
    pub options: ServiceOptions,
    pub done: mpsc::Sender<Command>,
    /// How the question was asked.
    pub mode: crate::prompt::Mode,
}

/// How a reply ended.
struct Outcome {
    state: ReplyState,
    reason: Option<String>,
}

impl Outcome {
    fn stopped() -> Outcome {
        Outcome {
            state: ReplyState::Stopped,
            reason: Some("stopped by the user".into()),
        }
    }

    fn failed(reason: impl ToString) -> Outcome {
        Outcome {
            state: ReplyState::Failed,
            reason: Some(reason.to_string()),
        }
    }
}

fn ends_sentence(text: &str) -> bool {
    text.contains(['.', '!', '?', '\n', '。', '！', '？'])
}

impl ReplyJob {
    pub(crate) async fn run(mut self) {
        self.log.push(Event::ReplyStarted {
            chat: self.chat,
            reply: self.reply,
            question: self.question,
        });
        let mut text = String::new();
        let outcome = match self.permit.take() {
            Some(permit) => self.write(permit, &mut text).await,
            None => match self.wait_for_backend().await {
                Some(permit) => self.write(permit, &mut text).await,
                None => Outcome::stopped(),
            },
        };
        let (store, reply) = (self.store.clone(), self.reply);
        let (state, reason) = (outcome.state, outcome.reason.clone());
        let saved = {
            // A label or state block the model copied from the request is not kept.
            let text = crate::prompt::strip_envelopes(&text);
            blocking(move || store.finish_reply(reply, state, &text, reason.as_deref())).await
        };
        if let Err(err) = saved {
            tracing::error!(%err, reply = %self.reply, "could not store the end of a reply");
        }
        tracing::debug!(reply = %self.reply, state = %outcome.state, "reply ended");
        self.log.finish(Event::ReplyEnded {
            reply: self.reply,
            state: outcome.state,
            reason: outcome.reason,
        });
        // The service may be gone already (the process is ending); nothing is owed to it then.
        let _ = self
            .done
            .send(Command::Finished {
                chat: self.chat,
                reply: self.reply,
            })
            .await;
    }

    /// Waits, in arrival order, for the backend; `None` when stopped meanwhile.
    async fn wait_for_backend(&self) -> Option<OwnedSemaphorePermit> {
        self.log.push(Event::Waiting {
            reply: self.reply,
            message: WAITING_MESSAGE.into(),
        });
        let acquire = self.permits.clone().acquire_owned();
        tokio::pin!(acquire);
        let mut heartbeat = tokio::time::interval(LEASE / 3);
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return None,
                permit = &mut acquire => {
                    let permit = permit.ok()?;
                    let (store, reply) = (self.store.clone(), self.reply);
                    if let Err(err) = blocking(move || store.set_live_state(reply, ReplyState::Running)).await {
                        tracing::warn!(%err, "could not store that a reply runs");
                    }
                    return Some(permit);
                }
                _ = heartbeat.tick() => {
                    let (store, reply) = (self.store.clone(), self.reply);
                    if let Err(err) = blocking(move || store.renew_lease(reply)).await {
                        tracing::warn!(%err, "could not renew a reply's lease");
                    }
                }
            }
        }
    }

    async fn write(&self, _permit: OwnedSemaphorePermit, text: &mut String) -> Outcome {
        self.log.push(Event::Running { reply: self.reply });
        let question = self.question;
        let store = self.store.clone();
        let (history, facts, previous) = match blocking(move || {
            Ok((
                store.history(question)?,
                store.facts()?,
                store.reply_before(question)?,
            ))
        })
        .await
        {
            Ok(found) => found,
            Err(err) => return Outcome::failed(err),
        };
        let mut state = crate::prompt::State::now(self.mode);
        state.cut = previous.as_ref().and_then(crate::prompt::Cut::of);
        let request = crate::prompt::build_request(
            &history,
            crate::prompt::system_prompt(&facts, &self.options.user_name),
            &state,
            self.backend.model(),
            self.backend.max_tokens(),
        );
        let stream = llm::guarded(
            self.backend.clone(),
            request,
            self.options.retry.clone(),
            self.options.first_token,
        );
        futures::pin_mut!(stream);

        // Progress goes to a writer task so a slow disk never holds up the stream.
        let (progress, writer) = progress_writer(self.store.clone(), self.reply);
        let mut saved_at = Instant::now();
        let mut dirty = false;
        let mut heartbeat = tokio::time::interval(LEASE / 3);
        let mut cut_at_limit = false;
        let outcome = loop {
            let flush_at = saved_at + self.options.progress;
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break Outcome::stopped(),
                item = stream.next() => match item {
                    None => break Outcome {
                        state: ReplyState::Done,
                        reason: cut_at_limit.then(|| "the answer was cut off at the token limit".to_string()),
                    },
                    Some(Ok(Guarded::Event(LlmEvent::TextDelta { text: delta }))) => {
                        text.push_str(&delta);
                        let sentence = ends_sentence(&delta);
                        self.log.push(Event::Delta { reply: self.reply, text: delta });
                        dirty = true;
                        if sentence || saved_at.elapsed() >= self.options.progress {
                            progress.send_replace(text.clone());
                            saved_at = Instant::now();
                            dirty = false;
                        }
                    }
                    Some(Ok(Guarded::Event(LlmEvent::Stop { reason }))) => {
                        cut_at_limit = reason == StopReason::MaxTokens;
                    }
                    Some(Ok(Guarded::Event(event))) => {
                        tracing::trace!(?event, "backend event");
                    }
                    Some(Ok(Guarded::Retrying { attempt, wait, reason })) => {
                        self.log.push(Event::Retrying {
                            reply: self.reply,
                            attempt,
                            wait_ms: wait.as_millis() as u64,
                            reason,
                        });
                    }
                    Some(Err(err)) => break Outcome::failed(err),
                },
                _ = tokio::time::sleep_until(flush_at), if dirty => {
                    progress.send_replace(text.clone());
                    saved_at = Instant::now();
                    dirty = false;
                }
                _ = heartbeat.tick() => {
                    // Saving the same text renews the lease, so a long first-token wait stays ours.
                    progress.send_replace(text.clone());
                }
            }
        };
        drop(progress);
        if writer.await.is_err() {
            tracing::warn!("the progress writer ended abnormally");
        }
        outcome
    }
}

/// A task that stores the latest text it is sent, skipping versions it had no time for.
fn progress_writer(
    store: Store,
    reply: ReplyId,
) -> (watch::Sender<String>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = watch::channel(String::new());
    rx.mark_unchanged();
    let task = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let text = rx.borrow_and_update().clone();
            let store = store.clone();
            if let Err(err) = blocking(move || store.save_progress(reply, &text)).await {
                tracing::warn!(%err, %reply, "could not store a reply's progress");
            }
        }
    });
    (tx, task)
}
