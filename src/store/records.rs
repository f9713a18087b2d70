//! Records: what was said in a chat, in order, and the history a question is answered with.

use rusqlite::{params, Connection};

use super::{now_ms, ChatId, Fact, Record, RecordId, ReplyId, Role, Store, StoreError};

/// How a tool record of a stored fact begins.
pub const REMEMBERED: &str = "Remembered: ";

impl Store {
    /// Appends a record at the end of a chat.
    pub fn append_record(
        &self,
        chat: ChatId,
        role: Role,
        text: &str,
        reply: Option<ReplyId>,
    ) -> Result<Record, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let record = insert_record(&tx, chat, role, text, reply).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(record)
    }

    /// Keeps in `chat` the action line of a fact its reply `reply` stored ("Remembered: …"), a
    /// tool record naming the fact so the chat can offer Undo.
    pub fn note_remembered(
        &self,
        chat: ChatId,
        reply: ReplyId,
        fact: &Fact,
    ) -> Result<Record, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        self.mirror_fact(&tx, fact.id).map_err(|e| self.err(e))?;
        let text = format!("{REMEMBERED}{}", fact.text);
        let mut record =
            insert_record(&tx, chat, Role::Tool, &text, Some(reply)).map_err(|e| self.err(e))?;
        tx.execute(
            "UPDATE records SET fact_id = ?2 WHERE id = ?1",
            params![record.id.0, fact.id],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        record.fact = Some(fact.id);
        Ok(record)
    }

    /// A chat's records in order.
    pub fn records(&self, chat: ChatId) -> Result<Vec<Record>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, chat_id, seq, role, text, reply_id, created_at, fact_id
                 FROM records WHERE chat_id = ?1 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([chat.0], record_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }

    /// The records a request for `question` is built from: every record up to and including the
    /// question, from where the chat last started afresh, leaving out answers that were superseded
    /// by trying again.
    pub fn history(&self, question: RecordId) -> Result<Vec<Record>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT r.id, r.chat_id, r.seq, r.role, r.text, r.reply_id, r.created_at, r.fact_id
                 FROM records r
                 JOIN records q ON q.id = ?1 AND r.chat_id = q.chat_id AND r.seq <= q.seq
                 JOIN chats c ON c.id = r.chat_id AND r.seq >= coalesce(c.history_since, 0)
                 LEFT JOIN replies p ON p.id = r.reply_id
                 WHERE (r.reply_id IS NULL
                    OR p.id = (SELECT max(id) FROM replies WHERE question_id = p.question_id))
                 ORDER BY r.seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([question.0], record_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }
}

pub(super) fn record_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Record> {
    Ok(Record {
        id: RecordId(row.get(0)?),
        chat: ChatId(row.get(1)?),
        seq: row.get(2)?,
        role: Role::parse(&row.get::<_, String>(3)?),
        text: row.get(4)?,
        reply: row.get::<_, Option<i64>>(5)?.map(ReplyId),
        created_at: row.get(6)?,
        fact: row.get(7)?,
    })
}

pub(super) fn insert_record(
    conn: &Connection,
    chat: ChatId,
    role: Role,
    text: &str,
    reply: Option<ReplyId>,
) -> rusqlite::Result<Record> {
    let now = now_ms();
    let seq: i64 = conn.query_row(
        "SELECT coalesce(max(seq), 0) + 1 FROM records WHERE chat_id = ?1",
        [chat.0],
        |r| r.get(0),
    )?;
    conn.execute(
        "INSERT INTO records (chat_id, seq, role, text, reply_id, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![chat.0, seq, role.as_str(), text, reply.map(|r| r.0), now],
    )?;
    let id = conn.last_insert_rowid();
    conn.execute(
        "UPDATE chats SET updated_at = ?2 WHERE id = ?1",
        params![chat.0, now],
    )?;
    Ok(Record {
        id: RecordId(id),
        chat,
        seq,
        role,
        text: text.to_string(),
        reply,
        created_at: now,
        fact: None,
    })
}
