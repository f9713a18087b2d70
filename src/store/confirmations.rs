//! Confirmations: a deletion the model asked the user to confirm, settled only by a real yes.

use rusqlite::{params, OptionalExtension};

use super::{facts::fact_from_row, now_ms, ChatId, Fact, Store, StoreError};

impl Store {
    /// Asks the user of `chat` to confirm forgetting `fact` (replacing any question pending there).
    /// Only a user message recorded after this one answers it ([`Store::confirmation_answered`]).
    pub fn set_confirmation(
        &self,
        chat: ChatId,
        fact: i64,
        question: &str,
    ) -> Result<(), StoreError> {
        if self.user.is_some() {
            // The fact is the database's; a row of the same id here only keeps the reference
            // sound (nothing reads facts from this store).
            self.lock()
                .execute(
                    "INSERT OR IGNORE INTO facts (id, text, created_at, updated_at) VALUES (?1, '', 0, 0)",
                    [fact],
                )
                .map_err(|e| self.err(e))?;
        }
        self.lock()
            .execute(
                "INSERT INTO confirmations (chat_id, fact_id, question, created_at, after_seq)
                 VALUES (?1, ?2, ?3, ?4,
                         (SELECT COALESCE(MAX(seq), 0) FROM records WHERE chat_id = ?1 AND role = 'user'))
                 ON CONFLICT (chat_id) DO UPDATE
                 SET fact_id = ?2, question = ?3, created_at = ?4, after_seq = excluded.after_seq",
                params![chat.0, fact, question, now_ms()],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// When the confirmation pending in `chat` was asked (unix ms), if one is.
    pub fn confirmation_asked_at(&self, chat: ChatId) -> Result<Option<i64>, StoreError> {
        self.lock()
            .query_row(
                "SELECT created_at FROM confirmations WHERE chat_id = ?1",
                [chat.0],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The confirmation pending in `chat`, if any: the fact's id and the question asked.
    pub fn confirmation(&self, chat: ChatId) -> Result<Option<(i64, String)>, StoreError> {
        self.lock()
            .query_row(
                "SELECT fact_id, question FROM confirmations WHERE chat_id = ?1",
                [chat.0],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The fact whose forgetting is pending in `chat`, and whether the user has spoken since it
    /// was asked (a message of theirs recorded after it): only then can a yes be theirs. `None`
    /// when nothing is pending. An ask and a "confirm" in the same reply's tool rounds never
    /// count, whatever text between them told the model the user agreed.
    pub fn confirmation_answered(&self, chat: ChatId) -> Result<Option<(i64, bool)>, StoreError> {
        self.lock()
            .query_row(
                "SELECT c.fact_id,
                        EXISTS (SELECT 1 FROM records r
                                WHERE r.chat_id = c.chat_id AND r.role = 'user' AND r.seq > c.after_seq)
                 FROM confirmations c WHERE c.chat_id = ?1",
                [chat.0],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Ends the confirmation pending in `chat`; with `confirmed`, forgets its fact. Returns the
    /// fact forgotten, if one was.
    pub fn resolve_confirmation(
        &self,
        chat: ChatId,
        confirmed: bool,
    ) -> Result<Option<Fact>, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let pending: Option<i64> = tx
            .query_row(
                "SELECT fact_id FROM confirmations WHERE chat_id = ?1",
                [chat.0],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let mut forgotten = None;
        if let Some(fact) = pending {
            tx.execute("DELETE FROM confirmations WHERE chat_id = ?1", [chat.0])
                .map_err(|e| self.err(e))?;
            if confirmed {
                forgotten = tx
                    .query_row(
                        "SELECT id, text, created_at, updated_at, chat_id FROM facts WHERE id = ?1",
                        [fact],
                        fact_from_row,
                    )
                    .optional()
                    .map_err(|e| self.err(e))?;
                tx.execute("DELETE FROM facts WHERE id = ?1", [fact])
                    .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        drop(conn);
        if let (Some(user), Some(fact), true) = (&self.user, pending, confirmed) {
            // The fact itself is the database's.
            forgotten = user.facts()?.into_iter().find(|f| f.id == fact);
            if forgotten.is_some() {
                user.remove_fact(fact)?;
            }
        }
        Ok(forgotten)
    }
}
