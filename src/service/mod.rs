//! The conversation service: one actor task owns which chats are replying and who is attached; a
//! cheap [`Service`] handle is what every shell holds. Replies run as tasks the service owns, so a
//! window or a CLI that goes away never stops one: only [`Service::stop`] does.

mod actions;
mod consent;
mod events;
mod housekeeping;
mod reply;
mod voice;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio_util::sync::CancellationToken;

pub use actions::{ActionGuard, Actions};
pub use consent::Consent;
pub use events::{Attachment, Event, WAITING_MESSAGE};
pub use housekeeping::Housekeeping;
pub use voice::{
    ListenMode, VoiceAttachment, VoiceNotice, VoiceSignal, VoiceStatus, VoiceTicket, VoiceUpdate,
    WaitingQuestion, QUEUE_LIMIT,
};

use crate::config::{RetrySettings, Settings};
use crate::llm::{Backend, LlmEvent};
use crate::prompt::Mode;
use crate::store::{Chat, ChatId, Record, RecordId, ReplyId, ReplyState, Store, StoreError};
use events::{Hub, ReplyLog};
use voice::Voice;

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
    /// The orb has no conversation (nothing to try again).
    #[error("there is no voice conversation to try again")]
    NoVoiceConversation,
}

/// Why a question was not taken.
#[derive(Debug, Error)]
pub enum AskError {
    /// The chat is replying; one question at a time.
    #[error("chat {0} is still replying; wait for the reply to end or stop it")]
    Busy(ChatId),
    /// The voice conversation already has as many questions waiting as it keeps.
    #[error(
        "{QUEUE_LIMIT} questions are already waiting; remove one or wait for the reply to end"
    )]
    QueueFull,
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
    /// How long an answer, once begun, may go without a word.
    pub stall: Duration,
    /// Progress is stored at each sentence end or after this long.
    pub progress: Duration,
    /// The user's name, for the profile block.
    pub user_name: String,
    /// The rules the model is given (the user's file, else the built-in ones).
    pub rules: Arc<str>,
    /// How the voice conversation listens at start.
    pub listen_mode: ListenMode,
    /// Whether the voice conversation is also kept as a chat once it ends.
    pub save_voice: bool,
    /// In wake mode, whether the microphone stays open for the wake word while the orb is hidden.
    pub wake_while_hidden: bool,
    /// How long a voice conversation nobody watches, with nothing running, is kept.
    pub voice_keep: Duration,
    /// Summaries and recall across chats, when the sentence embedder is installed.
    pub recall: Option<Arc<crate::memory::recall::Recall>>,
    /// "Use earlier conversations": off, no summary is written and none is recalled.
    pub earlier_conversations: bool,
    /// The model's context in tokens (0: the backend's own).
    pub context_tokens: usize,
    /// The longest reply kept, in characters.
    pub max_chars: usize,
    /// The user's MCP servers, whose tools are offered beside the memory tools (none: only the
    /// memory tools).
    pub mcp: Option<Arc<crate::mcp::Servers>>,
    /// The user's language, for the envelopes the request wraps around their words.
    pub locale: crate::prompt::Locale,
}

/// How long an unwatched, idle voice conversation is kept before it is forgotten.
pub const VOICE_KEEP: Duration = Duration::from_secs(30 * 60);

impl ServiceOptions {
    /// The options the settings give.
    pub fn from_settings(settings: &Settings) -> ServiceOptions {
        ServiceOptions {
            retry: settings.retry.clone(),
            first_token: settings.timeouts.first_token(),
            stall: settings.timeouts.stall(),
            progress: Duration::from_millis(settings.replies.progress_ms.max(1)),
            user_name: settings.profile.name.clone(),
            rules: match crate::prompt::rules_from(&settings.profile.rules) {
                Ok(rules) => rules.into(),
                Err(err) => {
                    // Settings refuse such a file; one edited by hand falls back, said in the log
                    // and by `jarvis doctor`.
                    tracing::warn!("{err}; the built-in rules are used");
                    crate::prompt::RULES.into()
                }
            },
            listen_mode: settings.voice.mode,
            save_voice: settings.voice.save_conversations,
            wake_while_hidden: settings.voice.wake_while_hidden,
            voice_keep: VOICE_KEEP,
            recall: None,
            earlier_conversations: settings.memory.earlier_conversations,
            context_tokens: settings.replies.context_tokens,
            max_chars: settings.replies.max_chars.max(1),
            mcp: None,
            locale: crate::prompt::Locale::of(settings.general.language),
        }
    }

