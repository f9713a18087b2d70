//! The voice conversation: the orb's one live conversation, its queue of waiting questions, how it
//! listens, and the attachment a window holds on it. The actor owns it; windows only read
//! [`VoiceStatus`] and the conversation's chat events through a [`VoiceAttachment`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot, watch};
use tokio::time::Instant;

use super::{
    asks_the_user, blocking, Actor, AskError, Attachment, Command, Event, Service, ServiceError,
    NEW_CHAT_TITLE,
};
use crate::config::Mode;
use crate::store::{ChatId, ReplyId, ReplyState};

/// At most this many questions wait behind a running reply.
pub const QUEUE_LIMIT: usize = 4;

pub use crate::config::ListenMode;

/// A question waiting behind the running reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
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
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS)]
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
}

/// How a question put to the voice conversation was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "notice", rename_all = "snake_case")]
pub enum VoiceNotice {
    /// A spoken question was not taken: [`QUEUE_LIMIT`] questions already wait.
    QueueFull {
        /// What was said.
        text: String,
    },
}

/// One-off news for the voice loop, beside the status: each is acted on once, never merged into
/// a later one as a status is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoiceSignal {
    /// Stop or End: Jarvis's voice is cut, even when the reply's text had already ended and only
    /// its audio was still playing.
    Stop,
    /// Listening was turned on (anew): a microphone that failed is tried again.
    Listen,
}

