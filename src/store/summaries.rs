//! Each chat's summary for recall from other chats: rolling (each new one covers the records
//! after the last one's `upto`), deletable by the user without deleting the chat.

use rusqlite::{params, OptionalExtension};

use super::{now_ms, record_from_row, ChatId, Record, Store, StoreError, Summary};

impl Store {
    /// Stores a chat's summary covering its records up to seq `upto`, with its embedding —
    /// unless a summary covering as much or more was stored meanwhile (a slow summary never
    /// replaces a newer one). Returns whether it was stored.
    pub fn upsert_summary(
        &self,
        chat: ChatId,
        text: &str,
        vector: &[f32],
        upto: i64,
    ) -> Result<bool, StoreError> {
        if self.user.is_some() {
            // A conversation not kept leaves no summary either.
            return Ok(false);
        }
        let blob: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.lock()
            .execute(
                "INSERT INTO summaries (chat_id, text, vector, updated_at, upto)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (chat_id) DO UPDATE SET text = ?2, vector = ?3, updated_at = ?4, upto = ?5
                 WHERE summaries.upto < ?5",
                params![chat.0, text, blob, now_ms(), upto],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }

    /// Forgets a chat's summary (the chat stays): it is never recalled again, and the next
    /// summary, after a new reply, covers only what is said from now on. Returns whether there
    /// was one.
    pub fn delete_summary(&self, chat: ChatId) -> Result<bool, StoreError> {
        if let Some(user) = &self.user {
            return user.delete_summary(chat);
        }
        let deleted = self
            .lock()
            .execute(
                // Covering every record said so far, so that a summary being written meanwhile
                // cannot bring it back.
                "UPDATE summaries SET text = '', vector = NULL, updated_at = ?2,
                   upto = max(upto, (SELECT coalesce(max(seq), 0) FROM records WHERE chat_id = ?1))
                 WHERE chat_id = ?1 AND text != ''",
                params![chat.0, now_ms()],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))?;
        self.scrub_log();
        Ok(deleted)
    }

    /// Where a chat's next summary starts: the previous summary's text (empty when there is
    /// none, or the user deleted it) and the seq of the last record it covered (0: none).
    pub fn summary_start(&self, chat: ChatId) -> Result<(String, i64), StoreError> {
        if self.user.is_some() {
            return Ok((String::new(), 0));
        }
        self.lock()
            .query_row(
                "SELECT text, upto FROM summaries WHERE chat_id = ?1",
                [chat.0],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.err(e))
    }

    /// A chat's records after seq `after`, in order.
    pub fn records_after(&self, chat: ChatId, after: i64) -> Result<Vec<Record>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, chat_id, seq, role, text, reply_id, created_at, fact_id
                 FROM records WHERE chat_id = ?1 AND seq > ?2 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![chat.0, after], record_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }

    /// Every chat's summary that may be recalled, with its title and vector, newest first.
    pub fn summaries(&self) -> Result<Vec<Summary>, StoreError> {
        if let Some(user) = &self.user {
            return user.summaries();
        }
        self.summaries_where("", [])
    }

    /// Some chats' summaries.
    pub fn summaries_of(&self, chats: &[ChatId]) -> Result<Vec<Summary>, StoreError> {
        if let Some(user) = &self.user {
            return user.summaries_of(chats);
        }
        let mut out = Vec::new();
        for chat in chats {
            out.extend(self.summaries_where("AND s.chat_id = ?1", [chat.0])?);
        }
        Ok(out)
    }

    fn summaries_where<const N: usize>(
        &self,
        filter: &str,
        args: [i64; N],
    ) -> Result<Vec<Summary>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT s.chat_id, c.title, s.text, s.vector, s.updated_at, s.upto
                 FROM summaries s JOIN chats c ON c.id = s.chat_id
                 WHERE s.text != '' {filter} ORDER BY s.updated_at DESC, s.chat_id"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), |row| {
                let blob: Option<Vec<u8>> = row.get(3)?;
                let vector = blob
                    .unwrap_or_default()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                Ok(Summary {
                    chat: ChatId(row.get(0)?),
                    title: row.get(1)?,
                    text: row.get(2)?,
                    vector,
                    updated_at: row.get(4)?,
                    upto: row.get(5)?,
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }
}