    /// These options with the user's MCP servers, whose tools are then offered to the model.
    pub fn with_mcp(mut self, servers: Option<Arc<crate::mcp::Servers>>) -> ServiceOptions {
        self.mcp = servers;
        self
    }

    /// Recall, when it is installed and the user lets Jarvis use earlier conversations.
    pub fn recalling(&self) -> Option<&Arc<crate::memory::recall::Recall>> {
        self.recall.as_ref().filter(|_| self.earlier_conversations)
    }

    /// These options with recall: summaries written after each reply and found again from other
    /// chats. Off (with the reason logged) when the embedder is not installed.
    pub fn with_recall(mut self, store: &Store, models: &std::path::Path) -> ServiceOptions {
        match crate::memory::embed::LazyMiniLm::if_installed(models) {
            Some(embedder) => match crate::memory::recall::Recall::new(Arc::new(embedder), store) {
                Ok(recall) => self.recall = Some(Arc::new(recall)),
                Err(err) => tracing::warn!(%err, "recall is off: the summaries could not be read"),
            },
            None => tracing::info!(
                "recall is off: the sentence embedder is not installed (scripts/models memory)"
            ),
        }
        self
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
    StartAfresh {
        chat: ChatId,
        respond: oneshot::Sender<Result<i64, AskError>>,
    },
    Finished {
        chat: ChatId,
        reply: ReplyId,
    },
    /// The voice conversation's commands.
    Voice(voice::VoiceCommand),
    StopAll {
        respond: oneshot::Sender<usize>,
    },
    Reconfigure {
        backend: Option<Arc<dyn Backend>>,
        options: Box<ServiceOptions>,
    },
    /// Warm the backend for the next question in this chat (none: a new chat).
    Warm {
        chat: Option<ChatId>,
    },
}

/// What is going on, for menus and lists that enable, disable or mark things.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS)]
pub struct Activity {
    /// Chats with a reply being written (waiting or running), in this process.
    pub replying: Vec<ChatId>,
    /// Questions waiting in the voice conversation.
    pub queued: usize,
    /// A voice conversation exists (End conversation has something to end).
    pub conversation: bool,
    /// Jarvis's voice is playing (Stop reply cuts it).
    pub speaking: bool,
    /// Bumped whenever the chat list may have changed (a chat made, renamed, deleted, a reply
    /// started or ended).
    pub generation: u64,
}

impl Activity {
    /// Stop reply has something to stop.
    pub fn can_stop(&self) -> bool {
        !self.replying.is_empty() || self.queued > 0 || self.speaking
    }
}

/// The handle every shell holds; clones are cheap. The service ends when the last handle is
/// dropped and its replies have ended.
#[derive(Clone)]
pub struct Service {
    tx: mpsc::Sender<Command>,
    store: Store,
    /// Where an unsaved voice conversation lives: in memory, never on disk.
    memory: Store,
    activity: Arc<watch::Sender<Activity>>,
    voice: VoiceHandles,
    /// The summaries' index (it lives as long as the service).
    recall: Option<Arc<crate::memory::recall::Recall>>,
    /// What runs for each chat besides its replies' words (the state block counts them).
    actions: Actions,
    /// The tool calls waiting for the user's consent.
    consents: consent::Consents,
}

/// What the handle reads of the voice conversation without asking the actor.
#[derive(Clone)]
struct VoiceHandles {
    status: watch::Receiver<VoiceStatus>,
    notices: tokio::sync::broadcast::Sender<VoiceNotice>,
    signals: tokio::sync::broadcast::Sender<voice::VoiceSignal>,
    windows: voice::Windows,
}

/// Runs a blocking store call on the blocking pool.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        // The runtime is shutting down and never ran it.
        Err(join) if join.is_cancelled() => Err(StoreError::ShuttingDown),
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

impl Service {
    /// Starts the service on the current tokio runtime.
    pub fn start(store: Store, backend: Arc<dyn Backend>, options: ServiceOptions) -> Service {
        let (tx, rx) = mpsc::channel(64);
        let activity = Arc::new(watch::Sender::new(Activity::default()));
        let memory = match Store::in_memory(&store) {
            Ok(memory) => memory,
            Err(err) => {
                // (SQLite without memory to spare.) The conversation is then kept in the database
                // until it ends, as before.
                tracing::error!(%err, "no in-memory store: an unsaved voice conversation goes to disk");
                store.clone()
            }
        };
        let voice = Voice::new(options.listen_mode);
        let handles = VoiceHandles {
            status: voice.status.subscribe(),
            notices: voice.notices.clone(),
            signals: voice.signals.clone(),
            windows: voice.windows.clone(),
        };
        let recall = options.recall.clone();
        let actions = Actions::default();
        let consents = consent::Consents::default();
        let actor = Actor {
            actions: actions.clone(),
            consents: consents.clone(),
            housekeeping: Housekeeping::new(),
            permits: Arc::new(Semaphore::new(backend.max_concurrent().max(1))),
            store: store.clone(),
            memory: memory.clone(),
            backend,
            voice,
            options,
            chats: HashMap::new(),
            done: tx.downgrade(),
            activity: activity.clone(),
            warming: None,
        };
        tokio::spawn(actor.run(rx));
        Service {
            tx,
            store,
            memory,
            activity,
            voice: handles,
            recall,
            actions,
            consents,
        }
    }