/// The service's side of the voice conversation.
pub(crate) struct Voice {
    pub status: watch::Sender<VoiceStatus>,
    /// One-off news for the windows.
    pub notices: broadcast::Sender<VoiceNotice>,
    /// One-off news for the voice loop; sent before the status change it comes with, so a loop
    /// that sees the change finds the signal waiting.
    pub signals: broadcast::Sender<VoiceSignal>,
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
    /// The orb was last hidden (and not shown since, nor called up by push to talk).
    pub hidden: bool,
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
            signals: broadcast::channel(16).0,
            queue: VecDeque::new(),
            next_id: 1,
            idle_since: None,
            discard: Vec::new(),
            goodbye_after: None,
            windows: Windows::default(),
            hidden: false,
        }
    }

    /// While the orb is hidden, whatever changed the mode or the setting (`keep_wake`): it holds
    /// no open microphone unless it listens for the wake word and the wake word is kept on while
    /// hidden.
    pub fn quiet_while_hidden(&self, keep_wake: bool) {
        if self.hidden {
            self.orb_hidden(keep_wake);
        }
    }

    pub fn chat(&self) -> Option<ChatId> {
        self.status.borrow().chat
    }

    pub fn watched(&self) -> bool {
        self.windows.any()
    }

    /// Tells the voice loop something once.
    pub fn signal(&self, signal: VoiceSignal) {
        let _ = self.signals.send(signal);
    }

    /// How it listens from now on; during a reply, once the reply is answered.
    pub fn choose_mode(&self, mode: ListenMode) {
        let replying = self.status.borrow().replying.is_some();
        self.update(|s| {
            if replying && mode != s.mode {
                s.pending_mode = Some(mode);
            } else {
                s.mode = mode;
                s.pending_mode = None;
            }
        });
    }

    /// The push-to-talk shortcut went down or up.
    pub fn push_to_talk(&self, pressed: bool) {
        tracing::debug!(pressed, "push to talk");
        self.update(|s| match s.mode {
            // Held: open while pressed.
            ListenMode::PushToTalk => s.listening = pressed,
            // Hands-free and wake: a press switches the microphone on or off.
            ListenMode::HandsFree | ListenMode::Wake => {
                if pressed {
                    s.listening = !s.listening;
                    s.awake = false;
                }
            }
        });
    }

    /// The microphone button: on (a Listen signal first, so a failed microphone is tried
    /// again) or off (a wake conversation closes with it).
    pub fn set_listening(&self, on: bool) {
        if on {
            self.signal(VoiceSignal::Listen);
        }
        self.update(|s| {
            s.listening = on;
            if !on {
                s.awake = false;
            }
        })
    }

    /// The orb was hidden: a hidden orb holds no open microphone, unless it listens for the wake
    /// word and the settings keep the wake word on while hidden (`keep_wake`).
    pub fn orb_hidden(&self, keep_wake: bool) {
        self.update(|s| close_while_hidden(s, keep_wake));
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

/// A hidden orb's rule: no open microphone unless it listens for the wake word and the settings
/// keep the wake word on while hidden (`keep_wake`).
fn close_while_hidden(s: &mut VoiceStatus, keep_wake: bool) {
    if !(keep_wake && s.mode == ListenMode::Wake) {
        s.listening = false;
        s.awake = false;
    }
}

/// A mode chosen during a reply, taken up now; on a hidden orb (`hidden`) in the same change the
/// hidden orb's rule applies, so the voice loop never sees it listen in a mode it may not.
fn take_pending_mode(s: &mut VoiceStatus, hidden: bool, keep_wake: bool) {
    if let Some(mode) = s.pending_mode.take() {
        s.mode = mode;
        if hidden {
            close_while_hidden(s, keep_wake);
        }
    }
}

/// What a window attached to the voice conversation reads next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
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

/// What the voice conversation is asked to do; the actor handles each in order.
pub(crate) enum VoiceCommand {
    Ask {
        text: String,
        mode: Mode,
        respond: oneshot::Sender<Result<VoiceTicket, AskError>>,
    },
    Retry {
        respond: oneshot::Sender<Result<ReplyId, AskError>>,
    },
    Remove {
        id: u64,
        respond: oneshot::Sender<bool>,
    },
    Subscribe {
        respond: oneshot::Sender<watch::Receiver<VoiceStatus>>,
    },
    Stop {
        respond: oneshot::Sender<bool>,
    },
    End {
        respond: oneshot::Sender<bool>,
    },
    Mode {
        mode: ListenMode,
    },
    Listening {
        on: bool,
    },
    Awake {
        awake: bool,
    },
    Goodbye,
    Speaking {
        on: bool,
    },
    PushToTalk {
        pressed: bool,
    },
    /// A key bound by hand was pressed (no release comes).
    Talk,
    OrbShown {
        shown: bool,
    },
    Acknowledge,
}

impl Service {
    /// Puts a question typed into the orb to the voice conversation: it starts at once when
    /// nothing runs there, else it waits in the queue (at most [`QUEUE_LIMIT`]). It never
    /// cancels anything. The model is told it was typed, whether the microphone is open or not.
    pub async fn voice_ask(&self, text: impl Into<String>) -> Result<VoiceTicket, AskError> {
        self.voice_question(text.into(), Mode::Typed).await
    }

    /// Puts a question the voice loop heard, captured while the microphone listened in `mode`
    /// (the push-to-talk key may be up by now: the mode is the one it was said in). When the
    /// queue is full, the windows are told it was not taken.
    pub async fn voice_ask_heard(
        &self,
        text: impl Into<String>,
        mode: ListenMode,
    ) -> Result<VoiceTicket, AskError> {
        self.voice_question(text.into(), mode.into()).await
    }

    async fn voice_question(&self, text: String, mode: Mode) -> Result<VoiceTicket, AskError> {
        if text.trim().is_empty() {
            return Err(ServiceError::EmptyQuestion.into());
        }
        self.call(|respond| {
            Command::Voice(VoiceCommand::Ask {
                text,
                mode,
                respond,
            })
        })
        .await?
    }

    /// Try again in the orb: a new reply to the voice conversation's failed or interrupted last
    /// question.
    pub async fn voice_retry(&self) -> Result<ReplyId, AskError> {
        self.call(|respond| Command::Voice(VoiceCommand::Retry { respond }))
            .await?
    }

    /// Withdraws a waiting question; `false` when it is no longer waiting.
    pub async fn voice_remove(&self, id: u64) -> Result<bool, ServiceError> {
        self.call(|respond| Command::Voice(VoiceCommand::Remove { id, respond }))
            .await
    }

    /// Attaches a window to the voice conversation. Attaching never opens the microphone.
    pub async fn voice_attach(&self) -> Result<VoiceAttachment, ServiceError> {
        let status = self
            .call(|respond| Command::Voice(VoiceCommand::Subscribe { respond }))
            .await?;
        Ok(VoiceAttachment::new(
            self.clone(),
            status,
            self.voice.notices.subscribe(),
            &self.voice.windows,
        ))
    }

    /// The voice conversation's one-off signals (Stop, Listen), for the voice loop.
    pub fn voice_signals(&self) -> broadcast::Receiver<VoiceSignal> {
        self.voice.signals.subscribe()
    }

    /// The voice conversation's status, for the voice loop: reading it is not watching it (a
    /// reply with no window attached is not spoken, and is marked answered while away).
    pub fn voice_status(&self) -> watch::Receiver<VoiceStatus> {
        self.voice.status.clone()
    }

    /// Whether a window is attached to the voice conversation now.
    pub fn voice_watched(&self) -> bool {
        self.voice.windows.any()
    }

    /// Opens or closes the microphone in hands-free and wake modes (the orb's microphone
    /// button); push to talk opens it only while the shortcut is held.
    pub async fn set_listening(&self, on: bool) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::Listening { on }))
            .await
    }

    /// Opens or closes a wake conversation (the voice loop heard "Hey Jarvis", a goodbye took
    /// effect, or it went quiet).
    pub async fn set_awake(&self, awake: bool) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::Awake { awake }))
            .await
    }

    /// A goodbye was said in a wake conversation: it closes now (what follows needs the wake
    /// word), and the conversation ends once the reply in progress is answered — its voice plays
    /// out, the questions waiting behind it are dropped, and the microphone goes on listening
    /// for "Hey Jarvis".
    pub async fn voice_goodbye(&self) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::Goodbye)).await
    }

    /// The voice loop's speaker started or stopped playing Jarvis's voice.
    pub async fn set_speaking(&self, on: bool) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::Speaking { on }))
            .await
    }

    /// As [`Service::set_speaking`], from where nothing can wait (a voice loop being dropped);
    /// dropped only if the service is gone or swamped.
    pub fn speaking_ended_now(&self) {
        let _ = self
            .tx
            .try_send(Command::Voice(VoiceCommand::Speaking { on: false }));
    }

    /// Keeps how much of a spoken answer was played before it was cut (Stop, End, or its window
    /// going away), so the next request can say where it was cut.
    pub async fn voice_heard(&self, reply: ReplyId, prefix: String) -> Result<(), ServiceError> {
        let store = self.store_of_reply(reply).clone();
        blocking(move || store.set_heard(reply, &prefix)).await?;
        Ok(())
    }

    /// Stops the voice conversation's reply and every question waiting behind it (what a spoken
    /// "stop" does); `false` when there was nothing to stop.
    pub async fn voice_stop(&self) -> Result<bool, ServiceError> {
        self.call(|respond| Command::Voice(VoiceCommand::Stop { respond }))
            .await
    }

    /// Ends the voice conversation: stops its reply, drops its queue and starts afresh next time
    /// (its chat is kept unless saving voice conversations is off). `false` when there was none.
    pub async fn end_conversation(&self) -> Result<bool, ServiceError> {
        self.call(|respond| Command::Voice(VoiceCommand::End { respond }))
            .await
    }

    /// Chooses how the voice conversation listens; during a reply it takes effect once the
    /// reply is answered.
    pub async fn set_listen_mode(&self, mode: ListenMode) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::Mode { mode })).await
    }

    /// The push-to-talk shortcut went down (`true`: the microphone opens) or up (the utterance
    /// ends). It never cancels a reply.
    pub async fn push_to_talk(&self, pressed: bool) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::PushToTalk { pressed }))
            .await
    }

    /// A key bound by hand to `jarvis-desktop --action talk` was pressed, where the desktop
    /// gives no shortcut (a Wayland desktop without the portal's GlobalShortcuts): its command
    /// runs on the press and nothing tells the release. So each press toggles: in push-to-talk
    /// the first opens the microphone and the next ends the utterance; in the other modes it is
    /// the shortcut's press (the microphone on or off). It never cancels a reply.
    pub async fn talk(&self) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::Talk)).await
    }

    /// The orb was shown or hidden. Hiding it closes the microphone (a hidden orb holds none),
    /// unless it listens for the wake word and the settings keep the wake word on while hidden;
    /// showing it never opens the microphone. The push-to-talk shortcut shows the orb first.
    pub async fn set_orb_shown(&self, shown: bool) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::OrbShown { shown }))
            .await
    }

    /// A window showed the reply that was answered while nobody watched.
    pub async fn acknowledge_answer(&self) -> Result<(), ServiceError> {
        self.send(Command::Voice(VoiceCommand::Acknowledge)).await
    }
}

