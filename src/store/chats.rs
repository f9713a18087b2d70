//! Chats: made, renamed, listed, deleted, and started afresh.

use rusqlite::{params, OptionalExtension};

use super::{now_ms, Chat, ChatId, ReplyState, Store, StoreError};

impl Store {
    /// Makes a new chat.
    pub fn create_chat(&self, title: &str) -> Result<Chat, StoreError> {
        let now = now_ms();
        let conn = self.lock();
        conn.execute(
            "INSERT INTO chats (title, created_at, updated_at) VALUES (?1, ?2, ?2)",
            params![title, now],
        )
        .map_err(|e| self.err(e))?;
        Ok(Chat {
            id: ChatId(conn.last_insert_rowid()),
            title: title.to_string(),
            created_at: now,
            updated_at: now,
            last_reply: None,
            history_since: None,
        })
    }

    /// Renames a chat.
    pub fn rename_chat(&self, chat: ChatId, title: &str) -> Result<(), StoreError> {
        let n = self
            .lock()
            .execute(
                "UPDATE chats SET title = ?2 WHERE id = ?1",
                params![chat.0, title],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NoSuchChat(chat));
        }
        Ok(())
    }

    /// Deletes a chat with its records and replies, unless a live reply in another process is
    /// writing to it (`Ok(false)`).
    pub fn delete_chat(&self, chat: ChatId) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let tx = match self.claim(&mut conn, chat) {
            Err(StoreError::ReplyingElsewhere(_)) => return Ok(false),
            claimed => claimed?,
        };
        let n = tx
            .execute("DELETE FROM chats WHERE id = ?1", [chat.0])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NoSuchChat(chat));
        }
        tx.commit().map_err(|e| self.err(e))?;
        drop(conn);
        self.scrub_log();
        Ok(true)
    }

    /// All chats, newest first.
    pub fn chats(&self) -> Result<Vec<Chat>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!(
                "{CHAT_SELECT} ORDER BY c.updated_at DESC, c.id DESC"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], chat_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }

    /// One chat.
    pub fn chat(&self, chat: ChatId) -> Result<Chat, StoreError> {
        self.lock()
            .query_row(
                &format!("{CHAT_SELECT} WHERE c.id = ?1"),
                [chat.0],
                chat_from_row,
            )
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or(StoreError::NoSuchChat(chat))
    }

    /// Starts afresh in a chat: from now on the model sees only the records that come after this
    /// point (no summary of the earlier ones, no confirmation left waiting); the chat keeps them
    /// all. Returns the seq the model's history now starts at, or `None` while another process is
    /// replying in it.
    pub fn start_afresh(&self, chat: ChatId) -> Result<Option<i64>, StoreError> {
        let mut conn = self.lock();
        let tx = match self.claim(&mut conn, chat) {
            Err(StoreError::ReplyingElsewhere(_)) => return Ok(None),
            claimed => claimed?,
        };
        let since: i64 = tx
            .query_row(
                "UPDATE chats SET history_since =
                     coalesce((SELECT max(seq) FROM records WHERE chat_id = ?1), 0) + 1,
                   anchor = NULL, compacted = NULL
                 WHERE id = ?1 RETURNING history_since",
                [chat.0],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?
            .ok_or(StoreError::NoSuchChat(chat))?;
        // A question Jarvis was waiting on belongs to what came before.
        tx.execute("DELETE FROM confirmations WHERE chat_id = ?1", [chat.0])
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Some(since))
    }
}

fn chat_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Chat> {
    Ok(Chat {
        id: ChatId(row.get(0)?),
        title: row.get(1)?,
        created_at: row.get(2)?,
        updated_at: row.get(3)?,
        last_reply: row
            .get::<_, Option<String>>(4)?
            .map(|s| ReplyState::parse(&s)),
        history_since: row.get(5)?,
    })
}

/// A chat with its latest reply's state, as `chat_from_row` reads it.
const CHAT_SELECT: &str = "SELECT c.id, c.title, c.created_at, c.updated_at,
        (SELECT state FROM replies WHERE chat_id = c.id ORDER BY id DESC LIMIT 1), c.history_since
     FROM chats c";
