//! The voice conversation: the orb's one live conversation, its queue of waiting questions, how it
//! listens, and the attachment a window holds on it. The actor owns it; windows only read
//! [`VoiceStatus`] and the conversation's chat events through a [`VoiceAttachment`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::{Attachment, Event, Service};
use crate::store::{ChatId, ReplyId};

/// At most this many questions wait behind a running reply.
pub const QUEUE_LIMIT: usize = 4;

pub use crate::config::ListenMode;

/// A question waiting behind the running reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingQuestion {
    /// Its id, for Remove.
    pub id: u64,
    /// What was asked.
    pub text: String,
    /// How it was asked.
    #[serde(skip, default = "typed")]
    pub mode: crate::config::Mode,
}

fn typed() -> crate::config::Mode {
    crate::config::Mode::Typed
}

/// What a window shows of the voice conversation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct VoiceStatus {
    /// The chat the conversation is saved in, once it has one.
    pub chat: Option<ChatId>,
    /// How it listens now.
    pub mode: ListenMode,
    /// A mode chosen during a reply, taken up once the reply is answered.
    pub pending_mode: Option<ListenMode>,
    /// The microphone is open.
    pub listening: bool,
    /// The reply being written, waiting for the backend or running.
    pub replying: Option<ReplyId>,
    /// Questions waiting behind it, first to start first.
    pub queue: Vec<WaitingQuestion>,
    /// A reply that finished while no window watched, not yet acknowledged.
    pub answered_away: Option<ReplyId>,
    /// In wake mode: a wake conversation is open ("Hey Jarvis" was heard), so questions are
    /// taken without the wake word until a goodbye or a quiet spell.
    pub awake: bool,
    /// The last answer asked the user something (a confirmation, or a question of the model's):
    /// what is said or typed next is taken as their reply, ahead of the waiting questions, and a
    /// "no", "cancel" or "never mind" then answers rather than stops.
    pub awaiting_answer: bool,
    /// Jarvis's voice is playing (the voice loop says so): the reply's text may have ended long
    /// before, and Stop must stay within reach while it talks.
    pub speaking: bool,
    /// Counts Stop and End: the voice loop cuts Jarvis's voice on each, even when the reply
    /// itself had already finished and only its audio was still playing.
    pub stops: u64,
    /// Counts the times listening was turned on: the voice loop opens a microphone that failed
    /// again only on a new one (a status it had not caught up with yet does not count).
    pub listens: u64,
}

/// How a question put to the voice conversation was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "taken", rename_all = "snake_case")]
pub enum VoiceTicket {
    /// Its reply started.
    Started {
        /// The reply.
        reply: ReplyId,
    },
    /// It waits behind the running reply.
    Queued {
        /// Its id in the queue.
        id: u64,
    },
}

/// Something a window on the voice conversation should tell the user once (not a state: it is
/// not kept, and a window that attaches later does not see it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "notice", rename_all = "snake_case")]
pub enum VoiceNotice {
    /// A spoken question was not taken: [`QUEUE_LIMIT`] questions already wait.
    QueueFull {
        /// What was said.
        text: String,
    },
}

/// The service's side of the voice conversation.
pub(crate) struct Voice {
    pub status: watch::Sender<VoiceStatus>,
    /// One-off news for the windows.
    pub notices: broadcast::Sender<VoiceNotice>,
    pub queue: VecDeque<WaitingQuestion>,
    pub next_id: u64,
    /// Since when no window has watched and nothing has run.
    pub idle_since: Option<Instant>,
    /// Chats of ended conversations to delete once their reply ends (saving is off).
    pub discard: Vec<ChatId>,
    /// A goodbye was said during this reply: the conversation ends once it ends.
    pub goodbye_after: Option<ReplyId>,
    /// Windows attached now.
    pub windows: Windows,
}

/// Counts the windows attached to the voice conversation (the voice loop itself is not one).
#[derive(Clone, Default)]
pub struct Windows(Arc<AtomicUsize>);

impl Windows {
    /// Whether any window is attached.
    pub fn any(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }

    fn enter(&self) -> WindowGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        WindowGuard(self.clone())
    }
}

/// Held by an attachment: the window counts as attached until it is dropped.
struct WindowGuard(Windows);

impl Drop for WindowGuard {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Voice {
    pub fn new(mode: ListenMode) -> Voice {
        Voice {
            status: watch::Sender::new(VoiceStatus {
                mode,
                ..VoiceStatus::default()
            }),
            notices: broadcast::channel(16).0,
            queue: VecDeque::new(),
            next_id: 1,
            idle_since: None,
            discard: Vec::new(),
            goodbye_after: None,
            windows: Windows::default(),
        }
    }

    pub fn chat(&self) -> Option<ChatId> {
        self.status.borrow().chat
    }

    pub fn watched(&self) -> bool {
        self.windows.any()
    }

    /// Publishes a change, with the queue as it stands; windows wake only on a real change.
    pub fn update(&self, change: impl FnOnce(&mut VoiceStatus)) {
        let queue: Vec<WaitingQuestion> = self.queue.iter().cloned().collect();
        self.status.send_if_modified(|status| {
            let before = status.clone();
            change(status);
            status.queue.clone_from(&queue);
            *status != before
        });
    }
}

/// What a window attached to the voice conversation reads next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum VoiceUpdate {
    /// The conversation's status changed (the first update is the status on attach).
    Status(VoiceStatus),
    /// An event of the conversation's replies, replayed from the current reply's first.
    Event(Event),
    /// Something to tell the user once.
    Notice(VoiceNotice),
}

/// The next status, once it changes; `None` once the service has stopped.
async fn status_update(status: &mut watch::Receiver<VoiceStatus>) -> Option<VoiceUpdate> {
    status.changed().await.ok()?;
    Some(VoiceUpdate::Status(status.borrow_and_update().clone()))
}

/// A window's subscription to the voice conversation. Dropping it detaches the window and never
/// touches a reply; the conversation counts as unwatched while no attachment is held.
pub struct VoiceAttachment {
    service: Service,
    status: watch::Receiver<VoiceStatus>,
    notices: broadcast::Receiver<VoiceNotice>,
    chat: Option<(ChatId, Attachment)>,
    _window: WindowGuard,
}

impl VoiceAttachment {
    pub(crate) fn new(
        service: Service,
        mut status: watch::Receiver<VoiceStatus>,
        notices: broadcast::Receiver<VoiceNotice>,
        windows: &Windows,
    ) -> Self {
        status.mark_changed();
        VoiceAttachment {
            service,
            status,
            notices,
            chat: None,
            _window: windows.enter(),
        }
    }

    /// The next update; `None` once the service has stopped. Cancel-safe.
    pub async fn next(&mut self) -> Option<VoiceUpdate> {
        loop {
            // Follow the conversation's chat: a new conversation has a new one.
            let wanted = self.status.borrow().chat;
            if self.chat.as_ref().map(|(id, _)| *id) != wanted {
                self.chat = match wanted {
                    Some(chat) => match self.service.attach(chat).await {
                        Ok(attachment) => Some((chat, attachment)),
                        Err(err) => {
                            tracing::warn!(%err, %chat, "could not follow the voice conversation");
                            None
                        }
                    },
                    None => None,
                };
                if self.chat.is_none() && wanted.is_some() {
                    // Its chat is gone; wait for the next status instead of trying again at once.
                    return status_update(&mut self.status).await;
                }
            }
            let events = async {
                match &mut self.chat {
                    Some((_, attachment)) => attachment.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                update = status_update(&mut self.status) => return update,
                notice = self.notices.recv() => match notice {
                    Ok(notice) => return Some(VoiceUpdate::Notice(notice)),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                event = events => match event {
                    Some(event) => return Some(VoiceUpdate::Event(event)),
                    // The chat was deleted: its attachment ended; wait for the status to move on.
                    None if self.status.borrow().chat.is_some() => {
                        return status_update(&mut self.status).await;
                    }
                    None => {}
                },
            }
        }
    }
}
