//! The conversation service: one actor task owns which chats are replying and who is attached; a
//! cheap [`Service`] handle is what every shell holds. Replies run as tasks the service owns, so a
//! window or a CLI that goes away never stops one: only [`Service::stop`] does.

mod events;
mod reply;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio_util::sync::CancellationToken;

pub use events::{Attachment, Event, WAITING_MESSAGE};

use crate::config::{RetrySettings, Settings};
use crate::llm::Backend;
use crate::store::{Chat, ChatId, Record, RecordId, ReplyId, ReplyState, Store, StoreError};
use events::ReplyLog;

/// Why the service could not do something.
#[derive(Debug, Error)]
pub enum ServiceError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The service task is gone (the app is shutting down).
    #[error("the conversation service has stopped")]
    Gone,
    /// Nothing to try again.
    #[error("chat {0} has no failed or interrupted reply to try again")]
    NothingToRetry(ChatId),
    /// An empty question.
    #[error("the question is empty")]
    EmptyQuestion,
}

/// Why a question was not taken.
#[derive(Debug, Error)]
pub enum AskError {
    /// The chat is replying; one question at a time.
    #[error("chat {0} is still replying; wait for the reply to end or stop it")]
    Busy(ChatId),
    /// Anything else.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl From<StoreError> for AskError {
    fn from(err: StoreError) -> Self {
        AskError::Service(ServiceError::Store(err))
    }
}

/// How replies are written.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Retries before the first token.
    pub retry: RetrySettings,
    /// How long the first token may take.
    pub first_token: Duration,
    /// Progress is stored at each sentence end or after this long.
    pub progress: Duration,
    /// The user's name, for the profile block.
    pub user_name: String,
}

impl ServiceOptions {
    /// The options the settings give.
    pub fn from_settings(settings: &Settings) -> ServiceOptions {
        ServiceOptions {
            retry: settings.retry.clone(),
            first_token: settings.timeouts.first_token(),
            progress: Duration::from_millis(settings.replies.progress_ms.max(1)),
            user_name: settings.profile.name.clone(),
        }
    }
}

pub(crate) enum Command {
    Ask {
        chat: ChatId,
        text: String,
        respond: oneshot::Sender<Result<ReplyId, AskError>>,
    },
    Retry {
        chat: ChatId,
        respond: oneshot::Sender<Result<ReplyId, AskError>>,
    },
    Attach {
        chat: ChatId,
        respond: oneshot::Sender<Result<Attachment, ServiceError>>,
    },
    Stop {
        chat: ChatId,
        respond: oneshot::Sender<bool>,
    },
    Delete {
        chat: ChatId,
        respond: oneshot::Sender<Result<(), AskError>>,
    },
    Finished {
        chat: ChatId,
        reply: ReplyId,
    },
}

/// The handle every shell holds; clones are cheap. The service ends when the last handle is
/// dropped and its replies have ended.
#[derive(Clone)]
pub struct Service {
    tx: mpsc::Sender<Command>,
    store: Store,
}

/// Runs a blocking store call on the blocking pool.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

