//! Facts the user asked Jarvis to remember, with the chat each was said in.

use rusqlite::params;

use super::{now_ms, ChatId, Fact, FactOrigin, Store, StoreError};

impl Store {
    /// Remembers a fact, said in chat `from` (`None`: written by the user in the Memory panel or
    /// the CLI); one already known (whatever its case) is returned as it is.
    pub fn add_fact(&self, text: &str, from: Option<ChatId>) -> Result<Fact, StoreError> {
        self.store_fact(text, from).map(|(fact, _)| fact)
    }

    /// As [`Store::add_fact`], and whether the fact is new (`false`: it was known already, and
    /// is returned as it was, its origin unchanged).
    pub fn store_fact(&self, text: &str, from: Option<ChatId>) -> Result<(Fact, bool), StoreError> {
        if let Some(user) = &self.user {
            // A conversation that is not kept is not named as the fact's source either; it is
            // said to be one that was not saved.
            let origin = match from {
                Some(_) => FactOrigin::Unsaved,
                None => FactOrigin::User,
            };
            return user.insert_fact(text, origin, None);
        }
        let origin = match from {
            Some(_) => FactOrigin::Chat,
            None => FactOrigin::User,
        };
        self.insert_fact(text, origin, from)
    }

    fn insert_fact(
        &self,
        text: &str,
        origin: FactOrigin,
        from: Option<ChatId>,
    ) -> Result<(Fact, bool), StoreError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(StoreError::EmptyFact);
        }
        let now = now_ms();
        let conn = self.lock();
        let new = conn
            .execute(
                "INSERT INTO facts (text, created_at, updated_at, chat_id, origin)
                 VALUES (?1, ?2, ?2, ?3, ?4)
                 ON CONFLICT DO NOTHING",
                params![text, now, from.map(|c| c.0), origin.as_str()],
            )
            .map_err(|e| self.err(e))?
            > 0;
        conn.query_row(
            "SELECT id, text, created_at, updated_at, chat_id, origin FROM facts WHERE lower(text) = lower(?1)",
            [text],
            fact_from_row,
        )
        .map(|fact| (fact, new))
        .map_err(|e| self.err(e))
    }

    /// In a store kept in memory, a row standing for the database's fact `id`, so a reference to
    /// it here (a confirmation, an action line) is sound; nothing reads facts from this store.
    /// Nothing to do in the database itself.
    pub(super) fn mirror_fact(&self, conn: &rusqlite::Connection, id: i64) -> rusqlite::Result<()> {
        if self.user.is_some() {
            conn.execute(
                "INSERT OR IGNORE INTO facts (id, text, created_at, updated_at) VALUES (?1, '', 0, 0)",
                [id],
            )?;
        }
        Ok(())
    }

    /// Rewrites a fact.
    pub fn edit_fact(&self, id: i64, text: &str) -> Result<Fact, StoreError> {
        if let Some(user) = &self.user {
            return user.edit_fact(id, text);
        }
        let text = text.trim();
        if text.is_empty() {
            return Err(StoreError::EmptyFact);
        }
        let conn = self.lock();
        let n = conn
            .execute(
                "UPDATE facts SET text = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, text, now_ms()],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NoSuchFact(id));
        }
        conn.query_row(
            "SELECT id, text, created_at, updated_at, chat_id, origin FROM facts WHERE id = ?1",
            [id],
            fact_from_row,
        )
        .map_err(|e| self.err(e))
    }

    /// Forgets a fact for good.
    pub fn remove_fact(&self, id: i64) -> Result<(), StoreError> {
        if let Some(user) = &self.user {
            return user.remove_fact(id);
        }
        let n = self
            .lock()
            .execute("DELETE FROM facts WHERE id = ?1", [id])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NoSuchFact(id));
        }
        self.scrub_log();
        Ok(())
    }

    /// All facts, oldest first.
    pub fn facts(&self) -> Result<Vec<Fact>, StoreError> {
        if let Some(user) = &self.user {
            return user.facts();
        }
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, text, created_at, updated_at, chat_id, origin FROM facts ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], fact_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }
}

pub(super) fn fact_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Fact> {
    Ok(Fact {
        id: row.get(0)?,
        text: row.get(1)?,
        created_at: row.get(2)?,
        updated_at: row.get(3)?,
        chat: row.get::<_, Option<i64>>(4)?.map(ChatId),
        origin: FactOrigin::parse(&row.get::<_, String>(5)?),
    })
}
