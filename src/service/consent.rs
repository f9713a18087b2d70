//! The user's consent to one tool call (DESIGN §8): a reply whose call waits for it registers the
//! call here and shows an action card; the window's answer reaches it through
//! `Service::consent`. Stop ends the wait (the reply's cancellation), and a call nobody waits for
//! any more takes no answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::store::ReplyId;

/// The user's answer to one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Consent {
    /// This call runs; the next asks again.
    Once,
    /// This call runs, and every later call to the same tool of the same server without asking.
    Always,
    /// This call does not run; the model is told so.
    Deny,
}

type Key = (ReplyId, String);

/// The calls waiting for consent; clones share them.
#[derive(Clone, Default)]
pub(crate) struct Consents(Arc<Mutex<HashMap<Key, oneshot::Sender<Consent>>>>);

/// A call's wait: its answer comes through `answer`; dropped, the call no longer waits.
pub(crate) struct Waiting {
    consents: Consents,
    key: Key,
    pub(crate) answer: oneshot::Receiver<Consent>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.consents.locked().remove(&self.key);
    }
}

impl Consents {
    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<Key, oneshot::Sender<Consent>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `call` of `reply` waits for the user from now.
    pub(crate) fn wait(&self, reply: ReplyId, call: &str) -> Waiting {
        let (tx, answer) = oneshot::channel();
        let key = (reply, call.to_string());
        self.locked().insert(key.clone(), tx);
        Waiting {
            consents: self.clone(),
            key,
            answer,
        }
    }

    /// Answers `call` of `reply`; false when it does not wait (answered already, or its reply
    /// ended).
    pub(crate) fn answer(&self, reply: ReplyId, call: &str, consent: Consent) -> bool {
        let waiting = self.locked().remove(&(reply, call.to_string()));
        waiting.is_some_and(|tx| tx.send(consent).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reaches_the_call_that_waits_and_only_once() {
        let consents = Consents::default();
        let mut waiting = consents.wait(ReplyId(1), "c1");
        assert!(
            !consents.answer(ReplyId(2), "c1", Consent::Once),
            "another reply's"
        );
        assert!(consents.answer(ReplyId(1), "c1", Consent::Deny));
        assert_eq!(waiting.answer.try_recv().unwrap(), Consent::Deny);
        assert!(
            !consents.answer(ReplyId(1), "c1", Consent::Once),
            "answered"
        );
        let gone = consents.wait(ReplyId(1), "c2");
        drop(gone);
        assert!(
            !consents.answer(ReplyId(1), "c2", Consent::Always),
            "no longer waits"
        );
    }
}
