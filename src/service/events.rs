//! The events every subscriber reads, each reply's event log, and attachments that replay a log
//! from its first event and then follow it live.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::store::{ChatId, RecordId, Reply, ReplyId, ReplyState, Store};

/// Shown while a reply waits for a one-at-a-time backend.
pub const WAITING_MESSAGE: &str = "Waiting for the reply in another chat to finish…";

/// What happens to a reply; the same stream for the CLI, the windows and tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(tag = "type", rename_all = "snake_case")]
#[ts(rename = "ReplyEvent")]
pub enum Event {
    /// A reply to `question` began.
    ReplyStarted {
        /// The chat.
        chat: ChatId,
        /// The reply.
        reply: ReplyId,
        /// The question's record.
        question: RecordId,
    },
    /// The reply waits for the backend, which is busy with another chat.
    Waiting {
        /// The reply.
        reply: ReplyId,
        /// What to show.
        message: String,
    },
    /// The backend is working on the reply.
    Running {
        /// The reply.
        reply: ReplyId,
    },
    /// The request failed before the first token and will be tried again.
    Retrying {
        /// The reply.
        reply: ReplyId,
        /// Which retry (1 for the first).
        attempt: u32,
        /// Milliseconds until it.
        wait_ms: u64,
        /// Why.
        reason: String,
    },
    /// The model called a tool; the UI shows `label` ("Remembering…") until more text comes.
    Action {
        /// The reply.
        reply: ReplyId,
        /// The tool.
        tool: String,
        /// What to show.
        label: String,
    },
    /// The reply stored a fact: the chat shows it as an action line ("Remembered: …") with Undo,
    /// kept as a record of the chat.
    Remembered {
        /// The reply.
        reply: ReplyId,
        /// The fact's id (Undo forgets it).
        fact: i64,
        /// The fact.
        text: String,
    },
    /// A call to a tool of the user's MCP servers waits for their consent: the chat window shows
    /// an action card (Allow once, Always allow this tool, Deny), answered through
    /// `Service::consent`.
    Consent {
        /// The reply.
        reply: ReplyId,
        /// The call's id (the card's answer names it).
        call: String,
        /// The server, by its name in the settings.
        server: String,
        /// The tool, by its name on the server.
        tool: String,
        /// The call's arguments as JSON, indented (cut where very long).
        arguments: String,
    },
    /// The call no longer waits for consent (answered, or the reply stopped): its card goes.
    Consented {
        /// The reply.
        reply: ReplyId,
        /// The call's id.
        call: String,
        /// Whether it was allowed.
        allowed: bool,
    },
    /// A tool call's action line (what was called, its arguments and result) was kept as a
    /// record of the chat.
    ToolCalled {
        /// The reply.
        reply: ReplyId,
        /// The tool, as the model named it.
        tool: String,
    },
    /// A piece of the reply's text.
    Delta {
        /// The reply.
        reply: ReplyId,
        /// The text.
        text: String,
    },
    /// The reply ended.
    ReplyEnded {
        /// The reply.
        reply: ReplyId,
        /// How: done, stopped, failed or interrupted.
        state: ReplyState,
        /// Why, when it did not simply finish.
        reason: Option<String>,
    },
}

impl Event {
    /// The reply this event belongs to.
    pub fn reply(&self) -> ReplyId {
        match self {
            Event::ReplyStarted { reply, .. }
            | Event::Waiting { reply, .. }
            | Event::Running { reply }
            | Event::Retrying { reply, .. }
            | Event::Delta { reply, .. }
            | Event::Action { reply, .. }
            | Event::Remembered { reply, .. }
            | Event::Consent { reply, .. }
            | Event::Consented { reply, .. }
            | Event::ToolCalled { reply, .. }
            | Event::ReplyEnded { reply, .. } => *reply,
        }
    }
}

#[derive(Default)]
pub(crate) struct LogState {
    events: Vec<Event>,
    closed: bool,
}

/// One reply's events, kept whole so a late attacher gets them from the first.
pub(crate) struct ReplyLog {
    reply: ReplyId,
    tx: watch::Sender<LogState>,
}

impl ReplyLog {
    pub(crate) fn new(reply: ReplyId) -> Arc<ReplyLog> {
        Arc::new(ReplyLog {
            reply,
            tx: watch::Sender::new(LogState::default()),
        })
    }

    /// A closed log standing for a reply read from the store (after a restart, or one that an
    /// attachment fell too far behind to find in memory).
    pub(crate) fn from_stored(reply: &Reply) -> Arc<ReplyLog> {
        let mut events = vec![Event::ReplyStarted {
            chat: reply.chat,
            reply: reply.id,
            question: reply.question,
        }];
        if !reply.text.is_empty() {
            events.push(Event::Delta {
                reply: reply.id,
                text: reply.text.clone(),
            });
        }
        if !reply.state.is_live() {
            events.push(Event::ReplyEnded {
                reply: reply.id,
                state: reply.state,
                reason: reply.reason.clone(),
            });
        }
        Arc::new(ReplyLog {
            reply: reply.id,
            tx: watch::Sender::new(LogState {
                events,
                closed: true,
            }),
        })
    }

    pub(crate) fn push(&self, event: Event) {
        self.tx.send_modify(|s| s.events.push(event));
    }

    /// Pushes the last event and closes the log at once, so whoever sees the end also sees the
    /// chat free for its next question.
    pub(crate) fn finish(&self, last: Event) {
        self.tx.send_modify(|s| {
            s.events.push(last);
            s.closed = true;
        });
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tx.borrow().closed
    }
}

/// How many of a chat's replies stay in memory for attachments that fall behind; an attachment
/// further behind reads the ones in between back from the store.
const KEPT_LOGS: usize = 8;

