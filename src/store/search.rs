//! The chat's own records the model no longer sees — before where the user started afresh, or
//! folded into a compaction summary — found by full-text search (FTS5, kept in step by
//! triggers) and read back by range.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{record_from_row, ChatId, Record, Role, Store, StoreError};

/// A record found by a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Found {
    /// Its seq in the chat.
    pub seq: i64,
    /// Who said it.
    pub role: Role,
    /// The words around the match, the matching ones in «».
    pub snippet: String,
    /// Unix ms.
    pub created_at: i64,
}

/// FTS5 query syntax from plain words, within `chat`: each word quoted (so no word is read as
/// an operator), all of them required, or any of them when `any`.
fn match_expression(chat: ChatId, query: &str, any: bool) -> Option<String> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{w}\""))
        .collect();
    if words.is_empty() {
        return None;
    }
    Some(format!(
        "chat : \"c{}\" AND text : ({})",
        chat.0,
        words.join(if any { " OR " } else { " " })
    ))
}

impl Store {
    /// The seq before which `chat`'s records are hidden from the model (where it started
    /// afresh, or its compaction anchor, whichever is later), if any record lies before it.
    pub fn hidden_before(&self, chat: ChatId) -> Result<Option<i64>, StoreError> {
        let found: Option<i64> = self
            .lock()
            .query_row(
                "SELECT max(coalesce(history_since, 0), coalesce(anchor, 0)) FROM chats WHERE id = ?1",
                [chat.0],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some(boundary) = found.filter(|b| *b > 1) else {
            return Ok(None);
        };
        let any: bool = self
            .lock()
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM records WHERE chat_id = ?1 AND seq < ?2)",
                params![chat.0, boundary],
                |row| row.get(0),
            )
            .map_err(|e| self.err(e))?;
        Ok(any.then_some(boundary))
    }

    /// Up to `limit` records of `chat` before seq `before` that contain every word of `query`
    /// (failing that, any of them), in the chat's order; one more than `limit` means there are
    /// more. (Not ranked by bm25: its document counts cost a scan of every record holding a
    /// common word — seconds over 100,000 records — where this stays under a millisecond.)
    pub fn search_records(
        &self,
        chat: ChatId,
        query: &str,
        before: i64,
        limit: usize,
    ) -> Result<Vec<Found>, StoreError> {
        for any in [false, true] {
            let Some(expression) = match_expression(chat, query, any) else {
                return Ok(Vec::new());
            };
            let conn = self.lock();
            // CROSS JOIN keeps the index search outside: otherwise SQLite walks the chat's
            // records and runs the search once for each of them.
            let mut stmt = conn
                .prepare_cached(
                    "SELECT r.seq, r.role, snippet(records_search, 0, '«', '»', '…', 24), r.created_at
                     FROM records_search CROSS JOIN records r ON r.id = records_search.rowid
                     WHERE records_search MATCH ?1 AND r.chat_id = ?2 AND r.seq < ?3
                     ORDER BY r.seq LIMIT ?4",
                )
                .map_err(|e| self.err(e))?;
            let found = stmt
                .query_map(params![expression, chat.0, before, limit as i64], |row| {
                    Ok(Found {
                        seq: row.get(0)?,
                        role: Role::parse(&row.get::<_, String>(1)?),
                        snippet: row.get(2)?,
                        created_at: row.get(3)?,
                    })
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| self.err(e))?;
            if !found.is_empty() || query.split_whitespace().count() < 2 {
                return Ok(found);
            }
        }
        Ok(Vec::new())
    }

    /// `chat`'s records with seq from `from` to `to` (inclusive) and below `before`, in order.
    pub fn records_between(
        &self,
        chat: ChatId,
        from: i64,
        to: i64,
        before: i64,
    ) -> Result<Vec<Record>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, chat_id, seq, role, text, reply_id, created_at, fact_id
                 FROM records WHERE chat_id = ?1 AND seq >= ?2 AND seq <= ?3 AND seq < ?4
                 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![chat.0, from, to, before], record_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_so_none_is_an_operator() {
        let chat = ChatId(7);
        assert_eq!(
            match_expression(chat, "NEAR(boat) OR \"x", false).as_deref(),
            Some("chat : \"c7\" AND text : (\"NEAR\" \"boat\" \"OR\" \"x\")")
        );
        assert_eq!(
            match_expression(chat, "red boat", true).as_deref(),
            Some("chat : \"c7\" AND text : (\"red\" OR \"boat\")")
        );
        assert_eq!(match_expression(chat, " -- ", false), None);
    }
}