    /// How many actions (tool calls, compaction, the summary after an answer) run for `chat` now:
    /// what the next request's state block will count.
    pub fn actions_running(&self, chat: ChatId) -> usize {
        self.actions.running(chat)
    }

    /// The user's answer to the tool call `call` of `reply`, which waits for it (an action card's
    /// Allow once, Always allow this tool or Deny). False when that call does not wait (it was
    /// answered already, or its reply ended).
    pub fn consent(&self, reply: ReplyId, call: &str, consent: Consent) -> bool {
        self.consents.answer(reply, call, consent)
    }

    async fn send(&self, command: Command) -> Result<(), ServiceError> {
        self.tx.send(command).await.map_err(|_| ServiceError::Gone)
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ServiceError> {
        let (respond, answer) = oneshot::channel();
        self.send(make(respond)).await?;
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
        let chat = blocking(move || store.create_chat(&title)).await?;
        self.chats_changed();
        Ok(chat)
    }

    /// Renames a chat.
    pub async fn rename_chat(&self, chat: ChatId, title: String) -> Result<(), ServiceError> {
        let store = self.store.clone();
        blocking(move || store.rename_chat(chat, title.trim())).await?;
        self.chats_changed();
        Ok(())
    }

    /// The summaries of earlier conversations Jarvis may recall into other chats, newest first.
    pub async fn summaries(&self) -> Result<Vec<crate::store::Summary>, ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.summaries()).await?)
    }

    /// The facts Jarvis remembers, oldest first.
    pub async fn facts(&self) -> Result<Vec<crate::store::Fact>, ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.facts()).await?)
    }

    /// Remembers a fact the user gave (the Memory panel, `jarvis facts add`).
    pub async fn add_fact(&self, text: String) -> Result<crate::store::Fact, ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.add_fact(&text, None)).await?)
    }

    /// Rewrites a fact.
    pub async fn edit_fact(
        &self,
        id: i64,
        text: String,
    ) -> Result<crate::store::Fact, ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.edit_fact(id, &text)).await?)
    }

    /// Deletes a fact for real.
    pub async fn remove_fact(&self, id: i64) -> Result<(), ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.remove_fact(id)).await?)
    }

    /// A chat's latest reply, if it has one.
    pub async fn last_reply(
        &self,
        chat: ChatId,
    ) -> Result<Option<crate::store::Reply>, ServiceError> {
        let store = self.store_of(chat).clone();
        Ok(blocking(move || store.last_reply(chat)).await?)
    }

    /// A stored reply (in the database or, for an unsaved voice conversation, in memory).
    pub async fn reply(&self, reply: ReplyId) -> Result<Option<crate::store::Reply>, ServiceError> {
        let store = self.store_of_reply(reply).clone();
        Ok(blocking(move || store.reply(reply)).await?)
    }

    /// Forgets a chat's summary (the chat stays): it is never recalled again; the chat's next
    /// answer starts a new one from what is said from then on. Returns whether there was one.
    pub async fn delete_summary(&self, chat: ChatId) -> Result<bool, ServiceError> {
        let store = self.store.clone();
        let deleted = blocking(move || store.delete_summary(chat)).await?;
        if let Some(recall) = &self.recall {
            recall.forget(chat);
        }
        Ok(deleted)
    }

    /// Deletes a chat and everything in it; refused while it is replying (stop it first).
    /// Windows attached to it see their attachment end.
    pub async fn delete_chat(&self, chat: ChatId) -> Result<(), AskError> {
        self.call(|respond| Command::Delete { chat, respond })
            .await?
    }

    /// Starts afresh in a chat: it keeps every record, but the model sees only what comes after
    /// this point (no summary of the earlier part either). Refused while it is replying. Returns
    /// the seq of the first record the model will see.
    pub async fn start_afresh(&self, chat: ChatId) -> Result<i64, AskError> {
        self.call(|respond| Command::StartAfresh { chat, respond })
            .await?
    }

    /// All chats, newest first, each with its latest reply's state.
    pub async fn chats(&self) -> Result<Vec<Chat>, ServiceError> {
        let store = self.store.clone();
        Ok(blocking(move || store.chats()).await?)
    }

    /// A chat's records in order.
    pub async fn records(&self, chat: ChatId) -> Result<Vec<Record>, ServiceError> {
        let store = self.store_of(chat).clone();
        Ok(blocking(move || store.records(chat)).await?)
    }

    /// The store underneath (the database).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store a chat lives in: the database, or memory for an unsaved voice conversation.
    pub fn store_of(&self, chat: ChatId) -> &Store {
        kept_in(&self.store, &self.memory, chat.in_memory())
    }

    /// The store a reply lives in (as [`Service::store_of`] its chat's).
    pub fn store_of_reply(&self, reply: ReplyId) -> &Store {
        kept_in(&self.store, &self.memory, reply.in_memory())
    }

    fn chats_changed(&self) {
        self.activity.send_modify(|a| a.generation += 1);
    }

    /// What is going on now, and every change after.
    pub fn activity(&self) -> watch::Receiver<Activity> {
        self.activity.subscribe()
    }

    /// Stop reply (tray): stops every reply being written and the voice conversation's waiting
    /// questions. Returns how many replies it stopped.
    pub async fn stop_all(&self) -> Result<usize, ServiceError> {
        self.call(|respond| Command::StopAll { respond }).await
    }

    /// Answers with `options`, and `backend` when given, from the next reply on (changed
    /// settings); replies being written keep theirs. The listen mode is left as it is.
    pub async fn reconfigure(
        &self,
        backend: Option<Arc<dyn Backend>>,
        options: ServiceOptions,
    ) -> Result<(), ServiceError> {
        self.send(Command::Reconfigure {
            backend,
            options: Box::new(options),
        })
        .await
    }

    /// Readies the backend for the next question in `chat` (none: a new chat), where it keeps
    /// a prompt's processing between requests (the local model server): the system prompt and
    /// the chat's history are processed now, as housekeeping that gives way to any reply, so
    /// that the question's first token comes from the cache. A later warm-up replaces one still
    /// running. Elsewhere it does nothing.
    pub async fn warm(&self, chat: Option<ChatId>) -> Result<(), ServiceError> {
        self.send(Command::Warm { chat }).await
    }
}

