//! The SQLite store: chats, their records and replies, durable across restarts and crashes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use rusqlite_migration::{Migrations, M};
use serde::{Deserialize, Serialize};
use thiserror::Error;

mod search;
mod summaries;

pub use search::Found;

/// The migrations, embedded at compile time and applied in order.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_chats_records_replies.sql"),
    include_str!("../../migrations/0002_facts.sql"),
    include_str!("../../migrations/0003_heard_prefix.sql"),
    include_str!("../../migrations/0004_confirmations.sql"),
    include_str!("../../migrations/0005_summaries.sql"),
    include_str!("../../migrations/0006_compaction.sql"),
    include_str!("../../migrations/0007_history_since.sql"),
    include_str!("../../migrations/0008_rolling_summaries_and_provenance.sql"),
    include_str!("../../migrations/0009_records_search.sql"),
];

/// How long a running reply's lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(15);

/// What went wrong with the store; each message says what to do.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The database was written by a newer Jarvis.
    #[error("the database {path} has schema version {found}, newer than this Jarvis understands (up to {supported}); update Jarvis, or set JARVIS_DATA_DIR to use another data directory")]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
    /// Another process held the database longer than the busy timeout.
    #[error("the database {path} is locked by another process (waited {waited_ms} ms); close the other Jarvis or try again")]
    Locked {
        /// The file.
        path: PathBuf,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The data directory could not be made.
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The migrations failed.
    #[error("cannot bring the database {path} up to date: {message}")]
    Migration {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// No chat with that id.
    #[error("there is no chat {0}")]
    NoSuchChat(ChatId),
    /// No fact with that id.
    #[error("there is no fact {0}")]
    NoSuchFact(i64),
    /// An empty fact.
    #[error("a fact cannot be empty")]
    EmptyFact,
    /// Any other SQLite error.
    #[error("database error in {path}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// The error.
        source: rusqlite::Error,
    },
}

/// A chat's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChatId(pub i64);

/// A reply's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReplyId(pub i64);

/// A record's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RecordId(pub i64);

macro_rules! display_id {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    )*};
}
display_id!(ChatId, ReplyId, RecordId);

/// Who said a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user.
    User,
    /// Jarvis.
    Assistant,
    /// A tool's result.
    Tool,
}

impl Role {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    fn parse(s: &str) -> Role {
        match s {
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => Role::User,
        }
    }
}

/// Where a reply is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyState {
    /// Another reply holds the backend.
    Waiting,
    /// Being written.
    Running,
    /// Answered.
    Done,
    /// Stopped by the user.
    Stopped,
    /// Failed, with a reason.
    Failed,
    /// The process that wrote it died.
    Interrupted,
}

impl ReplyState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyState::Waiting => "waiting",
            ReplyState::Running => "running",
            ReplyState::Done => "done",
            ReplyState::Stopped => "stopped",
            ReplyState::Failed => "failed",
            ReplyState::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> ReplyState {
        match s {
            "waiting" => ReplyState::Waiting,
            "running" => ReplyState::Running,
            "done" => ReplyState::Done,
            "stopped" => ReplyState::Stopped,
            "failed" => ReplyState::Failed,
            _ => ReplyState::Interrupted,
        }
    }

    /// Whether the reply is still being worked on.
    pub fn is_live(self) -> bool {
        matches!(self, ReplyState::Waiting | ReplyState::Running)
    }

    /// Whether it can be tried again.
    pub fn can_retry(self) -> bool {
        matches!(self, ReplyState::Failed | ReplyState::Interrupted)
    }
}

impl std::fmt::Display for ReplyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A chat, with the state of its latest reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chat {
    /// Its id.
    pub id: ChatId,
    /// Its title.
    pub title: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms of the last change.
    pub updated_at: i64,
    /// The latest reply's state, if any.
    pub last_reply: Option<ReplyState>,
    /// Where the user started afresh: the seq of the first record the model sees.
    pub history_since: Option<i64>,
}

/// One stored row of a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Its id.
    pub id: RecordId,
    /// The chat.
    pub chat: ChatId,
    /// Order within the chat.
    pub seq: i64,
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub text: String,
    /// The reply an assistant record came from.
    pub reply: Option<ReplyId>,
    /// Unix ms.
    pub created_at: i64,
}

/// A reply as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Its id.
    pub id: ReplyId,
    /// The chat.
    pub chat: ChatId,
    /// The question's record.
    pub question: RecordId,
    /// Its state.
    pub state: ReplyState,
    /// The text written so far.
    pub text: String,
    /// Why it failed, stopped or was interrupted.
    pub reason: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms.
    pub ended_at: Option<i64>,
    /// When its spoken answer was cut: what of it had been played ("" = nothing).
    pub heard: Option<String>,
}