impl Actor {
    /// Handles one of the voice conversation's commands.
    pub(super) async fn handle_voice(&mut self, command: VoiceCommand) {
        // In wake mode the microphone is open for the wake word: the user speaks once awake.
        let hearing = |s: &VoiceStatus| match s.mode {
            ListenMode::Wake => s.awake,
            _ => s.listening,
        };
        let (was_hearing, was_mode) = {
            let status = self.voice.status.borrow();
            (hearing(&status), status.mode)
        };
        self.handle_voice_command(command).await;
        // The microphone opened (the shortcut, the button, the key bound by hand) or "Hey
        // Jarvis" was heard: while the user speaks and whisper writes it down, the model is
        // given the conversation so far, so the question's first token comes from its cache.
        // (A change of mode is not the microphone opening: from wake mode, listening for the
        // wake word, to hands-free the microphone was open all along.)
        let (now_hearing, same_mode, idle, chat) = {
            let status = self.voice.status.borrow();
            (
                hearing(&status),
                status.mode == was_mode,
                status.replying.is_none() && self.voice.queue.is_empty(),
                status.chat,
            )
        };
        if now_hearing && !was_hearing && same_mode && idle {
            self.warm(chat);
        }
    }

    async fn handle_voice_command(&mut self, command: VoiceCommand) {
        match command {
            VoiceCommand::Ask {
                text,
                mode,
                respond,
            } => {
                let result = self.voice_ask(text.clone(), mode).await;
                if matches!(result, Err(AskError::QueueFull)) && mode != Mode::Typed {
                    // Said aloud, nobody reads the refusal unless the orb says it.
                    let _ = self.voice.notices.send(VoiceNotice::QueueFull { text });
                }
                let _ = respond.send(result);
            }
            VoiceCommand::Retry { respond } => {
                let _ = respond.send(self.voice_retry().await);
            }
            VoiceCommand::Remove { id, respond } => {
                let before = self.voice.queue.len();
                self.voice.queue.retain(|q| q.id != id);
                let removed = self.voice.queue.len() != before;
                self.voice.update(|_| {});
                let _ = respond.send(removed);
            }
            VoiceCommand::Subscribe { respond } => {
                self.voice.idle_since = None;
                let _ = respond.send(self.voice.status.subscribe());
            }
            VoiceCommand::Stop { respond } => {
                let _ = respond.send(self.voice_stop());
            }
            VoiceCommand::End { respond } => {
                let _ = respond.send(self.end_conversation().await);
            }
            VoiceCommand::Mode { mode } => {
                self.voice.choose_mode(mode);
                self.voice
                    .quiet_while_hidden(self.options.wake_while_hidden);
            }
            VoiceCommand::PushToTalk { pressed } => {
                // (The shortcut shows the orb first.)
                if pressed {
                    self.voice.hidden = false;
                }
                self.voice.push_to_talk(pressed)
            }
            VoiceCommand::Talk => {
                self.voice.hidden = false;
                let (mode, open) = {
                    let status = self.voice.status.borrow();
                    (status.mode, status.listening)
                };
                // Held open by the last press: this one is the release.
                self.voice
                    .push_to_talk(!(mode == ListenMode::PushToTalk && open))
            }
            VoiceCommand::Listening { on } => self.voice.set_listening(on),
            VoiceCommand::Awake { awake } => {
                if awake {
                    // "Hey Jarvis" again before the goodbye took effect: the conversation goes on.
                    self.voice.goodbye_after = None;
                }
                self.voice
                    .update(|s| s.awake = awake && s.mode == ListenMode::Wake)
            }
            VoiceCommand::Speaking { on } => self.voice.update(|s| s.speaking = on),
            VoiceCommand::Goodbye => {
                self.voice.update(|s| s.awake = false);
                let replying = self.voice.status.borrow().replying;
                match replying {
                    Some(reply) => self.voice.goodbye_after = Some(reply),
                    None => self.end_after_goodbye().await,
                }
            }
            VoiceCommand::OrbShown { shown } => {
                self.voice.hidden = !shown;
                if !shown {
                    self.voice.orb_hidden(self.options.wake_while_hidden);
                }
            }
            VoiceCommand::Acknowledge => self.voice.update(|s| s.answered_away = None),
        }
    }