/// The database, or the memory an unsaved voice conversation lives in, as an id says
/// ([`ChatId::in_memory`], [`ReplyId::in_memory`]).
fn kept_in<'s>(db: &'s Store, memory: &'s Store, in_memory: bool) -> &'s Store {
    if in_memory {
        memory
    } else {
        db
    }
}

/// Whether an answer ends by asking the user something (its last sentence is a question), so
/// that what they say next is their reply to it.
pub fn asks_the_user(answer: &str) -> bool {
    let end = answer.trim_end_matches(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '*' | '_' | '"' | '\'' | '”' | '’' | ')' | '“' | '«' | '»' | '」' | '』' | '）'
            )
    });
    end.ends_with(['?', '？'])
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
    /// Its end is shown but not yet stored (tried again): the chat takes no question meanwhile.
    settling: Arc<std::sync::atomic::AtomicBool>,
}

struct ChatState {
    hub: Hub,
    running: Option<Running>,
}

impl ChatState {
    /// The reply still being written, if any (an ended one may linger until its `Finished`
    /// arrives), or one whose end is still being stored.
    fn writing(&self) -> Option<&Running> {
        self.running
            .as_ref()
            .filter(|r| !r.log.is_closed() || r.settling.load(std::sync::atomic::Ordering::SeqCst))
    }
}