/// A chat's summary, for recall from other chats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The chat.
    pub chat: ChatId,
    /// Its title.
    pub title: String,
    /// The summary.
    pub text: String,
    /// Its embedding (empty when none could be made); not sent to the windows.
    #[serde(skip)]
    pub vector: Vec<f32>,
    /// Unix ms.
    pub updated_at: i64,
    /// The seq of the chat's last record it covers.
    pub upto: i64,
}

/// A fact the user asked Jarvis to remember.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// Its id.
    pub id: i64,
    /// The fact, as the user would say it.
    pub text: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms of the last edit.
    pub updated_at: i64,
    /// The chat it was said in, while that chat exists.
    pub chat: Option<ChatId>,
}

/// The current time in unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

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

/// The store: one SQLite connection shared by cheap clones. Calls block; async code runs them
/// on the blocking pool.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    path: Arc<PathBuf>,
    busy: Duration,
    /// A store in memory (the unsaved voice conversation) keeps only chats; the user's facts and
    /// the summaries of their chats are read from and written to this one.
    user: Option<Box<Store>>,
}

/// Ids of chats, records and replies kept in memory start here, so they never meet the ids of
/// the database's (the service and the windows tell them apart by it).
pub const IN_MEMORY_IDS: i64 = 1 << 50;

impl ChatId {
    /// Whether the chat is kept in memory only (an unsaved voice conversation).
    pub fn in_memory(self) -> bool {
        self.0 >= IN_MEMORY_IDS
    }
}

impl ReplyId {
    /// Whether the reply is kept in memory only.
    pub fn in_memory(self) -> bool {
        self.0 >= IN_MEMORY_IDS
    }
}

/// A chat with its latest reply's state, as `chat_from_row` reads it.
const CHAT_SELECT: &str = "SELECT c.id, c.title, c.created_at, c.updated_at,
        (SELECT state FROM replies WHERE chat_id = c.id ORDER BY id DESC LIMIT 1), c.history_since
     FROM chats c";

const REPLY_COLUMNS: &str =
    "id, chat_id, question_id, state, text, reason, started_at, ended_at, heard";

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

fn record_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Record> {
    Ok(Record {
        id: RecordId(row.get(0)?),
        chat: ChatId(row.get(1)?),
        seq: row.get(2)?,
        role: Role::parse(&row.get::<_, String>(3)?),
        text: row.get(4)?,
        reply: row.get::<_, Option<i64>>(5)?.map(ReplyId),
        created_at: row.get(6)?,
    })
}