    /// Try again: the conversation's last question once more, unless a reply runs.
    async fn voice_retry(&mut self) -> Result<ReplyId, AskError> {
        let result = match self.voice.chat() {
            Some(chat) if self.voice.status.borrow().replying.is_none() => {
                self.ask(chat, None, Mode::Typed).await
            }
            Some(chat) => Err(AskError::Busy(chat)),
            None => Err(ServiceError::NoVoiceConversation.into()),
        };
        if let Ok(reply) = result {
            self.voice.update(|s| {
                s.replying = Some(reply);
                s.answered_away = None;
            });
        }
        result
    }

    /// A reply ended: in the voice conversation its next question starts, a pending mode is
    /// taken up, and a reply nobody watched is marked answered while away; an unsaved ended
    /// conversation's chat is deleted once its reply is done.
    pub(super) async fn voice_reply_finished(&mut self, chat: ChatId, reply: ReplyId) {
        if let Some(index) = self.voice.discard.iter().position(|c| *c == chat) {
            if self.replying(chat).is_none() {
                self.voice.discard.remove(index);
                if let Err(err) = self.delete(chat).await {
                    tracing::warn!(%err, %chat, "could not discard an unsaved voice conversation");
                }
            }
            return;
        }
        if self.voice.chat() != Some(chat) {
            return;
        }
        let unwatched = !self.voice.watched();
        let (answered, asks) = {
            let store = self.store_of(chat).clone();
            blocking(move || Ok((store.reply(reply)?, store.confirmation(chat)?)))
                .await
                .map(|(stored, confirmation)| {
                    let done = stored.filter(|r| r.state == ReplyState::Done);
                    let asks = done
                        .as_ref()
                        .is_some_and(|r| confirmation.is_some() || asks_the_user(&r.text));
                    (done.is_some(), asks)
                })
                .unwrap_or((false, false))
        };
        // (A mode chosen during the reply is taken up now; on a hidden orb, in the same change,
        // so that the voice loop never sees it listen in a mode a hidden orb does not.)
        let (hidden, keep_wake) = (self.voice.hidden, self.options.wake_while_hidden);
        self.voice.update(|s| {
            if s.replying == Some(reply) {
                s.replying = None;
            }
            take_pending_mode(s, hidden, keep_wake);
            if unwatched && answered {
                s.answered_away = Some(reply);
            }
            // ADR 0159: the answer asked the user something; what they say or type next is their
            // reply to it, ahead of anything that was waiting.
            s.awaiting_answer = asks;
        });
        if self.voice.goodbye_after == Some(reply) {
            self.end_after_goodbye().await;
            return;
        }
        if asks {
            // (Published above, with the queue as it stands.)
            return;
        }
        while let Some(next) = self.voice.queue.pop_front() {
            match self.ask(chat, Some(next.text), next.mode).await {
                Ok(reply) => {
                    self.voice.update(|s| s.replying = Some(reply));
                    return;
                }
                Err(err) => {
                    tracing::warn!(%err, "a waiting voice question could not start");
                }
            }
        }
        self.voice.update(|_| {});
    }

