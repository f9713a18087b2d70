//! Replies and their leases: one owner writes a reply's progress as it is made; a reply whose
//! owner is gone is marked interrupted, keeping what was written.

use rusqlite::{params, Connection, OptionalExtension};
use std::sync::OnceLock;

use super::{
    now_ms, records::insert_record, ChatId, Record, RecordId, Reply, ReplyId, ReplyState, Role,
    Store, StoreError, LEASE,
};

impl Store {
    /// Starts a reply to `question`, owned by this process.
    pub fn start_reply(
        &self,
        chat: ChatId,
        question: RecordId,
        state: ReplyState,
    ) -> Result<Reply, StoreError> {
        let conn = self.lock();
        insert_reply(&conn, chat, question, state).map_err(|e| self.err(e))
    }

    /// Stores a question and starts its reply in one transaction, so a crash never leaves one
    /// without the other. A chat's first question may also give it `title`.
    pub fn add_question(
        &self,
        chat: ChatId,
        text: &str,
        title: Option<&str>,
        state: ReplyState,
    ) -> Result<(Record, Reply), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let added = (|| {
            if let Some(title) = title {
                tx.execute(
                    "UPDATE chats SET title = ?2
                     WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM records WHERE chat_id = ?1)",
                    params![chat.0, title],
                )?;
            }
            let record = insert_record(&tx, chat, Role::User, text, None)?;
            let reply = insert_reply(&tx, chat, record.id, state)?;
            Ok((record, reply))
        })()
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(added)
    }

    /// Moves a live reply to another live state (waiting → running).
    pub fn set_live_state(&self, reply: ReplyId, state: ReplyState) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE replies SET state = ?2, lease_until = ?3 WHERE id = ?1",
                params![reply.0, state.as_str(), now_ms() + LEASE.as_millis() as i64],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// Stores the text written so far and renews the lease.
    pub fn save_progress(&self, reply: ReplyId, text: &str) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE replies SET text = ?2, lease_until = ?3 WHERE id = ?1",
                params![reply.0, text, now_ms() + LEASE.as_millis() as i64],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// The latest reply to a question asked before `question` in its chat: where the previous
    /// answer stands when `question` is asked.
    pub fn reply_before(&self, question: RecordId) -> Result<Option<Reply>, StoreError> {
        self.lock()
            .query_row(
                &format!(
                    "SELECT {REPLY_COLUMNS} FROM replies
                     WHERE chat_id = (SELECT chat_id FROM records WHERE id = ?1) AND question_id < ?1
                       AND (SELECT seq FROM records WHERE id = question_id)
                           >= (SELECT coalesce(history_since, 0) FROM chats WHERE id = replies.chat_id)
                     ORDER BY id DESC LIMIT 1"
                ),
                params![question.0],
                reply_from_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Keeps how much of a reply's spoken answer was played before it was cut.
    pub fn set_heard(&self, reply: ReplyId, prefix: &str) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE replies SET heard = ?2 WHERE id = ?1",
                params![reply.0, prefix],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// Renews a live reply's lease.
    pub fn renew_lease(&self, reply: ReplyId) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "UPDATE replies SET lease_until = ?2 WHERE id = ?1",
                params![reply.0, now_ms() + LEASE.as_millis() as i64],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// Ends a reply: its final state, text and reason, and the assistant record of what was written.
    pub fn finish_reply(
        &self,
        reply: ReplyId,
        state: ReplyState,
        text: &str,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        finish_in(&tx, reply, state, text, reason).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// A reply by id.
    pub fn reply(&self, reply: ReplyId) -> Result<Option<Reply>, StoreError> {
        self.lock()
            .query_row(
                &format!("SELECT {REPLY_COLUMNS} FROM replies WHERE id = ?1"),
                [reply.0],
                reply_from_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// A chat's latest reply.
    pub fn last_reply(&self, chat: ChatId) -> Result<Option<Reply>, StoreError> {
        self.lock()
            .query_row(
                &format!(
                    "SELECT {REPLY_COLUMNS} FROM replies WHERE chat_id = ?1 ORDER BY id DESC LIMIT 1"
                ),
                [chat.0],
                reply_from_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// All replies of a chat, oldest first.
    pub fn replies(&self, chat: ChatId) -> Result<Vec<Reply>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {REPLY_COLUMNS} FROM replies WHERE chat_id = ?1 ORDER BY id"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([chat.0], reply_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
    }

    /// Whether a live reply of this chat is owned by a process other than this one that still runs.
    pub fn live_elsewhere(&self, chat: ChatId) -> Result<bool, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT owner_pid, lease_until FROM replies
                 WHERE chat_id = ?1 AND state IN ('waiting', 'running') AND owner IS NOT ?2",
            )
            .map_err(|e| self.err(e))?;
        let owners = stmt
            .query_map(params![chat.0, owner()], |r| {
                Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))?;
        let now = now_ms();
        Ok(owners
            .into_iter()
            .any(|(pid, lease)| lease.unwrap_or(0) >= now && pid.is_some_and(process_alive)))
    }

    /// Marks replies left running or waiting by a process that is gone (or whose lease ran out) as
    /// interrupted, keeping their text. Returns how many.
    pub fn mark_interrupted(&self) -> Result<usize, StoreError> {
        let mut conn = self.lock();
        // Look first without the write lock, so opening the store never waits on another writer
        // unless there is something to mark.
        if orphans(&conn).map_err(|e| self.err(e))?.is_empty() {
            return Ok(0);
        }
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let orphans = orphans(&tx).map_err(|e| self.err(e))?;
        for (id, text) in &orphans {
            finish_in(
                &tx,
                *id,
                ReplyState::Interrupted,
                text,
                Some("Jarvis closed before the reply was finished"),
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        tracing::info!(count = orphans.len(), "marked replies interrupted");
        Ok(orphans.len())
    }
}

/// Live replies of other processes that are gone or whose lease ran out, with their text.
fn orphans(conn: &Connection) -> rusqlite::Result<Vec<(ReplyId, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, text, owner_pid, lease_until FROM replies
         WHERE state IN ('waiting', 'running') AND owner IS NOT ?1",
    )?;
    let now = now_ms();
    let rows = stmt
        .query_map([owner()], |r| {
            Ok((
                ReplyId(r.get(0)?),
                r.get::<_, String>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, Option<i64>>(3)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows
        .into_iter()
        .filter(|(_, _, pid, lease)| lease.unwrap_or(0) < now || !pid.is_some_and(process_alive))
        .map(|(id, text, _, _)| (id, text))
        .collect())
}

fn insert_reply(
    conn: &Connection,
    chat: ChatId,
    question: RecordId,
    state: ReplyState,
) -> rusqlite::Result<Reply> {
    let now = now_ms();
    conn.execute(
        "INSERT INTO replies (chat_id, question_id, state, owner, owner_pid, lease_until, started_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            chat.0,
            question.0,
            state.as_str(),
            owner(),
            std::process::id(),
            now + LEASE.as_millis() as i64,
            now
        ],
    )?;
    Ok(Reply {
        id: ReplyId(conn.last_insert_rowid()),
        chat,
        question,
        state,
        text: String::new(),
        reason: None,
        started_at: now,
        ended_at: None,
        heard: None,
    })
}

fn finish_in(
    conn: &Connection,
    reply: ReplyId,
    state: ReplyState,
    text: &str,
    reason: Option<&str>,
) -> rusqlite::Result<()> {
    let chat: i64 = conn.query_row(
        "SELECT chat_id FROM replies WHERE id = ?1",
        [reply.0],
        |r| r.get(0),
    )?;
    conn.execute(
        "UPDATE replies SET state = ?2, text = ?3, reason = ?4, ended_at = ?5, lease_until = NULL
         WHERE id = ?1",
        params![reply.0, state.as_str(), text, reason, now_ms()],
    )?;
    if !text.is_empty() {
        insert_record(conn, ChatId(chat), Role::Assistant, text, Some(reply))?;
    }
    Ok(())
}

fn reply_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Reply> {
    Ok(Reply {
        id: ReplyId(row.get(0)?),
        chat: ChatId(row.get(1)?),
        question: RecordId(row.get(2)?),
        state: ReplyState::parse(&row.get::<_, String>(3)?),
        text: row.get(4)?,
        reason: row.get(5)?,
        started_at: row.get(6)?,
        ended_at: row.get(7)?,
        heard: row.get(8)?,
    })
}

const REPLY_COLUMNS: &str =
    "id, chat_id, question_id, state, text, reason, started_at, ended_at, heard";

/// This process's identity as a reply owner: its pid and a token unique to this run.
pub fn owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| format!("{}:{}", std::process::id(), uuid::Uuid::new_v4().simple()))
}

fn process_alive(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only asks whether the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