impl Store {
    /// Opens (creating if needed) the database at `path`, applies migrations and marks replies
    /// whose process is gone as interrupted.
    pub fn open(path: &Path, busy_timeout: Duration) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::DataDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let store = Store {
            conn: Arc::new(Mutex::new(Connection::open(path).map_err(|source| {
                StoreError::Sqlite {
                    path: path.to_path_buf(),
                    source,
                }
            })?)),
            path: Arc::new(path.to_path_buf()),
            busy: busy_timeout,
            user: None,
        };
        store.prepare()?;
        store.mark_interrupted()?;
        Ok(store)
    }

    /// A store that writes nothing to disk, for a conversation the user chose not to keep: its
    /// chats, records and replies live in memory (ids from [`IN_MEMORY_IDS`]) and are gone with
    /// it; facts and summaries are `user`'s, the database's.
    pub fn in_memory(user: &Store) -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Sqlite {
            path: path.clone(),
            source,
        })?;
        let store = Store {
            conn: Arc::new(Mutex::new(conn)),
            path: Arc::new(path),
            busy: user.busy,
            user: Some(Box::new(user.clone())),
        };
        store.prepare()?;
        // A row of each below the first id: SQLite gives a new row the largest id plus one.
        let base = IN_MEMORY_IDS - 1;
        store
            .lock()
            .execute_batch(&format!(
                "INSERT INTO chats (id, title, created_at, updated_at) VALUES ({base}, '', 0, 0);
                 INSERT INTO records (id, chat_id, seq, role, text, created_at)
                     VALUES ({base}, {base}, 0, 'user', '', 0);
                 INSERT INTO replies (id, chat_id, question_id, state, started_at)
                     VALUES ({base}, {base}, {base}, 'done', 0);"
            ))
            .map_err(|e| store.err(e))?;
        Ok(store)
    }

    /// Whether this store keeps its chats in memory only.
    pub fn is_in_memory(&self) -> bool {
        self.user.is_some()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        match source.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => StoreError::Locked {
                path: self.path.to_path_buf(),
                waited_ms: self.busy.as_millis() as u64,
            },
            _ => StoreError::Sqlite {
                path: self.path.to_path_buf(),
                source,
            },
        }
    }

    fn prepare(&self) -> Result<(), StoreError> {
        let mut conn = self.lock();
        conn.busy_timeout(self.busy).map_err(|e| self.err(e))?;
        // A deferred transaction that reads and then writes gets SQLITE_BUSY at once, without
        // waiting, when another process writes; taking the write lock up front makes it wait.
        conn.set_transaction_behavior(TransactionBehavior::Immediate);
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| self.err(e))?;
        // journal_mode returns a row, so it is queried rather than updated.
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .map_err(|e| self.err(e))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| self.err(e))?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        let supported = MIGRATIONS.len() as i64;
        if found > supported {
            return Err(StoreError::TooNew {
                path: self.path.to_path_buf(),
                found,
                supported,
            });
        }
        let migrations = Migrations::new(MIGRATIONS.iter().map(|sql| M::up(sql)).collect());
        migrations.to_latest(&mut conn).map_err(|err| match err {
            rusqlite_migration::Error::RusqliteError { err, .. } => self.err(err),
            other => StoreError::Migration {
                path: self.path.to_path_buf(),
                message: other.to_string(),
            },
        })
    }

    /// The schema version recorded in the database.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.lock()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// `PRAGMA integrity_check`'s answer ("ok" when sound).
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.lock()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

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
        if self.live_elsewhere(chat)? {
            return Ok(false);
        }
        let n = self
            .lock()
            .execute("DELETE FROM chats WHERE id = ?1", [chat.0])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NoSuchChat(chat));
        }
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

    /// A chat's records in order.
    pub fn records(&self, chat: ChatId) -> Result<Vec<Record>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, chat_id, seq, role, text, reply_id, created_at
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
                "SELECT r.id, r.chat_id, r.seq, r.role, r.text, r.reply_id, r.created_at
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

    /// Remembers a fact, said in chat `from` (`None`: written by the user in the Memory panel or
    /// the CLI); one already known (whatever its case) is returned as it is.
    pub fn add_fact(&self, text: &str, from: Option<ChatId>) -> Result<Fact, StoreError> {
        if let Some(user) = &self.user {
            // A conversation that is not kept is not named as the fact's source either.
            return user.add_fact(text, None);
        }
        let text = text.trim();
        if text.is_empty() {
            return Err(StoreError::EmptyFact);
        }
        let now = now_ms();
        let conn = self.lock();
        conn.execute(
            "INSERT INTO facts (text, created_at, updated_at, chat_id) VALUES (?1, ?2, ?2, ?3)
             ON CONFLICT DO NOTHING",
            params![text, now, from.map(|c| c.0)],
        )
        .map_err(|e| self.err(e))?;
        conn.query_row(
            "SELECT id, text, created_at, updated_at, chat_id FROM facts WHERE lower(text) = lower(?1)",
            [text],
            fact_from_row,
        )
        .map_err(|e| self.err(e))
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
            "SELECT id, text, created_at, updated_at, chat_id FROM facts WHERE id = ?1",
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
        Ok(())
    }

    /// Asks the user of `chat` to confirm forgetting `fact` (replacing any question pending there).
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
                "INSERT INTO confirmations (chat_id, fact_id, question, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (chat_id) DO UPDATE SET fact_id = ?2, question = ?3, created_at = ?4",
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

    /// Starts afresh in a chat: from now on the model sees only the records that come after this
    /// point (no summary of the earlier ones, no confirmation left waiting); the chat keeps them
    /// all. Returns the seq the model's history now starts at, or `None` while another process is
    /// replying in it.
    pub fn start_afresh(&self, chat: ChatId) -> Result<Option<i64>, StoreError> {
        if self.live_elsewhere(chat)? {
            return Ok(None);
        }
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
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

    /// All facts, oldest first.
    pub fn facts(&self) -> Result<Vec<Fact>, StoreError> {
        if let Some(user) = &self.user {
            return user.facts();
        }
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, text, created_at, updated_at, chat_id FROM facts ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], fact_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>());
        rows.map_err(|e| self.err(e))
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