    async fn voice_ask(&mut self, text: String, mode: Mode) -> Result<VoiceTicket, AskError> {
        let chat = match self.voice.chat() {
            Some(chat) => chat,
            None => {
                // With saving off, nothing of the conversation is written to disk: it lives in
                // memory, with the user's facts still the database's.
                let store = if self.options.save_voice {
                    self.store.clone()
                } else {
                    self.memory.clone()
                };
                let chat = blocking(move || store.create_chat(NEW_CHAT_TITLE)).await?;
                self.voice.update(|s| s.chat = Some(chat.id));
                chat.id
            }
        };
        let replying = self.voice.status.borrow().replying.is_some();
        if replying || self.replying(chat).is_some() {
            if self.voice.queue.len() >= QUEUE_LIMIT {
                return Err(AskError::QueueFull);
            }
            let id = self.voice.next_id;
            self.voice.next_id += 1;
            self.voice
                .queue
                .push_back(WaitingQuestion { id, text, mode });
            self.voice.update(|_| {});
            return Ok(VoiceTicket::Queued { id });
        }
        let reply = self.ask(chat, Some(text), mode).await?;
        self.voice.update(|s| {
            s.replying = Some(reply);
            s.answered_away = None;
            // This was the answer Jarvis waited for; the questions waiting come after it.
            s.awaiting_answer = false;
        });
        Ok(VoiceTicket::Started { reply })
    }

