//! Compaction: the summary of a long chat's earlier part, which the model gets instead of it.

use rusqlite::{params, OptionalExtension};

use super::{ChatId, Store, StoreError};

impl Store {
    /// A compacted chat's anchor (the first record sent by seq) and the summary of what came
    /// before it.
    pub fn compaction(&self, chat: ChatId) -> Result<Option<(i64, String)>, StoreError> {
        self.lock()
            .query_row(
                "SELECT anchor, compacted FROM chats WHERE id = ?1 AND anchor IS NOT NULL",
                [chat.0],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Moves a chat's anchor to `anchor` (a seq) with the summary of everything before it.
    pub fn set_compaction(
        &self,
        chat: ChatId,
        anchor: i64,
        summary: &str,
    ) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE chats SET anchor = ?2, compacted = ?3 WHERE id = ?1",
                params![chat.0, anchor, summary],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }
}
