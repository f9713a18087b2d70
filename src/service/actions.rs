//! What runs for a chat besides the words of its reply — tool calls in flight, compaction, the
//! summary written after an answer — counted so the state block can say how many actions are
//! still running (ADR 0044). Each holds a guard for as long as it runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::store::ChatId;

/// The count of running actions per chat; clones share it.
#[derive(Clone, Default, Debug)]
pub struct Actions(Arc<Mutex<HashMap<ChatId, usize>>>);

impl Actions {
    /// Counts one action for `chat` until the guard is dropped.
    pub fn start(&self, chat: ChatId) -> ActionGuard {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(chat)
            .or_default() += 1;
        ActionGuard {
            actions: self.clone(),
            chat,
        }
    }

    /// How many actions run for `chat` now.
    pub fn running(&self, chat: ChatId) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&chat)
            .copied()
            .unwrap_or(0)
    }
}

/// Held while an action runs.
pub struct ActionGuard {
    actions: Actions,
    chat: ChatId,
}

impl Drop for ActionGuard {
    fn drop(&mut self) {
        let mut counts = self.actions.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.chat) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.chat);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_counts_while_its_guard_lives() {
        let actions = Actions::default();
        let (a, b) = (ChatId(1), ChatId(2));
        let first = actions.start(a);
        let second = actions.start(a);
        let other = actions.start(b);
        assert_eq!((actions.running(a), actions.running(b)), (2, 1));
        drop(first);
        drop(other);
        assert_eq!((actions.running(a), actions.running(b)), (1, 0));
        drop(second);
        assert_eq!(actions.running(a), 0);
    }
}