impl Service {
    /// Starts the service on the current tokio runtime.
    pub fn start(store: Store, backend: Arc<dyn Backend>, options: ServiceOptions) -> Service {
        let (tx, rx) = mpsc::channel(64);
        let actor = Actor {
            permits: Arc::new(Semaphore::new(backend.max_concurrent().max(1))),
            store: store.clone(),
            backend,
            options,
            chats: HashMap::new(),
            done: tx.downgrade(),
        };
        tokio::spawn(actor.run(rx));
        Service { tx, store }
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ServiceError> {
        let (respond, answer) = oneshot::channel();
        self.tx
            .send(make(respond))
            .await
            .map_err(|_| ServiceError::Gone)?;
        answer.await.map_err(|_| ServiceError::Gone)
    }

    /// Stores the question and starts its reply; returns at once. Busy while the chat replies.
    pub async fn ask(&self, chat: ChatId, text: impl Into<String>) -> Result<ReplyId, AskError> {
        let text = text.into();
        if text.trim().is_empty() {
            return Err(ServiceError::EmptyQuestion.into());
        }
        self.call(|respond| Command::Ask {
            chat,
            text,
            respond,
        })
        .await?
    }

    /// Starts a new reply to the question of the chat's failed or interrupted last reply.
    pub async fn retry(&self, chat: ChatId) -> Result<ReplyId, AskError> {
        self.call(|respond| Command::Retry { chat, respond })
            .await?
    }

    /// Subscribes to a chat: its current (or last) reply from the first event, then live.
    pub async fn attach(&self, chat: ChatId) -> Result<Attachment, ServiceError> {
        self.call(|respond| Command::Attach { chat, respond })
            .await?
    }

    /// Stops the chat's reply, keeping what was written; `false` when nothing was running.
    pub async fn stop(&self, chat: ChatId) -> Result<bool, ServiceError> {
        self.call(|respond| Command::Stop { chat, respond }).await
    }

    /// Makes a new chat.
    pub async fn new_chat(&self, title: Option<String>) -> Result<Chat, ServiceError> {
        let store = self.store.clone();
        let title = title.unwrap_or_else(|| NEW_CHAT_TITLE.to_string());
        Ok(blocking(move || store.create_chat(&title)).await?)
    }

    /// Renames a chat.
    pub async fn rename_chat(&self, chat: ChatId, title: String) -> Result<(), ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.rename_chat(chat, title.trim())).await?)
    }

    /// Deletes a chat and everything in it; refused while it is replying (stop it first).
    /// Windows attached to it see their attachment end.
    pub async fn delete_chat(&self, chat: ChatId) -> Result<(), AskError> {
        self.call(|respond| Command::Delete { chat, respond })
            .await?
    }

    /// All chats, newest first, each with its latest reply's state.
    pub async fn chats(&self) -> Result<Vec<Chat>, ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.chats()).await?)
    }

    /// A chat's records in order.
    pub async fn records(&self, chat: ChatId) -> Result<Vec<Record>, ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.records(chat)).await?)
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// The title of a chat that has no question yet; the first question names it.
pub const NEW_CHAT_TITLE: &str = "New chat";

fn title_from(question: &str) -> String {
    let line = question
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title.push('…');
    }
    title
}

struct Running {
    reply: ReplyId,
    cancel: CancellationToken,
    log: Arc<ReplyLog>,
}

struct ChatState {
    hub: watch::Sender<Option<Arc<ReplyLog>>>,
    running: Option<Running>,
}

struct Actor {
    store: Store,
    backend: Arc<dyn Backend>,
    permits: Arc<Semaphore>,
    options: ServiceOptions,
    chats: HashMap<ChatId, ChatState>,
    /// Weak, so the service ends when the last handle goes; each reply holds a strong one.
    done: mpsc::WeakSender<Command>,
}