    fn voice_stop(&mut self) -> bool {
        let had_more = !self.voice.queue.is_empty() || self.voice.status.borrow().speaking;
        self.voice.queue.clear();
        let stopped = self.voice.chat().is_some_and(|chat| self.stop(chat));
        self.voice.signal(VoiceSignal::Stop);
        self.voice.update(|s| s.awaiting_answer = false);
        stopped || had_more
    }

    async fn end_conversation(&mut self) -> bool {
        let Some(chat) = self.voice.chat() else {
            return false;
        };
        self.voice.queue.clear();
        self.stop(chat);
        self.voice.signal(VoiceSignal::Stop);
        self.voice.update(|s| {
            s.chat = None;
            s.replying = None;
            s.listening = false;
            s.awake = false;
            s.awaiting_answer = false;
            s.answered_away = None;
            if let Some(mode) = s.pending_mode.take() {
                s.mode = mode;
            }
        });
        self.voice.idle_since = None;
        self.voice.goodbye_after = None;
        self.discard_unsaved(chat).await;
        true
    }

    /// Ends the voice conversation after a goodbye: like End, but what is being said plays out
    /// and the microphone keeps listening for the wake word.
    async fn end_after_goodbye(&mut self) {
        self.voice.goodbye_after = None;
        let Some(chat) = self.voice.chat() else {
            return;
        };
        self.voice.queue.clear();
        let (hidden, keep_wake) = (self.voice.hidden, self.options.wake_while_hidden);
        self.voice.update(|s| {
            s.chat = None;
            s.replying = None;
            s.awake = false;
            s.awaiting_answer = false;
            take_pending_mode(s, hidden, keep_wake);
        });
        self.voice.idle_since = None;
        self.discard_unsaved(chat).await;
    }

    /// With saving off, an ended conversation's chat goes (once its reply has ended).
    async fn discard_unsaved(&mut self, chat: ChatId) {
        // A conversation kept in memory goes with its end; one in the database (saving was on
        // when it began) stays unless saving is off now.
        if self.options.save_voice && !chat.in_memory() {
            return;
        }
        if self.replying(chat).is_some() {
            self.voice.discard.push(chat);
        } else if let Err(err) = self.delete(chat).await {
            tracing::warn!(%err, %chat, "could not discard an unsaved voice conversation");
        }
    }

    /// Forgets the voice conversation once nobody has watched it, with nothing running or
    /// waiting, for the keep time.
    pub(super) async fn forget_idle_voice(&mut self) {
        // Any reply of its chat keeps it (one asked in the chat window too): forgetting never
        // stops anything.
        let writing = self
            .voice
            .chat()
            .and_then(|chat| self.chats.get(&chat))
            .is_some_and(|c| c.writing().is_some());
        let idle = self.voice.chat().is_some()
            && !self.voice.watched()
            && self.voice.queue.is_empty()
            && self.voice.status.borrow().replying.is_none()
            && !writing;
        if !idle {
            self.voice.idle_since = None;
            return;
        }
        let since = *self.voice.idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= self.options.voice_keep {
            tracing::debug!("forgetting the idle voice conversation");
            // As after a goodbye: nothing is stopped, and the microphone listens as the user
            // chose (the wake word while hidden still wakes it).
            self.end_after_goodbye().await;
            self.voice.update(|s| s.answered_away = None);
            self.publish_activity();
        }
    }
}