fn fact_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Fact> {
    Ok(Fact {
        id: row.get(0)?,
        text: row.get(1)?,
        created_at: row.get(2)?,
        updated_at: row.get(3)?,
        chat: row.get::<_, Option<i64>>(4)?.map(ChatId),
    })
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

fn insert_record(
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
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("j.db"), Duration::from_secs(1)).unwrap();
        (dir, store)
    }

    #[test]
    fn records_keep_their_order_and_replies_their_answer() {
        let (_dir, s) = store();
        let chat = s.create_chat("t").unwrap();
        let q = s.append_record(chat.id, Role::User, "hi", None).unwrap();
        let r = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        s.save_progress(r.id, "Hel").unwrap();
        s.finish_reply(r.id, ReplyState::Done, "Hello", None)
            .unwrap();
        let recs = s.records(chat.id).unwrap();
        assert_eq!(
            recs.iter()
                .map(|r| (r.seq, r.role, r.text.as_str()))
                .collect::<Vec<_>>(),
            vec![(1, Role::User, "hi"), (2, Role::Assistant, "Hello")]
        );
        assert_eq!(s.chat(chat.id).unwrap().last_reply, Some(ReplyState::Done));
        assert_eq!(s.schema_version().unwrap(), MIGRATIONS.len() as i64);
    }

    #[test]
    fn history_leaves_out_answers_that_were_tried_again() {
        let (_dir, s) = store();
        let chat = s.create_chat("t").unwrap();
        let q = s.append_record(chat.id, Role::User, "q1", None).unwrap();
        let r1 = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        s.finish_reply(r1.id, ReplyState::Failed, "partial", Some("x"))
            .unwrap();
        let r2 = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        s.finish_reply(r2.id, ReplyState::Done, "whole answer", None)
            .unwrap();
        let q2 = s.append_record(chat.id, Role::User, "q2", None).unwrap();
        let texts: Vec<_> = s
            .history(q2.id)
            .unwrap()
            .into_iter()
            .map(|r| r.text)
            .collect();
        assert_eq!(texts, ["q1", "whole answer", "q2"]);
        // Retrying the first question sees nothing after it.
        let texts: Vec<_> = s
            .history(q.id)
            .unwrap()
            .into_iter()
            .map(|r| r.text)
            .collect();
        assert_eq!(texts, ["q1"]);
    }

    #[test]
    fn a_question_and_its_reply_are_stored_together_and_the_first_names_the_chat() {
        let (_dir, s) = store();
        let chat = s.create_chat("New chat").unwrap();
        let (q, r) = s
            .add_question(
                chat.id,
                "What is the capital of France?",
                Some("Capital of France"),
                ReplyState::Running,
            )
            .unwrap();
        assert_eq!((r.question, r.state), (q.id, ReplyState::Running));
        assert_eq!(s.reply(r.id).unwrap().unwrap().question, q.id);
        assert_eq!(s.chat(chat.id).unwrap().title, "Capital of France");
        s.add_question(
            chat.id,
            "And Germany?",
            Some("Germany"),
            ReplyState::Waiting,
        )
        .unwrap();
        assert_eq!(
            s.chat(chat.id).unwrap().title,
            "Capital of France",
            "only the first names it"
        );
        assert_eq!(s.records(chat.id).unwrap().len(), 2);
        assert_eq!(s.replies(chat.id).unwrap().len(), 2);
    }

    #[test]
    fn facts_are_kept_once_edited_and_really_deleted() {
        let (_dir, s) = store();
        let dog = s.add_fact("My dog is called Bruno", None).unwrap();
        assert_eq!(
            s.add_fact("  my dog is called bruno ", None).unwrap().id,
            dog.id,
            "once"
        );
        s.add_fact("I live in Lyon", None).unwrap();
        assert!(matches!(s.add_fact("  ", None), Err(StoreError::EmptyFact)));
        let edited = s
            .edit_fact(dog.id, "My dog is called Bruno and he is five")
            .unwrap();
        assert_eq!(edited.text, "My dog is called Bruno and he is five");
        s.remove_fact(dog.id).unwrap();
        let left: Vec<_> = s.facts().unwrap().into_iter().map(|f| f.text).collect();
        assert_eq!(left, ["I live in Lyon"]);
        assert!(matches!(
            s.remove_fact(dog.id),
            Err(StoreError::NoSuchFact(_))
        ));
    }

    #[test]
    fn a_reply_of_this_process_is_not_marked_interrupted() {
        let (_dir, s) = store();
        let chat = s.create_chat("t").unwrap();
        let q = s.append_record(chat.id, Role::User, "hi", None).unwrap();
        let r = s.start_reply(chat.id, q.id, ReplyState::Running).unwrap();
        assert_eq!(s.mark_interrupted().unwrap(), 0);
        assert_eq!(s.reply(r.id).unwrap().unwrap().state, ReplyState::Running);
    }
}