struct Actor {
    /// What runs for each chat besides its replies' words; the state block counts them.
    actions: Actions,
    /// The tool calls waiting for the user's consent.
    consents: consent::Consents,
    /// The summaries' way to the backend, which gives way to replies.
    housekeeping: Housekeeping,
    store: Store,
    /// Unsaved voice conversations, in memory.
    memory: Store,
    backend: Arc<dyn Backend>,
    permits: Arc<Semaphore>,
    options: ServiceOptions,
    chats: HashMap<ChatId, ChatState>,
    voice: Voice,
    /// Weak, so the service ends when the last handle goes; each reply holds a strong one.
    done: mpsc::WeakSender<Command>,
    activity: Arc<watch::Sender<Activity>>,
    /// The warm-up running, if any.
    warming: Option<tokio::task::JoinHandle<()>>,
}

enum Start {
    Busy,
    NothingToRetry,
    /// The question, its reply and how it was asked.
    Started(RecordId, ReplyId, Mode),
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        // Often enough to forget an unwatched voice conversation close to its time.
        let mut tick =
            tokio::time::interval((self.options.voice_keep / 30).max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let command = tokio::select! {
                command = rx.recv() => match command {
                    Some(command) => command,
                    None => break,
                },
                _ = tick.tick() => {
                    self.forget_idle_voice().await;
                    continue;
                }
            };
            self.handle(command).await;
            // A chat nobody watches and nothing runs in is forgotten; the store has it all, and
            // the next attach rebuilds its last reply from there.
            self.chats
                .retain(|_, c| c.running.is_some() || c.hub.receiver_count() > 0);
            self.publish_activity();
        }
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::Ask {
                chat,
                text,
                respond,
            } => {
                let _ = respond.send(self.ask(chat, Some(text), Mode::Typed).await);
            }
            Command::Retry { chat, respond } => {
                let _ = respond.send(self.ask(chat, None, Mode::Typed).await);
            }
            Command::Attach { chat, respond } => {
                let _ = respond.send(self.attach(chat).await);
            }
            Command::Stop { chat, respond } => {
                let _ = respond.send(self.stop(chat));
            }
            Command::Delete { chat, respond } => {
                let _ = respond.send(self.delete(chat).await);
            }
            Command::StartAfresh { chat, respond } => {
                let result = if self.replying(chat).is_some() {
                    Err(AskError::Busy(chat))
                } else {
                    let store = self.store_of(chat).clone();
                    match blocking(move || store.start_afresh(chat)).await {
                        Ok(Some(since)) => Ok(since),
                        Ok(None) => Err(AskError::Busy(chat)), // replying in another process
                        Err(err) => Err(err.into()),
                    }
                };
                if result.is_ok() {
                    self.activity.send_modify(|a| a.generation += 1);
                }
                let _ = respond.send(result);
            }
            Command::Finished { chat, reply } => self.finished(chat, reply).await,
            Command::Voice(command) => self.handle_voice(command).await,
            Command::StopAll { respond } => {
                self.voice.queue.clear();
                self.voice.update(|s| s.awaiting_answer = false);
                let mut stopped = 0;
                for state in self.chats.values() {
                    if let Some(running) = state.writing() {
                        running.cancel.cancel();
                        stopped += 1;
                    }
                }
                self.voice.signal(voice::VoiceSignal::Stop);
                let _ = respond.send(stopped);
            }
            Command::Reconfigure { backend, options } => {
                if let Some(backend) = backend {
                    // A warm-up of the backend replaced is of no use to the next.
                    self.stop_warming();
                    self.permits = Arc::new(Semaphore::new(backend.max_concurrent().max(1)));
                    self.backend = backend;
                }
                // Recall lives as long as the service; settings do not carry it.
                let recall = self.options.recall.take();
                let language_changed = self.options.locale != options.locale;
                self.options = *options;
                if self.options.recall.is_none() {
                    self.options.recall = recall;
                }
                if language_changed {
                    // What was warmed is in the old language (the system prompt's note on the
                    // envelopes): the next question would find none of it cached.
                    self.warm(None);
                }
                // "Listen for Hey Jarvis while hidden" turned off while hidden closes it now.
                self.voice
                    .quiet_while_hidden(self.options.wake_while_hidden);
            }
            Command::Warm { chat } => self.warm(chat),
        }
    }

    /// Ends the warm-up running, if any (its request is dropped: the server stops processing it
    /// within a batch).
    fn stop_warming(&mut self) {
        if let Some(earlier) = self.warming.take() {
            earlier.abort();
        }
    }

    /// Starts the warm-up for the next question in `chat` (see [`Service::warm`]).
    fn warm(&mut self, chat: Option<ChatId>) {
        self.stop_warming();
        if !self.backend.prefills() {
            return;
        }
        let store = match chat {
            Some(chat) => self.store_of(chat).clone(),
            None => self.store.clone(),
        };
        let (backend, permits, housekeeping) = (
            self.backend.clone(),
            self.permits.clone(),
            self.housekeeping.clone(),
        );
        let (name, rules) = (self.options.user_name.clone(), self.options.rules.clone());
        let locale = self.options.locale;
        self.warming = Some(tokio::spawn(async move {
            let (model, max_tokens) = (backend.model().to_string(), backend.max_tokens());
            let started = std::time::Instant::now();
            // Once: a reply that wants the backend meanwhile makes this give way, and that
            // reply then holds its own conversation in the cache. The request is built once the
            // backend is free, from the history as it then is (a reply that ran meanwhile is in
            // it).
            let warmed = housekeeping
                .run_once(&permits, || async {
                    let (store, name, rules, model) =
                        (store.clone(), name.clone(), rules.clone(), model.clone());
                    let request = blocking(move || {
                        crate::prompt::warm_request(
                            &store, chat, &name, &rules, &model, max_tokens, locale,
                        )
                    })
                    .await
                    .map_err(|err| crate::llm::LlmError::Unavailable(err.to_string()))?;
                    let mut events = backend.stream(request);
                    let mut prompt_tokens = None;
                    while let Some(event) = events.next().await {
                        match event {
                            Ok(LlmEvent::Usage { input_tokens, .. }) => {
                                prompt_tokens = input_tokens
                            }
                            Ok(_) => {}
                            Err(err) => return Err(err),
                        }
                    }
                    Ok(prompt_tokens)
                })
                .await;
            match warmed {
                Ok(Ok(tokens)) => tracing::debug!(
                    ?chat,
                    ?tokens,
                    ms = started.elapsed().as_millis() as u64,
                    "the backend is warm for the next question"
                ),
                Ok(Err(err)) => tracing::debug!(%err, "the warm-up failed"),
                Err(gave_up) => tracing::debug!(?gave_up, "the warm-up gave way to a reply"),
            }
        }));
    }

    fn publish_activity(&self) {
        let mut replying: Vec<ChatId> = self
            .chats
            .iter()
            .filter(|(_, c)| c.writing().is_some())
            .map(|(id, _)| *id)
            .collect();
        replying.sort();
        let queued = self.voice.queue.len();
        let conversation = self.voice.chat().is_some();
        let speaking = self.voice.status.borrow().speaking;
        self.activity.send_if_modified(|a| {
            let marks_changed = a.replying != replying;
            let changed = marks_changed
                || a.queued != queued
                || a.conversation != conversation
                || a.speaking != speaking;
            if marks_changed {
                // A reply started or ended: the chat list's marks change.
                a.generation += 1;
                a.replying = replying;
            }
            a.queued = queued;
            a.conversation = conversation;
            a.speaking = speaking;
            changed
        });
    }

    fn stop(&self, chat: ChatId) -> bool {
        match self.replying(chat) {
            Some(running) => {
                running.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// A reply ended: the voice conversation's next question starts, a pending mode is taken up,
    /// and a reply nobody watched is marked answered while away.
    async fn finished(&mut self, chat: ChatId, reply: ReplyId) {
        if let Some(state) = self.chats.get_mut(&chat) {
            if state.running.as_ref().is_some_and(|r| r.reply == reply) {
                state.running = None;
            }
        }
        self.voice_reply_finished(chat, reply).await;
    }

    /// The store a chat lives in: memory for an unsaved voice conversation, else the database.
    fn store_of(&self, chat: ChatId) -> &Store {
        kept_in(&self.store, &self.memory, chat.in_memory())
    }

    /// The chat's state, made on first use from the store's last reply.
    async fn chat_state(&mut self, chat: ChatId) -> Result<&mut ChatState, StoreError> {
        if !self.chats.contains_key(&chat) {
            let store = self.store_of(chat).clone();
            let last = blocking(move || {
                store.chat(chat)?;
                store.last_reply(chat)
            })
            .await?;
            let state = ChatState {
                hub: Hub::new(last.as_ref().map(ReplyLog::from_stored)),
                running: None,
            };
            self.chats.insert(chat, state);
        }
        Ok(self.chats.get_mut(&chat).expect("inserted above"))
    }

    /// The chat's reply that is still being written, if any (an ended one may linger until its
    /// `Finished` arrives).
    fn replying(&self, chat: ChatId) -> Option<&Running> {
        self.chats.get(&chat).and_then(ChatState::writing)
    }

    async fn delete(&mut self, chat: ChatId) -> Result<(), AskError> {
        if self.replying(chat).is_some() {
            return Err(AskError::Busy(chat));
        }
        let store = self.store_of(chat).clone();
        if !blocking(move || store.delete_chat(chat)).await? {
            return Err(AskError::Busy(chat)); // replying in another process
        }
        // Its summary went with it (the store cascades); recall forgets it too.
        if let Some(recall) = &self.options.recall {
            recall.forget(chat);
        }
        // Dropping its hub ends every attachment to it.
        self.chats.remove(&chat);
        if self.voice.chat() == Some(chat) {
            self.voice.queue.clear();
            // Whatever of it is still being said is cut with it.
            self.voice.signal(voice::VoiceSignal::Stop);
            self.voice.update(|s| {
                s.chat = None;
                s.replying = None;
                s.answered_away = None;
            });
        }
        self.activity.send_modify(|a| a.generation += 1);
        Ok(())
    }

    async fn attach(&mut self, chat: ChatId) -> Result<Attachment, ServiceError> {
        let store = self.store_of(chat).clone();
        let state = self.chat_state(chat).await?;
        Ok(state.hub.attach(store, chat))
    }

    /// Starts a reply: to a new question (`Some(text)`) asked in `mode`, or again to the last
    /// one (`None`), asked as it was the first time (`mode` is then not used).
    async fn ask(
        &mut self,
        chat: ChatId,
        text: Option<String>,
        mode: Mode,
    ) -> Result<ReplyId, AskError> {
        self.chat_state(chat).await?;
        if self.replying(chat).is_some() {
            return Err(AskError::Busy(chat));
        }
        // Its place at the backend is taken now, in the order questions arrive.
        let turn = reply::BackendTurn::take(&self.permits).await;
        // A summary holding the backend gives way to a reply at once.
        let housekeeping_gives_way = !turn.is_now() && self.housekeeping.make_way();
        let initial = if turn.is_now() {
            ReplyState::Running
        } else {
            ReplyState::Waiting
        };
        let store = self.store_of(chat).clone();
        let started = blocking(move || -> Result<Start, StoreError> {
            // The store checks that no other process replies here in the transaction that
            // starts the reply.
            let started = match text {
                Some(text) => {
                    let title =
                        (store.chat(chat)?.title == NEW_CHAT_TITLE).then(|| title_from(&text));
                    store
                        .add_question_as(chat, &text, title.as_deref(), initial, mode.stored())
                        .map(|(record, reply)| (record.id, reply.id, mode))
                }
                // Asked again as it was asked the first time (spoken, or typed).
                None => match store.last_reply(chat)? {
                    Some(last) if last.state.can_retry() => {
                        let asked =
                            Mode::from_stored(store.question_mode(last.question)?.as_deref());
                        store
                            .start_reply(chat, last.question, initial)
                            .map(|reply| (last.question, reply.id, asked))
                    }
                    _ => return Ok(Start::NothingToRetry),
                },
            };
            match started {
                Ok((question, reply, mode)) => Ok(Start::Started(question, reply, mode)),
                Err(StoreError::ReplyingElsewhere(_)) => Ok(Start::Busy),
                Err(err) => Err(err),
            }
        })
        .await?;
        let (question, reply, mode) = match started {
            Start::Busy => return Err(AskError::Busy(chat)),
            Start::NothingToRetry => return Err(ServiceError::NothingToRetry(chat).into()),
            Start::Started(question, reply, mode) => (question, reply, mode),
        };
        let done = self.done.upgrade().ok_or(ServiceError::Gone)?;
        let log = ReplyLog::new(reply);
        let cancel = CancellationToken::new();
        let settling = Arc::<std::sync::atomic::AtomicBool>::default();
        let job = reply::ReplyJob {
            chat,
            reply,
            question,
            store: self.store_of(chat).clone(),
            backend: self.backend.clone(),
            permits: self.permits.clone(),
            cancel: cancel.clone(),
            log: log.clone(),
            options: self.options.clone(),
            done,
            mode,
            actions: self.actions.clone(),
            consents: self.consents.clone(),
            in_conversation: self.voice.chat() == Some(chat),
            housekeeping: self.housekeeping.clone(),
            housekeeping_gives_way,
            settling: settling.clone(),
        };
        let state = self.chat_state(chat).await?;
        state.hub.publish(log.clone());
        state.running = Some(Running {
            reply,
            cancel,
            log,
            settling,
        });
        tokio::spawn(job.run(turn));
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_answer_that_ends_on_a_question_asks_the_user() {
        assert!(super::asks_the_user("Shall I set it?"));
        assert!(super::asks_the_user(
            "Which one do you mean? **Bruno** or **Max?**\n"
        ));
        assert!(super::asks_the_user("要我设置吗？"));
        assert!(super::asks_the_user("Er fragt: „Soll ich ihn stellen?“"));
        assert!(super::asks_the_user("他问：「要我设置吗？」"));
        assert!(!super::asks_the_user("Why? Because it rains."));
        assert!(!super::asks_the_user(""));
    }
}