/// A chat's replies in the order they started, the newest last.
#[derive(Default)]
pub(crate) struct HubState {
    logs: VecDeque<Arc<ReplyLog>>,
    /// The newest reply whose log was let go (it had ended): the store has it.
    let_go: Option<ReplyId>,
}

/// Where a chat's attachments find its replies: every one of them, in order, so an attachment
/// that lags (a voice loop busy speaking, a window on a loaded machine) never skips a reply.
pub(crate) struct Hub {
    tx: watch::Sender<HubState>,
}

impl Hub {
    /// A hub whose current reply is `last` (read from the store), if the chat has one.
    pub(crate) fn new(last: Option<Arc<ReplyLog>>) -> Hub {
        Hub {
            tx: watch::Sender::new(HubState {
                logs: last.into_iter().collect(),
                let_go: None,
            }),
        }
    }

    /// A reply started: attachments go on to it once they have read the ones before.
    pub(crate) fn publish(&self, log: Arc<ReplyLog>) {
        self.tx.send_modify(|hub| {
            hub.logs.push_back(log);
            while hub.logs.len() > KEPT_LOGS && hub.logs.front().is_some_and(|l| l.is_closed()) {
                hub.let_go = hub.logs.pop_front().map(|l| l.reply);
            }
        });
    }

    pub(crate) fn receiver_count(&self) -> usize {
        self.tx.receiver_count()
    }

    /// An attachment that starts at the current reply's first event.
    pub(crate) fn attach(&self, store: Store, chat: ChatId) -> Attachment {
        let mut hub = self.tx.subscribe();
        let current = hub
            .borrow_and_update()
            .logs
            .back()
            .map(|log| (log.clone(), log.tx.subscribe()));
        Attachment {
            hub,
            store,
            chat,
            current,
            index: 0,
        }
    }
}

/// A subscriber to one chat: it replays the current (or last) reply from its first event, follows
/// it live, then every later reply of the chat in order, however far behind it falls. Dropping it
/// never touches a reply.
pub struct Attachment {
    hub: watch::Receiver<HubState>,
    /// Where the replies let go from memory are read back.
    store: Store,
    chat: ChatId,
    current: Option<(Arc<ReplyLog>, watch::Receiver<LogState>)>,
    index: usize,
}

impl Attachment {
    /// The next event; `None` once the service has stopped or the chat was deleted. Cancel-safe.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if self.current.is_none() {
                // Attached before the chat's first reply: follow it from its start.
                if let Some(first) = self.after(ReplyId(i64::MIN)).await {
                    self.follow(first);
                }
            }
            if let Some((log, rx)) = &mut self.current {
                // The guard is scoped so the future stays `Send` (attachments run on any thread).
                let open = {
                    let state = rx.borrow_and_update();
                    if let Some(event) = state.events.get(self.index) {
                        self.index += 1;
                        return Some(event.clone());
                    }
                    !state.closed
                };
                if open {
                    // The log's sender lives as long as the log we hold, so this only wakes on a push.
                    let _ = rx.changed().await;
                    continue;
                }
                let read = log.reply;
                if let Some(next) = self.after(read).await {
                    self.follow(next);
                    continue;
                }
            }
            if self.hub.changed().await.is_err() {
                return None;
            }
        }
    }

    /// The next event of `reply`, skipping others; `None` after its end or when the service stopped.
    pub async fn next_of(&mut self, reply: ReplyId) -> Option<Event> {
        loop {
            let event = self.next().await?;
            if event.reply() == reply {
                return Some(event);
            }
        }
    }

    fn follow(&mut self, log: Arc<ReplyLog>) {
        let rx = log.tx.subscribe();
        self.current = Some((log, rx));
        self.index = 0;
    }

    /// The chat's reply after `read`: from memory, or from the store when the ones in between
    /// were let go. Cancel-safe: nothing changes until it returns.
    async fn after(&mut self, read: ReplyId) -> Option<Arc<ReplyLog>> {
        let (kept, let_go) = {
            let hub = self.hub.borrow_and_update();
            let kept = hub.logs.iter().find(|l| l.reply > read).cloned();
            (kept, hub.let_go)
        };
        if let_go.is_some_and(|gone| gone > read) {
            let (store, chat) = (self.store.clone(), self.chat);
            match super::blocking(move || store.reply_after(chat, read)).await {
                Ok(Some(stored)) if kept.as_ref().is_none_or(|k| stored.id < k.reply) => {
                    return Some(ReplyLog::from_stored(&stored));
                }
                Ok(_) => {}
                // The rest is still in memory; only the replies in between are missed.
                Err(err) => tracing::warn!(%err, %chat, "could not read a reply back"),
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn an_attachment_can_be_followed_from_any_thread() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("jarvis.db"), Duration::from_secs(1)).unwrap();
        let mut attachment = Hub::new(None).attach(store, ChatId(1));
        assert_send(&attachment.next());
    }

    #[test]
    fn events_serialise_with_a_snake_case_type_tag_for_every_subscriber() {
        let delta = Event::Delta {
            reply: ReplyId(7),
            text: "Hi".into(),
        };
        assert_eq!(
            serde_json::to_string(&delta).unwrap(),
            r#"{"type":"delta","reply":7,"text":"Hi"}"#
        );
        let ended = Event::ReplyEnded {
            reply: ReplyId(7),
            state: ReplyState::Stopped,
            reason: Some("stopped by the user".into()),
        };
        let json = serde_json::to_string(&ended).unwrap();
        assert_eq!(
            json,
            r#"{"type":"reply_ended","reply":7,"state":"stopped","reason":"stopped by the user"}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), ended);
    }
}
