//! Replies and their leases: one owner writes a reply's progress as it is made; a reply whose
//! owner is gone is marked interrupted, keeping what was written.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::sync::OnceLock;

use super::{
    now_ms, records::insert_record, ChatId, Record, RecordId, Reply, ReplyId, ReplyState, Role,
    Store, StoreError, LEASE,
};

impl Store {
    /// Starts a reply to `question`, owned by this process; [`StoreError::ReplyingElsewhere`]
    /// while another running Jarvis replies in the chat (checked in the same write transaction,
    /// so two processes never both start one).
    pub fn start_reply(
        &self,
        chat: ChatId,
        question: RecordId,
        state: ReplyState,
    ) -> Result<Reply, StoreError> {
        let mut conn = self.lock();
        let tx = self.claim(&mut conn, chat)?;
        let reply = insert_reply(&tx, chat, question, state).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(reply)
    }

    /// An IMMEDIATE transaction (the write lock taken at once) in which no other running Jarvis
    /// replies in `chat`; [`StoreError::ReplyingElsewhere`] when one does.
    pub(super) fn claim<'c>(
        &self,
        conn: &'c mut Connection,
        chat: ChatId,
    ) -> Result<rusqlite::Transaction<'c>, StoreError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        if live_elsewhere(&tx, chat).map_err(|e| self.err(e))? {
            return Err(StoreError::ReplyingElsewhere(chat));
        }
        Ok(tx)
    }

    /// Stores a question and starts its reply in one transaction, so a crash never leaves one
    /// without the other, and two processes never both start one in a chat
    /// ([`StoreError::ReplyingElsewhere`]). A chat's first question may also give it `title`.
    pub fn add_question(
        &self,
        chat: ChatId,
        text: &str,
        title: Option<&str>,
        state: ReplyState,
    ) -> Result<(Record, Reply), StoreError> {
        self.add_question_as(chat, text, title, state, None)
    }

    /// [`Store::add_question`] for a question asked in `mode` (as [`Store::question_mode`]
    /// gives it back; `None`: typed).
    pub fn add_question_as(
        &self,
        chat: ChatId,
        text: &str,
        title: Option<&str>,
        state: ReplyState,
        mode: Option<&str>,
    ) -> Result<(Record, Reply), StoreError> {
        let mut conn = self.lock();
        let tx = self.claim(&mut conn, chat)?;
        let added = (|| {
            if let Some(title) = title {
                tx.execute(
                    "UPDATE chats SET title = ?2
                     WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM records WHERE chat_id = ?1)",
                    params![chat.0, title],
                )?;
            }
            let record = insert_record(&tx, chat, Role::User, text, None)?;
            if mode.is_some() {
                tx.execute(
                    "UPDATE records SET mode = ?2 WHERE id = ?1",
                    params![record.id.0, mode],
                )?;
            }
            let reply = insert_reply(&tx, chat, record.id, state)?;
            Ok((record, reply))
        })()
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(added)
    }

    /// How the question `record` was asked, as [`Store::add_question_as`] kept it (`None`: typed).
    pub fn question_mode(&self, record: RecordId) -> Result<Option<String>, StoreError> {
        self.lock()
            .query_row(
                "SELECT mode FROM records WHERE id = ?1",
                [record.0],
                |row| row.get(0),
            )
            .optional()
            .map(Option::flatten)
            .map_err(|e| self.err(e))
    }

    /// Moves a live reply of this process to another live state (waiting → running).
    pub fn set_live_state(&self, reply: ReplyId, state: ReplyState) -> Result<(), StoreError> {
        let changed = self
            .lock()
            .execute(
                &format!("UPDATE replies SET state = ?3, lease_until = ?4 WHERE {OURS}"),
                params![reply.0, owner(), state.as_str(), lease_from_now()],
            )
            .map_err(|e| self.err(e))?;
        fenced(reply, changed)
    }

    /// Stores the text written so far and renews the lease, while the reply is still this
    /// process's and live ([`StoreError::NotOurs`] when another took it).
    pub fn save_progress(&self, reply: ReplyId, text: &str) -> Result<(), StoreError> {
        let changed = self
            .lock()
            .execute(
                &format!("UPDATE replies SET text = ?3, lease_until = ?4 WHERE {OURS}"),
                params![reply.0, owner(), text, lease_from_now()],
            )
            .map_err(|e| self.err(e))?;
        fenced(reply, changed)
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

    /// Renews the lease of a live reply of this process.
    pub fn renew_lease(&self, reply: ReplyId) -> Result<(), StoreError> {
        let changed = self
            .lock()
            .execute(
                &format!("UPDATE replies SET lease_until = ?3 WHERE {OURS}"),
                params![reply.0, owner(), lease_from_now()],
            )
            .map_err(|e| self.err(e))?;
        fenced(reply, changed)
    }

    /// Ends a live reply of this process: its final state, text and reason, and the assistant
    /// record of what was written. A reply another process has ended meanwhile is left as it
    /// ended there ([`StoreError::NotOurs`]), so one reply never gets two records.
    pub fn finish_reply(
        &self,
        reply: ReplyId,
        state: ReplyState,
        text: &str,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let finished =
            finish_in(&tx, reply, Some(owner()), state, text, reason).map_err(|e| self.err(e))?;
        fenced(reply, usize::from(finished))?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// Gives up a live reply of this process whose end could not be stored: it stays as far as
    /// its progress was stored, and no longer this process's, so another Jarvis takes it as
    /// abandoned (marks it interrupted) instead of refusing questions in its chat while this one
    /// runs. [`StoreError::NotOurs`] when it was not live and ours.
    pub fn release_reply(&self, reply: ReplyId) -> Result<(), StoreError> {
        let changed = self
            .lock()
            .execute(
                &format!(
                    "UPDATE replies SET owner = NULL, owner_pid = NULL, lease_until = NULL WHERE {OURS}"
                ),
                params![reply.0, owner()],
            )
            .map_err(|e| self.err(e))?;
        fenced(reply, changed)
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

    /// The chat's first reply after `reply`.
    pub fn reply_after(&self, chat: ChatId, reply: ReplyId) -> Result<Option<Reply>, StoreError> {
        self.lock()
            .query_row(
                &format!(
                    "SELECT {REPLY_COLUMNS} FROM replies WHERE chat_id = ?1 AND id > ?2 \
                     ORDER BY id LIMIT 1"
                ),
                [chat.0, reply.0],
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
        live_elsewhere(&self.lock(), chat).map_err(|e| self.err(e))
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
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let orphans = orphans(&tx).map_err(|e| self.err(e))?;
        for orphan in &orphans {
            finish_in(
                &tx,
                orphan.id,
                orphan.owner.as_deref(),
                ReplyState::Interrupted,
                &orphan.text,
                Some("Jarvis closed before the reply was finished"),
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        tracing::info!(count = orphans.len(), "marked replies interrupted");
        Ok(orphans.len())
    }
}

/// Whether a live reply of `chat` belongs to another process that still runs.
pub(super) fn live_elsewhere(conn: &Connection, chat: ChatId) -> rusqlite::Result<bool> {
    Ok(others_live(conn, Some(chat))?
        .iter()
        .any(|r| owner_alive(r.owner.as_deref(), r.pid, r.lease)))
}

/// A live reply of another owner, as `others_live` reads it.
struct Theirs {
    id: ReplyId,
    text: String,
    /// (None: given up by its process.)
    owner: Option<String>,
    pid: Option<i64>,
    lease: Option<i64>,
}

/// The live replies (of `chat`, or of all chats) that other owners hold.
fn others_live(conn: &Connection, chat: Option<ChatId>) -> rusqlite::Result<Vec<Theirs>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, text, owner, owner_pid, lease_until FROM replies
         WHERE state IN ('waiting', 'running') AND owner IS NOT ?1
           AND (?2 IS NULL OR chat_id = ?2)",
    )?;
    let rows = stmt
        .query_map(params![owner(), chat.map(|c| c.0)], |r| {
            Ok(Theirs {
                id: ReplyId(r.get(0)?),
                text: r.get(1)?,
                owner: r.get(2)?,
                pid: r.get(3)?,
                lease: r.get(4)?,
            })
        })?
        .collect();
    rows
}

/// Live replies of other owners that are gone, with their owner and text. A reply whose owner
/// still runs is never taken, however late its lease (a long compaction, a laptop waking up).
fn orphans(conn: &Connection) -> rusqlite::Result<Vec<Theirs>> {
    Ok(others_live(conn, None)?
        .into_iter()
        .filter(|r| !owner_alive(r.owner.as_deref(), r.pid, r.lease))
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

/// Ends `reply` if `owner` still holds it live; false (nothing written) when it does not.
fn finish_in(
    conn: &Connection,
    reply: ReplyId,
    owner: Option<&str>,
    state: ReplyState,
    text: &str,
    reason: Option<&str>,
) -> rusqlite::Result<bool> {
    let chat: Option<i64> = conn
        .query_row(
            &format!(
                "UPDATE replies SET state = ?3, text = ?4, reason = ?5, ended_at = ?6, lease_until = NULL
                 WHERE {OURS} RETURNING chat_id"
            ),
            params![reply.0, owner, state.as_str(), text, reason, now_ms()],
            |r| r.get(0),
        )
        .optional()?;
    let Some(chat) = chat else {
        return Ok(false);
    };
    if !text.is_empty() {
        insert_record(conn, ChatId(chat), Role::Assistant, text, Some(reply))?;
    }
    Ok(true)
}

/// The fence on every write of a reply's progress: it is still live and still `?2`'s.
const OURS: &str = "id = ?1 AND owner IS ?2 AND state IN ('waiting', 'running')";

fn lease_from_now() -> i64 {
    now_ms() + LEASE.as_millis() as i64
}

/// `Ok` when the fenced write changed the reply, else [`StoreError::NotOurs`].
fn fenced(reply: ReplyId, changed: usize) -> Result<(), StoreError> {
    if changed == 0 {
        Err(StoreError::NotOurs(reply))
    } else {
        Ok(())
    }
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

/// This process's identity as a reply owner: `pid.start:token` — its pid, when it started
/// (Linux: clock ticks after boot, so a pid handed to a later process does not pass for it) and
/// a token unique to this run.
pub fn owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let me = std::process::id();
        format!(
            "{}:{}",
            process_identity(me).unwrap_or_else(|| me.to_string()),
            uuid::Uuid::new_v4().simple()
        )
    })
}

/// `pid.start` for a running process whose start time can be read, else `None`.
fn process_identity(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses; field 22 is the start.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let start = after_comm.split_whitespace().nth(19)?;
    Some(format!("{pid}.{start}"))
}

/// Whether the process that owns a reply still runs. An owner written with its start time is
/// alive while a process of that pid and start time runs; one written without it (by an older
/// Jarvis) while its pid runs and its lease holds.
fn owner_alive(owner: Option<&str>, pid: Option<i64>, lease: Option<i64>) -> bool {
    let Some(pid) = pid.filter(|&p| process_alive(p)) else {
        return false;
    };
    let written = owner
        .unwrap_or_default()
        .split(':')
        .next()
        .unwrap_or_default();
    if !written.contains('.') {
        return lease.unwrap_or(0) >= now_ms();
    }
    u32::try_from(pid)
        .ok()
        .and_then(process_identity)
        // Where /proc cannot be read, the pid alone says it.
        .is_none_or(|now| now == written)
}

fn process_alive(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only asks whether the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