enum Start {
    Busy,
    NothingToRetry,
    Started(RecordId, ReplyId),
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        while let Some(command) = rx.recv().await {
            match command {
                Command::Ask {
                    chat,
                    text,
                    respond,
                } => {
                    let _ = respond.send(self.ask(chat, Some(text)).await);
                }
                Command::Retry { chat, respond } => {
                    let _ = respond.send(self.ask(chat, None).await);
                }
                Command::Attach { chat, respond } => {
                    let _ = respond.send(self.attach(chat).await);
                }
                Command::Stop { chat, respond } => {
                    let stopped = match self.replying(chat) {
                        Some(running) => {
                            running.cancel.cancel();
                            true
                        }
                        None => false,
                    };
                    let _ = respond.send(stopped);
                }
                Command::Delete { chat, respond } => {
                    let _ = respond.send(self.delete(chat).await);
                }
                Command::Finished { chat, reply } => {
                    if let Some(state) = self.chats.get_mut(&chat) {
                        if state.running.as_ref().is_some_and(|r| r.reply == reply) {
                            state.running = None;
                        }
                    }
                }
            }
            // A chat nobody watches and nothing runs in is forgotten; the store has it all, and
            // the next attach rebuilds its last reply from there.
            self.chats
                .retain(|_, c| c.running.is_some() || c.hub.receiver_count() > 0);
        }
    }

    /// The chat's state, made on first use from the store's last reply.
    async fn chat_state(&mut self, chat: ChatId) -> Result<&mut ChatState, StoreError> {
        if !self.chats.contains_key(&chat) {
            let store = self.store.clone();
            let last = blocking(move || {
                store.chat(chat)?;
                store.last_reply(chat)
            })
            .await?;
            let state = ChatState {
                hub: watch::Sender::new(last.as_ref().map(ReplyLog::from_stored)),
                running: None,
            };
            self.chats.insert(chat, state);
        }
        Ok(self.chats.get_mut(&chat).expect("inserted above"))
    }

    /// The chat's reply that is still being written, if any (an ended one may linger until its
    /// `Finished` arrives).
    fn replying(&self, chat: ChatId) -> Option<&Running> {
        self.chats
            .get(&chat)
            .and_then(|c| c.running.as_ref())
            .filter(|r| !r.log.is_closed())
    }

    async fn delete(&mut self, chat: ChatId) -> Result<(), AskError> {
        if self.replying(chat).is_some() {
            return Err(AskError::Busy(chat));
        }
        let store = self.store.clone();
        if !blocking(move || store.delete_chat(chat)).await? {
            return Err(AskError::Busy(chat)); // replying in another process
        }
        // Dropping its hub ends every attachment to it.
        self.chats.remove(&chat);
        Ok(())
    }

    async fn attach(&mut self, chat: ChatId) -> Result<Attachment, ServiceError> {
        let state = self.chat_state(chat).await?;
        Ok(Attachment::new(state.hub.subscribe()))
    }

    /// Starts a reply: to a new question (`Some(text)`) or again to the last one (`None`).
    async fn ask(&mut self, chat: ChatId, text: Option<String>) -> Result<ReplyId, AskError> {
        self.chat_state(chat).await?;
        if self.replying(chat).is_some() {
            return Err(AskError::Busy(chat));
        }
        let permit = self.permits.clone().try_acquire_owned().ok();
        let initial = if permit.is_some() {
            ReplyState::Running
        } else {
            ReplyState::Waiting
        };
        let store = self.store.clone();
        let started = blocking(move || -> Result<Start, StoreError> {
            if store.live_elsewhere(chat)? {
                return Ok(Start::Busy);
            }
            let (question, reply) = match text {
                Some(text) => {
                    let title =
                        (store.chat(chat)?.title == NEW_CHAT_TITLE).then(|| title_from(&text));
                    let (record, reply) =
                        store.add_question(chat, &text, title.as_deref(), initial)?;
                    (record.id, reply)
                }
                None => match store.last_reply(chat)? {
                    Some(last) if last.state.can_retry() => (
                        last.question,
                        store.start_reply(chat, last.question, initial)?,
                    ),
                    _ => return Ok(Start::NothingToRetry),
                },
            };
            Ok(Start::Started(question, reply.id))
        })
        .await?;
        let (question, reply) = match started {
            Start::Busy => return Err(AskError::Busy(chat)),
            Start::NothingToRetry => return Err(ServiceError::NothingToRetry(chat).into()),
            Start::Started(question, reply) => (question, reply),
        };
        let done = self.done.upgrade().ok_or(ServiceError::Gone)?;
        let log = ReplyLog::new();
        let cancel = CancellationToken::new();
        let job = reply::ReplyJob {
            chat,
            reply,
            question,
            store: self.store.clone(),
            backend: self.backend.clone(),
            permits: self.permits.clone(),
            permit,
            cancel: cancel.clone(),
            log: log.clone(),
            options: self.options.clone(),
            done,
        };
        let state = self.chat_state(chat).await?;
        state.hub.send_replace(Some(log.clone()));
        state.running = Some(Running { reply, cancel, log });
        tokio::spawn(job.run());
        Ok(reply)
    }
}
