//! The events every subscriber reads, each reply's event log, and attachments that replay a log
//! from its first event and then follow it live.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::store::{ChatId, RecordId, Reply, ReplyId, ReplyState};

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
    tx: watch::Sender<LogState>,
}

impl ReplyLog {
    pub(crate) fn new() -> Arc<ReplyLog> {
        Arc::new(ReplyLog {
            tx: watch::Sender::new(LogState::default()),
        })
    }

    /// A closed log standing for a reply read from the store (after a restart).
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

/// A subscriber to one chat: it replays the current (or last) reply from its first event, follows
/// it live, then goes on to the chat's next replies. Dropping it never touches a reply.
pub struct Attachment {
    hub: watch::Receiver<Option<Arc<ReplyLog>>>,
    current: Option<(Arc<ReplyLog>, watch::Receiver<LogState>)>,
    index: usize,
}

impl Attachment {
    pub(crate) fn new(hub: watch::Receiver<Option<Arc<ReplyLog>>>) -> Attachment {
        Attachment {
            hub,
            current: None,
            index: 0,
        }
    }

    /// The next event; `None` once the service has stopped. Cancel-safe.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            let latest = self.hub.borrow_and_update().clone();
            if let Some(latest) = latest {
                let switch = match &self.current {
                    None => true,
                    Some((log, rx)) => {
                        !Arc::ptr_eq(log, &latest) && {
                            let state = rx.borrow();
                            state.closed && self.index >= state.events.len()
                        }
                    }
                };
                if switch {
                    let rx = latest.tx.subscribe();
                    self.current = Some((latest, rx));
                    self.index = 0;
                }
            }
            if let Some((_, rx)) = &mut self.current {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn an_attachment_can_be_followed_from_any_thread() {
        let (_hub, rx) = watch::channel(None);
        let mut attachment = Attachment::new(rx);
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
